import Foundation
import Logging
import SwitchyardCore
import SwitchyardMQTT

/// The bridge in-process over a real broker: the real transport and engine with the given adapters,
/// quiet logging, the runtime's shutdown order. Adapter test suites build their harness on this.
public final class InProcessBridge: Sendable {
    public let transport: MosquittoTransport
    public let engine: BridgeEngine
    let runTask: Task<Void, Never>

    private init(transport: MosquittoTransport, engine: BridgeEngine, runTask: Task<Void, Never>) {
        self.transport = transport
        self.engine = engine
        self.runTask = runTask
    }

    public static func start(port: Int, base: String, adapters: [any Adapter], info: JSONValue = .object([:])) async -> InProcessBridge {
        var logger = Logger(label: "test-bridge")
        logger.logLevel = .critical
        let transport = MosquittoTransport(settings: MQTTSettings(host: "127.0.0.1", port: port, clientID: "switchyard-\(base)", keepalive: 10,
                                                                  stateTopic: "\(base)/bridge/state", reconnectMinDelay: 0.1,
                                                                  reconnectMaxDelay: 1, connectTimeout: 5), logger: logger)
        let engine = BridgeEngine(settings: EngineSettings(scheme: TopicScheme(base: base), version: "test", healthInterval: 3600),
                                  transport: transport, logger: logger)
        transport.start()
        await engine.setInfo(info)
        await engine.start(adapters: adapters)
        return InProcessBridge(transport: transport, engine: engine, runTask: Task { await engine.run() })
    }

    public func stop() async {
        runTask.cancel()
        await engine.shutdown()
        await transport.stop(timeout: 5)
    }
}

/// A fresh base topic, so that tests sharing a broker never see each other's topics.
public func uniqueBase() -> String { "sy\(UUID().uuidString.prefix(6).lowercased())" }

/// What every adapter suite sets up around its simulator: a real broker, the bridge in-process with
/// the adapter, and a probe subscribed to what users see. `stop` takes them down in that order.
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

    public static func start(broker: Broker, base: String, subscribe: [String], adapter: any Adapter,
                             info: JSONValue = .object([:])) async throws -> BridgeUnderTest {
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe(subscribe)
        let bridge = await InProcessBridge.start(port: broker.port, base: base, adapters: [adapter], info: info)
        return BridgeUnderTest(broker: broker, bridge: bridge, probe: probe, base: base)
    }

    public func stop() async {
        await bridge.stop()
        probe.close()
        broker.stop()
    }
}
