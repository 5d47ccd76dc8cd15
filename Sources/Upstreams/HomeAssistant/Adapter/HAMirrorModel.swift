#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// What the mirror publishes for Home Assistant's entities, and what it last published: pure, so the
/// statestream layout and the diffing (docs/topics.md "Home Assistant mirror") are unit-tested without a
/// socket. Per entity it keeps only the topics it published: suffix (`state`, an attribute,
/// `last_changed`) → retained payload, packed (`Packed`): a handful of bytes for a sensor, where a
/// dictionary of Strings costs a few hundred (a String per suffix and payload, and a table), and a large
/// Home Assistant has tens of thousands of entities.
package struct HAMirrorModel: Sendable {
    typealias Topics = [String: String]

    /// An entity's published topics in one array: per topic, in suffix order, the suffix's number and the
    /// payload. A payload of up to `inlineBytes` is copied in; a longer one (history-heavy attributes) is kept
    /// as the very array handed to the transport, which the retained ledger keeps too: one copy of it.
    package struct Packed: Sendable, Equatable {
        var bytes: [UInt8] = []
        var long: [[UInt8]] = []
    }

    static let inlineBytes = 16

    /// Entity id → packed topics: ids and values in two arrays found through a `SlotIndex`, about 40 bytes
    /// an entity. A Dictionary<String, Packed> costs about as much until its table, which holds the keys and
    /// values themselves, passes three quarters full and doubles in one piece: then up to twice as much.
    package struct EntityTable: Sendable {
        private var ids: [String] = []
        private var values: [Packed] = []
        private var free: [UInt32] = []
        private var index = SlotIndex()

        var count: Int { index.count }
        var isEmpty: Bool { count == 0 }
        var keys: [String] { ids.indices.compactMap { values[$0].bytes.isEmpty && values[$0].long.isEmpty ? nil : ids[$0] } }

        static func hash(_ id: String) -> Int { id.hashValue }
        /// Over the ids alone (see `RetainedLedger.hashOf`: a closure over `self` would make the index copy
        /// its table on every write).
        private var hashOf: (UInt32) -> Int { { [ids] slot in Self.hash(ids[Int(slot)]) } }
        private func slot(_ id: String) -> UInt32? { index.find(hash: Self.hash(id)) { ids[Int($0)] == id } }

        subscript(id: String) -> Packed? {
            get { slot(id).map { values[Int($0)] } }
            set {
                if let s = slot(id) {
                    guard let newValue, !newValue.bytes.isEmpty || !newValue.long.isEmpty else {
                        index.remove(s, hash: Self.hash(id), hashOf: hashOf)
                        ids[Int(s)] = ""
                        values[Int(s)] = Packed()
                        free.append(s)
                        return
                    }
                    values[Int(s)] = newValue
                } else if let newValue, !newValue.bytes.isEmpty || !newValue.long.isEmpty {
                    let s: UInt32
                    if let f = free.popLast() {
                        s = f
                        ids[Int(s)] = id
                        values[Int(s)] = newValue
                    } else {
                        s = UInt32(ids.count)
                        ids.append(id)
                        values.append(newValue)
                    }
                    index.insert(s, hash: Self.hash(id), hashOf: hashOf)
                }
            }
        }

        mutating func reserveCapacity(_ n: Int) {
            ids.reserveCapacity(n)
            values.reserveCapacity(n)
            index.reserve(n, hashOf: hashOf)
        }
    }

    let publishAttributes: Bool
    let publishTimestamps: Bool
    /// Entity id → what its topics hold on the broker.
    private(set) var published = EntityTable()
    /// Suffixes (attribute names), numbered once: thousands of entities share a few.
    private var suffixNames: [String] = []
    private var suffixNumbers: [String: UInt32] = [:]
    /// Distinct topic suffixes (attribute names) numbered at most: the table is never emptied, and a peer
    /// that names new attributes in every message would grow it for as long as the bridge runs. Past it,
    /// a new attribute is not mirrored (`ha_attributes`); those already numbered still are.
    static let maxSuffixes = 65_536

    init(publishAttributes: Bool, publishTimestamps: Bool) {
        self.publishAttributes = publishAttributes
        self.publishTimestamps = publishTimestamps
    }

    // MARK: packing

    /// Topics packed: `entries` sorted by suffix.
    mutating func pack(_ entries: [(suffix: String, payload: [UInt8])]) -> Packed {
        var p = Packed()
        for (suffix, payload) in entries {
            guard let n = number(suffix) else { continue }
            Self.varint(UInt64(n), into: &p.bytes)
            if payload.count <= Self.inlineBytes {
                Self.varint(UInt64(payload.count) << 1, into: &p.bytes)
                p.bytes += payload
            } else {
                Self.varint(UInt64(p.long.count) << 1 | 1, into: &p.bytes)
                p.long.append(payload)
            }
        }
        return p
    }

    /// The suffix's number, given it now if it is new; nil (counted) past `maxSuffixes`.
    mutating func number(_ suffix: String) -> UInt32? {
        if let known = suffixNumbers[suffix] { return known }
        guard suffixNames.count < Self.maxSuffixes else {
            Bounds.hit("ha_attributes")
            return nil
        }
        let n = UInt32(suffixNames.count)
        suffixNames.append(suffix)
        suffixNumbers[suffix] = n
        return n
    }

    /// The topics of a packed entity, in suffix order, each with its payload (a long one: the kept array).
    func unpack(_ p: Packed) -> [(suffix: String, payload: [UInt8])] {
        var out: [(suffix: String, payload: [UInt8])] = []
        var i = 0
        while i < p.bytes.count {
            let n = Int(Self.readVarint(p.bytes, &i))
            let x = Self.readVarint(p.bytes, &i)
            if x & 1 == 1 {
                out.append((suffixNames[n], p.long[Int(x >> 1)]))
            } else {
                let count = Int(x >> 1)
                out.append((suffixNames[n], Array(p.bytes[i..<(i + count)])))
                i += count
            }
        }
        return out
    }

    func topics(_ p: Packed) -> Topics {
        Dictionary(uniqueKeysWithValues: unpack(p).map { ($0.suffix, String(decoding: $0.payload, as: UTF8.self)) })
    }

    mutating func pack(_ t: Topics) -> Packed { pack(t.sorted { $0.key < $1.key }.map { ($0.key, Array($0.value.utf8)) }) }

    static func varint(_ v: UInt64, into out: inout [UInt8]) {
        var v = v
        while v >= 0x80 { out.append(UInt8(v & 0x7F) | 0x80); v >>= 7 }
        out.append(UInt8(v))
    }

    static func readVarint(_ b: [UInt8], _ i: inout Int) -> UInt64 {
        var v: UInt64 = 0, shift: UInt64 = 0
        while true {
            let byte = b[i]
            i += 1
            v |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { return v }
            shift += 7
        }
    }

    /// Attribute names that would collide with the command topics or the entity's own topics, or nest,
    /// are not published.
    static let reservedSuffixes: Set<String> = ["set", "get", "result", "availability", "state", "last_changed", "last_updated"]
    static func publishable(_ k: String) -> Bool { Topic.isLevel(k) && !reservedSuffixes.contains(k) }

    // MARK: an entity's topics

    /// The topics of an entity given whole (`get_states`, `state_changed`); nil without a state.
    mutating func topics(full s: JSONValue) -> Topics? {
        guard let state = s["state"]?.stringValue else { return nil }
        var t: Topics = [:]
        apply(to: &t, state: state, attributes: s["attributes"]?.objectValue, removed: [],
              lastChanged: s["last_changed"], lastUpdated: s["last_updated"])
        return t
    }

    /// One entity of a `subscribe_entities` add (compressed: `s`, `a`, `lc`, `lu` left out when equal to `lc`).
    mutating func topics(compressed v: JSONValue) -> Topics {
        var t: Topics = [:]
        apply(to: &t, state: v["s"]?.stringValue ?? "", attributes: v["a"]?.objectValue, removed: [],
              lastChanged: v["lc"], lastUpdated: v["lu"] ?? v["lc"])
        return t
    }

    /// A `subscribe_entities` change (`{"+": {s, a, lc, lu}, "-": {"a": [names]}}`) applied to what the
    /// entity published; nil for an entity never published. Attributes are merged, not replaced.
    mutating func topics(changing eid: String, by diff: JSONValue) -> Topics? {
        guard let p = published[eid] else { return nil }
        var t = topics(p)
        let plus = diff["+"]
        apply(to: &t, state: plus?["s"]?.stringValue, attributes: plus?["a"]?.objectValue,
              removed: diff["-"]?["a"]?.arrayValue?.compactMap(\.stringValue) ?? [],
              lastChanged: plus?["lc"], lastUpdated: plus?["lu"])
        return t
    }

    /// Merges a state, attributes and timestamps into an entity's topics; only what is published is kept.
    mutating func apply(to t: inout Topics, state: String?, attributes: [String: JSONValue]?, removed: [String],
                        lastChanged: JSONValue?, lastUpdated: JSONValue?) {
        if let state { t["state"] = state }
        if publishAttributes {
            for (k, v) in attributes ?? [:] where Self.publishable(k) { t[k] = v.serialized }
            for k in removed where Self.publishable(k) { t[k] = nil }
        }
        if publishTimestamps {
            if let lc = Self.iso(lastChanged) { t["last_changed"] = lc; t["last_updated"] = lc }
            if let lu = Self.iso(lastUpdated) { t["last_updated"] = lu }
        }
    }

    static func iso(_ v: JSONValue?) -> String? {
        switch v {
        case .string(let s)?: return Timestamp.parse(s).map { Timestamp.rfc3339($0) } ?? s
        case .number(let n)?: return Timestamp.rfc3339(Date(timeIntervalSince1970: n))
        default: return nil
        }
    }

    // MARK: diffing

    /// The messages that bring an entity's topics from what was last published to `want` (nil: the
    /// entity is gone): changed topics published, vanished ones cleared (an empty retained payload).
    mutating func sync(_ eid: String, _ want: Topics?) -> [MirrorMessage] {
        sync(eid, entries: want.map { $0.sorted { $0.key < $1.key }.map { ($0.key, Array($0.value.utf8)) } })
    }

    /// The same from a packed snapshot entry: its long payloads go out (and stay) as they are; without any,
    /// the entry itself is kept (no second packing).
    mutating func sync(_ eid: String, packed: Packed?) -> [MirrorMessage] {
        let out = sync(eid, entries: packed.map(unpack))
        if let packed, packed.long.isEmpty, !out.isEmpty, published[eid] != nil { published[eid] = packed }
        return out
    }

    /// `want`: sorted by suffix.
    mutating func sync(_ eid: String, entries want: [(suffix: String, payload: [UInt8])]?) -> [MirrorMessage] {
        // HA's entity ids are `domain.object_id` in [a-z0-9_]; one that would not make two topic levels
        // (from a broken or hostile peer) is not mirrored.
        guard let dot = eid.firstIndex(of: "."), Topic.isLevel(eid[..<dot]), Topic.isLevel(eid[eid.index(after: dot)...]) else { return [] }
        // A topic whose suffix cannot be numbered (past `maxSuffixes`) is not published: the model could
        // not say later that it is there to be cleared.
        var want = want ?? []
        want.removeAll { number($0.suffix) == nil }
        let had = published[eid].map(unpack) ?? []
        let base = "\(eid[..<dot])/\(eid[eid.index(after: dot)...])"
        var kept: [String: [UInt8]] = [:]
        for x in had { kept[x.suffix] = x.payload }
        let wanted = Set(want.map(\.suffix))
        var out: [MirrorMessage] = []
        var now: [(suffix: String, payload: [UInt8])] = []
        for (suffix, payload) in want {
            // Unchanged: the kept array stays (the ledger holds the same one).
            if let old = kept[suffix], old == payload { now.append((suffix, old)); continue }
            out.append(MirrorMessage("\(base)/\(suffix)", payload, retain: true))
            now.append((suffix, payload))
        }
        for x in had where !wanted.contains(x.suffix) { out.append(MirrorMessage("\(base)/\(x.suffix)", [], retain: true)) }
        guard !out.isEmpty else { return [] }
        published[eid] = now.isEmpty ? nil : pack(now)
        return out
    }

    /// The entities published now that a full snapshot (first connect, reconnect) no longer holds, or
    /// that are no longer mirrored: each is to be cleared.
    func gone<V>(from snapshot: [String: V], mirrored: (String) -> Bool) -> [String] {
        gone(keeping: { snapshot[$0] != nil }, mirrored: mirrored)
    }

    /// The same, the snapshot given as a membership test.
    func gone(keeping present: (String) -> Bool, mirrored: (String) -> Bool) -> [String] {
        published.keys.sorted().filter { !present($0) || !mirrored($0) }
    }

    /// Room for `n` more entities at once (a snapshot), rather than doubling on the way.
    mutating func reserve(_ n: Int) { published.reserveCapacity(published.count + n) }
}

extension HAMirrorModel {
    /// An entity of a snapshot or an add, packed as it arrived.
    typealias Entity = (id: String, topics: Packed)

    /// What one message of a frame held in its large lists, read out while it was parsed.
    struct Streamed {
        /// `event.a` of `subscribe_entities`: the snapshot, or adds.
        var adds: [Entity] = []
        /// `result` entries with `entity_id` and `state`: a `get_states` answer.
        var states: [Entity] = []
        /// `result` entries with `entity_id` and `platform` (the entity registry) that are this bridge's own.
        var own: [String] = []
    }

    /// A frame from Home Assistant, parsed as the mirror reads it: the members of `event.a` and of `result`
    /// are taken one by one while the frame is parsed, never as one tree: the entity registry's list is read
    /// only to find the bridge's own entities, and parsed whole it would hold a dictionary for every entity
    /// at once (in a real HA every entry has twenty fields), at a start's peak. Entities are packed as they
    /// come and sorted by id; a registry entry is kept only as the id of one of our own; what is neither
    /// (a service's response) is put back where it was. The value is the frame (a message, or an array of
    /// coalesced messages) without what was taken; `streamed` is by message.
    static func read(_ text: String, into model: inout HAMirrorModel, ownPrefix: String) -> (value: JSONValue, streamed: [Int: Streamed])? {
        var streamed: [Int: Streamed] = [:]
        var elements: [Int: [JSONValue]] = [:]
        var members: [Int: [String: JSONValue]] = [:]
        guard var v = try? JSONValue.parse(text, streaming: [["event", "a"], ["result"]], visit: { m in
            if m.path == 0 {
                if let eid = m.key { streamed[m.document, default: Streamed()].adds.append((eid, model.pack(model.topics(compressed: m.value)))) }
                return
            }
            if let key = m.key { members[m.document, default: [:]][key] = m.value; return }
            if let eid = m.value["entity_id"]?.stringValue {
                if m.value["platform"] != nil {
                    if m.value["platform"] == "mqtt", m.value["unique_id"]?.stringValue?.hasPrefix(ownPrefix) == true {
                        streamed[m.document, default: Streamed()].own.append(eid)
                    }
                    return
                }
                if m.value["state"] != nil {
                    if let t = model.topics(full: m.value) { streamed[m.document, default: Streamed()].states.append((eid, model.pack(t))) }
                    return
                }
            }
            elements[m.document, default: []].append(m.value)
        }) else { return nil }
        for k in streamed.keys {
            sortLastWins(&streamed[k]!.adds)
            sortLastWins(&streamed[k]!.states)
        }
        // Put back what was neither: a service's response, an unknown list.
        func restore(_ n: Int, _ result: JSONValue) {
            func set(_ doc: JSONValue) -> JSONValue {
                guard case .object(var o) = doc else { return doc }
                o["result"] = result
                return .object(o)
            }
            if case .array(var docs) = v, n < docs.count { docs[n] = set(docs[n]); v = .array(docs) } else if n == 0 { v = set(v) }
        }
        for (n, e) in elements { restore(n, .array(e)) }
        for (n, o) in members { restore(n, .object(o)) }
        return (v, streamed)
    }

    /// Sorts by entity id, in place; of one id given twice, the later stays (the sort is stable).
    static func sortLastWins(_ entities: inout [Entity]) {
        entities.sort { $0.id < $1.id }
        var kept = 0
        for i in entities.indices {
            if kept > 0 && entities[kept - 1].id == entities[i].id { entities[kept - 1] = entities[i] } else { entities[kept] = entities[i]; kept += 1 }
        }
        entities.removeLast(entities.count - kept)
    }

    /// One WebSocket frame from Home Assistant read as the mirror reads it (streamed `event.a`, coalesced
    /// messages, `subscribe_entities` adds/changes/removals, `state_changed`, `get_states` results), into
    /// a model, without a socket: the fuzz target `ha`. Returns the messages the mirror would publish.
    package static func digest(_ frame: [UInt8]) -> [MirrorMessage] {
        var model = HAMirrorModel(publishAttributes: true, publishTimestamps: true)
        guard let (v, streamed) = read(String(decoding: frame, as: UTF8.self), into: &model, ownPrefix: "switchyard_") else { return [] }
        var out: [MirrorMessage] = []
        for (n, item) in (v.arrayValue ?? [v]).enumerated() {
            let s = streamed[n] ?? Streamed()
            for e in s.adds { out += model.sync(e.id, packed: e.topics) }
            let event = item["event"]
            for (eid, diff) in (event?["c"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                if let t = model.topics(changing: eid, by: diff) { out += model.sync(eid, t) }
            }
            for eid in event?["r"]?.arrayValue ?? [] { if let e = eid.stringValue { out += model.sync(e, nil) } }
            if let new = event?["data"]?["new_state"], let eid = new["entity_id"]?.stringValue { out += model.sync(eid, model.topics(full: new)) }
            for e in s.states { out += model.sync(e.id, packed: e.topics) }
            for eid in s.own { out += model.sync(eid, nil) }
        }
        return out
    }

    /// Whether every entity of a frame's snapshot, and every change to it, comes back from packing as it
    /// went in (the fuzz target `ha` holds this for any frame).
    package static func packsLosslessly(_ frame: [UInt8]) -> Bool {
        var model = HAMirrorModel(publishAttributes: true, publishTimestamps: true)
        var ok = true
        _ = try? JSONValue.parse(frame, streaming: [["event", "a"]], visit: { m in
            guard m.key != nil else { return }
            let t = model.topics(compressed: m.value)
            let packed = model.pack(t)
            ok = ok && model.topics(packed) == t
        })
        return ok
    }
}
