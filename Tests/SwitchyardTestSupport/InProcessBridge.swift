import Foundation
import Logging
import SwitchyardCore
import SwitchyardMQTT

/// The bridge in-process over a real broker: the real transport and engine with the given adapters,
/// quiet logging, the runtime's shutdown order. The one in-process helper every suite builds on.
///
/// It exists only inside `with { bridge in … }`: the engine runs as a child task of that call, and
/// before it returns (also when the body throws) the adapters have stopped, every device is `offline`
/// and the transport has drained and disconnected. No test leaves a bridge running behind it.
public final class InProcessBridge: Sendable {
    public struct Options: Sendable {
        public var clientID: String?
        public var minDelay = 0.1
        public var maxDelay = 1.0
        public var maxPayload = 256 * 1024
        public var protocolVersion = 4
        public var reannounceDelay: ClosedRange<Double> = 0.1...0.3
        public var info: JSONValue = .object([:])
        public var discovery = true
        /// Non-retained messages the outbox keeps while disconnected.
        public var maxEvents = 10_000
        /// MQTT 5 topic aliases the transport may use (`mqtt.max_topic_aliases`).
        public var maxTopicAliases = 1_000
        /// `mqtt.message_expiry`.
        public var expiry = MessageExpiry()
        public init() {}
    }

    public let transport: MosquittoTransport
    public let engine: BridgeEngine

    private init(transport: MosquittoTransport, engine: BridgeEngine) {
        self.transport = transport
        self.engine = engine
    }

    @discardableResult
    public static func with<R: Sendable>(port: Int, base: String, adapters: [any Adapter], options: Options = Options(),
                                         _ body: (InProcessBridge) async throws -> R) async throws -> R {
        var logger = Logger(label: "test-bridge")
        logger.logLevel = .critical
        let transport = MosquittoTransport(settings: MQTTSettings(host: "127.0.0.1", port: port, protocolVersion: options.protocolVersion,
                                                                  clientID: options.clientID ?? "switchyard-\(base)", keepalive: 10,
                                                                  stateTopic: "\(base)/bridge/state", maxTopicAliases: options.maxTopicAliases,
                                                                  maxEvents: options.maxEvents, reconnectMinDelay: options.minDelay,
                                                                  reconnectMaxDelay: options.maxDelay, connectTimeout: 5), logger: logger)
        var settings = EngineSettings(scheme: TopicScheme(base: base), discovery: options.discovery, version: "test", maxPayload: options.maxPayload,
                                      healthInterval: 3600, reannounceDelay: options.reannounceDelay)
        settings.expiry = options.expiry
        let engine = BridgeEngine(settings: settings, transport: transport, logger: logger)
        transport.start()
        await engine.setInfo(options.info)
        let bridge = InProcessBridge(transport: transport, engine: engine)
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await engine.run(adapters: adapters) }
            let result: Result<R, any Error>
            do { result = .success(try await body(bridge)) } catch { result = .failure(error) }
            group.cancelAll()
            try? await group.waitForAll()
            await transport.stop(timeout: 5)
            return try result.get()
        }
    }
}

/// A fresh base topic, so that tests sharing a broker never see each other's topics.
public func uniqueBase() -> String { "sy\(UUID().uuidString.prefix(6).lowercased())" }

/// What every adapter suite sets up around its simulator: a real broker, the bridge in-process with
/// the adapter, and a probe subscribed to what users see. Like the bridge, it exists only inside
/// `with`, which takes it all down (bridge, probe, broker) before it returns.
public final class BridgeUnderTest: Sendable {
    public let broker: Broker
    public let bridge: InProcessBridge
    public let probe: MQTTProbe
    public let base: String

    private init(broker: Broker, bridge: InProcessBridge, probe: MQTTProbe, base: String) {
        self.broker = broker
        self.bridge = bridge
        self.probe = probe
        self.base = base
    }

    @discardableResult
    public static func with<R: Sendable>(base: String = uniqueBase(), subscribe: (String) -> [String], adapter: any Adapter,
                                         options: InProcessBridge.Options = InProcessBridge.Options(),
                                         _ body: (BridgeUnderTest) async throws -> R) async throws -> R {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe(subscribe(base))
        return try await InProcessBridge.with(port: broker.port, base: base, adapters: [adapter], options: options) { bridge in
            try await body(BridgeUnderTest(broker: broker, bridge: bridge, probe: probe, base: base))
        }
    }
}
