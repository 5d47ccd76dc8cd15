import SwitchyardCore

/// The config edits the requests that change groups and scenes make (`bridge/request/group/add`, `remove`,
/// `rename`, `members/add`, `members/remove`, `scene/store`, `scene/remove`; docs/topics.md "Groups and
/// scenes"), worked out from the groups and scenes as read now. Pure: the caller plans them with
/// `ConfigEditor` (which reads the result as a config: a cycle, an unknown adapter or group is refused there,
/// with the reader's words) and commits them.
public enum GroupEdits {
    /// The request paths, under `bridge/request/`.
    public static let paths = ["group/add", "group/remove", "group/rename", "group/members/add", "group/members/remove",
                               "scene/store", "scene/remove"]
    /// The most devices and groups one request may name (`members`), and the longest name it may give.
    public static let maxMembers = 1000
    public static let maxName = 200

    /// What `scene/store` captures: the scene's name, and the devices and groups given (else the scene's own).
    public static func toStore(_ body: JSONValue, config: GroupsConfig) throws(AdapterError) -> (name: String, members: [MemberRef]) {
        let name = try self.name(body, "name", "scene/store")
        if let given = body["members"] {
            let members = try refs(given, "members")
            guard !members.isEmpty else { throw AdapterError("scene/store: members is empty") }
            return (name, members)
        }
        guard let s = config.scene(name) else {
            throw AdapterError("scene/store: scene '\(name)' does not exist yet: give its \"members\" (adapter/name of devices or groups)")
        }
        return (name, s.entries.map(\.member))
    }

    /// The edits of one request. `captured`: for `scene/store`, what the bridge read of each member now
    /// (nil for one it does not list).
    public static func edits(_ path: String, _ body: JSONValue, config: GroupsConfig,
                             captured: [(MemberRef, [String: JSONValue]?)] = []) throws(AdapterError) -> [YAMLEdit] {
        switch path {
        case "group/add":
            let name = try self.name(body, "name", path)
            guard config.group(name) == nil else { throw AdapterError("\(path): group '\(name)' exists already") }
            var entries: [YAMLValue.Entry] = [.init("members", .list(try refs(body["members"] ?? .array([]), "members").map { .string($0.description) }))]
            if let mode = body["state_mode"] {
                guard let m = mode.stringValue, GroupStateMode(rawValue: m) != nil else {
                    throw AdapterError("\(path): state_mode: expected any or all, got \(mode.excerpt)")
                }
                entries.append(.init("state_mode", .string(m)))
            }
            return [.set(ConfigPath(keys: "groups", name), .map(entries))]
        case "group/remove":
            let name = try existing(body, "name", config, path)
            let users = config.groups.filter { $0.members.contains(group(name)) }.map { "group/\($0.name)" }
                + config.scenes.filter { $0.entries.contains { $0.member == group(name) } }.map { "scene/\($0.name)" }
            guard users.isEmpty else {
                throw AdapterError("\(path): group '\(name)' is used by \(users.joined(separator: ", ")): remove it there first")
            }
            return [.remove(ConfigPath(keys: "groups", name))]
        case "group/rename":
            let from = try existing(body, "from", config, path)
            let to = try self.name(body, "to", path)
            guard config.group(to) == nil else { throw AdapterError("\(path): group '\(to)' exists already") }
            var edits: [YAMLEdit] = [.rename(ConfigPath(keys: "groups", from), to: to)]
            // Where other groups and scenes name it, they name it anew.
            for g in config.groups {
                for (i, m) in g.members.enumerated() where m == group(from) {
                    edits.append(.set(ConfigPath([.key("groups"), .key(g.name == from ? to : g.name), .key("members"), .index(i)]),
                                      .string(group(to).description)))
                }
            }
            for s in config.scenes where s.entries.contains(where: { $0.member == group(from) }) {
                edits.append(.rename(ConfigPath(keys: "scenes", s.name, "states", group(from).description), to: group(to).description))
            }
            return edits
        case "group/members/add", "group/members/remove":
            let name = try existing(body, "group", config, path)
            let given: [MemberRef]
            if let one = body["member"] { given = try refs(.array([one]), "member") } else { given = try refs(body["members"] ?? .null, "members") }
            guard !given.isEmpty else { throw AdapterError("\(path): give \"member\": \"adapter/name\" (or \"members\": [...])") }
            let members = config.group(name)!.members
            if path == "group/members/add" {
                if let dup = given.first(where: members.contains) { throw AdapterError("\(path): \(dup) is a member of group '\(name)' already") }
                return given.map { .append(ConfigPath(keys: "groups", name, "members"), .string($0.description)) }
            }
            if let absent = given.first(where: { !members.contains($0) }) {
                throw AdapterError("\(path): \(absent.description.excerpt(80)) is not a member of group '\(name)'")
            }
            // From the last, so that each index is still the item's when it is removed.
            return members.indices.filter { given.contains(members[$0]) }.reversed().map {
                .remove(ConfigPath([.key("groups"), .key(name), .key("members"), .index($0)]))
            }
        case "scene/store":
            let (name, _) = try toStore(body, config: config)
            if let missing = captured.first(where: { $0.1 == nil }) {
                throw AdapterError("\(path): \(missing.0.description.excerpt(80)) has no state to store (not listed now, or none of state, brightness, colour)")
            }
            var edits: [YAMLEdit] = []
            let states = ConfigPath(keys: "scenes", name, "states")
            // Stored anew: a device's earlier values are not merged with its new ones.
            if config.scene(name) != nil { edits.append(.remove(states)) }
            edits.append(.set(states, .map(captured.map { .init($0.0.description, stored($0.1!)) })))
            if let t = body["transition"] {
                guard let v = t.doubleValue, v >= 0, v <= 3600 else { throw AdapterError("\(path): transition: expected seconds 0–3600, got \(t.excerpt)") }
                edits.append(.set(ConfigPath(keys: "scenes", name, "transition"), .number(v)))
            }
            return edits
        case "scene/remove":
            let name = try self.name(body, "name", path)
            guard config.scene(name) != nil else { throw AdapterError("\(path): no scene '\(name)' (scenes: \(config.scenes.map(\.name).joined(separator: ", ")))") }
            return [.remove(ConfigPath(keys: "scenes", name))]
        default:
            throw AdapterError("unknown request '\(path)'")
        }
    }

    /// A stored state as the file writes it: state, brightness, color_temp, color {h, s}.
    static func stored(_ f: [String: JSONValue]) -> YAMLValue {
        var entries: [YAMLValue.Entry] = []
        if case .string(let s)? = f["state"] { entries.append(.init("state", .string(s))) }
        if let b = f["brightness"]?.intValue { entries.append(.init("brightness", .int(b))) }
        if let k = f["color_temp"]?.intValue { entries.append(.init("color_temp", .int(k))) }
        if let c = f["color"], let h = c["h"]?.intValue, let s = c["s"]?.intValue { entries.append(.init("color", .map([.init("h", .int(h)), .init("s", .int(s))]))) }
        return .map(entries)
    }

    static func group(_ name: String) -> MemberRef { MemberRef(adapter: GroupsConfig.groupAdapter, name: name) }

    static func name(_ body: JSONValue, _ key: String, _ path: String) throws(AdapterError) -> String {
        guard case .string(let n)? = body[key] else { throw AdapterError("\(path) needs {\"\(key)\": \"<name>\"}") }
        guard n.utf8.count <= maxName else { throw AdapterError("\(path): \(key): a name of \(n.utf8.count) bytes is over \(maxName)") }
        if let p = Naming.problem(withName: n) { throw AdapterError("\(path): \(key): \(p)") }
        return n
    }

    static func existing(_ body: JSONValue, _ key: String, _ config: GroupsConfig, _ path: String) throws(AdapterError) -> String {
        let n = try name(body, key, path)
        guard config.group(n) != nil else { throw AdapterError("\(path): no group '\(n)' (groups: \(config.groups.map(\.name).joined(separator: ", ")))") }
        return n
    }

    static func refs(_ v: JSONValue, _ key: String) throws(AdapterError) -> [MemberRef] {
        guard case .array(let items) = v else { throw AdapterError("\(key): expected a list of adapter/name, got \(v.excerpt)") }
        guard items.count <= maxMembers else { throw AdapterError("\(key): \(items.count) is over the \(maxMembers) one request may name") }
        var out: [MemberRef] = []
        var seen: Set<MemberRef> = []
        for item in items {
            guard case .string(let s) = item, let ref = MemberRef(s) else { throw AdapterError("\(key): expected adapter/name, got \(item.excerpt)") }
            if seen.insert(ref).inserted { out.append(ref) }
        }
        return out
    }
}
