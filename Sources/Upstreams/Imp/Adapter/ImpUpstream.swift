import SwitchyardConfig
import SwitchyardCore

/// `imp:` — Electric Imp devices through their agents, with per-app profiles (built-in or YAML).
public struct ImpUpstream: Upstream {
    public init() {}
    public var key: String { ImpAdapter.id }
    public var summary: String { "Electric Imp devices through their agents, with per-app profiles." }
    /// Agent ids are secrets: anyone holding one controls the device (docs/design.md).
    public var secretKeys: Set<String> { ["devices.agent_id"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> ImpSettings {
        var m = ImpSettings()
        m.baseURL = s.cloudURL("base_url", m.baseURL, secret: "agent ids", doc: "Where the agents are; https only (http:// for a loopback simulator).")
        m.pollInterval = s.double("poll_interval", 60, min: 5, max: 86_400, doc: "Seconds between state reads of one device (devices are spread over it).")
        m.timeout = s.double("timeout", 60, min: 1, max: 600, doc: "Seconds for one agent request.")
        for (name, ps) in s.sections("profiles", doc: "Your own apps, by profile name, described without writing Swift.") {
            m.profiles.append(readProfile(name, ps))
        }
        let known = Set(ImpProfile.builtIn.map(\.name) + m.profiles.map { $0.name.lowercased() })
        let knownList = known.sorted().joined(separator: ", ")
        for (code, profile, mark) in s.stringMap("apps", doc: "App code (from /controller/info) -> profile name.") {
            if !known.contains(profile.lowercased()) {
                s.problem(mark, key: "apps.\(code)", "unknown profile '\(profile)' (known: \(knownList))")
            }
            m.apps[code] = profile
        }
        var seen: Set<String> = []
        for d in s.list("devices", doc: "The Imp devices, each through its agent.") {
            let name = d.deviceName(seen: &seen, missing: "every imp device needs a name (its stable id)")
            let agent = d.secret("agent_id", doc: "The agent URL's last part (12 characters): a secret, it controls the device.")
            if agent == nil, !d.has("agent_id_file") {
                d.problem("give agent_id (or agent_id_file, or ${ENV}): the agent URL's last part")
            }
            if let agent, agent.count != 12 || !agent.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
                // The value is a secret: the message does not repeat it.
                d.problem(d.position(of: d.has("agent_id") ? "agent_id" : "agent_id_file"), key: "agent_id",
                          "an agent id is 12 characters of A-Z, a-z, 0-9, _ and - (the last part of https://agent.electricimp.com/<id>)")
            }
            var app: String?
            if let (a, mark) = d.scalar("app", doc: "The profile to use, skipping detection.") {
                if known.contains(a.lowercased()) { app = a } else { d.problem(mark, key: "app", "unknown profile '\(a)' (known: \(knownList))") }
            }
            d.finish()
            m.devices.append(.init(name: name, agentID: agent ?? "", app: app))
        }
        s.finish()
        return m
    }

    func readProfile(_ name: String, _ ps: ConfigSection) -> ImpProfile {
        var p = ImpProfile(name: name.lowercased())
        p.statePath = path(ps, "state", "/controller/state", doc: "The GET path of the state.")
        p.format = ImpProfile.Format(rawValue: ps.choice("format", "json", ImpProfile.Format.allCases.map(\.rawValue),
                                                        doc: "json (fields are JSON Pointers), flag (\"1\"/\"0\"), dotted (fields are indexes).")) ?? .json
        p.connected = ps.string("connected", doc: "Where \"device connected\" is read.")
        let reserved = ["agent", "device_connected", "app", "appcode", "action"]
        for f in ps.list("fields", doc: "The state fields.") {
            let fname = f.string("name", doc: "The field's name in the state, lower-case [a-z0-9_].") ?? ""
            if fname.isEmpty || reserved.contains(fname) || Naming.slug(fname) != fname {
                f.problem(at: "name", "a field name is lower-case [a-z0-9_] and not one of \(reserved.joined(separator: ", "))")
            }
            let from = f.string("from", doc: "Where the field is read: a JSON Pointer, or an index for the dotted format.") ?? ""
            if p.format == .dotted ? Int(from) == nil : !(from.isEmpty || from.hasPrefix("/")) {
                f.problem(at: "from", p.format == .dotted ? "an index into the dotted string (0, 1, …)" : "a JSON Pointer such as /on or /world/utc")
            }
            let kind: ImpProfile.Kind
            switch f.choice("type", "integer", ["power", "bool", "brightness", "integer", "text"], doc: "What the field holds.") {
            case "power": kind = .power
            case "bool": kind = .bool
            case "brightness": kind = .brightness(rawMax: f.int("raw_max", 15, min: 1, max: 65_535, doc: "The device's value for 100 %."))
            case "text": kind = .text
            default: kind = .integer(min: f.int("min", 0, doc: "The least value."), max: f.int("max", 100, doc: "The greatest value."))
            }
            var field = ImpProfile.Field(fname, from: from, kind, readOffset: f.int("read_offset", 0, doc: "Added to the value read."),
                                         setOffset: f.int("set_offset", 0, doc: "Added to the value sent."))
            if f.has("set") {
                let set = f.section("set", doc: "How the field is set: a request.")
                field.set = request(set)
                set.finish()
            }
            f.finish()
            p.fields.append(field)
        }
        for a in ps.list("actions", doc: "Actions (set/action).") {
            let aname = a.string("name", doc: "The action's name.") ?? ""
            if aname.isEmpty { a.problem(at: "name", "every action needs a name") }
            let repoll = a.bool("repoll", true, doc: "Read the state again after it.")
            if let req = request(a) { p.actions.append(ImpProfile.Action(aname, req, repoll: repoll)) }
            a.finish()
        }
        ps.finish()
        return p
    }

    func path(_ s: ConfigSection, _ k: String, _ def: String, doc: String) -> String {
        guard let (v, mark) = s.scalar(k, doc: doc, shownDefault: def.isEmpty ? nil : .string(def)) else { return def }
        if !v.hasPrefix("/") { s.problem(mark, key: k, "a path on the agent, starting with /, got '\(v)'") }
        return v
    }

    /// `{path, body}`: body is JSON text in which the string "{{value}}" stands for the value.
    func request(_ s: ConfigSection) -> ImpProfile.Request? {
        let path = path(s, "path", "", doc: "The path on the agent, starting with /.")
        if path.isEmpty { s.problem(at: "path", "a request needs a path") }
        var body: JSONValue = .object([:])
        if let (text, mark) = s.scalar("body", doc: "JSON text; the string \"{{value}}\" in it stands for the value.") {
            do {
                body = try JSONValue.parse(text)
            } catch {
                s.problem(mark, key: "body", "not JSON (\(error.description)); write it as JSON text, e.g. '{\"setlight\": \"{{value}}\"}'")
            }
        }
        return path.isEmpty ? nil : ImpProfile.Request(path: path, body: body)
    }

    public func makeAdapter(_ settings: ImpSettings) -> any Adapter { ImpAdapter(settings: settings) }

    public func configEntry(ofDevice id: String, in s: ImpSettings) -> ConfigPath? {
        s.devices.contains { $0.name == id } ? ConfigPath([.key(key), .key("devices"), .item(key: "name", equals: id)]) : nil
    }
}
