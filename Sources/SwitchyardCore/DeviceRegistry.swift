/// A message for the broker, as the engine hands it to the transport.
public struct Publication: Sendable, Equatable {
    public var topic: String
    public var body: PayloadBody
    public var qos: Int
    public var retain: Bool
    /// When it may go relative to what else is waiting (see `Lane`); not part of what the message is.
    public var lane: Lane
    /// MQTT 5 properties (expiry, correlation data) of a non-retained message.
    public var properties = MessageProperties.none

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
        a.topic == b.topic && a.qos == b.qos && a.retain == b.retain && a.properties == b.properties && a.payload == b.payload
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
///
/// Kept small per device, as a bridge may carry tens of thousands: a record holds its listing (shared with
/// the payload sources below), its state only as the bytes last published (the very array the transport's
/// ledger keeps), its availability and a counter. A device's details and discovery configs are not kept
/// serialised anywhere: the transport gets sources that write them when they are sent.
public struct DeviceRegistry: Sendable {
    /// What a device was last listed as, under which name: immutable, shared by its record and by the
    /// sources of its details and discovery payloads (one allocation per listing).
    final class Listing: PayloadSource {
        let descriptor: DeviceDescriptor
        let name: String
        let context: Context
        /// The device's options and what they make of it, boxed: a device without options (most) pays one
        /// pointer for them.
        let options: Options?

        /// A device's options, and the device as announced with them.
        final class Options: Sendable {
            let policy: DevicePolicy
            /// Its name for people (the `homeassistant.name`, `label` or `name` option), without the capabilities
            /// of the fields it does not publish.
            let announced: DeviceDescriptor
            init(_ policy: DevicePolicy, _ d: DeviceDescriptor) {
                self.policy = policy
                var a = d
                if let n = policy.homeassistant.name ?? policy.label ?? policy.name.map(Naming.readable) { a.displayName = n }
                if !policy.filteredFields.isEmpty { a.capabilities = d.capabilities.filter { !policy.filteredFields.contains($0.name) } }
                announced = a
            }
        }

        init(_ descriptor: DeviceDescriptor, name: String, context: Context, policy: DevicePolicy? = nil) {
            self.descriptor = descriptor
            self.name = name
            self.context = context
            options = policy.map { Options($0, descriptor) }
        }

        /// The device's options (`DevicePolicy`), when it has any.
        var policy: DevicePolicy? { options?.policy }
        /// The device as announced (`Options.announced`).
        var announced: DeviceDescriptor { options?.announced ?? descriptor }

        /// Whether its discovery configs are announced (not `homeassistant.exclude`).
        var announces: Bool { policy?.homeassistant.exclude != true }

        /// `bridge/devices/<adapter>/<name>`.
        func payload() -> [UInt8] {
            let d = descriptor, adapterID = context.adapterID
            var o: [String: JSONValue] = [
                "adapter": .string(adapterID), "id": .string(d.id), "name": .string(name), "label": .string(policy?.label ?? d.label),
                "topic": .string(context.scheme.device(adapter: adapterID, name: name)), "category": .string(d.category.rawValue),
                "capabilities": .array(d.capabilities.map(\.descriptor)),
            ]
            o["model"] = d.model.map(JSONValue.string) ?? .null
            o["manufacturer"] = d.manufacturer.map(JSONValue.string) ?? .null
            if let v = d.swVersion { o["sw_version"] = .string(v) }
            if let part = d.partOf { o["part_of"] = .string(part.parentID) }
            return JSONValue.object(o).bytes
        }
    }

    /// One of a device's discovery configs, written when it is sent.
    final class DiscoveryPayload: PayloadSource {
        let listing: Listing
        let index: Int
        init(_ listing: Listing, _ index: Int) {
            self.listing = listing
            self.index = index
        }
        func payload() -> [UInt8] {
            guard let builder = listing.context.discovery else { return [] }
            let entries = builder.entries(adapter: listing.context.adapterID, name: listing.name, device: listing.announced,
                                          overrides: listing.policy?.homeassistant)
            return index < entries.count ? entries[index].payload.bytes : []
        }
    }

    /// A device's one config in `device` mode, written when it is sent; `dropped`: the entities of the listing
    /// it replaced that this one has not, removed by it.
    final class DeviceConfigPayload: PayloadSource {
        let listing: Listing
        let dropped: [DiscoveryBuilder.Shape]
        init(_ listing: Listing, dropped: [DiscoveryBuilder.Shape] = []) {
            self.listing = listing
            self.dropped = dropped
        }
        func payload() -> [UInt8] {
            guard let builder = listing.context.discovery else { return [] }
            let entries = builder.entries(adapter: listing.context.adapterID, name: listing.name, device: listing.announced,
                                          overrides: listing.policy?.homeassistant)
            return builder.deviceConfig(entries, dropped: dropped).bytes
        }
    }

    /// What every listing of one adapter shares.
    final class Context: Sendable {
        let adapterID: String
        let scheme: TopicScheme
        let discovery: DiscoveryBuilder?
        /// The adapter's discovery node prefix, worked out once.
        let nodePrefix: String
        init(adapterID: String, scheme: TopicScheme, discovery: DiscoveryBuilder?) {
            self.adapterID = adapterID
            self.scheme = scheme
            self.discovery = discovery
            nodePrefix = discovery?.nodePrefix(adapter: adapterID) ?? ""
        }
    }

    /// The discovery shapes of each kind of device (category and capabilities), worked out once: 10 000
    /// lights of one kind share one list (building every config only to read its topics would do the same
    /// work again for every device at start-up).
    struct Shapes: Sendable {
        private var known: [(DeviceCategory, [Capability], [DiscoveryBuilder.Shape])] = []
        static let limit = 256

        mutating func of(_ d: DeviceDescriptor, _ builder: DiscoveryBuilder) -> [DiscoveryBuilder.Shape] {
            if let k = known.first(where: { $0.0 == d.category && $0.1 == d.capabilities }) { return k.2 }
            let shapes = builder.shapes(d)
            if known.count < Self.limit { known.append((d.category, d.capabilities, shapes)) }
            return shapes
        }
    }

    public struct Record: Sendable {
        var listing: Listing
        /// The state as last published (canonical JSON; the transport keeps the same array); nil: none yet.
        var stateBytes: [UInt8]?
        public var available: Bool?
        var missing: UInt8 = 0

        public var descriptor: DeviceDescriptor { listing.descriptor }
        /// The full name inside the adapter, namespace included (`group/lounge`).
        public var name: String { listing.name }
        /// The state as last published.
        public var state: [String: JSONValue] {
            stateBytes.flatMap { try? JSONValue.parse($0) }?.objectValue ?? [:]
        }
    }

    public let adapterID: String
    let scheme: TopicScheme
    /// Discovery configs to announce, or nil when `homeassistant.discovery` is off.
    let discovery: DiscoveryBuilder?
    let reservedPrefixes: [String]
    let context: Context
    var shapes = Shapes()
    public private(set) var devices: [String: Record] = [:]
    public private(set) var byName: [String: String] = [:]
    /// The adapter lists its devices from config (authoritative listings): a device it does not list is gone.
    public private(set) var listsFromConfig = false
    /// New devices whose details, discovery, first availability and `device_added` are still to be made
    /// (`flushAnnouncements`): a start's states go out before that work is even done.
    private(set) var pendingAnnouncements: [String] = []
    /// Per-device options, by stable id (`setPolicies`); only devices that have any.
    public private(set) var policies: [String: DevicePolicy] = [:]
    /// Devices listed while disabled, as last listed: back at once when enabled again.
    private(set) var disabledListed: [String: DeviceDescriptor] = [:]
    /// Names no device has any more, and why (renamed, disabled): a command sent to one is refused with that
    /// reason instead of as unknown, at once (design.md §19).
    public private(set) var retired: [String: String] = [:]
    /// The stable ids of the devices listed while disabled.
    public var disabledDevices: [String] { disabledListed.keys.sorted() }
    /// At most this many retired names are kept (the oldest go first).
    static let retiredLimit = 1024
    private var retiredOrder: [String] = []

    public init(adapterID: String, scheme: TopicScheme, discovery: DiscoveryBuilder?, reservedPrefixes: [String]) {
        self.adapterID = adapterID
        self.scheme = scheme
        self.discovery = discovery
        self.reservedPrefixes = reservedPrefixes
        self.context = Context(adapterID: adapterID, scheme: scheme, discovery: discovery)
    }

    /// The same devices under a restarted adapter (which may reserve other prefixes).
    public func carried(reservedPrefixes: [String]) -> DeviceRegistry {
        var r = DeviceRegistry(adapterID: adapterID, scheme: scheme, discovery: discovery, reservedPrefixes: reservedPrefixes)
        r.devices = devices
        r.byName = byName
        r.listsFromConfig = listsFromConfig
        r.shapes = shapes
        r.pendingAnnouncements = pendingAnnouncements
        r.policies = policies
        r.disabledListed = disabledListed
        r.retired = retired
        r.retiredOrder = retiredOrder
        return r
    }

    public func record(named name: String) -> Record? { byName[name].flatMap { devices[$0] } }

    /// The numbers of name segments in use (the command subscriptions cover each depth).
    public var nameDepths: Set<Int> { Set(devices.values.map { $0.name.utf8.reduce(1) { $0 + ($1 == UInt8(ascii: "/") ? 1 : 0) } }) }

    // MARK: listings

    /// A complete listing (design.md §7 in docs/design.md): `authoritative` listings (from config) remove
    /// missing devices at once, upstream listings only after a device is absent from 3 in a row. Returns
    /// whether the device list changed. A new device is named and recorded (with its first availability)
    /// at once, and announced by `flushAnnouncements`, which the engine calls after the states the adapter
    /// reports next: a device's announcement (availability, `device_added`, discovery configs, details)
    /// costs more than its state, and the states go out first (docs/design.md §16). Anything still to
    /// announce is announced first.
    public mutating func setDevices(_ listed: [DeviceDescriptor], authoritative: Bool, available: [String: Bool],
                                    into out: inout [RegistryOutput]) -> Bool {
        flushAnnouncements(into: &out)
        if authoritative { listsFromConfig = true }
        var listed = listed
        if policies.values.contains(where: \.disabled) || !disabledListed.isEmpty {
            // Disabled devices are kept aside, as listed: never named, published or commanded.
            if authoritative { disabledListed = [:] }
            listed.removeAll { d in
                guard policies[d.id]?.disabled == true else { return false }
                disabledListed[d.id] = d
                return true
            }
        }
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
        let assignment = assignNames(all, into: &out)
        var changed = !removed.isEmpty
        for d in listed {
            let name = d.namespace + assignment.names[d.id]!
            if var rec = devices[d.id] {
                rec.missing = 0
                if rec.name != name {
                    if let w = assignment.warnings[d.id] { out.append(.log(.warning, "\(adapterID): \(w)")) }
                    rename(&rec, to: name, descriptor: d, into: &out)
                    changed = true
                } else if rec.descriptor != d {
                    let old = rec.listing
                    rec.listing = Listing(d, name: name, context: context, policy: policies[d.id])
                    publishDetails(rec, into: &out)
                    announce(rec, replacing: old, into: &out)
                    changed = true
                }
                devices[d.id] = rec
            } else {
                if let w = assignment.warnings[d.id] { out.append(.log(.warning, "\(adapterID): \(w)")) }
                add(d, name: name, available: available[d.id] ?? true)
                changed = true
            }
        }
        return changed
    }

    /// The new devices' announcements: details and discovery in the `late` lane, their availability as it is
    /// now and `device_added` in the `soon` lane, in listing order. A device removed meanwhile is skipped.
    public mutating func flushAnnouncements(into out: inout [RegistryOutput]) {
        guard !pendingAnnouncements.isEmpty else { return }
        let ids = pendingAnnouncements
        pendingAnnouncements = []
        out.reserveCapacity(out.count + ids.count * 4)
        for id in ids {
            guard let rec = devices[id] else { continue }
            publishDetails(rec, lane: .late, into: &out)
            announce(rec, replacing: nil, lane: .late, into: &out)
            if let a = rec.available { out.append(.publish(availability(rec, a, lane: .soon))) }
            out.append(.publish(event("device_added", ["adapter": adapterID, "id": id, "name": rec.name], lane: .soon)))
        }
    }

    /// A rename publishes the new topics and clears the old state, availability and details; discovery
    /// is keyed by the stable id, so Home Assistant keeps the entity. The order is what a subscriber to a
    /// discovery config needs: the new state and availability first, then the config pointing at them,
    /// and only then the old topics emptied (no config points at them any more).
    ///
    /// `anew` (a rename asked for with `homeassistant_rename`): the old discovery configs are cleared first and
    /// the new ones are not announced here: the caller announces them (`republish(_:configsOnly:)`) once Home
    /// Assistant has let go of the entities, which it then makes again with ids that follow the new name.
    mutating func rename(_ rec: inout Record, to name: String, descriptor: DeviceDescriptor, anew: Bool = false, into out: inout [RegistryOutput]) {
        let oldListing = rec.listing
        let old = rec.name
        if byName[old] == descriptor.id { byName[old] = nil }
        byName[name] = descriptor.id
        retire(old, "was renamed to '\(name)': its commands go to \(scheme.set(adapter: adapterID, name: name))")
        retired[name] = nil
        if anew { for t in discoveryTopics(oldListing) { out.append(.publish(Publication(t, [], retain: true))) } }
        rec.listing = Listing(descriptor, name: name, context: context, policy: policies[descriptor.id])
        publishDetails(rec, into: &out)
        out.append(.publish(statePublication(&rec, force: true)))
        if let a = rec.available { out.append(.publish(availability(rec, a))) }
        if !anew { announce(rec, replacing: oldListing, into: &out) }
        // The old state is cleared only where the bridge left a retained copy (a device with `retain: false` has none).
        var stale = [scheme.availability(adapter: adapterID, name: old), scheme.deviceDetails(adapter: adapterID, name: old)]
        if oldListing.policy?.retain != false { stale.insert(scheme.device(adapter: adapterID, name: old), at: 0) }
        for t in stale { out.append(.publish(Publication(t, [], retain: true))) }
        out.append(.publish(event("device_renamed", ["adapter": adapterID, "from": old, "id": descriptor.id, "to": name])))
    }

    /// A name no device has now, and why (kept for the answer to a command sent to it).
    mutating func retire(_ name: String, _ why: String) {
        if retired.updateValue(why, forKey: name) == nil { retiredOrder.append(name) }
        if retiredOrder.count > Self.retiredLimit {
            let drop = retiredOrder.count - Self.retiredLimit
            for n in retiredOrder.prefix(drop) where byName[n] == nil { retired[n] = nil }
            retiredOrder.removeFirst(drop)
        }
    }

    /// Names for every device, their `name` options as configured names; an option that gives a device the
    /// name another device has is not used (with a warning): two devices never share topics.
    func assignNames(_ all: [DeviceDescriptor], into out: inout [RegistryOutput]) -> Naming.Assignment {
        var skip: Set<String> = []
        var a = Naming.assign(all.map { named($0) }, reservedPrefixes: reservedPrefixes)
        var holders: [String: [String]] = [:]
        for d in all { holders[d.namespace + a.names[d.id]!, default: []].append(d.id) }
        for (name, ids) in holders where ids.count > 1 {
            for id in ids.sorted() where policies[id]?.name != nil {
                skip.insert(id)
                out.append(.log(.warning, "\(adapterID): device '\(id)': its name option '\(name)' is another device's name; not used"))
            }
        }
        if !skip.isEmpty { a = Naming.assign(all.map { named($0, skip: skip) }, reservedPrefixes: reservedPrefixes) }
        return a
    }

    /// The descriptor as named: with its `name` option as the configured name, when it has a valid one.
    func named(_ d: DeviceDescriptor, skip: Set<String> = []) -> DeviceDescriptor {
        guard !skip.contains(d.id), let n = policies[d.id]?.name, Naming.problem(withName: n, reservedPrefixes: reservedPrefixes) == nil else { return d }
        var named = d
        named.configuredName = n
        return named
    }

    /// A new device, named: recorded with its first availability, announced by `flushAnnouncements`.
    mutating func add(_ d: DeviceDescriptor, name: String, available: Bool) {
        byName[name] = d.id
        retired[name] = nil
        devices[d.id] = Record(listing: Listing(d, name: name, context: context, policy: policies[d.id]), available: available)
        pendingAnnouncements.append(d.id)
    }

    /// Clears the device's discovery configs, then its state, availability and details: Home Assistant
    /// drops the entity before the topics it reads are emptied (an empty state under a standing config
    /// is a template error there).
    public mutating func remove(_ id: String, reason: String, into out: inout [RegistryOutput]) {
        guard let rec = devices[id] else { return }
        var topics = discoveryTopics(rec.listing)
        if rec.listing.policy?.retain != false { topics.append(scheme.device(adapter: adapterID, name: rec.name)) }
        for t in topics + [scheme.availability(adapter: adapterID, name: rec.name), scheme.deviceDetails(adapter: adapterID, name: rec.name)] {
            out.append(.publish(Publication(t, [], retain: true)))
        }
        devices[id] = nil
        byName[rec.name] = nil
        out.append(.publish(event("device_removed", ["adapter": adapterID, "id": id, "name": rec.name, "reason": reason])))
    }

    /// What a change of options did, for the engine to finish.
    public struct PolicyChange: Sendable, Equatable {
        /// Devices came, went or were renamed: `bridge/devices` and the subscriptions change.
        public var listChanged = false
        /// Devices enabled again: their adapter is asked for their state.
        public var enabled: [String] = []
        /// Devices renamed with their Home Assistant entities made anew: their configs are announced once Home
        /// Assistant has let go of the old ones (`republish(_:configsOnly:)`).
        public var announceLater: [String] = []
    }

    /// The devices' options from now on (by stable id; a device without any is not in `new`), applied to every
    /// device known: disabled ones removed (and kept aside as listed), enabled ones back, names changed by
    /// their `name` option renamed (`anew`: with their Home Assistant entities made anew), and the topics of
    /// the others whose options changed published again as the new options say.
    public mutating func setPolicies(_ new: [String: DevicePolicy], anew: Set<String> = [], into out: inout [RegistryOutput]) -> PolicyChange {
        flushAnnouncements(into: &out)
        var change = PolicyChange()
        policies = new.filter { !$0.value.isDefault }
        for id in devices.keys.sorted() where policies[id]?.disabled == true {
            let rec = devices[id]!
            disabledListed[id] = rec.descriptor
            remove(id, reason: "disabled", into: &out)
            retire(rec.name, "is disabled (the devices option 'disabled' of \(adapterID) device '\(id)')")
            change.listChanged = true
        }
        var back: [DeviceDescriptor] = []
        for id in disabledListed.keys.sorted() where policies[id]?.disabled != true { back.append(disabledListed.removeValue(forKey: id)!) }
        let assignment = assignNames(devices.values.map(\.descriptor) + back, into: &out)
        for id in devices.keys.sorted() {
            var rec = devices[id]!
            let name = rec.descriptor.namespace + assignment.names[id]!
            if rec.name != name {
                if let w = assignment.warnings[id] { out.append(.log(.warning, "\(adapterID): \(w)")) }
                rename(&rec, to: name, descriptor: rec.descriptor, anew: anew.contains(id), into: &out)
                if anew.contains(id) { change.announceLater.append(id) }
                change.listChanged = true
            } else if rec.listing.policy != policies[id] {
                restyle(&rec, policies[id], into: &out)
            }
            devices[id] = rec
        }
        for d in back {
            add(d, name: d.namespace + assignment.names[d.id]!, available: true)
            change.enabled.append(d.id)
            change.listChanged = true
        }
        return change
    }

    /// A device whose options changed but not its name: what they change is published again. A state that
    /// stops being retained has the broker's retained copy cleared first (and goes on without one).
    mutating func restyle(_ rec: inout Record, _ policy: DevicePolicy?, into out: inout [RegistryOutput]) {
        let old = rec.listing
        rec.listing = Listing(rec.descriptor, name: rec.name, context: context, policy: policy)
        let was = old.policy ?? DevicePolicy(), now = policy ?? DevicePolicy()
        if !now.filteredFields.isEmpty, let state = rec.stateBytes.flatMap({ try? JSONValue.parse($0) })?.objectValue {
            let kept = state.filter { !now.filteredFields.contains($0.key) }
            if kept.count != state.count { rec.stateBytes = JSONValue.object(kept).bytes }
        }
        if was.retain != now.retain || was.qos != now.qos || was.messageExpiry != now.messageExpiry || was.filteredFields != now.filteredFields {
            if was.retain && !now.retain { out.append(.publish(Publication(scheme.device(adapter: adapterID, name: rec.name), [], retain: true))) }
            if let bytes = rec.stateBytes { out.append(.publish(stateMessage(rec, bytes))) }
        }
        if was.label != now.label || was.homeassistant != now.homeassistant || was.filteredFields != now.filteredFields {
            publishDetails(rec, into: &out)
            announce(rec, replacing: old, into: &out)
        }
    }

    /// The name a device would have without its `name` option (a rename back to it drops the option).
    public func nameWithoutOption(_ id: String) -> String? {
        guard let rec = devices[id] else { return nil }
        var without = self
        without.policies[id]?.name = nil
        var none: [RegistryOutput] = []
        let assignment = without.assignNames(devices.values.map(\.descriptor), into: &none)
        return assignment.names[id].map { rec.descriptor.namespace + $0 }
    }

    /// Removes every device (the adapter left the config).
    public mutating func removeAll(reason: String, into out: inout [RegistryOutput]) {
        flushAnnouncements(into: &out)
        for id in devices.keys.sorted() { remove(id, reason: reason, into: &out) }
    }

    // MARK: state

    /// Merges fields into the state (rounded by each field's capability); the full state when a rounded
    /// value changed, else nothing.
    public mutating func update(_ id: String, _ fields: [String: JSONValue]) -> Publication? {
        guard var rec = devices[id] else { return nil }
        var state = rec.state
        let filtered = rec.listing.policy?.filteredFields ?? []
        for (k, v) in fields where !filtered.contains(k) { state[k] = rec.descriptor.capability(k)?.normalise(v) ?? v }
        let bytes = JSONValue.object(state).bytes
        guard bytes != rec.stateBytes else { return nil }
        rec.stateBytes = bytes
        devices[id] = rec
        return stateMessage(rec, bytes)
    }

    /// A state as the device's options say it goes: retained or not, its QoS, its expiry (non-retained only).
    func stateMessage(_ rec: Record, _ bytes: [UInt8]) -> Publication {
        var p = Publication(scheme.device(adapter: adapterID, name: rec.name), bytes, retain: true)
        guard let policy = rec.listing.policy else { return p }
        p.retain = policy.retain
        p.qos = policy.qos
        if !policy.retain { p.properties.expiry = policy.messageExpiry }
        return p
    }

    /// The device's options, when it has any.
    public func policy(of id: String) -> DevicePolicy? { devices[id]?.listing.policy }

    /// The full state (`/get` and republish publish it even when unchanged).
    public mutating func state(_ id: String, force: Bool) -> Publication? {
        guard var rec = devices[id] else { return nil }
        if !force && rec.stateBytes != nil { return nil }
        let p = statePublication(&rec, force: force)
        devices[id] = rec
        return p
    }

    /// The state as last published (`{}` before any), to be published again.
    func statePublication(_ rec: inout Record, force: Bool) -> Publication {
        let bytes = rec.stateBytes ?? JSONValue.object([:]).bytes
        rec.stateBytes = bytes
        return stateMessage(rec, bytes)
    }

    public mutating func setAvailable(_ id: String, _ available: Bool) -> Publication? { setAvailable(id, available, lane: .now) }

    mutating func setAvailable(_ id: String, _ available: Bool, lane: Lane) -> Publication? {
        guard var rec = devices[id], rec.available != available else { return nil }
        rec.available = available
        devices[id] = rec
        return availability(rec, available, lane: lane)
    }

    func availability(_ rec: Record, _ available: Bool, lane: Lane = .now) -> Publication {
        Publication(scheme.availability(adapter: adapterID, name: rec.name), text: available ? "online" : "offline", retain: true, lane: lane)
    }

    /// `offline` on every device's availability topic (clean shutdown), in name order.
    public func offlineAll() -> [Publication] {
        devices.values.sorted { $0.descriptor.id < $1.descriptor.id }.map { availability($0, false) }
    }

    /// Discovery, state and availability of every device again (HA birth, `republish`): the states and
    /// availability first, the configs after them (`late`).
    public mutating func republishAll(into out: inout [RegistryOutput]) {
        flushAnnouncements(into: &out)
        republish(devices.keys.sorted(), into: &out)
    }

    /// The same for some devices (a re-announcement goes out a few devices at a time); `configsOnly`: their
    /// discovery configs alone. A device removed meanwhile is skipped.
    public mutating func republish(_ ids: some Sequence<String>, configsOnly: Bool = false, into out: inout [RegistryOutput]) {
        flushAnnouncements(into: &out)
        for id in ids {
            guard var rec = devices[id] else { continue }
            announce(rec, replacing: nil, lane: .late, into: &out)
            if configsOnly { continue }
            out.append(.publish(statePublication(&rec, force: true)))
            if let a = rec.available { out.append(.publish(availability(rec, a))) }
            devices[id] = rec
        }
    }

    /// Every device's id, in the order a re-announcement takes them.
    public var sortedIDs: [String] { devices.keys.sorted() }

    // MARK: details and discovery

    func publishDetails(_ rec: Record, lane: Lane = .now, into out: inout [RegistryOutput]) {
        out.append(.publish(Publication(scheme.deviceDetails(adapter: adapterID, name: rec.name), body: .source(rec.listing), retain: true, lane: lane)))
    }

    /// The device's discovery configs (as sources); what the `replacing` listing announced and this one
    /// does not is cleared.
    mutating func announce(_ rec: Record, replacing old: Listing?, lane: Lane = .now, into out: inout [RegistryOutput]) {
        guard let discovery else { return }
        if discovery.mode == .device {
            // One config: entities the old listing had and this one has not are removed by it.
            let dropped = old.map { o in shapes.of(o.announced, discovery).filter { !shapes.of(rec.listing.announced, discovery).contains($0) } } ?? []
            guard let topic = discoveryTopics(rec.listing).first else {
                // Not announced (`homeassistant.exclude`): what the old listing announced is cleared.
                if let old { for stale in discoveryTopics(old) { out.append(.publish(Publication(stale, [], retain: true))) } }
                return
            }
            if let old, let stale = discoveryTopics(old).first, stale != topic { out.append(.publish(Publication(stale, [], retain: true))) }
            out.append(.publish(Publication(topic, body: .source(DeviceConfigPayload(rec.listing, dropped: dropped)), retain: true, lane: lane)))
            return
        }
        let topics = discoveryTopics(rec.listing)
        if let old { for stale in discoveryTopics(old) where !topics.contains(stale) { out.append(.publish(Publication(stale, [], retain: true))) } }
        for (i, t) in topics.enumerated() {
            out.append(.publish(Publication(t, body: .source(DiscoveryPayload(rec.listing, i)), retain: true, lane: lane)))
        }
    }

    /// The config topics a listing announces (none without discovery); the shapes of a new kind of device are
    /// remembered.
    mutating func discoveryTopics(_ listing: Listing) -> [String] {
        Self.configTopics(listing, adapterID: adapterID, discovery: discovery, shapes: &shapes)
    }

    static func configTopics(_ listing: Listing, adapterID: String, discovery: DiscoveryBuilder?, shapes: inout Shapes,
                             mode: DiscoveryMode? = nil) -> [String] {
        guard let discovery, listing.announces else { return [] }
        let node = listing.context.nodePrefix + Naming.normaliseID(listing.descriptor.id)
        if (mode ?? discovery.mode) == .device { return [discovery.deviceConfigTopic(node: node)] }
        return shapes.of(listing.announced, discovery).map { discovery.configTopic($0, node: node) }
    }

    /// A lookup of the discovery topics of the devices whose normalised id (as in the discovery node) is
    /// asked for; each is worked out when asked.
    public var discoveryTopicsByNode: (String) -> Set<String>? { discoveryTopicsByNode(mode: nil) }

    /// The same for the other discovery mode: the topics an install of the other mode has for these devices.
    public var otherDiscoveryTopicsByNode: (String) -> Set<String>? {
        discoveryTopicsByNode(mode: discovery?.mode == .device ? .entity : .device)
    }

    func discoveryTopicsByNode(mode: DiscoveryMode?) -> (String) -> Set<String>? {
        var byNode: [String: [String]] = [:]
        byNode.reserveCapacity(devices.count)
        for id in devices.keys { byNode[Naming.normaliseID(id), default: []].append(id) }
        let registry = self
        return { node in
            guard let ids = byNode[node] else { return nil }
            var cache = registry.shapes
            return ids.reduce(into: Set<String>()) { topics, id in
                guard let rec = registry.devices[id] else { return }
                topics.formUnion(Self.configTopics(rec.listing, adapterID: registry.adapterID, discovery: registry.discovery, shapes: &cache,
                                                   mode: mode))
            }
        }
    }

    /// One entry of `bridge/devices` per device, by name.
    public var listEntries: [JSONValue] { Self.listEntries(listings) }

    /// The devices' listings (shared, not copied): what `bridge/devices` is written from when it is sent.
    var listings: [Listing] { devices.values.map(\.listing) }

    static func listEntries(_ listings: [Listing]) -> [JSONValue] {
        listings.sorted { $0.name < $1.name }.map { l in
            let adapterID = l.context.adapterID
            var o: [String: JSONValue] = [
                "adapter": .string(adapterID), "id": .string(l.descriptor.id), "name": .string(l.name),
                "topic": .string(l.context.scheme.device(adapter: adapterID, name: l.name)),
                "capabilities": .array(l.descriptor.capabilities.map { .string($0.name) }),
            ]
            o["model"] = l.descriptor.model.map(JSONValue.string) ?? .null
            return .object(o)
        }
    }

    /// `bridge/devices` as a source: the listings of every adapter (in order), written when it is sent
    /// (the JSON is a couple of hundred bytes a device; the source holds one reference a device).
    final class DeviceList: PayloadSource {
        let adapters: [[Listing]]
        init(_ adapters: [[Listing]]) { self.adapters = adapters }
        /// Written entry by entry, in canonical order (each entry's keys sorted), with no tree built: a tree
        /// would hold a dictionary per device, several times the size of the text, at the peak of a start.
        func payload() -> [UInt8] {
            var w = JSONWriter(capacity: adapters.reduce(0) { $0 + $1.count } * 200)
            w.out.append(UInt8(ascii: "["))
            var first = true
            for listings in adapters {
                for l in listings.sorted(by: { $0.name < $1.name }) {
                    if !first { w.out.append(UInt8(ascii: ",")) }
                    first = false
                    let adapterID = l.context.adapterID
                    w.literal("{\"adapter\":")
                    w.string(adapterID)
                    w.literal(",\"capabilities\":[")
                    for (i, c) in l.descriptor.capabilities.enumerated() {
                        if i > 0 { w.out.append(UInt8(ascii: ",")) }
                        w.string(c.name)
                    }
                    w.literal("],\"id\":")
                    w.string(l.descriptor.id)
                    w.literal(",\"model\":")
                    if let m = l.descriptor.model { w.string(m) } else { w.literal("null") }
                    w.literal(",\"name\":")
                    w.string(l.name)
                    w.literal(",\"topic\":")
                    w.string(l.context.scheme.device(adapter: adapterID, name: l.name))
                    w.out.append(UInt8(ascii: "}"))
                }
            }
            w.out.append(UInt8(ascii: "]"))
            return w.out
        }
    }

    /// A `bridge/event` message: `data`'s keys given in their sorted order, written as the canonical JSON of
    /// `{"data": {…}, "type": …}` without a dictionary built (one per device at a start of thousands).
    func event(_ type: String, _ data: KeyValuePairs<String, String>, lane: Lane = .now) -> Publication {
        var w = JSONWriter(capacity: 128)
        w.literal("{\"data\":{")
        var previous: String?
        for (k, v) in data {
            assert(previous.map { $0 < k } ?? true, "event keys out of order")
            if previous != nil { w.out.append(UInt8(ascii: ",")) }
            previous = k
            w.string(k)
            w.out.append(UInt8(ascii: ":"))
            w.string(v)
        }
        w.literal("},\"type\":")
        w.string(type)
        w.out.append(UInt8(ascii: "}"))
        return Publication(scheme.bridge("event"), w.out, retain: false, lane: lane)
    }
}
