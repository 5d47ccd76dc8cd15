/// How the engine publishes one device, whatever its upstream: the per-device options of the config
/// (`devices: {<adapter>: {<stable id>: {…}}}`, docs/topics.md "Per-device options") as the engine applies
/// them. Every field's default is the bridge's own behaviour, so a device without options has no policy.
/// Keyed by the device's stable id (design.md §7, §19): a rename is one of them (`name`), so it keeps the
/// device's discovery ids and so its Home Assistant entity.
public struct DevicePolicy: Sendable, Equatable {
    /// The device's name (its topics) instead of the upstream's or the adapter's own.
    public var name: String?
    /// Shown in the device's details and as its Home Assistant name instead of the upstream's label.
    public var label: String?
    /// Whether the state topic is retained.
    public var retain = true
    /// QoS of the state publishes.
    public var qos = 1
    /// MQTT 5 Message Expiry Interval of the state publishes (non-retained ones: retained states are sent
    /// again on every reconnect), seconds; 0: none.
    public var messageExpiry: UInt32 = 0
    /// Seconds: changes within this time of each other are published once, with the last value.
    public var debounce: Double = 0
    /// Seconds: at most one state publish per this time; the last value is always published.
    public var throttle: Double = 0
    /// State fields that are never published (nor announced to Home Assistant).
    public var filteredFields: Set<String> = []
    public var homeassistant = HomeAssistant()
    /// The device is ignored: no topics, no commands, no polling where its upstream allows it.
    public var disabled = false

    /// How the device is announced to Home Assistant.
    public struct HomeAssistant: Sendable, Equatable {
        /// Not announced at all (configs cleared).
        public var exclude = false
        /// The device's name there.
        public var name: String?
        /// Every entity's icon and category, unless the entity has its own below.
        public var icon: String?
        public var entityCategory: String?
        /// Per entity, by its object (`light`, `rssi`, `connected`): name, icon, category.
        public var entities: [String: Entity] = [:]
        public init(exclude: Bool = false, name: String? = nil, icon: String? = nil, entityCategory: String? = nil, entities: [String: Entity] = [:]) {
            self.exclude = exclude
            self.name = name
            self.icon = icon
            self.entityCategory = entityCategory
            self.entities = entities
        }

        public struct Entity: Sendable, Equatable {
            public var name: String?
            public var icon: String?
            public var entityCategory: String?
            public init(name: String? = nil, icon: String? = nil, entityCategory: String? = nil) {
                self.name = name
                self.icon = icon
                self.entityCategory = entityCategory
            }
        }

        /// Nothing overridden.
        public var isDefault: Bool { self == HomeAssistant() }
    }

    public init(name: String? = nil, label: String? = nil, retain: Bool = true, qos: Int = 1, messageExpiry: UInt32 = 0, debounce: Double = 0,
                throttle: Double = 0, filteredFields: Set<String> = [], homeassistant: HomeAssistant = HomeAssistant(), disabled: Bool = false) {
        self.name = name
        self.label = label
        self.retain = retain
        self.qos = qos
        self.messageExpiry = messageExpiry
        self.debounce = debounce
        self.throttle = throttle
        self.filteredFields = filteredFields
        self.homeassistant = homeassistant
        self.disabled = disabled
    }

    /// The bridge's own behaviour: such a device needs no policy.
    public var isDefault: Bool { self == DevicePolicy() }

    /// Whether state publishes wait (debounce or throttle).
    public var paced: Bool { debounce > 0 || throttle > 0 }

    /// The same without its name: what else than the topics a change of policy changes.
    var publishing: DevicePolicy {
        var p = self
        p.name = nil
        return p
    }
}
