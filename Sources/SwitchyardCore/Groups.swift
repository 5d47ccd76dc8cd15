/// Groups and scenes as the config defines them (`groups:`, `scenes:`; docs/topics.md "Groups and scenes").
/// The engine serves them as its own devices, `<base>/group/<name>` and `<base>/scene/<name>`
/// (BridgeEngine+Groups.swift); what each does is worked out by `GroupBook`.

/// A device as a group or a scene names it: its adapter and its name, as in its topic (`lifx/kitchen` is
/// `<base>/lifx/kitchen`, `virtual/rooms/lamp` a name with a folder, `group/downstairs` another group).
public struct MemberRef: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var adapter: String
    public var name: String

    public init(adapter: String, name: String) {
        self.adapter = adapter
        self.name = name
    }

    /// `adapter/name`: the first segment is the adapter, the rest the device's name; nil when either is empty.
    public init?(_ text: String) {
        guard let slash = text.firstIndex(of: "/") else { return nil }
        let adapter = String(text[..<slash]), name = String(text[text.index(after: slash)...])
        guard !adapter.isEmpty, !name.isEmpty else { return nil }
        self.init(adapter: adapter, name: name)
    }

    public var description: String { "\(adapter)/\(name)" }
    public var isGroup: Bool { adapter == GroupsConfig.groupAdapter }
    public static func < (a: MemberRef, b: MemberRef) -> Bool { a.description < b.description }
}

/// How a group's `state` follows its members': ON while any member is on, or only while all are.
public enum GroupStateMode: String, Sendable, CaseIterable {
    case any, all
}

/// One group: its members, any adapter's devices and other groups.
public struct GroupDefinition: Sendable, Equatable {
    public var name: String
    public var members: [MemberRef]
    public var stateMode: GroupStateMode

    public init(name: String, members: [MemberRef], stateMode: GroupStateMode = .any) {
        self.name = name
        self.members = members
        self.stateMode = stateMode
    }
}

/// One scene: the state each of its devices or groups is to take, in the groups' fields (`GroupFields`).
public struct SceneDefinition: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var member: MemberRef
        public var fields: [String: JSONValue]
        public init(member: MemberRef, fields: [String: JSONValue]) {
            self.member = member
            self.fields = fields
        }
    }

    public var name: String
    /// Seconds, when the scene says how long its recall takes (a recall's own `transition` wins).
    public var transition: Double?
    public var entries: [Entry]

    public init(name: String, transition: Double? = nil, entries: [Entry]) {
        self.name = name
        self.transition = transition
        self.entries = entries
    }
}

/// Every group and scene of the config.
public struct GroupsConfig: Sendable, Equatable {
    /// The adapter segment of groups' topics, and of a member that is a group.
    public static let groupAdapter = "group"
    /// The adapter segment of scenes' topics.
    public static let sceneAdapter = "scene"

    public var groups: [GroupDefinition]
    public var scenes: [SceneDefinition]

    public init(groups: [GroupDefinition] = [], scenes: [SceneDefinition] = []) {
        self.groups = groups
        self.scenes = scenes
    }

    public var isEmpty: Bool { groups.isEmpty && scenes.isEmpty }

    public func group(_ name: String) -> GroupDefinition? { groups.first { $0.name == name } }
    public func scene(_ name: String) -> SceneDefinition? { scenes.first { $0.name == name } }

    /// The cycles among the groups' nested groups, each once, each as the path that closes it starting at the
    /// group listed first in the config (`["a", "b", "a"]`): the member of `path[0]` that is `path[1]` closes
    /// it. A group that names itself is the cycle `["a", "a"]`.
    public static func cycles(_ groups: [GroupDefinition]) -> [[String]] {
        let byName = Dictionary(groups.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        let order = Dictionary(groups.enumerated().map { ($0.element.name, $0.offset) }, uniquingKeysWith: { a, _ in a })
        var found: [[String]] = []
        var seen: Set<[String]> = []
        // A path from `from` back to `start`, through nested groups, the shortest first found depth-first.
        func path(from: String, to start: String, visited: inout Set<String>) -> [String]? {
            if from == start { return [start] }
            guard visited.insert(from).inserted, let g = byName[from] else { return nil }
            for m in g.members where m.isGroup {
                if let rest = path(from: m.name, to: start, visited: &visited) { return [from] + rest }
            }
            return nil
        }
        for g in groups {
            for m in g.members where m.isGroup {
                var visited: Set<String> = []
                guard let rest = path(from: m.name, to: g.name, visited: &visited) else { continue }
                let cycle = [g.name] + rest
                // The same cycle found from another of its groups: keyed by its groups from the first in the config.
                let ring = Array(cycle.dropLast())
                let first = ring.indices.min { order[ring[$0]] ?? 0 < order[ring[$1]] ?? 0 } ?? 0
                let key = Array(ring[first...] + ring[..<first])
                if seen.insert(key).inserted { found.append(cycle) }
            }
        }
        return found
    }
}

/// The fields a group (and a scene) speaks, in the units of design.md §2, and what each member takes of them.
public enum GroupFields {
    /// What a group's command may carry: the fields its members have among these (`GroupBook.descriptor`).
    public static let writable = ["state", "brightness", "color", "color_temp", "transition"]
    /// What a scene stores for each of its devices or groups.
    public static let stored = ["state", "brightness", "color", "color_temp"]
}
