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
        SwitchyardLogHandler.bootstrap(format: format, level: level, fromCommandLine: logLevel != nil)
        return Logger(label: "switchyard")
    }
}

/// The config, read with the registration list, or every problem on standard error and exit status 2
/// with nothing started.
public func loadOrExit(_ path: String, upstreams: [any Upstream] = upstreams) -> SwitchyardConfig {
    do {
        return try SwitchyardConfig.load(path: path, upstreams: upstreams)
    } catch {
        let n = error.problems.count
        let files = Set(error.problems.map(\.file)).subtracting([path]).sorted()
        Console.err(error.problems.map(\.description).joined(separator: "\n") + "\n"
                    + "\(n) problem\(n == 1 ? "" : "s") in \(([path] + files).joined(separator: " and ")); nothing started\n")
        exit(2)
    }
}
