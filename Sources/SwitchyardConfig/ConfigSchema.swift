import SwitchyardCore

/// What a changed key takes to apply.
public enum ConfigRestart: String, Sendable, Equatable, CaseIterable {
    /// Applied at once by a reload (`log.level`, `health.interval`, device options).
    case atOnce = "none"
    /// The console restarts (`web`).
    case console
    /// The upstream's adapter restarts, alone (its section).
    case adapter
    /// Listed as `restart_required`: the bridge must be restarted (`mqtt`, `homeassistant`, `state_dir`).
    case bridge
}

/// The JSON Schema (draft 2020-12) of the whole config file, made by the code that reads it: the reading
/// runs once over no file at all with `ConfigSection` recording each getter (its key, type, default,
/// range, choices, description, whether it is a secret) instead of only reading it, every `has` answered
/// yes, lists read with one item and maps with one entry, and once more for each other value of each
/// `choice`, so that keys read only for some values (an Imp field's `raw_max`) are found and said to
/// depend on it. Nothing is written twice: a key the reader accepts is in the schema because the reader
/// read it. Annotations beyond the standard ones:
/// - `x-switchyard-restart`: `none`, `console`, `adapter` or `bridge` (`ConfigRestart`), on every property;
/// - `x-switchyard-secret: true` (with `writeOnly: true`) on secrets; their `<key>_file` form is a property too;
/// - `x-switchyard-order`: the keys of an object in the order the file documents them (JSON objects have none);
/// - `x-switchyard-when: {"<key>": [values]}` on a key read only when a sibling choice has one of those values.
public struct ConfigSchema: Sendable {
    public let json: JSONValue

    public init(upstreams: [any Upstream]) {
        json = Self.build(upstreams: upstreams)
    }

    // MARK: looking keys up

    /// The schema of the value at `path` (lists' items by any index or selector; map entries by any key).
    public func schema(at path: ConfigPath) -> JSONValue? {
        var s = json
        for c in path.components {
            switch c {
            case .key(let k):
                if let p = s["properties"]?[k] {
                    s = p
                } else if let a = s["additionalProperties"], a.objectValue != nil {
                    s = a
                } else {
                    return nil
                }
            case .index, .item:
                guard let items = s["items"] else { return nil }
                s = items
            }
        }
        return s
    }

    public func contains(_ path: ConfigPath) -> Bool { schema(at: path) != nil }

    /// What a change at `path` takes to apply; nil when the schema has no such key.
    public func restart(for path: ConfigPath) -> ConfigRestart? {
        schema(at: path)?["x-switchyard-restart"]?.stringValue.flatMap(ConfigRestart.init(rawValue:))
    }

    /// Whether the value at `path` is a secret (`<key>` of a key read as one; its `_file` form is not:
    /// it is a path).
    public func isSecret(_ path: ConfigPath) -> Bool { schema(at: path)?["x-switchyard-secret"] == .bool(true) }

    /// The keys of the mapping at `path` in the order the file documents them.
    public func order(at path: ConfigPath) -> [String] {
        schema(at: path)?["x-switchyard-order"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    // MARK: making it

    static func build(upstreams: [any Upstream]) -> JSONValue {
        let base = SchemaProbe(forced: [:])
        let root = base.run(upstreams: upstreams)
        // Each other value of each choice: what is read then and not otherwise depends on it.
        for site in base.sites {
            var variants: [(value: String, keys: [String], object: SchemaObject)] = []
            guard let object = base.objects[site.section] else { continue }
            variants.append((site.def, object.order, object))
            for v in site.allowed where v != site.def {
                let probe = SchemaProbe(forced: ["\(site.section)\u{0}\(site.key)": v])
                _ = probe.run(upstreams: upstreams)
                if let o = probe.objects[site.section] { variants.append((v, o.order, o)) }
            }
            let all = variants.reduce(into: [String]()) { acc, v in for k in v.keys where !acc.contains(k) { acc.append(k) } }
            for k in all {
                let values = variants.filter { $0.keys.contains(k) }.map(\.value)
                guard values.count < variants.count else { continue }
                if object.props[k] == nil, let from = variants.first(where: { $0.object.props[k] != nil })?.object.props[k] {
                    object.set(k, from)
                }
                object.when[k] = (site.key, values, site.def)
            }
        }
        var out = root.json(restart: .bridge)
        guard case .object(var o) = out else { return out }
        o["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        o["$id"] = "https://switchyard.invalid/config.schema.json"
        o["title"] = "Switchyard configuration"
        o["description"] = "The bridge's YAML config file (config.example.yaml documents every key). Durations are seconds unless the key ends in _ms; string values may use ${ENV} and ${ENV:-default}."
        out = .object(o)
        return out
    }
}

/// One run of the reading that records instead of reading a file.
final class SchemaProbe {
    let forced: [String: String]
    var objects: [String: SchemaObject] = [:]
    var sites: [(section: String, key: String, allowed: [String], def: String)] = []

    init(forced: [String: String]) { self.forced = forced }

    func object(at path: String) -> SchemaObject {
        if let o = objects[path] { return o }
        let o = SchemaObject()
        objects[path] = o
        return o
    }

    func choice(section: String, key: String, allowed: [String], def: String) {
        if !sites.contains(where: { $0.section == section && $0.key == key }) { sites.append((section, key, allowed, def)) }
    }

    func run(upstreams: [any Upstream]) -> SchemaObject {
        let reader = ConfigReader(files: ["schema"], environment: [:])
        reader.probe = self
        _ = try? SwitchyardConfig.read(root: nil, reader: reader, upstreams: upstreams, environment: [:])
        return object(at: "")
    }
}

/// What the reading recorded about one mapping of the file.
final class SchemaObject {
    struct Scalar {
        var type: String
        var def: JSONValue?
        var min: Double?
        var max: Double?
        var choices: [String]?
        var secret = false
        var doc: String
    }

    indirect enum Item {
        case scalar(Scalar)
        case object(SchemaObject)
        case array(Item, doc: String)
        /// A value of more than one shape, said as its own schema (`api.manage`: true, false or a list).
        case custom(JSONValue, doc: String)
    }

    var order: [String] = []
    var props: [String: Item] = [:]
    /// Entries under any key (`names: {id: name}`, `profiles: {name: {…}}`).
    var additional: Item?
    var doc = ""
    /// Pairs of keys that may not both be given (a secret and its `_file`).
    var exclusive: [(String, String)] = []
    /// Keys read only when the choice `key` has one of `values` (`def` when it is not given).
    var when: [String: (key: String, values: [String], def: String)] = [:]
    /// The section's restart rule, and its keys' own (`ConfigSection.restart`).
    var restart: ConfigRestart?
    var keyRestart: [String: ConfigRestart] = [:]

    /// Records a key; a key read again keeps what was said of it first, unless that said nothing.
    func set(_ k: String, _ item: Item) {
        guard let old = props[k] else {
            order.append(k)
            props[k] = item
            return
        }
        if Self.doc(old).isEmpty { props[k] = item }
    }

    static func doc(_ item: Item) -> String {
        switch item {
        case .scalar(let s): s.doc
        case .object(let o): o.doc
        case .array(_, let doc): doc
        case .custom(_, let doc): doc
        }
    }

    func json(restart inherited: ConfigRestart) -> JSONValue {
        let restart = self.restart ?? inherited
        var o: [String: JSONValue] = ["type": "object"]
        if !doc.isEmpty { o["description"] = .string(doc) }
        var props: [String: JSONValue] = [:]
        for k in order {
            let r = keyRestart[k] ?? restart
            props[k] = Self.json(self.props[k]!, restart: r, when: when[k])
        }
        o["properties"] = .object(props)
        o["x-switchyard-order"] = .array(order.map(JSONValue.string))
        o["x-switchyard-restart"] = .string(restart.rawValue)
        o["additionalProperties"] = additional.map { Self.json($0, restart: restart, when: nil) } ?? .bool(false)
        var all: [JSONValue] = []
        for (a, b) in exclusive { all.append(["not": ["required": [.string(a), .string(b)]]]) }
        // Keys that depend on a choice: forbidden unless the choice has one of their values.
        var groups: [String: (key: String, values: [String], def: String, keys: [String])] = [:]
        for k in order {
            guard let w = when[k] else { continue }
            let id = "\(w.key)\u{0}\(w.values.joined(separator: "\u{0}"))"
            groups[id, default: (w.key, w.values, w.def, [])].keys.append(k)
        }
        for id in groups.keys.sorted() {
            let g = groups[id]!
            var cond: [String: JSONValue] = ["properties": .object([g.key: ["enum": .array(g.values.map(JSONValue.string))]])]
            if !g.values.contains(g.def) { cond["required"] = [.string(g.key)] }
            all.append(["if": .object(cond), "else": ["properties": .object(Dictionary(uniqueKeysWithValues: g.keys.map { ($0, JSONValue.bool(false)) }))]])
        }
        if !all.isEmpty { o["allOf"] = .array(all) }
        return .object(o)
    }

    static func json(_ item: Item, restart: ConfigRestart, when: (key: String, values: [String], def: String)?) -> JSONValue {
        var o: [String: JSONValue]
        switch item {
        case .scalar(let s):
            o = ["type": .string(s.type)]
            if !s.doc.isEmpty { o["description"] = .string(s.doc) }
            if let d = s.def { o["default"] = d }
            if let m = s.min { o["minimum"] = .number(m) }
            if let m = s.max { o["maximum"] = .number(m) }
            if let c = s.choices { o["enum"] = .array(c.map(JSONValue.string)) }
            if s.secret {
                o["writeOnly"] = true
                o["x-switchyard-secret"] = true
            }
            o["x-switchyard-restart"] = .string(restart.rawValue)
        case .object(let obj):
            guard case .object(let j) = obj.json(restart: restart) else { return .null }
            o = j
        case .array(let items, let doc):
            o = ["type": "array", "items": json(items, restart: restart, when: nil), "x-switchyard-restart": .string(restart.rawValue)]
            if !doc.isEmpty { o["description"] = .string(doc) }
        case .custom(let schema, let doc):
            o = schema.objectValue ?? [:]
            o["x-switchyard-restart"] = .string(restart.rawValue)
            if !doc.isEmpty { o["description"] = .string(doc) }
        }
        if let when { o["x-switchyard-when"] = .object([when.key: .array(when.values.map(JSONValue.string))]) }
        return .object(o)
    }
}
