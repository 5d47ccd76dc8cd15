import SwitchyardCore

/// How LIFX lights, groups, locations and scenes are declared to the core (their fields and capabilities).
extension LIFXAdapter {
    static func effectCapability() -> Capability {
        Capability("effect", .object([
            Capability("name", .enumeration(LIFXCommandPlanner.effectNames), writable: true),
            Capability("color", .text(maxLength: 200), writable: true),
            Capability("from_color", .text(maxLength: 200), writable: true),
            Capability("period", .number(min: 0.05, max: 86_400, precision: 3), unit: "s", writable: true),
            Capability("cycles", .number(min: 0.01, max: 1_000_000, precision: 2), writable: true),
            Capability("persist", .bool, writable: true),
            Capability("power_on", .bool, writable: true),
            Capability("peak", .number(min: 0, max: 1, precision: 3), writable: true),
            Capability("power_off", .bool, writable: true),
        ], acceptsText: true), writable: true)
    }

    static func lightCapabilities(color: Bool, colorTemp: Bool) -> [Capability] {
        var caps: [Capability] = [.state(), .brightness()]
        if color { caps.append(.color(acceptsText: true)) }
        if colorTemp || color { caps.append(.colorTemp(minKelvin: 1500, maxKelvin: 9000)) }
        caps.append(.colorMode(color ? ["hs", "color_temp"] : ["color_temp"]))
        caps += [
            .transition(), effectCapability(),
            Capability("brightness_step", .integer(min: -100, max: 100), unit: "%", writable: true, readable: false),
            Capability("color_temp_step", .integer(min: -7500, max: 7500), unit: "K", writable: true, readable: false),
            Capability("connected", .bool, role: .diagnostic, deviceClass: "connectivity"),
            Capability("label", .text(maxLength: 64), role: .hidden),
        ]
        return caps
    }

    func lightDescriptor(_ l: LIFXLight) -> DeviceDescriptor {
        var caps = Self.lightCapabilities(color: l.caps.hasColor, colorTemp: l.caps.hasVariableColorTemp)
        caps += [
            Capability("group", .text(maxLength: 64), role: .hidden), Capability("location", .text(maxLength: 64), role: .hidden),
            Capability("model", .text(maxLength: 64), role: .hidden), Capability("capabilities", .object([], acceptsText: false), role: .hidden),
            Capability("last_seen", .text(maxLength: 40), role: .diagnostic, deviceClass: "timestamp"),
            Capability("via", .text(maxLength: 8), role: .hidden),
        ]
        // A LIFX group is a room: Home Assistant suggests it as the light's area.
        return DeviceDescriptor(id: l.id, label: l.label, configuredName: settings.names[l.id], model: l.model, manufacturer: "LIFX",
                                category: .light, capabilities: caps, suggestedArea: l.group?.name)
    }

    func groupDescriptors() -> [DeviceDescriptor] {
        var out: [DeviceDescriptor] = []
        for (enabled, prefix, ns, key) in [(settings.groups, "group_", "group/", \LIFXLight.group), (settings.locations, "location_", "location/", \LIFXLight.location)]
        where enabled {
            var refs: [String: (LIFXRef, color: Bool, temp: Bool)] = [:]
            for l in lights.values.sorted(by: { $0.id < $1.id }) {
                guard let r = l[keyPath: key] else { continue }
                let prev = refs[r.id]
                refs[r.id] = (prev?.0 ?? r, (prev?.color ?? false) || l.caps.hasColor, (prev?.temp ?? false) || l.caps.hasVariableColorTemp)
            }
            for (rid, v) in refs.sorted(by: { $0.key < $1.key }) {
                var caps = Self.lightCapabilities(color: v.color, colorTemp: v.temp)
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
