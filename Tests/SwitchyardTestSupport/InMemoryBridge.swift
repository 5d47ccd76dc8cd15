import Foundation
import Logging
import SwitchyardCore

/// The engine with the given adapters over an `InMemoryTransport`: no broker, no network thread. What the
/// bridge publishes is read from the transport, and commands are handed to the engine as the transport
/// would hand them over. For the unit tier (docs/testing.md): an adapter against its loopback simulator in
/// a fraction of a second; the same adapter's tests over a real broker (`BridgeUnderTest`) stay the proof
/// of what a client sees.
///
/// It exists only inside `with { bridge in … }`: before that returns the engine's `run` has returned, so
/// every adapter has stopped.
public final class InMemoryBridge: Sendable {
    public let transport: InMemoryTransport
    public let engine: BridgeEngine
    public let base: String

    private init(transport: InMemoryTransport, engine: BridgeEngine, base: String) {
        self.transport = transport
        self.engine = engine
        self.base = base
    }

    /// `settleTimeout`: how long an adapter that has not listed is waited for (the engine's 15 s unless given).
    @discardableResult
    public static func with<R: Sendable>(base: String = "b", adapters: [any Adapter], discovery: Bool = false, settleTimeout: Double = 15,
                                         _ body: (InMemoryBridge) async throws -> R) async throws -> R {
        StallWatch.startIfAsked()
        var logger = Logger(label: "test-engine")
        logger.logLevel = .critical
        let transport = InMemoryTransport()
        let engine = BridgeEngine(settings: EngineSettings(scheme: TopicScheme(base: base), discovery: discovery, version: "test",
                                                           healthInterval: 3600, settleTimeout: settleTimeout),
                                  transport: transport, logger: logger)
        let bridge = InMemoryBridge(transport: transport, engine: engine, base: base)
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await engine.run(adapters: adapters) }
            transport.inject(.connected(sessionPresent: false))
            // The end of the transport's events ends `run`, whether the body returned or threw.
            defer { transport.finish() }
            return try await body(bridge)
        }
    }

    /// A message from the broker, as a client published it.
    public func send(_ topic: String, _ payload: String) {
        transport.inject(.message(InboundMessage(topic: topic, payload: Array(payload.utf8))))
    }

    /// `<base>/<adapter>/<name>/set`.
    public func command(_ adapter: String, _ name: String, _ payload: String) {
        send("\(base)/\(adapter)/\(name)/set", payload)
    }

    /// The last payload published on `topic`, if any.
    public func last(_ topic: String) -> String? { transport.published.last { $0.topic == topic }?.payload }

    /// The device's state as last published, parsed.
    public func state(_ adapter: String, _ name: String) -> JSONValue? {
        last("\(base)/\(adapter)/\(name)").flatMap { try? JSONValue.parse($0) }
    }

    /// Waits (at most `timeout` seconds) until the device's last published state satisfies `condition`, and
    /// returns it.
    @discardableResult
    public func waitForState(_ adapter: String, _ name: String, timeout: Double = 10,
                             _ condition: @Sendable (JSONValue) -> Bool = { _ in true }) async throws -> JSONValue {
        try await waitUntil("\(adapter)/\(name)'s state", timeout: timeout) { self.state(adapter, name).map(condition) ?? false }
        return state(adapter, name)!
    }

    /// Waits until `topic` has been published with exactly `payload`.
    public func waitFor(_ topic: String, _ payload: String, timeout: Double = 10) async throws {
        try await waitUntil("\(payload) on \(topic)", timeout: timeout) { self.transport.published.contains { $0.topic == topic && $0.payload == payload } }
    }

    /// The result of the command with `transaction`, parsed, once it has been published.
    public func result(_ adapter: String, _ name: String, transaction: String, timeout: Double = 10) async throws -> JSONValue {
        let topic = "\(base)/\(adapter)/\(name)/result"
        @Sendable func find() -> JSONValue? {
            transport.published.lazy.filter { $0.topic == topic }.compactMap { try? JSONValue.parse($0.payload) }
                .first { $0["transaction"] == .string(transaction) }
        }
        try await waitUntil("the result of \(transaction)", timeout: timeout) { find() != nil }
        return find()!
    }

    /// Errors published on bridge/log so far.
    public var logErrors: [JSONValue] {
        transport.published.filter { $0.topic == "\(base)/bridge/log" }.compactMap { try? JSONValue.parse($0.payload) }
            .filter { $0["level"] == "error" }
    }
}
