import SwitchyardCore

/// How LIFX lights, groups, locations, Ceiling parts and scenes are declared to the core (their fields and
/// capabilities), from the model.
enum LIFXDescriptors {
    /// Every device, and each one's availability for when it is new.
    static func all(_ home: LIFXHome, _ settings: LIFXSettings) -> ([DeviceDescriptor], [String: Bool]) {
        var devices: [DeviceDescriptor] = []
        var available: [String: Bool] = [:]
        for l in home.lights.values.sorted(by: { $0.id < $1.id }) {
            devices.append(light(l, settings))
            available[l.id] = l.connected
            if l.caps.isCeiling, l.matrix != nil {
                for p in LIFXCeilingPart.allCases {
                    devices.append(part(p, of: l, settings))
                    available[p.deviceID(l.id)] = l.connected
                }
            }
        }
        for c in home.collections(groups: settings.groups, locations: settings.locations) {
            devices.append(collection(c, members: c.members.compactMap { home.lights[$0] }))
            available[c.key] = home.state(of: c).available
        }
        devices += home.scenes.values.sorted { $0.uuid < $1.uuid }.map(scene)
        return (devices, available)
    }

    static func effectCapability(_ names: [String]) -> Capability {
        Capability("effect", .object([
            Capability("name", .enumeration(names), writable: true),
            Capability("color", .text(maxLength: 200), writable: true),
            Capability("from_color", .text(maxLength: 200), writable: true),
            Capability("period", .number(min: 0.05, max: 86_400, precision: 3), unit: "s", writable: true),
            Capability("cycles", .number(min: 0.01, max: 1_000_000, precision: 2), writable: true),
            Capability("persist", .bool, writable: true),
            Capability("power_on", .bool, writable: true),
            Capability("peak", .number(min: 0, max: 1, precision: 3), writable: true),
            Capability("power_off", .bool, writable: true),
            Capability("direction", .enumeration(["forward", "backward"]), writable: true),
            Capability("duration", .number(min: 0.1, max: 86_400 * 365, precision: 1), unit: "s", writable: true),
            Capability("palette", .list(Capability("colour", .text(maxLength: 200), writable: true), maxCount: 16), writable: true),
            Capability("sky_type", .enumeration(LIFXEffect.SkyType.allCases.map(\.name)), writable: true),
            Capability("cloud_saturation_min", .integer(min: 0, max: 255), writable: true),
            Capability("cloud_saturation_max", .integer(min: 0, max: 255), writable: true),
        ], acceptsText: true), writable: true)
    }

    static func lightCapabilities(color: Bool, colorTemp: Bool, effects: [String]?) -> [Capability] {
        var caps: [Capability] = [.state(), .brightness()]
        if color { caps.append(.color(acceptsText: true)) }
        if colorTemp || color { caps.append(.colorTemp(minKelvin: 1500, maxKelvin: 9000)) }
        caps.append(.colorMode(color ? ["hs", "color_temp"] : ["color_temp"]))
        caps.append(.transition())
        if let effects {
            caps += [
                effectCapability(effects),
                Capability("brightness_step", .integer(min: -100, max: 100), unit: "%", writable: true, readable: false),
                Capability("color_temp_step", .integer(min: -7500, max: 7500), unit: "K", writable: true, readable: false),
            ]
        }
        caps += [
            Capability("connected", .bool, role: .diagnostic, deviceClass: "connectivity"),
            Capability("label", .text(maxLength: 64), role: .hidden),
            Capability("via", .text(maxLength: 8), role: .hidden),
        ]
        return caps
    }

    /// A strip's zone segments: `[{"start": 0, "end": 9, "color": {"h": 240, "s": 100}, "brightness": 50}]`.
    static let zonesCapability = Capability("zones", .list(Capability("zone", .object([
        Capability("start", .integer(min: 0, max: LIFXZone.maxCount - 1), writable: true),
        Capability("end", .integer(min: 0, max: LIFXZone.maxCount - 1), writable: true),
        .color(acceptsText: true), .brightness(), .colorTemp(),
    ], acceptsText: false), writable: true), maxCount: LIFXZone.maxCount), writable: true, role: .hidden)

    static func light(_ l: LIFXLight, _ settings: LIFXSettings) -> DeviceDescriptor {
        var caps = lightCapabilities(color: l.caps.hasColor, colorTemp: l.caps.hasVariableColorTemp,
                                     effects: LIFXCommandPlanner.effectNames(for: [l]))
        caps += [
            Capability("group", .text(maxLength: 64), role: .hidden), Capability("location", .text(maxLength: 64), role: .hidden),
            Capability("model", .text(maxLength: 64), role: .hidden), Capability("capabilities", .object([], acceptsText: false), role: .hidden),
            Capability("last_seen", .text(maxLength: 40), role: .diagnostic, deviceClass: "timestamp"),
        ]
        // What only the LAN path drives: a strip's zones, the infrared LEDs, a Clean's HEV cycle.
        if l.via == "lan" {
            if l.caps.hasMultizone {
                caps += [zonesCapability, Capability("zone_count", .integer(min: 0, max: LIFXZone.maxCount), role: .hidden)]
            }
            if l.caps.hasIR {
                caps.append(Capability("infrared", .integer(min: 0, max: 100), unit: "%", writable: true, entityName: "Infrared"))
            }
            if l.caps.hasHEV {
                caps += [
                    Capability("clean_cycle", .binary(toggle: false), writable: true, entityName: "Clean cycle"),
                    Capability("clean_duration", .integer(min: 0, max: 86_400), unit: "s", writable: true, readable: false),
                    Capability("clean_remaining", .integer(min: 0, max: 86_400), unit: "s", role: .sensor, deviceClass: "duration",
                               entityName: "Clean cycle remaining"),
                    Capability("clean_last_result", .text(maxLength: 32), role: .diagnostic, entityName: "Last clean cycle"),
                ]
            }
        }
        // A LIFX group is a room: Home Assistant suggests it as the light's area.
        return DeviceDescriptor(id: l.id, label: l.label, configuredName: settings.names[l.id], model: l.model, manufacturer: "LIFX",
                                category: .light, capabilities: caps, swVersion: l.firmware, suggestedArea: l.group?.name)
    }

    /// A Ceiling's uplight or downlight: a light of its own (state, brightness, colour, colour temperature)
    /// with topics of its own, and in Home Assistant one more light of the Ceiling's device (`partOf`, listed
    /// after the Ceiling); its details say the Ceiling's model and firmware.
    static func part(_ p: LIFXCeilingPart, of l: LIFXLight, _ settings: LIFXSettings) -> DeviceDescriptor {
        let ceiling = light(l, settings)
        // The Ceiling's own Connected entity says it for all three lights.
        let caps = lightCapabilities(color: l.caps.hasColor, colorTemp: l.caps.hasVariableColorTemp, effects: nil).map { c in
            var c = c
            if c.name == "connected" { c.role = .hidden }
            return c
        }
        return DeviceDescriptor(id: p.deviceID(l.id), label: "\(l.label) \(p.title)", configuredName: settings.names[l.id].map { "\($0)_\(p.rawValue)" },
                                model: l.model, manufacturer: "LIFX", category: .light,
                                capabilities: caps, swVersion: l.firmware, suggestedArea: l.group?.name,
                                partOf: DevicePart(parentID: l.id, parentName: ceiling.humanName, name: p.title))
    }

    static func collection(_ c: LIFXHome.Collection, members: [LIFXLight]) -> DeviceDescriptor {
        // Effects any member runs (the others are left out of it).
        var caps = lightCapabilities(color: members.contains { $0.caps.hasColor }, colorTemp: members.contains { $0.caps.hasVariableColorTemp },
                                     effects: LIFXCommandPlanner.effectNames(for: members))
        caps.append(Capability("lights", .integer(min: 0, max: 10_000), role: .hidden))
        let group = c.kind == .group
        return DeviceDescriptor(id: c.key, label: c.name, namespace: "\(c.kind.rawValue)/", model: group ? "LIFX group" : "LIFX location",
                                manufacturer: "LIFX", category: .light, capabilities: caps, suggestedArea: group ? c.name : nil)
    }

    static func scene(_ s: LIFXScene) -> DeviceDescriptor {
        DeviceDescriptor(id: "scene_\(s.uuid)", label: s.name, namespace: "scene/", model: "LIFX scene", manufacturer: "LIFX",
                         category: .scene, capabilities: [
                            Capability("activate", .bool, writable: true, readable: false), .transition(),
                            Capability("name", .text(maxLength: 128), role: .hidden),
                            Capability("lights", .integer(min: 0, max: 10_000), role: .hidden),
                            Capability("last_activated", .text(maxLength: 40), role: .hidden),
                         ], bareCommands: ["ACTIVATE": ["activate": true]])
    }
}
