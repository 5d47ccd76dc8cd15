/// A message for the broker, as the engine hands it to the transport.
public struct Publication: Sendable, Equatable {
    public var topic: String
    public var body: PayloadBody
    public var qos: Int
    public var retain: Bool
    /// When it may go relative to what else is waiting (see `Lane`); not part of what the message is.
    public var lane: Lane

    public init(_ topic: String, _ payload: [UInt8], qos: Int = 1, retain: Bool, lane: Lane = .now) {
        self.init(topic, body: .bytes(payload), qos: qos, retain: retain, lane: lane)
    }
    public init(_ topic: String, body: PayloadBody, qos: Int = 1, retain: Bool, lane: Lane = .now) {
        self.topic = topic
        self.body = body
        self.qos = qos
        self.retain = retain
        self.lane = lane
    }
    public init(_ topic: String, text: String, qos: Int = 1, retain: Bool, lane: Lane = .now) {
        self.init(topic, Array(text.utf8), qos: qos, retain: retain, lane: lane)
    }
    public init(_ topic: String, json: JSONValue, qos: Int = 1, retain: Bool, lane: Lane = .now) {
        self.init(topic, json.bytes, qos: qos, retain: retain, lane: lane)
    }

    /// The payload's bytes (a source's are made now).
    public var payload: [UInt8] {
        get { body.bytes }
        set { body = .bytes(newValue) }
    }
    public var text: String { String(decoding: payload, as: UTF8.self) }

    public static func == (a: Publication, b: Publication) -> Bool {
        a.topic == b.topic && a.qos == b.qos && a.retain == b.retain && a.payload == b.payload
    }
}

/// What a registry change asks of the engine, in order: messages to publish and lines for bridge/log.
public enum RegistryOutput: Sendable, Equatable {
    case publish(Publication)
    case log(BridgeLogLevel, String)
}

/// One adapter's devices: their names (docs/topics.md "Devices", docs/design.md §1), state,
/// availability and discovery. Pure bookkeeping: every change returns the messages it needs, so the
/// rules (renames, removal after 3 listings, rounding, republish) are unit-tested without a broker.
public struct DeviceRegistry: Sendable {
    public struct Record: Sendable {
        public var descriptor: DeviceDescriptor
        /// The full name inside the adapter, namespace included (`group/lounge`).
        public var name: String
        public var state: [String: JSONValue] = [:]
        var publishedState: String?
        public var available: Bool?
        var missing = 0
        var discoveryTopics: [String] = []
    }

    public let adapterID: String
    let scheme: TopicScheme
    /// Discovery configs to announce, or nil when `homeassistant.discovery` is off.
    let discovery: DiscoveryBuilder?
    let reservedPrefixes: [String]
    public private(set) var devices: [String: Record] = [:]
    public private(set) var byName: [String: String] = [:]
    /// The adapter lists its devices from config (authoritative listings): a device it does not list is gone.
    public private(set) var listsFromConfig = false

    public init(adapterID: String, scheme: TopicScheme, discovery: DiscoveryBuilder?, reservedPrefixes: [String]) {
        self.adapterID = adapterID
        self.scheme = scheme
        self.discovery = discovery
        self.reservedPrefixes = reservedPrefixes
    }

    /// The same devices under a restarted adapter (which may reserve other prefixes).
    public func carried(reservedPrefixes: [String]) -> DeviceRegistry {
        var r = DeviceRegistry(adapterID: adapterID, scheme: scheme, discovery: discovery, reservedPrefixes: reservedPrefixes)
        r.devices = devices
        r.byName = byName
        r.listsFromConfig = listsFromConfig
        return r
    }

    public func record(named name: String) -> Record? { byName[name].flatMap { devices[$0] } }

    /// The numbers of name segments in use (the command subscriptions cover each depth).
    public var nameDepths: Set<Int> { Set(devices.values.map { $0.name.split(separator: "/").count }) }

    // MARK: listings

    /// A complete listing (design.md §7 in docs/design.md): `authoritative` listings (from config) remove
    /// missing devices at once, upstream listings only after a device is absent from 3 in a row. Returns
    /// whether the device list changed.
    public mutating func setDevices(_ listed: [DeviceDescriptor], authoritative: Bool, available: [String: Bool],
                                    into out: inout [RegistryOutput]) -> Bool {
        if authoritative { listsFromConfig = true }
        let listedIDs = Set(listed.map(\.id))
        var removed: [String] = []
        for (id, rec) in devices where !listedIDs.contains(id) {
            if authoritative || rec.missing + 1 >= 3 {
                removed.append(id)
            } else {
                devices[id]!.missing += 1
            }
        }
        for id in removed.sorted() { remove(id, reason: authoritative ? "removed from config" : "absent from 3 listings", into: &out) }

        // Names are assigned over everything still known, so a device that is briefly missing keeps its name.
        var all = listed
        for (id, rec) in devices where !listedIDs.contains(id) { all.append(rec.descriptor) }
        let assignment = Naming.assign(all, reservedPrefixes: reservedPrefixes)
        var changed = !removed.isEmpty
        for d in listed {
            let name = d.namespace + assignment.names[d.id]!
            if var rec = devices[d.id] {
                rec.missing = 0
                let descriptorChanged = rec.descriptor != d
                rec.descriptor = d
                if rec.name != name {
                    if let w = assignment.warnings[d.id] { out.append(.log(.warning, "\(adapterID): \(w)")) }
                    rename(&rec, to: name, into: &out)
                    changed = true
                } else if descriptorChanged {
                    publishDetails(rec, into: &out)
                    announce(&rec, into: &out)
                    changed = true
                }
                devices[d.id] = rec
            } else {
                if let w = assignment.warnings[d.id] { out.append(.log(.warning, "\(adapterID): \(w)")) }
                var rec = Record(descriptor: d, name: name)
                byName[name] = d.id
                publishDetails(rec, into: &out)
                announce(&rec, into: &out)
                devices[d.id] = rec
                setAvailable(d.id, available[d.id] ?? true, into: &out)
                out.append(.publish(event("device_added", ["adapter": .string(adapterID), "id": .string(d.id), "name": .string(name)])))
                changed = true
            }
        }
        return changed
    }

    /// A rename publishes the new topics and clears the old state, availability and details; discovery
    /// is keyed by the stable id, so Home Assistant keeps the entity. The order is what a subscriber to a
    /// discovery config needs: the new state and availability first, then the config pointing at them,
    /// and only then the old topics emptied (no config points at them any more).
    mutating func rename(_ rec: inout Record, to name: String, into out: inout [RegistryOutput]) {
        let old = rec.name
        byName[old] = nil
        byName[name] = rec.descriptor.id
        rec.name = name
        publishDetails(rec, into: &out)
        rec.publishedState = nil
        if let p = statePublication(&rec, force: true) { out.append(.publish(p)) }
        if let a = rec.available { out.append(.publish(availability(rec, a))) }
        announce(&rec, into: &out)
        for t in [scheme.device(adapter: adapterID, name: old), scheme.availability(adapter: adapterID, name: old),
                  scheme.deviceDetails(adapter: adapterID, name: old)] {
            out.append(.publish(Publication(t, [], retain: true)))
        }
        out.append(.publish(event("device_renamed", ["adapter": .string(adapterID), "id": .string(rec.descriptor.id),
                                                     "from": .string(old), "to": .string(name)])))
    }

    /// Clears the device's discovery configs, then its state, availability and details: Home Assistant
    /// drops the entity before the topics it reads are emptied (an empty state under a standing config
    /// is a template error there).
    public mutating func remove(_ id: String, reason: String, into out: inout [RegistryOutput]) {
        guard let rec = devices[id] else { return }
        for t in rec.discoveryTopics + [scheme.device(adapter: adapterID, name: rec.name), scheme.availability(adapter: adapterID, name: rec.name),
                                        scheme.deviceDetails(adapter: adapterID, name: rec.name)] {
            out.append(.publish(Publication(t, [], retain: true)))
        }
        devices[id] = nil
        byName[rec.name] = nil
        out.append(.publish(event("device_removed", ["adapter": .string(adapterID), "id": .string(id), "name": .string(rec.name),
                                                     "reason": .string(reason)])))
    }

    /// Removes every device (the adapter left the config).
    public mutating func removeAll(reason: String, into out: inout [RegistryOutput]) {
        for id in devices.keys.sorted() { remove(id, reason: reason, into: &out) }
    }

    // MARK: state

    /// Merges fields into the state (rounded by each field's capability); the full state when a rounded
    /// value changed, else nothing.
    public mutating func update(_ id: String, _ fields: [String: JSONValue]) -> Publication? {
        guard var rec = devices[id] else { return nil }
        for (k, v) in fields { rec.state[k] = rec.descriptor.capability(k)?.normalise(v) ?? v }
        let p = statePublication(&rec, force: false)
        devices[id] = rec
        return p
    }

    /// The full state (`/get` and republish publish it even when unchanged).
    public mutating func state(_ id: String, force: Bool) -> Publication? {
        guard var rec = devices[id] else { return nil }
        let p = statePublication(&rec, force: force)
        devices[id] = rec
        return p
    }

    func statePublication(_ rec: inout Record, force: Bool) -> Publication? {
        let text = JSONValue.object(rec.state).serialized
        guard force || text != rec.publishedState else { return nil }
        rec.publishedState = text
        return Publication(scheme.device(adapter: adapterID, name: rec.name), Array(text.utf8), retain: true)
    }

    public mutating func setAvailable(_ id: String, _ available: Bool) -> Publication? {
        guard var rec = devices[id], rec.available != available else { return nil }
        rec.available = available
        devices[id] = rec
        return availability(rec, available)
    }

    mutating func setAvailable(_ id: String, _ available: Bool, into out: inout [RegistryOutput]) {
        if let p = setAvailable(id, available) { out.append(.publish(p)) }
    }

    func availability(_ rec: Record, _ available: Bool) -> Publication {
        Publication(scheme.availability(adapter: adapterID, name: rec.name), text: available ? "online" : "offline", retain: true)
    }

    /// `offline` on every device's availability topic (clean shutdown), in name order.
    public func offlineAll() -> [Publication] {
        devices.values.sorted { $0.descriptor.id < $1.descriptor.id }.map { availability($0, false) }
    }

    /// Discovery, state and availability of every device again (HA birth, `republish`).
    public mutating func republishAll(into out: inout [RegistryOutput]) {
        for id in devices.keys.sorted() {
            var rec = devices[id]!
            announce(&rec, into: &out)
            if let p = statePublication(&rec, force: true) { out.append(.publish(p)) }
            if let a = rec.available { out.append(.publish(availability(rec, a))) }
            devices[id] = rec
        }
    }

    // MARK: details and discovery

    func publishDetails(_ rec: Record, into out: inout [RegistryOutput]) {
        let d = rec.descriptor
        var o: [String: JSONValue] = [
            "adapter": .string(adapterID), "id": .string(d.id), "name": .string(rec.name), "label": .string(d.label),
            "topic": .string(scheme.device(adapter: adapterID, name: rec.name)), "category": .string(d.category.rawValue),
            "capabilities": .array(d.capabilities.map(\.descriptor)),
        ]
        o["model"] = d.model.map(JSONValue.string) ?? .null
        o["manufacturer"] = d.manufacturer.map(JSONValue.string) ?? .null
        if let v = d.swVersion { o["sw_version"] = .string(v) }
        out.append(.publish(Publication(scheme.deviceDetails(adapter: adapterID, name: rec.name), json: .object(o), retain: true)))
    }

    func announce(_ rec: inout Record, into out: inout [RegistryOutput]) {
        guard let discovery else { return }
        let entries = discovery.entries(adapter: adapterID, name: rec.name, device: rec.descriptor)
        let topics = entries.map(\.topic)
        for stale in rec.discoveryTopics where !topics.contains(stale) { out.append(.publish(Publication(stale, [], retain: true))) }
        for e in entries { out.append(.publish(Publication(e.topic, json: e.payload, retain: true))) }
        rec.discoveryTopics = topics
    }

    /// Every device's discovery topics, by normalised device id (as in its discovery node).
    public var discoveryTopics: [String: Set<String>] {
        Dictionary(devices.values.map { (Naming.normaliseID($0.descriptor.id), Set($0.discoveryTopics)) }, uniquingKeysWith: { a, b in a.union(b) })
    }

    /// One entry of `bridge/devices` per device, by name.
    public var listEntries: [JSONValue] {
        devices.values.sorted { $0.name < $1.name }.map { rec in
            var o: [String: JSONValue] = [
                "adapter": .string(adapterID), "id": .string(rec.descriptor.id), "name": .string(rec.name),
                "topic": .string(scheme.device(adapter: adapterID, name: rec.name)),
                "capabilities": .array(rec.descriptor.capabilities.map { .string($0.name) }),
            ]
            o["model"] = rec.descriptor.model.map(JSONValue.string) ?? .null
            return .object(o)
        }
    }

    func event(_ type: String, _ data: [String: JSONValue]) -> Publication {
        Publication(scheme.bridge("event"), json: ["type": .string(type), "data": .object(data)], retain: false)
    }
}
