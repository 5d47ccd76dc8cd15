import SwitchyardCore

/// How LIFX lights, groups, locations and scenes are declared to the core (their fields and capabilities).
extension LIFXAdapter {
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
        ], acceptsText: true), writable: true)
    }

    static func lightCapabilities(color: Bool, colorTemp: Bool, effects: [String]) -> [Capability] {
        var caps: [Capability] = [.state(), .brightness()]
        if color { caps.append(.color(acceptsText: true)) }
        if colorTemp || color { caps.append(.colorTemp(minKelvin: 1500, maxKelvin: 9000)) }
        caps.append(.colorMode(color ? ["hs", "color_temp"] : ["color_temp"]))
        caps += [
            .transition(), effectCapability(effects),
            Capability("brightness_step", .integer(min: -100, max: 100), unit: "%", writable: true, readable: false),
            Capability("color_temp_step", .integer(min: -7500, max: 7500), unit: "K", writable: true, readable: false),
            Capability("connected", .bool, role: .diagnostic, deviceClass: "connectivity"),
            Capability("label", .text(maxLength: 64), role: .hidden),
        ]
        return caps
    }

    /// A strip's zone segments: `[{"start": 0, "end": 9, "color": {"h": 240, "s": 100}, "brightness": 50}]`.
    static let zonesCapability = Capability("zones", .list(Capability("zone", .object([
        Capability("start", .integer(min: 0, max: LIFXLANMessage.maxZones - 1), writable: true),
        Capability("end", .integer(min: 0, max: LIFXLANMessage.maxZones - 1), writable: true),
        .color(acceptsText: true), .brightness(), .colorTemp(),
    ], acceptsText: false), writable: true), maxCount: LIFXLANMessage.maxZones), writable: true, role: .hidden)

    func lightDescriptor(_ l: LIFXLight) -> DeviceDescriptor {
        var caps = Self.lightCapabilities(color: l.caps.hasColor, colorTemp: l.caps.hasVariableColorTemp,
                                          effects: LIFXCommandPlanner.effectNames(multizone: l.caps.hasMultizone, matrix: l.caps.hasMatrix))
        caps += [
            Capability("group", .text(maxLength: 64), role: .hidden), Capability("location", .text(maxLength: 64), role: .hidden),
            Capability("model", .text(maxLength: 64), role: .hidden), Capability("capabilities", .object([], acceptsText: false), role: .hidden),
            Capability("last_seen", .text(maxLength: 40), role: .diagnostic, deviceClass: "timestamp"),
            Capability("via", .text(maxLength: 8), role: .hidden),
        ]
        // What only the LAN path drives: a strip's zones, the infrared LEDs, a Clean's HEV cycle.
        if l.via == "lan" {
            if l.caps.hasMultizone {
                caps += [Self.zonesCapability, Capability("zone_count", .integer(min: 0, max: LIFXLANMessage.maxZones), role: .hidden)]
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

    func groupDescriptors() -> [DeviceDescriptor] {
        var out: [DeviceDescriptor] = []
        for (enabled, prefix, ns, key) in [(settings.groups, "group_", "group/", \LIFXLight.group), (settings.locations, "location_", "location/", \LIFXLight.location)]
        where enabled {
            var refs: [String: (LIFXRef, color: Bool, temp: Bool, multizone: Bool, matrix: Bool)] = [:]
            for l in lights.values.sorted(by: { $0.id < $1.id }) {
                guard let r = l[keyPath: key] else { continue }
                let prev = refs[r.id]
                refs[r.id] = (prev?.0 ?? r, (prev?.color ?? false) || l.caps.hasColor, (prev?.temp ?? false) || l.caps.hasVariableColorTemp,
                              (prev?.multizone ?? false) || l.caps.hasMultizone, (prev?.matrix ?? false) || l.caps.hasMatrix)
            }
            for (rid, v) in refs.sorted(by: { $0.key < $1.key }) {
                // Effects any member runs (the others are left out of it).
                var caps = Self.lightCapabilities(color: v.color, colorTemp: v.temp,
                                                  effects: LIFXCommandPlanner.effectNames(multizone: v.multizone, matrix: v.matrix))
                caps.append(Capability("lights", .integer(min: 0, max: 10_000), role: .hidden))
                out.append(DeviceDescriptor(id: prefix + rid, label: v.0.name, namespace: ns,
                                            model: prefix == "group_" ? "LIFX group" : "LIFX location", manufacturer: "LIFX",
                                            category: .light, capabilities: caps, suggestedArea: prefix == "group_" ? v.0.name : nil))
            }
        }
        return out
    }

    func sceneDescriptor(_ s: LIFXScene) -> DeviceDescriptor {
        DeviceDescriptor(id: "scene_\(s.uuid)", label: s.name, namespace: "scene/", model: "LIFX scene", manufacturer: "LIFX",
                         category: .scene, capabilities: [
                            Capability("activate", .bool, writable: true, readable: false), .transition(),
                            Capability("name", .text(maxLength: 128), role: .hidden),
                            Capability("lights", .integer(min: 0, max: 10_000), role: .hidden),
                            Capability("last_activated", .text(maxLength: 40), role: .hidden),
                         ], bareCommands: ["ACTIVATE": ["activate": true]])
    }

}
