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
    /// True while `run` runs: the engine must have ended it when it stops the adapter.
    var running = false

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
        running = true
        defer { running = false }
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
    func report(_ reports: [DeviceReport]) async { await context?.report(reports) }
    func list(_ devices: [DeviceDescriptor]) async {
        self.devices = devices
        await context?.setDevices(devices, authoritative: false)
    }
    func emit(_ type: String) async { await context?.event(type, ["from": "test"]) }
}

extension InProcessBridge {
    /// The bridge in-process with one scripted adapter.
    @discardableResult
    static func with<R: Sendable>(port: Int, base: String, adapter: ScriptedAdapter, options: Options = Options(),
                                  _ body: (InProcessBridge) async throws -> R) async throws -> R {
        var o = options
        o.info = ["broker": .string("mqtt://127.0.0.1:\(port)")]
        return try await with(port: port, base: base, adapters: [adapter], options: o, body)
    }
}

extension MQTTProbe {
    /// bridge/log errors received so far.
    func logErrors(_ base: String) -> [JSONValue] {
        messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }.filter { $0["level"] == "error" }
    }
}
