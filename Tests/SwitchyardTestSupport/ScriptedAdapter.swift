import Foundation
import SwitchyardCore

/// A test adapter: devices the test declares, commands it records, state the test pushes.
public actor ScriptedAdapter: Adapter {
    public nonisolated let id: String
    var devices: [DeviceDescriptor]
    var initial: [String: [String: JSONValue]]
    public private(set) var commands: [DeviceCommand] = []
    /// The fields each device was commanded, merged: what its first state must not undo.
    var commanded: [String: [String: JSONValue]] = [:]
    public private(set) var refreshes: [String] = []
    var failWith: String?
    var context: AdapterContext?
    /// True while `run` runs: the engine must have ended it when it stops the adapter.
    public private(set) var running = false
    /// How many `pushNext` made.
    public private(set) var pushed = 0

    public init(id: String = "test", devices: [DeviceDescriptor], initial: [String: [String: JSONValue]] = [:]) {
        self.id = id
        self.devices = devices
        self.initial = initial
    }

    public static func lamp(_ id: String = "lamp-1", name: String = "lamp") -> DeviceDescriptor {
        DeviceDescriptor(id: id, label: "Lamp", configuredName: name, model: "test lamp", manufacturer: "Tests", category: .light,
                         capabilities: [.state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(), .transition()])
    }

    public func run(context: AdapterContext) async throws {
        running = true
        defer { running = false }
        self.context = context
        await context.setDevices(devices, authoritative: false)
        // A command held for a device until it was listed can be carried out while this first state is on
        // its way (the listing releases it): as a real device would, the first state includes it.
        for d in devices {
            let first = (initial[d.id] ?? ["state": "OFF", "brightness": 50]).merging(commanded[d.id] ?? [:]) { _, commanded in commanded }
            await context.update(d.id, first)
        }
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        commands.append(command)
        if let failWith { throw AdapterError(failWith) }
        var fields = command.fields
        if fields["state"] == "TOGGLE" {
            fields["state"] = await context.state(of: command.deviceID)?["state"] == "ON" ? "OFF" : "ON"
        }
        fields["transition"] = nil
        commanded[command.deviceID, default: [:]].merge(fields) { _, new in new }
        await context.update(command.deviceID, fields)
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws { refreshes.append(deviceID) }

    public func setFailure(_ message: String?) { failWith = message }
    public func push(_ deviceID: String, _ fields: [String: JSONValue]) async { await context?.update(deviceID, fields) }
    /// The next of 1, 2, … 100, 1, 2, … as the device's brightness, numbered here on the adapter's own
    /// executor (so the numbers are in the order the adapter made its reports, whichever tasks called it).
    public func pushNext(_ deviceID: String) async {
        pushed += 1
        await context?.update(deviceID, ["brightness": JSONValue((pushed - 1) % 100 + 1)])
    }
    public func report(_ reports: [DeviceReport]) async { await context?.report(reports) }
    public func list(_ devices: [DeviceDescriptor]) async {
        self.devices = devices
        await context?.setDevices(devices, authoritative: false)
    }
    public func emit(_ type: String) async { await context?.event(type, ["from": "test"]) }
}
