#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import SwitchyardCore

/// The process log: one line per entry on stderr, text or JSON, with one level for the whole process
/// that only the CLI and a config reload set (`setProcessLevel`). Messages are constant strings; data
/// travels as metadata (never a secret).
public struct SwitchyardLogHandler: LogHandler {
    public enum Format: String, Sendable { case text, json }

    /// The level every handler reads, so that `config/reload` can change it at run time.
    static let processLevel = Locked<Logger.Level>(.info)

    /// Set when the command line gave the level (`--log-level`): it then outranks `log.level` in every
    /// config, the reloaded ones too.
    static let levelFromCommandLine = Locked<Bool>(false)

    public static func setProcessLevel(_ level: Logger.Level) { processLevel.withLock { $0 = level } }

    /// The level a reloaded config asks for, unless the command line gave one.
    public static func applyConfigLevel(_ level: Logger.Level) {
        if !levelFromCommandLine.withLock({ $0 }) { setProcessLevel(level) }
    }

    let label: String
    let format: Format
    public var metadata: Logger.Metadata = [:]
    /// A level set on one logger stays with that logger (swift-log's contract): a component (a library
    /// that quiets its own logger) can never change what the rest of the process logs.
    var ownLevel: Logger.Level?
    public var logLevel: Logger.Level {
        get { ownLevel ?? Self.processLevel.withLock { $0 } }
        set { ownLevel = newValue }
    }

    public init(label: String, format: Format) {
        self.label = label
        self.format = format
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let m = event.metadata { all.merge(m) { _, new in new } }
        let ts = Timestamp.rfc3339(Date())
        var line: String
        switch format {
        case .text:
            line = "\(ts) \(event.level) \(label): \(event.message)"
            for k in all.keys.sorted() { line += " \(k)=\(all[k]!)" }
        case .json:
            var o: [String: JSONValue] = ["ts": .string(ts), "level": .string("\(event.level)"), "logger": .string(label),
                                          "message": .string("\(event.message)")]
            for (k, v) in all { o[k] = .string("\(v)") }
            line = JSONValue.object(o).serialized
        }
        line += "\n"
        // One write(2) per line, so that lines from several threads never interleave.
        Console.err(line)
    }

    /// Installs the handler once for the whole process.
    public static func bootstrap(format: Format, level: Logger.Level, fromCommandLine: Bool = false) {
        setProcessLevel(level)
        levelFromCommandLine.withLock { $0 = fromCommandLine }
        LoggingSystem.bootstrap { label in SwitchyardLogHandler(label: label, format: format) }
    }
}

/// Unbuffered writes to standard output and error (also when piped), without Foundation's FileHandle:
/// the whole text in as few write(2) calls as the kernel allows, so that log lines never interleave.
public enum Console {
    public static func out(_ text: String) { write(1, text) }
    public static func err(_ text: String) { write(2, text) }

    static func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, $0.count - done) }
            if n > 0 { done += n } else if n < 0 && errno == EINTR { continue } else { return }
        }
    }
}
