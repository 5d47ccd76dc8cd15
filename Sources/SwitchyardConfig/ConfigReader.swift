#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// One problem in a config file, located: `file:line:column: key.path: message`.
public struct ConfigProblem: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int
    public var path: String
    public var message: String

    public var description: String {
        path.isEmpty ? "\(file):\(line):\(column): \(message)" : "\(file):\(line):\(column): \(path): \(message)"
    }
}

/// Every problem found in a config file, reported together.
public struct ConfigErrors: Error, Sendable, CustomStringConvertible {
    public var problems: [ConfigProblem]
    public var description: String { problems.map(\.description).joined(separator: "\n") }
}

/// Walks a composed YAML tree and reads typed values, collecting every problem with its position
/// instead of stopping at the first (Decodable stops at the first error and has no positions).
/// Unknown keys are problems too: a typo must not pass silently.
final class ConfigReader {
    /// The files marks point into: the main file, then its changes file (`YAMLMark.file`).
    let files: [String]
    var file: String { files[0] }
    let environment: [String: String]
    private(set) var problems: [ConfigProblem] = []
    /// Values read from secret keys, so that they can be checked never to leak.
    fileprivate(set) var secrets: [String] = []
    /// Set while the schema is being made: the reading records what it reads (`ConfigSchema`).
    var probe: SchemaProbe?

    init(files: [String], environment: [String: String]) {
        self.files = files
        self.environment = environment
    }

    func problem(_ mark: YAMLMark?, _ path: String, _ message: String) {
        let f = mark.map { Int($0.file) < files.count ? files[Int($0.file)] : file } ?? file
        problems.append(ConfigProblem(file: f, line: mark?.line ?? 1, column: mark?.column ?? 1, path: path, message: message))
    }

    /// `${NAME}` and `${NAME:-default}`; `$$` is a literal `$`.
    func expand(_ s: String, mark: YAMLMark?, path: String) -> String? {
        guard s.contains("$") else { return s }
        var out = ""
        var i = s.startIndex
        var ok = true
        while i < s.endIndex {
            let c = s[i]
            if c == "$", s.index(after: i) < s.endIndex {
                let n = s[s.index(after: i)]
                if n == "$" { out.append("$"); i = s.index(i, offsetBy: 2); continue }
                if n == "{", let close = s[i...].firstIndex(of: "}") {
                    let inner = String(s[s.index(i, offsetBy: 2)..<close])
                    var name = inner
                    var fallback: String?
                    if let r = inner.firstRange(of: ":-") {
                        name = String(inner[..<r.lowerBound])
                        fallback = String(inner[r.upperBound...])
                    }
                    if let v = environment[name] {
                        out += v
                    } else if let fallback {
                        out += fallback
                    } else {
                        problem(mark, path, "environment variable \(name) is not set")
                        ok = false
                    }
                    i = s.index(after: close)
                    continue
                }
            }
            out.append(c)
            i = s.index(after: i)
        }
        return ok ? out : nil
    }
}

/// A mapping of the config file being read: the typed getters report problems (with the key's
/// position) to the file's problem list, `finish()` reports the keys nobody asked for, and every value
/// a getter returns (the file's or the default) is recorded at its key. That record is the effective
/// config shown on `bridge/info`: derived from the reading itself, so a new key can never be left out
/// of it, and a key read with `secret` (or declared secret by its upstream) can never be shown.
public final class ConfigSection {
    let reader: ConfigReader
    /// The key path from the file's root, `lifx.names`, `imp.devices[0]`.
    public let path: String
    let mark: YAMLMark?
    var entries: [(key: String, keyMark: YAMLMark?, value: YAMLNode)] = []
    var used: Set<String> = []
    /// What was read, in reading order (a key read again keeps its first place and its last value).
    var recorded: [(key: String, node: Recorded)] = []
    /// Keys (paths relative to this section, list items without their index: `devices.agent_id`) whose
    /// values are secrets whatever getter read them; set by the upstream's registration.
    var secretKeys: Set<String> = []
    /// The section this one was read from (nil for the file's root).
    weak var parent: ConfigSection?
    /// What a change of this section's keys takes to apply (nil: as its parent's).
    var restart: ConfigRestart? { didSet { schema?.restart = restart } }
    /// Keys of this section whose change takes something else than the section's `restart`.
    var keyRestart: [String: ConfigRestart] = [:] { didSet { schema?.keyRestart = keyRestart } }
    /// What the reading says about the section's keys, when the schema is being made (`ConfigSchema`).
    let schema: SchemaObject?

    enum Recorded {
        case value(JSONValue)
        case secret(present: Bool)
        case section(ConfigSection)
        case list([ConfigSection])
    }

    init(reader: ConfigReader, path: String, node: YAMLNode?) {
        self.reader = reader
        self.path = path
        self.mark = node?.mark
        schema = reader.probe.map { $0.object(at: path) }
        guard let node else { return }
        guard case .mapping(let m, _) = node else {
            if !Self.isNull(node) { reader.problem(node.mark, path, "expected a mapping of keys, got \(Self.kind(node))") }
            return
        }
        for (k, v) in m {
            guard case .scalar(let s) = k else {
                reader.problem(k.mark, path, "keys must be plain strings")
                continue
            }
            entries.append((s.string, k.mark, v))
        }
    }

    static func isNull(_ n: YAMLNode) -> Bool {
        if case .scalar(let s) = n, s.plain, ["", "~", "null", "Null", "NULL"].contains(s.string) { return true }
        return false
    }

    static func kind(_ n: YAMLNode) -> String {
        switch n {
        case .scalar(let s): return "'\(s.string)'"
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        }
    }

    // MARK: problems

    /// What changing this section's keys takes: applied at once (`none`), the console restarted, the
    /// adapter restarted, or the bridge restarted by its operator.
    public var effectiveRestart: ConfigRestart { restart ?? parent?.effectiveRestart ?? .bridge }

    /// Marks key `k` as needing `r` to apply, unlike the rest of the section.
    public func restart(_ k: String, _ r: ConfigRestart) { keyRestart[k] = r }

    func describe(_ k: String, _ scalar: SchemaObject.Scalar) { describe(k, .scalar(scalar)) }

    func describe(_ k: String, object o: SchemaObject) { describe(k, .object(o)) }

    func describe(_ k: String, _ item: SchemaObject.Item) {
        guard let schema else { return }
        schema.set(k, item)
    }

    /// The full path of a key of this section, for messages.
    public func key(_ k: String) -> String { path.isEmpty ? k : "\(path).\(k)" }

    /// A problem at the value of key `k` (at the section itself when `k` is nil or absent).
    public func problem(at k: String? = nil, _ message: String) {
        reader.problem(k.map { mark(of: $0) } ?? mark, k.map(key) ?? path, message)
    }

    /// A problem at a position a getter returned (an element of a list, a map entry).
    public func problem(_ mark: YAMLMark?, key k: String, _ message: String) {
        reader.problem(mark, key(k), message)
    }

    func mark(of k: String) -> YAMLMark? { entries.first { $0.key == k }?.value.mark ?? mark }

    // MARK: recording

    func record(_ k: String, _ node: Recorded) {
        if let i = recorded.firstIndex(where: { $0.key == k }) { recorded[i].node = node } else { recorded.append((k, node)) }
    }

    /// Shows `value` for key `k` on bridge/info instead of what the getter recorded (a value normalised
    /// after reading, or one computed from others).
    public func record(_ k: String, _ value: JSONValue) { record(k, .value(value)) }

    /// The effective values read, as JSON, with every secret replaced by `"***"` (null when unset).
    public var redacted: JSONValue { view(relativeTo: "", secrets: secretKeys) }

    func view(relativeTo prefix: String, secrets: Set<String>) -> JSONValue {
        var o: [String: JSONValue] = [:]
        for (k, node) in recorded {
            let rel = prefix.isEmpty ? k : "\(prefix).\(k)"
            let secretHere = secrets.contains(rel)
            switch node {
            case .secret(let present):
                o[k] = present ? "***" : .null
            case .value(let v):
                o[k] = secretHere ? (v.isNull ? .null : "***") : v
            case .section(let s):
                // A section given its own secret keys (an upstream's) starts a new relative root.
                o[k] = s.secretKeys.isEmpty ? s.view(relativeTo: rel, secrets: secrets) : s.redacted
            case .list(let items):
                o[k] = .array(items.map { $0.view(relativeTo: rel, secrets: secrets) })
            }
        }
        return .object(o)
    }

    // MARK: reading

    func node(_ k: String) -> YAMLNode? {
        used.insert(k)
        guard let e = entries.first(where: { $0.key == k }), !Self.isNull(e.value) else { return nil }
        return e.value
    }

    /// Whether the key is given (and not null). When the schema is being made, every key is: the reading
    /// then takes every branch that depends on a key being there.
    public func has(_ k: String) -> Bool {
        // A key the reading asks about is one it knows ("unknown key" lists it).
        used.insert(k)
        if reader.probe != nil { return true }
        return entries.contains { $0.key == k && !Self.isNull($0.value) }
    }

    /// A scalar with `${ENV}` expanded, unrecorded; nil (and a problem) when it is not a scalar.
    func raw(_ k: String) -> (String, YAMLMark?)? {
        guard let n = node(k) else { return nil }
        guard case .scalar(let s) = n else {
            reader.problem(n.mark, key(k), "expected a single value, got \(Self.kind(n))")
            return nil
        }
        guard let expanded = reader.expand(s.string, mark: n.mark, path: key(k)) else { return nil }
        return (expanded, n.mark)
    }

    /// A single value as text, with its position (for messages about it). `shownDefault` is what the
    /// schema shows as its default (the value the reading site uses when the key is not given).
    public func scalar(_ k: String, doc: String = "", shownDefault: JSONValue? = nil) -> (String, YAMLMark?)? {
        describe(k, .init(type: "string", def: shownDefault, doc: doc))
        let v = raw(k)
        record(k, .value(v.map { .string($0.0) } ?? .null))
        return v
    }

    public func string(_ k: String, _ def: String, doc: String = "") -> String {
        describe(k, .init(type: "string", def: def.isEmpty ? nil : .string(def), doc: doc))
        let v = raw(k)?.0 ?? def
        record(k, .value(.string(v)))
        return v
    }

    public func string(_ k: String, doc: String = "") -> String? { scalar(k, doc: doc)?.0 }

    public func int(_ k: String, _ def: Int, min lo: Int = Int.min, max hi: Int = Int.max, doc: String = "") -> Int {
        describe(k, .init(type: "integer", def: JSONValue(def), min: lo == Int.min ? nil : Double(lo), max: hi == Int.max ? nil : Double(hi), doc: doc))
        var v = def
        if let (s, mark) = raw(k) {
            if let n = Int(s) {
                if n >= lo && n <= hi { v = n } else { reader.problem(mark, key(k), "\(n) is out of range \(lo)–\(hi)") }
            } else {
                reader.problem(mark, key(k), "expected a whole number, got '\(s)'")
            }
        }
        record(k, .value(JSONValue(v)))
        return v
    }

    public func double(_ k: String, _ def: Double, min lo: Double = -Double.infinity, max hi: Double = Double.infinity, doc: String = "") -> Double {
        describe(k, .init(type: "number", def: .number(def), min: lo.isFinite ? lo : nil, max: hi.isFinite ? hi : nil, doc: doc))
        var v = def
        if let (s, mark) = raw(k) {
            if let n = Double(s), n.isFinite {
                if n >= lo && n <= hi {
                    v = n
                } else {
                    reader.problem(mark, key(k), "\(s) is out of range \(JSONValue.format(lo))–\(JSONValue.format(hi))")
                }
            } else {
                reader.problem(mark, key(k), "expected a number (seconds unless the key ends in _ms), got '\(s)'")
            }
        }
        record(k, .value(.number(v)))
        return v
    }

    public func bool(_ k: String, _ def: Bool, doc: String = "") -> Bool {
        describe(k, .init(type: "boolean", def: .bool(def), doc: doc))
        var v = def
        if let (s, mark) = raw(k) {
            switch s.lowercased() {
            case "true", "yes", "on": v = true
            case "false", "no", "off": v = false
            default: reader.problem(mark, key(k), "expected true or false, got '\(s)'")
            }
        }
        record(k, .value(.bool(v)))
        return v
    }

    /// An override: nil when the key is not given (the schema shows `def` as the bridge's own value).
    public func optionalInt(_ k: String, _ def: Int, min lo: Int = Int.min, max hi: Int = Int.max, doc: String = "") -> Int? {
        let given = has(k)
        let v = int(k, def, min: lo, max: hi, doc: doc)
        return given ? v : nil
    }

    public func optionalDouble(_ k: String, _ def: Double, min lo: Double = -Double.infinity, max hi: Double = Double.infinity,
                               doc: String = "") -> Double? {
        let given = has(k)
        let v = double(k, def, min: lo, max: hi, doc: doc)
        return given ? v : nil
    }

    public func optionalBool(_ k: String, _ def: Bool, doc: String = "") -> Bool? {
        let given = has(k)
        let v = bool(k, def, doc: doc)
        return given ? v : nil
    }

    public func choice(_ k: String, _ def: String, _ allowed: [String], doc: String = "") -> String {
        describe(k, .init(type: "string", def: .string(def), choices: allowed, doc: doc))
        var v = def
        if let probe = reader.probe {
            // The schema explores each value of a choice in turn: the keys read only for some values.
            probe.choice(section: path, key: k, allowed: allowed, def: def)
            v = probe.forced["\(path)\u{0}\(k)"] ?? def
        }
        if let (s, mark) = raw(k) {
            if allowed.contains(s) { v = s } else { reader.problem(mark, key(k), "expected one of \(allowed.joined(separator: ", ")), got '\(s)'") }
        }
        record(k, .value(.string(v)))
        return v
    }

    public func section(_ k: String, doc: String = "") -> ConfigSection {
        let s = ConfigSection(reader: reader, path: key(k), node: node(k))
        s.parent = self
        if let o = s.schema {
            o.doc = doc
            describe(k, object: o)
        }
        record(k, .section(s))
        return s
    }

    /// A list of mappings.
    public func list(_ k: String, doc: String = "") -> [ConfigSection] {
        if reader.probe != nil {
            let item = ConfigSection(reader: reader, path: "\(key(k))[]", node: nil)
            item.parent = self
            describe(k, .array(.object(item.schema!), doc: doc))
            return [item]
        }
        guard let n = node(k) else { record(k, .list([])); return [] }
        guard case .sequence(let seq, _) = n else {
            reader.problem(n.mark, key(k), "expected a list, got \(Self.kind(n))")
            record(k, .list([]))
            return []
        }
        let items = seq.enumerated().map { i, item in ConfigSection(reader: reader, path: "\(key(k))[\(i)]", node: item) }
        for i in items { i.parent = self }
        record(k, .list(items))
        return items
    }

    /// A mapping of plain string keys to single values (`names: {id: name}`), with each value's mark.
    public func stringMap(_ k: String, doc: String = "") -> [(key: String, value: String, mark: YAMLMark?)] {
        let m = section(k, doc: doc)
        m.schema?.additional = .scalar(.init(type: "string", doc: ""))
        var out: [(key: String, value: String, mark: YAMLMark?)] = []
        for e in m.entries {
            if let (v, mark) = m.scalar(e.key) { out.append((e.key, v, mark)) }
        }
        return out
    }

    /// A list of plain values (`channels: [a, b]`), each with its mark.
    public func stringList(_ k: String, doc: String = "") -> [(String, YAMLMark?)] {
        describe(k, .array(.scalar(.init(type: "string", doc: "")), doc: doc))
        var out: [(String, YAMLMark?)] = []
        defer { record(k, .value(.array(out.map { .string($0.0) }))) }
        guard let n = node(k) else { return [] }
        guard case .sequence(let seq, _) = n else {
            reader.problem(n.mark, key(k), "expected a list, got \(Self.kind(n))")
            return []
        }
        for item in seq {
            guard case .scalar(let sc) = item else {
                reader.problem(item.mark, key(k), "expected single values in the list, got \(Self.kind(item))")
                continue
            }
            if let v = reader.expand(sc.string, mark: item.mark, path: key(k)) { out.append((v, item.mark)) }
        }
        return out
    }

    /// A mapping of names to mappings (`profiles: {name: {...}}`).
    public func sections(_ k: String, doc: String = "") -> [(key: String, section: ConfigSection)] {
        let m = section(k, doc: doc)
        if reader.probe != nil {
            let entry = ConfigSection(reader: reader, path: m.key("<name>"), node: nil)
            entry.parent = m
            m.schema?.additional = .object(entry.schema!)
            return [("name", entry)]
        }
        return m.entries.map { e in
            m.used.insert(e.key)
            let s = ConfigSection(reader: reader, path: m.key(e.key), node: e.value)
            s.parent = m
            m.record(e.key, .section(s))
            return (e.key, s)
        }
    }

    /// A secret: `<k>` (with `${ENV}`) or `<k>_file` (read from that file), never both. Shown as `***`.
    public func secret(_ k: String, doc: String = "") -> String? {
        describe(k, .init(type: "string", secret: true, doc: doc))
        describe("\(k)_file", .init(type: "string", doc: "A file holding \(k) (its last line break is not part of it); give either \(k) or \(k)_file."))
        schema?.exclusive.append((k, "\(k)_file"))
        let value = readSecret(k)
        record(k, .secret(present: value != nil))
        return value
    }

    func readSecret(_ k: String) -> String? {
        let fileKey = "\(k)_file"
        used.insert(k)
        if has(k) && has(fileKey) {
            reader.problem(entries.first { $0.key == fileKey }?.keyMark, key(fileKey), "give either \(k) or \(fileKey), not both")
        }
        if let (path, mark) = raw(fileKey) {
            do {
                var text = try String(contentsOfFile: path, encoding: .utf8)
                while text.hasSuffix("\n") || text.hasSuffix("\r") { text.removeLast() }
                if text.isEmpty { reader.problem(mark, key(fileKey), "file '\(path)' is empty") }
                reader.secrets.append(text)
                return text
            } catch {
                reader.problem(mark, key(fileKey), "cannot read secret file '\(path)'")
                return nil
            }
        }
        if let (v, _) = raw(k) {
            reader.secrets.append(v)
            return v
        }
        return nil
    }

    /// Reports every key of this section that no getter asked for.
    public func finish() {
        for e in entries where !used.contains(e.key) {
            let known = used.sorted().joined(separator: ", ")
            reader.problem(e.keyMark, key(e.key), "unknown key (known here: \(known))")
        }
    }
}

// Checks more than one upstream needs.
extension ConfigSection {
    /// An upstream URL that carries a secret: https, or http only to a loopback simulator. Without a
    /// trailing slash.
    public func cloudURL(_ k: String, _ def: String, secret: String, doc: String = "") -> String {
        guard let (url, mark) = scalar(k, doc: doc, shownDefault: .string(def)) else { record(k, .string(def)); return def }
        if let comps = URLComponents(string: url), let scheme = comps.scheme?.lowercased(), let host = comps.host, !host.isEmpty,
           scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)) {
            let v = url.hasSuffix("/") ? String(url.dropLast()) : url
            record(k, .string(v))
            return v
        }
        reader.problem(mark, key(k), "expected an https:// URL (http:// only for a loopback simulator: \(secret) must not travel in clear), got '\(url)'")
        record(k, .string(def))
        return def
    }

    /// A list item's `name`: present, a valid topic name, unique in its list (`seen`).
    public func deviceName(seen: inout Set<String>, missing: String, doc: String = "The device's name: its topic (switchyard/<adapter>/<name>) and stable id; '/' makes folders.") -> String {
        let name = string("name", doc: doc) ?? ""
        if name.isEmpty {
            reader.problem(mark, path + ".name", missing)
        } else if let p = Naming.problem(withName: name) {
            reader.problem(mark(of: "name"), path + ".name", p)
        } else if !seen.insert(name).inserted {
            reader.problem(mark(of: "name"), path + ".name", "duplicate device name '\(name)'")
        }
        return name
    }
}

extension ConfigSection {
    /// Where key `k`'s value is (the section's own position when absent), for `problem(_:key:_:)`.
    public func position(of k: String) -> YAMLMark? { mark(of: k) }
}
