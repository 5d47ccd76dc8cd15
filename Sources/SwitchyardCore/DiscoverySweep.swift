/// Which retained discovery configs of this bridge are orphans: announced by an earlier run (or an
/// earlier version) for something that no longer exists. Home Assistant would keep showing those
/// entities forever (at "unknown", with template warnings), so once every adapter has listed its devices,
/// the bridge reads the discovery configs under its own node prefix and clears the orphans. A config of
/// the other discovery mode (per entity while the bridge announces per device, or the reverse) for an
/// entity that exists now is to be migrated instead (`Verdict.migrate`), so that Home Assistant keeps the
/// entity. Pure.
public struct DiscoverySweep: Sendable {
    /// What the bridge announces now, for deciding.
    public struct Current {
        /// The bridge's own node and the topics it announces for it (and would announce in the other mode).
        public var bridgeNode: String
        public var bridgeTopics: Set<String>
        public var bridgeOtherTopics: Set<String> = []
        /// The topics a device (by normalised id) would have in the other discovery mode: nil when unknown.
        public var otherTopics: [String: (String) -> Set<String>?] = [:]
        /// Per running adapter (by normalised id): the discovery topics of one of its devices (by normalised
        /// device id; nil: no such device), asked only for the configs found, and whether its listing is
        /// complete (from config): then an unknown device is gone for good. (Asked, not worked out for every
        /// device up front: then every device's topics would be held at once, at the end of a start.)
        public var adapters: [String: (topics: (String) -> Set<String>?, complete: Bool)]
        public init(bridgeNode: String, bridgeTopics: Set<String>, adapters: [String: (topics: (String) -> Set<String>?, complete: Bool)]) {
            self.bridgeNode = bridgeNode
            self.bridgeTopics = bridgeTopics
            self.adapters = adapters
        }
        public init(bridgeNode: String, bridgeTopics: Set<String>, adapters: [String: (devices: [String: Set<String>], complete: Bool)]) {
            self.init(bridgeNode: bridgeNode, bridgeTopics: bridgeTopics,
                      adapters: adapters.mapValues { a in (topics: { a.devices[$0] }, complete: a.complete) })
        }
    }

    public let prefix: String
    public let nodePrefix: String
    /// `"<base>/bridge/`: every config this bridge announces points at its bridge topics (availability,
    /// or state for the bridge's own entities). Another bridge whose base only extends ours
    /// (`home_x` next to `home`) has node ids under our prefix but never this string.
    let marker: [UInt8]

    public init(discoveryPrefix: String, nodePrefix: String, baseTopic: String) {
        self.prefix = discoveryPrefix
        self.nodePrefix = nodePrefix
        self.marker = Array("\"\(baseTopic)/bridge/".utf8)
    }

    /// Whether a retained config's payload is this bridge's (see `marker`).
    public func isOurs(payload: [UInt8]) -> Bool {
        guard payload.count >= marker.count, let first = marker.first else { return false }
        var i = 0
        while i + marker.count <= payload.count {
            if payload[i] == first && payload[i..<(i + marker.count)].elementsEqual(marker) { return true }
            i += 1
        }
        return false
    }

    /// The subscriptions that bring the retained configs: per entity (`<prefix>/<component>/<node>/<object>/config`)
    /// and per device (`<prefix>/device/<node>/config`), whichever mode the bridge is in.
    public var filters: [String] { ["\(prefix)/+/+/+/config", "\(prefix)/device/+/config"] }

    /// The node of one of this bridge's config topics, or nil for anybody else's.
    public func node(of topic: String) -> String? {
        guard topic.hasPrefix(prefix + "/") else { return nil }
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        let depth = prefix.split(separator: "/", omittingEmptySubsequences: false).count
        guard parts.last == "config" else { return nil }
        let node: String
        if parts.count == depth + 4 {
            node = String(parts[parts.count - 3])
        } else if parts.count == depth + 3, parts[depth] == "device" {
            node = String(parts[parts.count - 2])
        } else {
            return nil
        }
        return node.hasPrefix(nodePrefix) ? node : nil
    }

    /// What to do with one of this bridge's retained configs.
    public enum Verdict: Equatable, Sendable {
        /// Announced now.
        case keep
        /// Announces nothing that exists now: cleared.
        case orphan
        /// The other mode's config of something announced now: migrated (Home Assistant's `migrate_discovery`).
        case migrate
    }

    public func verdict(_ topic: String, current: Current) -> Verdict {
        guard let node = node(of: topic) else { return .keep }
        if node == current.bridgeNode {
            return current.bridgeTopics.contains(topic) ? .keep : current.bridgeOtherTopics.contains(topic) ? .migrate : .orphan
        }
        let rest = node.dropFirst(nodePrefix.count)
        // The adapter whose normalised id starts the rest (the longest, should one id prefix another).
        guard let adapter = current.adapters.keys.filter({ rest.hasPrefix($0 + "_") }).max(by: { $0.count < $1.count }) else {
            return .orphan   // an adapter no longer configured
        }
        let entry = current.adapters[adapter]!
        let device = String(rest.dropFirst(adapter.count + 1))
        if let topics = entry.topics(device) {
            if topics.contains(topic) { return .keep }
            return current.otherTopics[adapter]?(device)?.contains(topic) == true ? .migrate : .orphan   // or an entity the device no longer has
        }
        return entry.complete ? .orphan : .keep                                                       // a device gone from the config
    }

    /// Whether a retained config topic of this bridge announces nothing that exists now.
    public func isOrphan(_ topic: String, current: Current) -> Bool { verdict(topic, current: current) == .orphan }
}
