/// MQTT 5 topic aliases for what the bridge publishes on one connection (design.md §17): a topic published
/// again gets an alias, first come first served, while the broker's Topic Alias Maximum (its CONNACK,
/// capped by `mqtt.max_topic_aliases`) leaves one free; from then on its PUBLISH carries the two-byte alias
/// instead of the topic. An alias is never moved to another topic: on a bridge with more topics than
/// aliases, moving them would cost the full topic plus the alias on every move, more than no alias at all.
///
/// "Published again" is read from a small direct-mapped table of recent topics' hashes, not a set of every
/// topic (a bridge with a large Home Assistant mirror publishes hundreds of thousands): a collision only
/// gives an alias one publish early. Aliases live as long as the connection: `reset` on every connect.
/// Pure bookkeeping, unit-tested without a broker.
struct TopicAliases {
    /// How a message goes: with its topic, with its topic and a new alias (`establish`: the broker learns
    /// it, once `established` is told it went), or with the alias alone.
    enum Use: Equatable {
        case topic
        case establish(UInt16)
        case alias(UInt16)
    }

    private(set) var maximum = 0
    private var assigned: [String: UInt16] = [:]
    private var seen = [UInt32](repeating: 0, count: TopicAliases.seenSlots)

    static let seenSlots = 4096

    /// A new connection: the broker knows no alias; it takes `maximum` (0: none).
    mutating func reset(maximum: Int) {
        self.maximum = max(0, min(maximum, Int(UInt16.max)))
        assigned.removeAll(keepingCapacity: false)
        for i in seen.indices { seen[i] = 0 }
    }

    /// Aliases in use on this connection.
    var count: Int { assigned.count }

    mutating func use(_ topic: String) -> Use {
        guard maximum > 0 else { return .topic }
        if let alias = assigned[topic] { return .alias(alias) }
        guard assigned.count < maximum else { return .topic }
        let h = Self.hash(topic)
        let slot = Int(h) & (Self.seenSlots - 1)
        if seen[slot] == h { return .establish(UInt16(assigned.count + 1)) }
        seen[slot] = h
        return .topic
    }

    /// The PUBLISH that carried `topic` with `alias` was handed to the client: the broker will know it.
    mutating func established(_ topic: String, _ alias: UInt16) {
        guard assigned[topic] == nil, Int(alias) == assigned.count + 1 else { return }
        assigned[topic] = alias
    }

    /// FNV-1a, never 0 (an empty slot).
    static func hash(_ topic: String) -> UInt32 {
        var h: UInt32 = 2_166_136_261
        for b in topic.utf8 { h = (h ^ UInt32(b)) &* 16_777_619 }
        return h == 0 ? 1 : h
    }
}
