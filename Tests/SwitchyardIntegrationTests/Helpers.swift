import Foundation
import Logging
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardTestSupport

/// A test adapter: devices the test declares, commands it records, state the test pushes.
actor ScriptedAdapter: Adapter {
    nonisolated let id: String
    var devices: [DeviceDescriptor]
    var initial: [String: [String: JSONValue]]
    var commands: [DeviceCommand] = []
    var refreshes: [String] = []
    var failWith: String?
    var context: AdapterContext?

    init(id: String = "test", devices: [DeviceDescriptor], initial: [String: [String: JSONValue]] = [:]) {
        self.id = id
        self.devices = devices
        self.initial = initial
    }

    static func lamp(_ id: String = "lamp-1", name: String = "lamp") -> DeviceDescriptor {
        DeviceDescriptor(id: id, label: "Lamp", configuredName: name, model: "test lamp", manufacturer: "Tests", category: .light,
                         capabilities: [.state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(), .transition()])
    }

    func run(context: AdapterContext) async throws {
        self.context = context
        await context.setDevices(devices, authoritative: false)
        for d in devices { await context.update(d.id, initial[d.id] ?? ["state": "OFF", "brightness": 50]) }
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }

    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        commands.append(command)
        if let failWith { throw AdapterError(failWith) }
        var fields = command.fields
        if fields["state"] == "TOGGLE" {
            fields["state"] = await context.state(of: command.deviceID)?["state"] == "ON" ? "OFF" : "ON"
        }
        fields["transition"] = nil
        await context.update(command.deviceID, fields)
    }

    func refresh(deviceID: String, context: AdapterContext) async throws { refreshes.append(deviceID) }

    func setFailure(_ message: String?) { failWith = message }
    func push(_ deviceID: String, _ fields: [String: JSONValue]) async { await context?.update(deviceID, fields) }
    func list(_ devices: [DeviceDescriptor]) async {
        self.devices = devices
        await context?.setDevices(devices, authoritative: false)
    }
    func emit(_ type: String) async { await context?.event(type, ["from": "test"]) }
}

/// The bridge in-process over a real broker: real transport, real engine, a scripted adapter.
final class TestBridge: Sendable {
    let transport: MosquittoTransport
    let engine: BridgeEngine
    let adapter: ScriptedAdapter
    let runTask: Task<Void, Never>

    private init(transport: MosquittoTransport, engine: BridgeEngine, adapter: ScriptedAdapter, runTask: Task<Void, Never>) {
        self.transport = transport
        self.engine = engine
        self.adapter = adapter
        self.runTask = runTask
    }

    static func start(port: Int, base: String, adapter: ScriptedAdapter, clientID: String? = nil, minDelay: Double = 0.1,
                      maxDelay: Double = 1, maxPayload: Int = 256 * 1024, protocolVersion: Int = 4) async -> TestBridge {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let settings = MQTTSettings(host: "127.0.0.1", port: port, protocolVersion: protocolVersion, clientID: clientID ?? "switchyard-\(base)",
                                    keepalive: 10, stateTopic: "\(base)/bridge/state", reconnectMinDelay: minDelay,
                                    reconnectMaxDelay: maxDelay, connectTimeout: 5)
        let transport = MosquittoTransport(settings: settings, logger: logger)
        let engine = BridgeEngine(settings: EngineSettings(scheme: TopicScheme(base: base), version: "test", maxPayload: maxPayload,
                                                           healthInterval: 3600, reannounceDelay: 0.1...0.3),
                                  transport: transport, logger: logger)
        transport.start()
        await engine.setInfo(["broker": .string("mqtt://127.0.0.1:\(port)")])
        await engine.start(adapters: [adapter])
        let task = Task { await engine.run() }
        return TestBridge(transport: transport, engine: engine, adapter: adapter, runTask: task)
    }

    /// Clean shutdown, in the runtime's order.
    func stop() async {
        runTask.cancel()
        await engine.shutdown()
        await transport.stop(timeout: 5)
    }
}

extension MQTTProbe {
    /// bridge/log errors received so far.
    func logErrors(_ base: String) -> [JSONValue] {
        messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }.filter { $0["level"] == "error" }
    }
}
