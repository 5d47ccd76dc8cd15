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
