import SwitchyardCore

/// `groups:` and `scenes:` (docs/topics.md "Groups and scenes"): read into `GroupsConfig`, every problem with
/// its position. What can be checked without the upstreams is: a member is `adapter/name` with a registered
/// adapter (or `group`), a nested group is defined, no group contains itself (the path is named), a scene's
/// values are in the groups' fields and ranges. Whether a device is there is known only at run time: one that
/// is not is shown as `missing`, and kept.
enum GroupsReader {
    static func read(groups gs: ConfigSection, scenes ss: ConfigSection, adapters: [String]) -> GroupsConfig {
        gs.restart = .atOnce
        ss.restart = .atOnce
        let known = adapters + [GroupsConfig.groupAdapter]
        var out = GroupsConfig()
        var memberMarks: [String: [(MemberRef, YAMLMark?)]] = [:]
        for (name, g) in gs.namedSections() {
            if let p = Naming.problem(withName: name) { gs.problem(gs.position(of: name), key: name, p) }
            var members: [MemberRef] = []
            for (text, mark) in g.stringList("members", doc: "Its members, each adapter/name as in its topic (lifx/kitchen, virtual/hall_lamp); group/<name> for another group.") {
                guard let ref = member(text, mark: mark, in: g, key: "members", known: known) else { continue }
                if members.contains(ref) {
                    g.problem(mark, key: "members", "'\(text)' is listed twice")
                    continue
                }
                members.append(ref)
                memberMarks[name, default: []].append((ref, mark))
            }
            let mode = g.choice("state_mode", "any", GroupStateMode.allCases.map(\.rawValue),
                                doc: "any: the group is ON while any member is; all: only while every member is.")
            g.finish()
            out.groups.append(GroupDefinition(name: name, members: members, stateMode: GroupStateMode(rawValue: mode) ?? .any))
        }
        gs.finish()
        let names = Set(out.groups.map(\.name))
        for g in out.groups {
            for (ref, mark) in memberMarks[g.name] ?? [] where ref.isGroup && !names.contains(ref.name) {
                gs.problem(mark, key: "\(g.name).members", "no group '\(ref.name)' is defined (groups: \(out.groups.map(\.name).joined(separator: ", ")))")
            }
        }
        for cycle in GroupsConfig.cycles(out.groups) {
            let mark = memberMarks[cycle[0]]?.first { $0.0 == MemberRef(adapter: GroupsConfig.groupAdapter, name: cycle[1]) }?.1
            gs.problem(mark, key: "\(cycle[0]).members",
                       "a group may not contain itself: \(cycle.map { "group/\($0)" }.joined(separator: " → "))")
        }

        for (name, s) in ss.namedSections() {
            if let p = Naming.problem(withName: name) { ss.problem(ss.position(of: name), key: name, p) }
            var scene = SceneDefinition(name: name, entries: [])
            if s.has("transition") {
                scene.transition = s.double("transition", 0, min: 0, max: 3600, doc: "Seconds the recall takes where the devices have a transition (a recall's own wins).")
            }
            let states = s.section("states", doc: "The state each device or group takes, by adapter/name, in the groups' fields.")
            for (key, st) in states.namedSections() {
                let fields = sceneFields(st)
                guard let ref = member(key, mark: states.position(of: key), in: states, key: key, known: known) else { continue }
                if ref.isGroup && !names.contains(ref.name) {
                    states.problem(states.position(of: key), key: key, "no group '\(ref.name)' is defined")
                }
                if fields.isEmpty {
                    states.problem(states.position(of: key), key: key, "stores nothing: give state, brightness, color or color_temp")
                }
                scene.entries.append(SceneDefinition.Entry(member: ref, fields: fields))
            }
            states.finish()
            s.finish()
            out.scenes.append(scene)
        }
        ss.finish()
        return out
    }

    /// A member as written (`adapter/name`), checked; nil (and a problem) when it cannot be one.
    static func member(_ text: String, mark: YAMLMark?, in s: ConfigSection, key: String, known: [String]) -> MemberRef? {
        guard let ref = MemberRef(text) else {
            s.problem(mark, key: key, "'\(text)' is not adapter/name (as in the device's topic: lifx/kitchen)")
            return nil
        }
        if ref.adapter == GroupsConfig.sceneAdapter {
            s.problem(mark, key: key, "'\(text)': a scene cannot be a member (recall it with scene/\(ref.name)/set)")
            return nil
        }
        guard known.contains(ref.adapter) else {
            s.problem(mark, key: key, "'\(text)': no adapter '\(ref.adapter)' (adapters: \(known.joined(separator: ", ")))")
            return nil
        }
        if let p = Naming.problem(withName: ref.name) {
            s.problem(mark, key: key, "'\(text)': \(p)")
            return nil
        }
        return ref
    }

    /// One device's or group's stored state in a scene: `state` ON or OFF, `brightness` %, `color_temp` K,
    /// `color` {h, s}; only what is given.
    static func sceneFields(_ st: ConfigSection) -> [String: JSONValue] {
        var f: [String: JSONValue] = [:]
        if let (v, mark) = st.scalar("state", doc: "ON or OFF.") {
            let word = v.uppercased()
            if ["ON", "OFF", "TRUE", "FALSE"].contains(word) {
                f["state"] = .string(word == "ON" || word == "TRUE" ? "ON" : "OFF")
                st.record("state", f["state"]!)
            } else {
                st.problem(mark, key: "state", "expected ON or OFF, got '\(v)'")
            }
        }
        if st.has("brightness") { f["brightness"] = JSONValue(st.int("brightness", 100, min: 0, max: 100, doc: "Percent.")) }
        if st.has("color_temp") { f["color_temp"] = JSONValue(st.int("color_temp", 2700, min: 1000, max: 20_000, doc: "Kelvin.")) }
        if st.has("color") {
            let c = st.section("color", doc: "Hue and saturation.")
            if c.has("h") && c.has("s") {
                f["color"] = ["h": JSONValue(c.int("h", 0, min: 0, max: 360, doc: "Hue, degrees.")),
                              "s": JSONValue(c.int("s", 0, min: 0, max: 100, doc: "Saturation, percent."))]
            } else {
                c.problem("a colour needs both h and s")
                _ = c.has("h"); _ = c.has("s")
            }
            c.finish()
        }
        st.finish()
        return f
    }
}

extension ConfigSection {
    /// This mapping's own entries, each a mapping read as a section (`groups: {<name>: {…}}`); in the schema,
    /// entries under any key.
    func namedSections() -> [(key: String, section: ConfigSection)] {
        if reader.probe != nil {
            let entry = ConfigSection(reader: reader, path: key("<name>"), node: nil)
            entry.parent = self
            schema?.additional = .object(entry.schema!)
            return [("name", entry)]
        }
        return entries.map { e in
            used.insert(e.key)
            let s = ConfigSection(reader: reader, path: key(e.key), node: e.value)
            s.parent = self
            record(e.key, .section(s))
            return (e.key, s)
        }
    }
}
