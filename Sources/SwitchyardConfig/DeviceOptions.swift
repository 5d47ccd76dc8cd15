import SwitchyardCore

/// One device's options (`devices: {<adapter>: {<stable id>: {…}}}`, the id `bridge/devices` shows): how the
/// bridge names and publishes it, whatever its upstream. Every option is optional; nil means the bridge's own
/// behaviour. Read here (so that the file is checked and the schema shows them); the engine applies them as
/// a `DevicePolicy` (`policy`). Keyed by the stable id, not the name, so that a rename (`name`) keeps the
/// device's options and its Home Assistant entity (design.md §19).
public struct DeviceOptions: Sendable, Equatable {
    /// The device's name (its topics, and its name in Home Assistant unless `label` or `homeassistant.name`
    /// says otherwise) instead of the upstream's label or the upstream section's own name for it.
    public var name: String?
    /// The name shown in Home Assistant and the console instead of the upstream's label.
    public var label: String?
    /// Whether the state topic is retained (the bridge's default: yes).
    public var retain: Bool?
    /// QoS of the state publishes, 0-2 (default 1).
    public var qos: Int?
    /// MQTT 5 message expiry of the state publishes, seconds.
    public var messageExpiry: Int?
    /// Seconds: state changes within this time of each other are published as one.
    public var debounce: Double?
    /// Seconds: at most one state publish per this time; the last value is always published.
    public var throttle: Double?
    /// State fields not published.
    public var filteredFields: [String] = []
    /// Home Assistant: not announced at all, or announced with these overrides.
    public var homeassistant = HomeAssistant()
    /// The device is ignored: no topics, no commands, no polling where the upstream allows.
    public var disabled = false

    public struct HomeAssistant: Sendable, Equatable {
        public var exclude = false
        public var name: String?
        public var icon: String?
        public var entityCategory: String?
        /// Per entity, by its object (`light`, `rssi`, `connected`: the key under the device config's
        /// `components`, or the last level but one of its per-entity topic).
        public var entities: [String: DevicePolicy.HomeAssistant.Entity] = [:]
        public init() {}
    }

    public init() {}

    /// The option keys, in the order they are read (for messages naming the valid ones).
    public static let keys = ["name", "label", "retain", "qos", "message_expiry", "debounce", "throttle", "filtered_fields", "homeassistant", "disabled"]

    static func read(_ s: ConfigSection, adapters: [String]) -> [String: [String: DeviceOptions]] {
        s.restart = .atOnce
        var out: [String: [String: DeviceOptions]] = [:]
        for adapter in adapters {
            var devices: [String: DeviceOptions] = [:]
            var names: [String: String] = [:]
            for (id, d) in s.sections(adapter, doc: "Options of \(adapter) devices, by stable id (bridge/devices shows each device's id).") {
                let o = read(d)
                if let n = o.name {
                    if let other = names.updateValue(id, forKey: n) { d.problem(at: "name", "'\(n)' is the name of \(adapter) device '\(other)' too") }
                }
                devices[id] = o
            }
            if !devices.isEmpty { out[adapter] = devices }
        }
        s.finish()
        return out
    }

    /// What the engine applies.
    public var policy: DevicePolicy {
        var p = DevicePolicy(name: name, label: label, retain: retain ?? true, qos: qos ?? 1, messageExpiry: UInt32(clamping: messageExpiry ?? 0),
                             debounce: debounce ?? 0, throttle: throttle ?? 0, filteredFields: Set(filteredFields), disabled: disabled)
        p.homeassistant = DevicePolicy.HomeAssistant(exclude: homeassistant.exclude, name: homeassistant.name, icon: homeassistant.icon,
                                                     entityCategory: homeassistant.entityCategory, entities: homeassistant.entities)
        return p
    }

    static func read(_ d: ConfigSection) -> DeviceOptions {
        var o = DeviceOptions()
        if let (n, mark) = d.scalar("name", doc: "The device's name: its topics (<base>/<adapter>/<name>, '/' makes folders) and, unless label or homeassistant.name says otherwise, its name in Home Assistant. Renaming keeps its Home Assistant entity.") {
            if let p = Naming.problem(withName: n) { d.problem(mark, key: "name", p) } else { o.name = n }
        }
        o.label = d.string("label", doc: "The name shown in Home Assistant and the console instead of the upstream's label.")
        o.retain = d.optionalBool("retain", true, doc: "Whether the device's state topic is retained.")
        o.qos = d.optionalInt("qos", 1, min: 0, max: 2, doc: "QoS of the device's state publishes.")
        o.messageExpiry = d.optionalInt("message_expiry", 0, min: 0, max: 4_294_967_295,
                                        doc: "Seconds after which the broker drops an undelivered state publish (MQTT 5 message expiry; 0: never).")
        o.debounce = d.optionalDouble("debounce", 0, min: 0, max: 3600,
                                      doc: "Seconds: state changes that follow each other within this time are published once, with the last value.")
        o.throttle = d.optionalDouble("throttle", 0, min: 0, max: 86_400,
                                      doc: "Seconds: at most one state publish per this time; the last value is always published.")
        o.filteredFields = d.stringList("filtered_fields", doc: "State fields that are not published.").map(\.0)
        let ha = d.section("homeassistant", doc: "How the device is announced to Home Assistant.")
        o.homeassistant.exclude = ha.bool("exclude", false, doc: "Not announced to Home Assistant at all (its configs are cleared).")
        o.homeassistant.name = ha.string("name", doc: "The device's name in Home Assistant.")
        o.homeassistant.icon = ha.string("icon", doc: "The entities' icon, e.g. mdi:lamp.")
        o.homeassistant.entityCategory = category(ha, doc: "config or diagnostic: where Home Assistant lists the entities.")
        for (object, e) in ha.sections("entities", doc: "Per entity, by its object (the key under the device config's components: light, rssi, connected…).") {
            var entity = DevicePolicy.HomeAssistant.Entity()
            entity.name = e.string("name", doc: "The entity's name in Home Assistant.")
            entity.icon = e.string("icon", doc: "The entity's icon, e.g. mdi:lamp.")
            entity.entityCategory = category(e, doc: "config or diagnostic: where Home Assistant lists the entity.")
            e.finish()
            o.homeassistant.entities[object] = entity
        }
        ha.finish()
        o.disabled = d.bool("disabled", false, doc: "The device is ignored: no topics, no commands, no polling where the upstream allows.")
        if let e = o.messageExpiry, e > 0, o.retain != false {
            d.problem(at: "message_expiry", "needs retain: false (a retained state is published again at every reconnect, so it never expires)")
        }
        d.finish()
        return o
    }

    static func category(_ s: ConfigSection, doc: String) -> String? {
        guard let (c, mark) = s.scalar("entity_category", doc: doc) else { return nil }
        if ["config", "diagnostic"].contains(c) { return c }
        s.problem(mark, key: "entity_category", "expected one of config, diagnostic, got '\(c)'")
        return nil
    }
}
