#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// What a transport learnt about a light when it identified it (the LAN does, from the device): what the
/// light can do and its model (nil when the product is not known), its firmware, and the group and location
/// the device stores.
struct LIFXIdentity: Sendable, Equatable {
    var caps: LIFXCaps?
    var model: String?
    /// "3.70".
    var firmware: String?
    /// Group and location as the device stores them (16-byte id in hex, label, `updated_at`); nil without a label.
    var group: LIFXRef?
    var location: LIFXRef?
}

/// A light's state as a transport read it from the device (a LAN poll), in the user's units.
struct LIFXReading: Sendable, Equatable {
    var on: Bool
    var colour: LIFXZone
    var label: String
    var zones: [LIFXZone]?
    var infrared: Int?
    var clean: LIFXClean?
    /// A LIFX Ceiling's 64 zones (63 downlight, the last the uplight).
    var matrix: [LIFXZone]?
    /// The effect the light runs as far as the device can tell; nil leaves the light's as it is (a waveform the
    /// bridge started is still running, or a command is on its way).
    var effect: String?
}

/// The LIFX home as the bridge knows it: every light, which transport sees it (`presence`), the groups and
/// locations the lights form, and the scenes. A value with no actor, no I/O and no clock of its own: the
/// router hands it what each transport saw and when and publishes what it says changed, and asks it to
/// `plan` each command (LIFXPlan.swift: which transport gets what, and the lights as the command leaves
/// them). It knows no transport's types: the LAN and the cloud turn what they read into `LIFXIdentity`,
/// `LIFXReading` and `LIFXLight`, and carry out `LIFXLANOrder`s and `LIFXCloudOrder`s. Groups and locations
/// are keyed by id, which is the same 16 bytes on both transports (the cloud writes them as 32 hex digits),
/// so a group both transports name is one group; its name is the one the device with the newest
/// `updated_at` stores (LIFX's rule), the cloud's where no device on the LAN said.
struct LIFXHome: Sendable {
    /// What changed, for the adapter to publish: the device list (a light or group appeared, went, or
    /// changed what it can do), lights whose state or availability may have changed, lights removed.
    struct Changes: Sendable, Equatable {
        var relist = false
        var touched: Set<String> = []
        var removed: [String] = []

        mutating func formUnion(_ other: Changes) {
            relist = relist || other.relist
            touched.formUnion(other.touched)
            removed += other.removed
        }
    }

    enum CollectionKind: String, Sendable { case group, location }

    /// A group or location: the lights that name its id, and its name.
    struct Collection: Sendable, Equatable {
        var kind: CollectionKind
        var id: String
        var name: String
        var members: [String]
        /// `group_<id>` / `location_<id>`.
        var key: String { "\(kind.rawValue)_\(id)" }
    }

    private(set) var presence: LIFXPresence
    private(set) var lights: [String: LIFXLight] = [:]
    /// Lights the LAN identified: what it said about their product holds even while the cloud reaches them.
    private(set) var lanKnown: Set<String> = []
    var scenes: [String: LIFXScene] = [:]
    var lastActivated: [String: String] = [:]

    init(cloudGrace: Int = 3, lanGrace: Double) {
        presence = LIFXPresence(cloudGrace: cloudGrace, lanGrace: lanGrace)
    }

    /// The same home under another LAN grace (a reload changed `offline_after`).
    func regraced(lanGrace: Double) -> LIFXHome {
        var h = self
        h.presence = presence.regraced(lanGrace: lanGrace)
        return h
    }

    // MARK: what the transports saw

    /// A complete cloud listing. `pending`: lights a queued or in-flight cloud request is changing (their
    /// optimistic values stay until it is answered). A light the cloud stops listing is removed only when
    /// the LAN does not see it either.
    mutating func cloudListed(_ listed: [LIFXLight], pending: Set<String>, now: MonotonicInstant) -> Changes {
        var c = Changes(relist: true)
        let connected = Dictionary(listed.map { ($0.id, $0.connected) }, uniquingKeysWith: { a, _ in a })
        for id in presence.cloudListed(connected, now: now) where lights[id] != nil {
            lights[id] = nil
            lanKnown.remove(id)
            c.removed.append(id)
        }
        for l in listed {
            mergeListed(l, pending: pending.contains(l.id), now: now)
            c.touched.insert(l.id)
        }
        c.touched.formUnion(settle(now: now))
        return c
    }

    /// Takes a listed light in. A light the LAN sees keeps what the LAN says (its state, label, product,
    /// zones…); the cloud adds what the LAN lacks (`last_seen`, a group where the LAN has none). A light the
    /// LAN identified but does not hear now takes the cloud's values and keeps the LAN's product facts.
    /// `last_seen` moves only with a real change (or hourly), so a steady light publishes nothing.
    mutating func mergeListed(_ listed: LIFXLight, pending: Bool, now: MonotonicInstant) {
        var l = listed
        let id = l.id
        if lanKnown.contains(id), presence.lanSees(id, now: now), var lan = lights[id] {
            lan.lastSeen = l.lastSeen
            if lan.group == nil { lan.group = l.group }
            if lan.location == nil { lan.location = l.location }
            lights[id] = lan
            return
        }
        if let old = lights[id], lanKnown.contains(id) {
            l.caps = old.caps
            l.model = old.model ?? l.model
            l.firmware = old.firmware
            l.zones = old.zones
            l.infrared = old.infrared
            l.clean = old.clean
            l.matrix = old.matrix
            l.group = old.group ?? l.group
            l.location = old.location ?? l.location
        }
        if let old = lights[id] {
            if pending { l.values = old.values }
            l.connected = old.connected
            l.via = old.via
            var a = old, b = l
            a.lastSeen = nil; b.lastSeen = nil
            if a == b, let oldSeen = old.lastSeen.flatMap(Timestamp.parse), let newSeen = l.lastSeen.flatMap(Timestamp.parse),
               newSeen.timeIntervalSince(oldSeen) < 3600 {
                l.lastSeen = old.lastSeen
            }
        }
        lights[id] = l
    }

    /// The cloud answered a request for a light: it reached it (`ok`) or not (`offline`, `timed_out`).
    mutating func cloudReached(_ id: String, _ reachable: Bool, now: MonotonicInstant) -> Changes {
        guard lights[id] != nil else { return Changes() }
        presence.cloudReached(id, reachable)
        return Changes(touched: settle(now: now).union([id]))
    }

    /// Listings keep failing: what only the cloud reaches is unreachable until a listing works again.
    mutating func cloudUnreachable(now: MonotonicInstant) -> Changes {
        presence.cloudUnreachable()
        return Changes(touched: settle(now: now))
    }

    /// The LAN identified a light (what it can do, its firmware, group and location) and read its state.
    mutating func lanFound(_ serial: String, identity facts: LIFXIdentity, reading: LIFXReading, now: MonotonicInstant, wall: Date) -> Changes {
        var l = lights[serial] ?? LIFXLight(id: serial)
        if let caps = facts.caps {
            l.caps = caps
            if l.model == nil || !lanKnown.contains(serial) { l.model = facts.model }
        }
        if let fw = facts.firmware { l.firmware = fw }
        if let g = facts.group { l.group = g }
        if let loc = facts.location { l.location = loc }
        lights[serial] = l
        lanKnown.insert(serial)
        presence.lanHeard(serial, at: now)
        var c = lanRead(serial, reading, commandPending: false, now: now, wall: wall)
        c.relist = true
        return c
    }

    /// A poll's reading. While a command is on its way (`commandPending`) the light keeps its optimistic
    /// values; the rest (label, effect, `last_seen`) is taken. `last_seen` moves along with another change,
    /// or hourly, so a steady light publishes nothing.
    mutating func lanRead(_ serial: String, _ r: LIFXReading, commandPending: Bool, now: MonotonicInstant, wall: Date) -> Changes {
        guard var l = lights[serial] else { return Changes() }
        presence.lanHeard(serial, at: now)
        let before = l
        if !commandPending {
            l.takeReported(on: r.on, colour: r.colour)
            if let z = r.zones { l.zones = z }
            if let ir = r.infrared { l.infrared = ir }
            if let c = r.clean { l.clean = c }
            if let m = r.matrix { l.matrix = m }
        }
        if let e = r.effect { l.effect = e }
        if !r.label.isEmpty { l.label = r.label }
        let seen = l.lastSeen.flatMap(Timestamp.parse)
        if l != before || seen == nil || wall.timeIntervalSince(seen!) >= 3600 { l.lastSeen = Timestamp.rfc3339(wall) }
        lights[serial] = l
        var c = Changes(touched: settle(now: now))
        if l != before { c.touched.insert(serial) }
        if l.label != before.label { c.relist = true }
        return c
    }

    /// The LAN heard these lights (any answer) at these times.
    mutating func lanHeard(_ heard: [String: MonotonicInstant], now: MonotonicInstant) -> Changes {
        for (id, at) in heard where lanKnown.contains(id) { presence.lanHeard(id, at: at) }
        return Changes(touched: settle(now: now))
    }

    /// A send over the LAN failed and no newer command is on its way: the light shows again what the device
    /// last reported.
    mutating func lanReverted(_ serial: String, to r: LIFXReading) -> Changes {
        guard var l = lights[serial] else { return Changes() }
        l.takeReported(on: r.on, colour: r.colour)
        if let z = r.zones, l.zones != nil { l.zones = z }
        if let ir = r.infrared, l.infrared != nil { l.infrared = ir }
        if let m = r.matrix, l.matrix != nil { l.matrix = m }
        guard l != lights[serial] else { return Changes() }
        lights[serial] = l
        return Changes(touched: [serial])
    }

    /// Time passed: availability and route as each light's sightings give them now, and each light's
    /// group and location under their current names. Returns the lights that changed.
    mutating func settle(now: MonotonicInstant) -> Set<String> {
        var changed: Set<String> = []
        let names = collectionNames()
        for (id, var l) in lights {
            let before = l
            l.connected = presence.available(id, now: now)
            l.via = presence.route(id, now: now).rawValue
            if let g = l.group, let n = names[.group]?[g.id], n != g.name { l.group!.name = n }
            if let g = l.location, let n = names[.location]?[g.id], n != g.name { l.location!.name = n }
            if l != before {
                lights[id] = l
                changed.insert(id)
            }
        }
        return changed
    }

    /// Whether a command for the light goes over the LAN: the LAN identified it and the routing rule says LAN.
    func onLAN(_ id: String, now: MonotonicInstant) -> Bool {
        lanKnown.contains(id) && presence.route(id, now: now) == .lan
    }

    // MARK: commands (optimistic)

    /// Takes a command's plan in (LIFXPlan.swift): the lights as it leaves them, the scenes it activated.
    mutating func take(_ plan: LIFXPlan) {
        for (id, l) in plan.lights where lights[id] != nil { lights[id] = l }
        for (uuid, at) in plan.activated { lastActivated[uuid] = at }
    }

    /// Restores lights to their own previous values, then re-applies the changes still on their way to them.
    mutating func revert(_ previous: [String: LIFXLight.Values], reapplying queued: [LIFXCloudOrder]) {
        for (id, v) in previous { lights[id]?.values = v }
        for op in queued {
            for id in op.lights where previous[id] != nil {
                switch op.kind {
                case .set(let s): lights[id]?.apply(s)
                case .delta(let d): lights[id]?.apply(d)
                default: break
                }
            }
        }
    }

    // MARK: groups and locations

    /// Every group and location the lights name, by id, with its name and members (sorted by id).
    func collections(groups: Bool = true, locations: Bool = true) -> [Collection] {
        var out: [Collection] = []
        let names = collectionNames()
        for (kind, enabled) in [(CollectionKind.group, groups), (.location, locations)] where enabled {
            var members: [String: [String]] = [:]
            for l in lights.values { if let r = kind.ref(l) { members[r.id, default: []].append(l.id) } }
            for (id, m) in members.sorted(by: { $0.key < $1.key }) {
                out.append(Collection(kind: kind, id: id, name: names[kind]?[id] ?? id, members: m.sorted()))
            }
        }
        return out
    }

    func collection(_ key: String) -> Collection? {
        for kind in [CollectionKind.group, .location] where key.hasPrefix("\(kind.rawValue)_") {
            let id = String(key.dropFirst(kind.rawValue.count + 1))
            let members = lights.values.filter { kind.ref($0)?.id == id }.map(\.id).sorted()
            guard !members.isEmpty else { return nil }
            return Collection(kind: kind, id: id, name: collectionNames()[kind]?[id] ?? id, members: members)
        }
        return nil
    }

    /// Each group's and location's name: from the member whose device stored it last (`updated_at`); the
    /// cloud's (no stamp) where no device said; ties go to the lowest light id.
    func collectionNames() -> [CollectionKind: [String: String]] {
        var out: [CollectionKind: [String: String]] = [:]
        for kind in [CollectionKind.group, .location] {
            var best: [String: (stamp: UInt64?, light: String, name: String)] = [:]
            for l in lights.values {
                guard let r = kind.ref(l) else { continue }
                // A stamp (the LAN's) ranks above none (the cloud's), a newer one above an older.
                func rank(_ s: UInt64?) -> (Int, UInt64) { s.map { (1, $0) } ?? (0, 0) }
                if let b = best[r.id] {
                    let newer = rank(r.updatedAt) > rank(b.stamp)
                    let tie = rank(r.updatedAt) == rank(b.stamp) && l.id < b.light
                    if !newer && !tie { continue }
                }
                best[r.id] = (r.updatedAt, l.id, r.name)
            }
            out[kind] = best.mapValues(\.name)
        }
        return out
    }

    /// A group or location is available while any member is; its `via` is its members' (`mixed` when they differ).
    func state(of c: Collection) -> (fields: [String: JSONValue], available: Bool) {
        let members = c.members.compactMap { lights[$0] }
        var fields = LIFXAggregate.fields(members, name: c.name)
        let vias = Set(members.map(\.via))
        fields["via"] = .string(vias.count == 1 ? vias.first! : "mixed")
        return (fields, members.contains(where: \.connected))
    }

    // MARK: what is published

    /// The state and availability of the lights `ids` and of every group, location and Ceiling part they
    /// belong to, in one hand-over.
    func reports(_ ids: Set<String>, groups: Bool, locations: Bool) -> [DeviceReport] {
        var out: [DeviceReport] = []
        var keys: Set<String> = []
        for id in ids.sorted() {
            guard let l = lights[id] else { continue }
            out.append(DeviceReport(id, fields: l.fields, available: l.connected))
            for part in LIFXCeilingPart.allCases where l.matrix != nil && l.caps.isCeiling {
                out.append(DeviceReport(part.deviceID(id), fields: l.partFields(part), available: l.connected))
            }
            if groups, let g = l.group { keys.insert("group_\(g.id)") }
            if locations, let loc = l.location { keys.insert("location_\(loc.id)") }
        }
        for key in keys.sorted() {
            guard let c = collection(key) else { continue }
            let s = state(of: c)
            out.append(DeviceReport(key, fields: s.fields, available: s.available))
        }
        return out
    }
}

extension LIFXHome.CollectionKind {
    func ref(_ l: LIFXLight) -> LIFXRef? { self == .group ? l.group : l.location }
}
