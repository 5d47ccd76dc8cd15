#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// What the mirror publishes for Home Assistant's entities, and what it last published: pure, so the
/// statestream layout and the diffing (docs/topics.md "Home Assistant mirror") are unit-tested without a
/// socket. Per entity it keeps only the topics it published: suffix (`state`, an attribute,
/// `last_changed`) → retained payload.
package struct HAMirrorModel: Sendable {
    typealias Topics = [String: String]

    let publishAttributes: Bool
    let publishTimestamps: Bool
    /// Entity id → what its topics hold on the broker.
    private(set) var published: [String: Topics] = [:]
    /// Attribute names, stored once (thousands of entities share a few).
    private var suffixes: Set<String> = []

    init(publishAttributes: Bool, publishTimestamps: Bool) {
        self.publishAttributes = publishAttributes
        self.publishTimestamps = publishTimestamps
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
        guard var t = published[eid] else { return nil }
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
            for (k, v) in attributes ?? [:] where Self.publishable(k) { t[suffixes.insert(k).memberAfterInsert] = v.serialized }
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
        // HA's entity ids are `domain.object_id` in [a-z0-9_]; one that would not make two topic levels
        // (from a broken or hostile peer) is not mirrored.
        guard let dot = eid.firstIndex(of: "."), Topic.isLevel(eid[..<dot]), Topic.isLevel(eid[eid.index(after: dot)...]) else { return [] }
        let want = want ?? [:]
        let had = published[eid] ?? [:]
        guard want != had else { return [] }
        let base = "\(eid[..<dot])/\(eid[eid.index(after: dot)...])"
        var out: [MirrorMessage] = []
        for (suffix, payload) in want.sorted(by: { $0.key < $1.key }) where had[suffix] != payload {
            out.append(MirrorMessage("\(base)/\(suffix)", Array(payload.utf8), retain: true))
        }
        for suffix in had.keys.sorted() where want[suffix] == nil {
            out.append(MirrorMessage("\(base)/\(suffix)", [], retain: true))
        }
        published[eid] = want.isEmpty ? nil : want
        return out
    }

    /// The entities published now that a full snapshot (first connect, reconnect) no longer holds, or
    /// that are no longer mirrored: each is to be cleared.
    func gone(from snapshot: [String: Topics], mirrored: (String) -> Bool) -> [String] {
        published.keys.sorted().filter { snapshot[$0] == nil || !mirrored($0) }
    }
}

extension HAMirrorModel {
    /// One WebSocket frame from Home Assistant read as the mirror reads it (streamed `event.a`, coalesced
    /// messages, `subscribe_entities` adds/changes/removals, `state_changed`, `get_states` results), into
    /// a model, without a socket: the fuzz target `ha`. Returns the messages the mirror would publish.
    package static func digest(_ frame: [UInt8]) -> [MirrorMessage] {
        var model = HAMirrorModel(publishAttributes: true, publishTimestamps: true)
        var adds: [Int: [String: Topics]] = [:]
        guard let v = try? JSONValue.parse(frame, streaming: [["event", "a"]], visit: { m in
            if let eid = m.key { adds[m.document, default: [:]][eid] = model.topics(compressed: m.value) }
        }) else { return [] }
        var out: [MirrorMessage] = []
        for (n, item) in (v.arrayValue ?? [v]).enumerated() {
            for (eid, t) in (adds[n] ?? [:]).sorted(by: { $0.key < $1.key }) { out += model.sync(eid, t) }
            let event = item["event"]
            for (eid, diff) in (event?["c"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                if let t = model.topics(changing: eid, by: diff) { out += model.sync(eid, t) }
            }
            for eid in event?["r"]?.arrayValue ?? [] { if let e = eid.stringValue { out += model.sync(e, nil) } }
            if let new = event?["data"]?["new_state"], let eid = new["entity_id"]?.stringValue { out += model.sync(eid, model.topics(full: new)) }
            for s in item["result"]?.arrayValue ?? [] {
                if let eid = s["entity_id"]?.stringValue { out += model.sync(eid, model.topics(full: s)) }
            }
        }
        return out
    }
}
