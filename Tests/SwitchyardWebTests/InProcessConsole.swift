import Foundation
import Logging
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
@testable import SwitchyardWeb
import SwitchyardWebTesting

/// The console in this process, over the engine and an `InMemoryTransport` with a scripted lamp: no
/// broker, no child process (the unit tier). What the console logs is kept (`logs`).
final class InProcessConsole: Sendable {
    let engine: BridgeEngine
    let transport: InMemoryTransport
    let console: ConsoleService
    let port: Int
    let logs: LogRecorder

    private init(engine: BridgeEngine, transport: InMemoryTransport, console: ConsoleService, port: Int, logs: LogRecorder) {
        self.engine = engine
        self.transport = transport
        self.console = console
        self.port = port
        self.logs = logs
    }

    /// Runs `body` with the console listening on a free loopback port; the console and the engine have
    /// stopped when it returns.
    @discardableResult
    static func with<R: Sendable>(web: @Sendable (inout SwitchyardConfig.Web) -> Void = { _ in },
                                  adapters: [any Adapter] = [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])],
                                  _ body: (InProcessConsole) async throws -> R) async throws -> R {
        var settings = SwitchyardConfig.Web()
        settings.port = 0
        web(&settings)
        let logs = LogRecorder()
        var quiet = Logger(label: "test-engine")
        quiet.logLevel = .critical
        let transport = InMemoryTransport()
        let scheme = TopicScheme(base: "b")
        let feed = ConsoleFeed(scheme: scheme, store: transport)
        let engine = BridgeEngine(settings: EngineSettings(scheme: scheme, discovery: true, version: "test", healthInterval: 3600),
                                  transport: ObservedTransport(transport, observer: feed), logger: quiet)
        await engine.observe(feed)
        var logger = Logger(label: "switchyard.web") { _ in logs }
        logger.logLevel = .debug
        let console = ConsoleService(settings: settings, engine: engine, feed: feed, transportStats: { transport.stats() }, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await engine.run(adapters: adapters) }
            group.addTask { try await console.run() }
            transport.inject(.connected(sessionPresent: false))
            defer {
                transport.finish()
                group.cancelAll()
            }
            try await waitUntil("the console listens", timeout: 30) { console.address != nil }
            let port = Int(console.address!.split(separator: ":").last!)!
            return try await body(InProcessConsole(engine: engine, transport: transport, console: console, port: port, logs: logs))
        }
    }

    /// One request, its blocking socket calls off the cooperative pool the console runs on.
    func get(_ path: String, headers: [(String, String)] = [], timeout: Double = 10) async throws -> HTTPProbe.Answer {
        let port = self.port
        return try await HTTPProbe.offPool { try HTTPProbe.request(port: port, path, headers: headers, timeout: timeout) }
    }

    /// `/livez`, asked again while a loaded run keeps the engine from answering in time (`HTTPProbe.alive`).
    func alive() async throws -> HTTPProbe.Answer {
        let port = self.port
        return try await HTTPProbe.alive { try await HTTPProbe.offPool { try HTTPProbe.request(port: port, "/livez", timeout: 30) } }
    }

    /// Blocking socket work of a test, off the cooperative pool.
    func blocking<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T { try await HTTPProbe.offPool(body) }
}

/// Keeps every log entry (level and message) for the test to read.
final class LogRecorder: LogHandler, Sendable {
    struct Entry: Sendable {
        var level: Logger.Level
        var message: String
    }
    let entries = Locked<[Entry]>([])
    var metadata: Logger.Metadata {
        get { [:] }
        set {}
    }
    var logLevel: Logger.Level {
        get { .trace }
        set {}
    }
    subscript(metadataKey _: String) -> Logger.Metadata.Value? {
        get { nil }
        set {}
    }
    func log(event: LogEvent) {
        entries.withLock { $0.append(Entry(level: event.level, message: "\(event.message) \(event.metadata ?? [:])")) }
    }
    /// Entries at `level` or above.
    func at(_ level: Logger.Level) -> [Entry] { entries.withLock { $0.filter { $0.level >= level } } }
}
