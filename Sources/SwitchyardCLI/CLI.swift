import ArgumentParser
import Logging
import SwitchyardConfig
import SwitchyardRuntime
#if canImport(Glibc)
import Glibc
#endif

/// What both executables share: log options, config loading that exits on problems, console output.
public struct LogOptions: ParsableArguments {
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (overrides log.level).")
    public var logLevel: String?

    @Option(help: "Log format: text or json (overrides log.format).")
    public var logFormat: String?

    public init() {}

    public func bootstrap(config: SwitchyardConfig?) throws -> Logger {
        let levelName = logLevel ?? config?.log.level ?? "info"
        guard let level = Logger.Level(rawValue: levelName) else { throw ValidationError("unknown log level '\(levelName)'") }
        let formatName = logFormat ?? config?.log.format ?? "text"
        guard let format = SwitchyardLogHandler.Format(rawValue: formatName) else { throw ValidationError("unknown log format '\(formatName)'") }
        SwitchyardLogHandler.bootstrap(format: format, level: level)
        return Logger(label: "switchyard")
    }
}

/// Unbuffered writes to standard output and error (also when piped), without Foundation's FileHandle.
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

/// The config, or every problem on standard error and exit status 2 with nothing started.
public func loadOrExit(_ path: String) -> SwitchyardConfig {
    do {
        return try SwitchyardConfig.load(path: path)
    } catch {
        let n = error.problems.count
        Console.err(error.problems.map(\.description).joined(separator: "\n") + "\n"
                    + "\(n) problem\(n == 1 ? "" : "s") in \(path); nothing started\n")
        exit(2)
    }
}
