#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// Devices that live in memory: lights, switches, and sensors that drift (one reading, or a multisensor's
/// four: several Home Assistant entities on one device, as most real devices have). For trying the bridge
/// (`switchyard demo`) before any hardware is configured, and for process-level tests. It obeys the
/// same Adapter contract as a real upstream, so everything the core does is exercised for real.
public actor VirtualAdapter: Adapter {
    public struct Device: Sendable, Equatable {
        public var name: String
        public var label: String
        public var type: String   // light | switch | sensor | multisensor
        public init(name: String, label: String, type: String) {
            self.name = name
            self.label = label
            self.type = type
        }
    }

    public static let id = "virtual"
    public nonisolated var id: String { Self.id }
    let devices: [Device]
    let sensorInterval: Double
    let clock: any BridgeClock
    var states: [String: [String: JSONValue]] = [:]
    /// Sensors the user disabled: no readings (`setDisabled`).
    var disabled: Set<String> = []

    public init(devices: [Device], sensorInterval: Double, clock: any BridgeClock = SystemClock()) {
        self.devices = devices
        self.sensorInterval = sensorInterval
        self.clock = clock
    }

    // One capability list per type, shared by every device of it (a thousand lights hold one copy).
    static let switchCapabilities: [Capability] = [.state()]
    static let sensorCapabilities: [Capability] = [
        Capability("temperature", .number(min: -40, max: 80, precision: 1), unit: "°C", role: .sensor, deviceClass: "temperature"),
    ]
    /// Four readings, four sensor entities in Home Assistant (the battery a diagnostic one): like a
    /// zigbee weather sensor.
    static let multisensorCapabilities: [Capability] = [
        sensorCapabilities[0],
        Capability("humidity", .number(min: 0, max: 100, precision: 1), unit: "%", role: .sensor, deviceClass: "humidity"),
        Capability("pressure", .number(min: 800, max: 1100, precision: 1), unit: "hPa", role: .sensor, deviceClass: "pressure"),
        Capability("battery", .integer(min: 0, max: 100), unit: "%", role: .diagnostic, deviceClass: "battery"),
    ]
    static let lightCapabilities: [Capability] = [
        .state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(), .transition(),
    ]

    static func descriptor(_ d: Device) -> DeviceDescriptor {
        switch d.type {
        case "switch":
            return DeviceDescriptor(id: d.name, label: d.label, configuredName: d.name, model: "virtual switch", manufacturer: "Switchyard",
                                    category: .switch, capabilities: switchCapabilities)
        case "sensor":
            return DeviceDescriptor(id: d.name, label: d.label, configuredName: d.name, model: "virtual sensor", manufacturer: "Switchyard",
                                    category: .sensor, capabilities: sensorCapabilities)
        case "multisensor":
            return DeviceDescriptor(id: d.name, label: d.label, configuredName: d.name, model: "virtual multisensor", manufacturer: "Switchyard",
                                    category: .sensor, capabilities: multisensorCapabilities)
        default:
            return DeviceDescriptor(id: d.name, label: d.label, configuredName: d.name, model: "virtual light", manufacturer: "Switchyard",
                                    category: .light, capabilities: lightCapabilities)
        }
    }

    // One first state per type, shared by every device of it until the device changes (copy on write): a
    // dictionary of its own would cost each light hundreds of bytes.
    static let switchState: [String: JSONValue] = ["state": "OFF"]
    static let sensorState: [String: JSONValue] = ["temperature": 21.0]
    static let multisensorState: [String: JSONValue] = ["temperature": 21.0, "humidity": 45.0, "pressure": 1013.0, "battery": 100]
    static let lightState: [String: JSONValue] = ["state": "OFF", "brightness": 100, "color_mode": "color_temp", "color_temp": 3500, "color": ["h": 0, "s": 0]]

    static func initialState(_ d: Device) -> [String: JSONValue] {
        switch d.type {
        case "switch": return switchState
        case "sensor": return sensorState
        case "multisensor": return multisensorState
        default: return lightState
        }
    }

    /// States a standby takeover hands over (`restore`): each device starts from its own, if it has one.
    var restored: [String: [String: JSONValue]] = [:]

    public func restore(states: [String: [String: JSONValue]]) {
        restored = states
    }

    /// A reload's new instance (design.md §11) starts each device from the old instance's state when the
    /// device is still there with the same type: the state lives only in the bridge, so a reload that adds,
    /// removes or changes one device must not reset the others to their types' first states.
    public func inherit(from previous: any Adapter) async {
        guard let old = previous as? VirtualAdapter else { return }
        let known = await old.states
        for d in devices where old.devices.contains(where: { $0.name == d.name && $0.type == d.type }) {
            if let s = known[d.name] { restored[d.name] = s }
        }
    }

    public func run(context: AdapterContext) async throws {
        // The states first: once a device is listed the engine may route a command to it while this waits for
        // the listing (the actor is reentrant), as after a standby takeover, when the session's commands are
        // there from the start. A restored state keeps only the fields its type has (the file may have changed
        // the type since).
        for d in devices {
            let initial = Self.initialState(d)
            states[d.name] = initial.merging(restored[d.name]?.filter { initial[$0.key] != nil } ?? [:]) { $1 }
        }
        await context.setDevices(devices.map(Self.descriptor), authoritative: true)
        await context.report(devices.map { DeviceReport($0.name, fields: states[$0.name] ?? [:]) })
        await context.setStatus(.running)
        let sensors = devices.filter { $0.type == "sensor" || $0.type == "multisensor" }
        guard !sensors.isEmpty else {
            while !Task.isCancelled { try await clock.sleep(seconds: 3600) }
            return
        }
        var step = 0
        while !Task.isCancelled {
            try await clock.sleep(seconds: sensorInterval)
            step += 1
            var readings: [DeviceReport] = []
            for s in sensors where !disabled.contains(s.name) {
                let fields = Self.drift(s, step: step)
                states[s.name]?.merge(fields) { $1 }
                readings.append(DeviceReport(s.name, fields: fields))
            }
            await context.report(readings)
        }
    }

    /// A sensor's readings at `step`: a slow, deterministic drift, 21 °C ± 2 (and a multisensor's
    /// humidity 45 % ± 5 and pressure 1013 hPa ± 3; its battery stays full).
    static func drift(_ s: Device, step: Int) -> [String: JSONValue] {
        let phase = Double(s.name.utf8.count)
        var fields: [String: JSONValue] = ["temperature": .number(21.0 + 2.0 * sin(Double(step) / 5.0 + phase))]
        if s.type == "multisensor" {
            fields["humidity"] = .number(45.0 + 5.0 * sin(Double(step) / 7.0 + phase))
            fields["pressure"] = .number(1013.0 + 3.0 * sin(Double(step) / 11.0 + phase))
        }
        return fields
    }

    public func setDisabled(_ deviceIDs: Set<String>) async { disabled = deviceIDs }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        guard var s = states[command.deviceID] else { throw AdapterError("device '\(command.deviceID)' is not known") }
        for (k, v) in command.fields {
            switch k {
            case "state":
                if v == "TOGGLE" {
                    s["state"] = s["state"] == "ON" ? "OFF" : "ON"
                } else {
                    s["state"] = v
                }
            case "transition":
                continue
            case "color":
                guard case .object = v else { throw AdapterError("color: expected {\"h\": 0–360, \"s\": 0–100}") }
                var merged = s["color"]?.objectValue ?? [:]
                for (ck, cv) in v.objectValue! { merged[ck] = cv }
                s["color"] = .object(merged)
                s["color_mode"] = "hs"
            case "color_temp":
                s["color_temp"] = v
                s["color_mode"] = "color_temp"
            default:
                s[k] = v
            }
        }
        // Like a real light: setting a brightness or a colour turns it on.
        if command.fields["state"] == nil, s["state"] != nil,
           command.fields.keys.contains(where: { ["brightness", "color", "color_temp"].contains($0) }) {
            s["state"] = "ON"
        }
        states[command.deviceID] = s
        // The state first: it is on its way to the broker before the count for bridge/health is made.
        await context.update(command.deviceID, s)
        await context.recordRequest(error: nil)
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        guard let s = states[deviceID] else { throw AdapterError("device '\(deviceID)' is not known") }
        await context.update(deviceID, s)
    }

    public func refreshAll(context: AdapterContext) async throws {
        await context.setDevices(devices.map(Self.descriptor), authoritative: true)
    }
}
