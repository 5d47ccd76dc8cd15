/// How the bridge announces a device to Home Assistant (`homeassistant.discovery_mode`).
public enum DiscoveryMode: String, Sendable, CaseIterable {
    /// One retained config per device, `<prefix>/device/<node>/config`, its entities under `cmps`
    /// (Home Assistant 2024.11 and later).
    case device
    /// One retained config per entity, `<prefix>/<component>/<node>/<object>/config`.
    case entity
}

/// Builds Home Assistant MQTT discovery configs from a device's declared capabilities, one per entity
/// (`entries`) or one per device (`deviceConfig`, from the same entries; docs/design.md "Discovery").
/// Pure: the engine decides when to publish.
///
/// Only what has a state is announced as a stateful entity: a field that is written but never read
/// (`transition`, `brightness_step`) gets no entity; actions are buttons. Every `value_template` reads a
/// field the device's state always carries. Devices are named for people (`DeviceDescriptor.humanName`)
/// and linked to the bridge's own device (`via_device`).
public struct DiscoveryBuilder: Sendable {
    public var scheme: TopicScheme
    public var version: String
    /// `origin.support_url`, only when configured (`homeassistant.support_url`).
    public var supportURL: String?
    /// One config per device or per entity.
    public var mode: DiscoveryMode

    public init(scheme: TopicScheme, version: String, supportURL: String? = nil, mode: DiscoveryMode = .entity) {
        self.scheme = scheme
        self.version = version
        self.supportURL = supportURL
        self.mode = mode
    }

    /// The bridge's own device in Home Assistant, which every device of the bridge links to.
    public var bridgeNode: String { "switchyard_\(Naming.normaliseID(scheme.base))_bridge" }

    /// The prefix of every discovery node of this bridge (`switchyard_<base>_`): its own, and nobody else's.
    public var nodePrefix: String { "switchyard_\(Naming.normaliseID(scheme.base))_" }

    var origin: JSONValue {
        var o: [String: JSONValue] = ["name": "Switchyard", "sw_version": .string(version)]
        if let supportURL { o["support_url"] = .string(supportURL) }
        return .object(o)
    }

    public struct Entry: Sendable, Equatable {
        public var topic: String
        public var payload: JSONValue
        /// The component and the (normalised) object the topic is made of.
        public var shape: Shape
    }

    /// What one config announces, apart from the device: `<prefix>/<component>/<node>/<object>/config`.
    public struct Shape: Sendable, Hashable {
        public var component: String
        public var object: String
    }

    public func configTopic(_ shape: Shape, node: String) -> String {
        "\(scheme.discoveryPrefix)/\(shape.component)/\(node)/\(shape.object)/config"
    }

    /// `<prefix>/device/<node>/config`: the one config of a device in `device` mode.
    public func deviceConfigTopic(node: String) -> String { "\(scheme.discoveryPrefix)/device/\(node)/config" }

    /// The key of an entity in its device config's `cmps`: its object, which Home Assistant joins to the node
    /// of the topic into the same discovery id as the per-entity topic's (`<node> <object>`), so that an
    /// entity announced one way is the same entity announced the other. Should two entities of a device share
    /// an object (a field named after its main component), the later one's key takes its component too.
    static func componentKeys(_ shapes: [Shape]) -> [String] {
        var seen: Set<String> = []
        return shapes.map { s in seen.insert(s.object).inserted ? s.object : "\(s.component)_\(s.object)" }
    }

    /// A device's entries as one device config: `device` and `origin` once, `availability` and
    /// `availability_mode` once when every entity has the same (they are options Home Assistant shares
    /// with every component), each entity under `cmps` with its `platform`. `dropped`: entities an earlier
    /// config of the device had and this one has not; each gets `{"platform": …}` alone, which removes it.
    public func deviceConfig(_ entries: [Entry], dropped: [Shape] = []) -> JSONValue {
        guard let first = entries.first?.payload.objectValue else { return .object([:]) }
        let shared = ["availability", "availability_mode"].filter { k in
            entries.allSatisfy { $0.payload.objectValue?[k] == first[k] }
        }
        var out: [String: JSONValue] = ["device": first["device"] ?? .object([:]), "origin": first["origin"] ?? origin]
        for k in shared { out[k] = first[k] }
        var cmps: [String: JSONValue] = [:]
        let keys = Self.componentKeys(entries.map(\.shape))
        for (e, key) in zip(entries, keys) {
            var c = e.payload.objectValue ?? [:]
            c["device"] = nil
            c["origin"] = nil
            for k in shared { c[k] = nil }
            c["platform"] = .string(e.shape.component)
            cmps[key] = .object(c)
        }
        let current = Set(entries.map(\.shape))
        for d in dropped where !current.contains(d) && cmps[d.object] == nil { cmps[d.object] = ["platform": .string(d.component)] }
        out["components"] = .object(cmps)
        return .object(out)
    }

    /// The shapes of a device's configs, in the order `entries` gives them: they depend on its category and
    /// capabilities only (see `DeviceRegistry.Shapes`, which works them out once for each kind of device).
    public func shapes(_ d: DeviceDescriptor) -> [Shape] { entries(adapter: "a", name: "n", device: d).map(\.shape) }

    /// `switchyard_<base>_<adapter>_<id>`, normalised to `[A-Za-z0-9_-]`.
    public func nodeID(adapter: String, deviceID: String) -> String { nodePrefix(adapter: adapter) + Naming.normaliseID(deviceID) }

    /// `switchyard_<base>_<adapter>_`: what every node of one adapter's devices starts with.
    public func nodePrefix(adapter: String) -> String { "\(nodePrefix)\(Naming.normaliseID(adapter))_" }

    /// The entity id Home Assistant makes of a device's main entity when it first sees it
    /// (`<component>.<object_id>`, as `entries` announces it); nil for a device without one (a sensor).
    public func mainEntityID(adapter: String, name: String, device d: DeviceDescriptor) -> String? {
        let component: String
        switch d.category {
        case .light: component = "light"
        case .switch: component = "switch"
        case .scene: component = "scene"
        case .sensor, .generic: return nil
        }
        return "\(component).\(Naming.slug(name).isEmpty ? Naming.normaliseID(d.id) : Naming.slug(name))"
    }

    static let lightFields: Set<String> = ["state", "brightness", "color", "color_temp", "color_mode", "transition", "effect"]

    /// A device's entries with its per-device overrides (`DevicePolicy.HomeAssistant`): every entity's icon and
    /// category, and each entity's own name, icon and category by its object. `config` is given only to an
    /// entity that takes commands (Home Assistant refuses it on a read-only one).
    public func entries(adapter: String, name: String, device d: DeviceDescriptor, overrides: DevicePolicy.HomeAssistant?) -> [Entry] {
        var out = entries(adapter: adapter, name: name, device: d)
        guard let o = overrides, !o.isDefault else { return out }
        for i in out.indices {
            guard case .object(var p) = out[i].payload else { continue }
            let own = o.entities[out[i].shape.object]
            if let icon = own?.icon ?? o.icon { p["icon"] = .string(icon) }
            if let c = own?.entityCategory ?? o.entityCategory, c != "config" || p["command_topic"] != nil { p["entity_category"] = .string(c) }
            if let n = own?.name { p["name"] = .string(n) }
            out[i].payload = .object(p)
        }
        return out
    }

    public func entries(adapter: String, name: String, device d: DeviceDescriptor) -> [Entry] {
        let node = nodeID(adapter: adapter, deviceID: d.id)
        let stateTopic = scheme.device(adapter: adapter, name: name)
        let setTopic = scheme.set(adapter: adapter, name: name)
        let objectBase = Naming.slug(name).isEmpty ? Naming.normaliseID(d.id) : Naming.slug(name)
        var deviceBlock: [String: JSONValue] = [
            "identifiers": [.string(node)],
            "name": .string(d.humanName),
            "via_device": .string(bridgeNode),
        ]
        if let part = d.partOf {
            // A part (a Ceiling's uplight) joins the device it is part of: its identifiers and name only, so
            // Home Assistant shows one device with the part as one more entity, and the device's own config
            // alone says its model, versions and area (the adapter lists the device before its parts).
            deviceBlock["identifiers"] = [.string(nodeID(adapter: adapter, deviceID: part.parentID))]
            deviceBlock["name"] = .string(part.parentName)
        } else {
            if let m = d.model { deviceBlock["model"] = .string(m) }
            if let m = d.manufacturer { deviceBlock["manufacturer"] = .string(m) }
            if let v = d.swVersion { deviceBlock["sw_version"] = .string(v) }
            if let v = d.hwVersion { deviceBlock["hw_version"] = .string(v) }
            if let a = d.suggestedArea { deviceBlock["suggested_area"] = .string(a) }
        }
        let common: [String: JSONValue] = [
            "availability": [
                ["topic": .string(scheme.bridgeState)],
                ["topic": .string(scheme.availability(adapter: adapter, name: name))],
            ],
            "availability_mode": "all",
            "device": .object(deviceBlock),
            "origin": origin,
            "qos": 1,
        ]
        var out: [Entry] = []
        func add(_ component: String, _ object: String, main: Bool, _ fields: [String: JSONValue]) {
            var p = common
            for (k, v) in fields { p[k] = v }
            let objectID = main ? objectBase : "\(objectBase)_\(Naming.normaliseID(object))"
            p["unique_id"] = .string("\(node)_\(Naming.normaliseID(object))")
            p["object_id"] = .string(objectID)
            p["default_entity_id"] = .string("\(component).\(objectID)")
            // The main entity takes the device's name; a part's, its own ("Uplight"), and its other
            // entities say which part they belong to.
            if let part = d.partOf {
                if main { p["name"] = .string(part.name) } else if case .string(let n)? = p["name"] { p["name"] = .string("\(part.name) \(n)") }
            } else if main {
                p["name"] = .null
            }
            // Attributes that do not change with the state (a group's members): a template without a variable
            // renders as its text, which Home Assistant reads as the entity's attributes at each state.
            if main, !d.entityAttributes.isEmpty {
                p["json_attributes_topic"] = .string(stateTopic)
                p["json_attributes_template"] = .string(String(decoding: JSONValue.object(d.entityAttributes).bytes, as: UTF8.self))
            }
            let shape = Shape(component: component, object: Naming.normaliseID(object))
            out.append(Entry(topic: configTopic(shape, node: node), payload: .object(p), shape: shape))
        }

        var consumed: Set<String> = []
        switch d.category {
        case .light:
            var modes: [JSONValue] = []
            if d.capability("color") != nil { modes.append("hs") }
            if d.capability("color_temp") != nil { modes.append("color_temp") }
            if modes.isEmpty { modes = d.capability("brightness") != nil ? ["brightness"] : ["onoff"] }
            var f: [String: JSONValue] = [
                "schema": "json", "state_topic": .string(stateTopic), "command_topic": .string(setTopic),
                "supported_color_modes": .array(modes),
            ]
            if d.capability("brightness") != nil { f["brightness"] = true; f["brightness_scale"] = 100 }
            if let ct = d.capability("color_temp"), case .integer(let lo, let hi) = ct.kind {
                f["color_temp_kelvin"] = true; f["min_kelvin"] = JSONValue(lo); f["max_kelvin"] = JSONValue(hi)
            }
            if let fx = d.capability("effect"), let values = Self.effectNames(fx) {
                f["effect"] = true; f["effect_list"] = .array(values.map(JSONValue.string))
            }
            add("light", "light", main: true, f)
            consumed = Self.lightFields
        case .switch:
            add("switch", "switch", main: true, [
                "state_topic": .string(stateTopic), "command_topic": .string(setTopic),
                "value_template": "{{ value_json.state }}", "payload_on": "ON", "payload_off": "OFF",
                "state_on": "ON", "state_off": "OFF",
            ])
            consumed = ["state"]
        case .scene:
            var f: [String: JSONValue] = ["command_topic": .string(setTopic), "payload_on": "ACTIVATE"]
            f["icon"] = "mdi:palette"
            add("scene", "scene", main: true, f)
            consumed = ["activate", "transition"]
        case .sensor, .generic:
            break
        }

        for c in d.capabilities where !consumed.contains(c.name) && c.role != .hidden {
            // A field that is written but never read has no state for an entity to show (actions excepted).
            var isAction = false
            if case .action = c.kind { isAction = true }
            if !c.readable && !isAction { continue }
            var f: [String: JSONValue] = ["name": .string(c.entityName ?? Naming.readable(c.name))]
            let template: JSONValue = .string("{{ value_json.\(c.name) }}")
            if c.role == .diagnostic { f["entity_category"] = "diagnostic" }
            // Settings are `config`; Home Assistant refuses that category on read-only entities.
            if c.role == .config && c.writable { f["entity_category"] = "config" }
            if let u = c.unit { f["unit_of_measurement"] = .string(u) }
            if let dc = c.deviceClass { f["device_class"] = .string(dc) }
            let fieldSet = "\(setTopic)/\(c.name)"
            switch c.kind {
            case .action(let values):
                for v in values {
                    var g = f
                    g["name"] = .string(Naming.readable(v))
                    g["command_topic"] = .string(fieldSet)
                    g["payload_press"] = .string(v)
                    g.removeValue(forKey: "unit_of_measurement")
                    add("button", "\(c.name)_\(v)", main: false, g)
                }
            case .binary where c.writable, .bool where c.writable:
                f["state_topic"] = .string(stateTopic); f["command_topic"] = .string(fieldSet)
                f["value_template"] = .string(c.kind == .bool ? "{{ 'ON' if value_json.\(c.name) else 'OFF' }}" : "{{ value_json.\(c.name) }}")
                f["payload_on"] = c.kind == .bool ? "true" : "ON"
                f["payload_off"] = c.kind == .bool ? "false" : "OFF"
                f["state_on"] = "ON"; f["state_off"] = "OFF"
                add("switch", c.name, main: false, f)
            case .enumeration(let values) where c.writable:
                f["state_topic"] = .string(stateTopic); f["command_topic"] = .string(fieldSet)
                f["value_template"] = template; f["options"] = .array(values.map(JSONValue.string))
                add("select", c.name, main: false, f)
            case .integer(let lo, let hi) where c.writable:
                f["state_topic"] = .string(stateTopic); f["command_topic"] = .string(fieldSet)
                f["value_template"] = template; f["min"] = JSONValue(lo); f["max"] = JSONValue(hi); f["step"] = 1
                add("number", c.name, main: false, f)
            case .number(let lo, let hi, let p) where c.writable:
                f["state_topic"] = .string(stateTopic); f["command_topic"] = .string(fieldSet)
                f["value_template"] = template; f["min"] = .number(lo); f["max"] = .number(hi)
                f["step"] = .number(Capability.round(1 / pow10(p), precision: p))
                add("number", c.name, main: false, f)
            case .binary, .bool:
                f["state_topic"] = .string(stateTopic)
                f["value_template"] = .string(c.kind == .bool ? "{{ 'ON' if value_json.\(c.name) else 'OFF' }}" : "{{ value_json.\(c.name) }}")
                f["payload_on"] = "ON"; f["payload_off"] = "OFF"
                f.removeValue(forKey: "unit_of_measurement")
                add("binary_sensor", c.name, main: false, f)
            case .integer, .number, .enumeration, .text:
                guard c.readable else { continue }
                f["state_topic"] = .string(stateTopic); f["value_template"] = template
                if case .integer = c.kind { f["state_class"] = "measurement" }
                if case .number = c.kind { f["state_class"] = "measurement" }
                add("sensor", c.name, main: false, f)
            case .object, .list:
                continue
            }
        }
        return out
    }
}

extension DiscoveryBuilder {
    /// The bridge's own device: its connection state, version, a button that re-announces everything
    /// without a restart, and each adapter's status (from `bridge/info`).
    public func bridgeEntries(adapters: [String]) -> [Entry] {
        let device: JSONValue = ["identifiers": [.string(bridgeNode)], "name": .string(scheme.base == "switchyard" ? "Switchyard" : "Switchyard \(scheme.base)"),
                                 "manufacturer": "Switchyard", "model": "MQTT bridge", "sw_version": .string(version)]
        var out: [Entry] = []
        func add(_ component: String, _ object: String, _ fields: [String: JSONValue]) {
            var p: [String: JSONValue] = ["device": device, "origin": origin, "qos": 1,
                                          "unique_id": .string("\(bridgeNode)_\(object)"), "object_id": .string("\(bridgeNode)_\(object)"),
                                          "default_entity_id": .string("\(component).\(bridgeNode)_\(object)")]
            for (k, v) in fields { p[k] = v }
            let shape = Shape(component: component, object: object)
            out.append(Entry(topic: configTopic(shape, node: bridgeNode), payload: .object(p), shape: shape))
        }
        let online: [String: JSONValue] = ["availability_topic": .string(scheme.bridgeState)]
        // Not tied to the bridge's availability: it is the bridge's availability.
        add("binary_sensor", "connection_state", ["name": "Connection state", "state_topic": .string(scheme.bridgeState),
                                                  "payload_on": "online", "payload_off": "offline", "device_class": "connectivity",
                                                  "entity_category": "diagnostic"])
        add("sensor", "version", online.merging(["name": "Version", "state_topic": .string(scheme.bridge("info")),
                                                 "value_template": "{{ value_json.version }}", "entity_category": "diagnostic",
                                                 "icon": "mdi:tag"]) { a, _ in a })
        add("button", "republish", online.merging(["name": "Republish", "command_topic": .string("\(scheme.base)/bridge/request/republish"),
                                                   "payload_press": "", "entity_category": "config", "icon": "mdi:refresh"]) { a, _ in a })
        for id in adapters {
            let key = Naming.normaliseID(id)
            add("sensor", "\(key)_status", online.merging([
                "name": .string("\(Naming.readable(id)) status"), "state_topic": .string(scheme.bridge("info")),
                // Present while the adapter is configured; "removed" covers the moment before its config is cleared.
                "value_template": .string("{{ value_json.adapters['\(id)'] | default('removed') }}"), "entity_category": "diagnostic",
                "icon": "mdi:connection",
            ]) { a, _ in a })
        }
        return out
    }

    /// Effect names: an enumeration, or the `name` member of an effect object (`{"name": "breathe", …}`).
    static func effectNames(_ c: Capability) -> [String]? {
        switch c.kind {
        case .enumeration(let values): return values
        case .object(let members, _):
            if let n = members.first(where: { $0.name == "name" }), case .enumeration(let values) = n.kind { return values }
            return nil
        default: return nil
        }
    }
}

private func pow10(_ p: Int) -> Double {
    var v = 1.0
    for _ in 0..<max(0, p) { v *= 10 }
    return v
}
