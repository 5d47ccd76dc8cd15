import SwitchyardCore

/// One device's options (`devices: {<adapter>: {<device name>: {…}}}`): how the bridge publishes it,
/// whatever its upstream. Every option is optional; nil means the bridge's own behaviour. Read here so
/// that the file is checked and the schema shows them; the engine applies them.
public struct DeviceOptions: Sendable, Equatable {
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
        public init() {}
    }

    public init() {}

    /// The option keys, in the order they are read (for messages naming the valid ones).
    public static let keys = ["label", "retain", "qos", "message_expiry", "debounce", "throttle", "filtered_fields", "homeassistant", "disabled"]

    static func read(_ s: ConfigSection, adapters: [String]) -> [String: [String: DeviceOptions]] {
        s.restart = .atOnce
        var out: [String: [String: DeviceOptions]] = [:]
        for adapter in adapters {
            var devices: [String: DeviceOptions] = [:]
            for (name, d) in s.sections(adapter, doc: "Options of \(adapter) devices, by device name (as in their topics).") {
                if let p = Naming.problem(withName: name) { s.problem(s.position(of: adapter), key: "\(adapter).\(name)", p) }
                devices[name] = read(d)
            }
            if !devices.isEmpty { out[adapter] = devices }
        }
        s.finish()
        return out
    }

    static func read(_ d: ConfigSection) -> DeviceOptions {
        var o = DeviceOptions()
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
        if let (c, mark) = ha.scalar("entity_category", doc: "config or diagnostic: where Home Assistant lists the entities.") {
            if ["config", "diagnostic"].contains(c) { o.homeassistant.entityCategory = c } else {
                ha.problem(mark, key: "entity_category", "expected one of config, diagnostic, got '\(c)'")
            }
        }
        ha.finish()
        o.disabled = d.bool("disabled", false, doc: "The device is ignored: no topics, no commands, no polling where the upstream allows.")
        d.finish()
        return o
    }
}
