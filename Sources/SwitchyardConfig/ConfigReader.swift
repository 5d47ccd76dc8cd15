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
    let file: String
    let environment: [String: String]
    private(set) var problems: [ConfigProblem] = []
    /// Values read from secret keys, so that they can be checked never to leak.
    private(set) var secrets: [String] = []

    init(file: String, environment: [String: String]) {
        self.file = file
        self.environment = environment
    }

    func problem(_ mark: YAMLMark?, _ path: String, _ message: String) {
        problems.append(ConfigProblem(file: file, line: mark?.line ?? 1, column: mark?.column ?? 1, path: path, message: message))
    }

    /// A mapping being read; `finish()` reports the keys nobody asked for.
    final class Section {
        let reader: ConfigReader
        let path: String
        let mark: YAMLMark?
        var entries: [(key: String, keyMark: YAMLMark?, value: YAMLNode)] = []
        var used: Set<String> = []

        init(reader: ConfigReader, path: String, node: YAMLNode?) {
            self.reader = reader
            self.path = path
            self.mark = node?.mark
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

        func key(_ k: String) -> String { path.isEmpty ? k : "\(path).\(k)" }

        func node(_ k: String) -> YAMLNode? {
            used.insert(k)
            guard let e = entries.first(where: { $0.key == k }), !Self.isNull(e.value) else { return nil }
            return e.value
        }

        func has(_ k: String) -> Bool { entries.contains { $0.key == k && !Self.isNull($0.value) } }

        /// A scalar with `${ENV}` expanded; nil (and a problem) when it is not a scalar.
        func scalar(_ k: String) -> (String, YAMLMark?)? {
            guard let n = node(k) else { return nil }
            guard case .scalar(let s) = n else {
                reader.problem(n.mark, key(k), "expected a single value, got \(Self.kind(n))")
                return nil
            }
            guard let expanded = reader.expand(s.string, mark: n.mark, path: key(k)) else { return nil }
            return (expanded, n.mark)
        }

        func string(_ k: String, _ def: String) -> String { string(k) ?? def }
        func string(_ k: String) -> String? { scalar(k)?.0 }

        func int(_ k: String, _ def: Int, min lo: Int = Int.min, max hi: Int = Int.max) -> Int {
            guard let (s, mark) = scalar(k) else { return def }
            guard let v = Int(s) else {
                reader.problem(mark, key(k), "expected a whole number, got '\(s)'")
                return def
            }
            guard v >= lo && v <= hi else {
                reader.problem(mark, key(k), "\(v) is out of range \(lo)–\(hi)")
                return def
            }
            return v
        }

        func double(_ k: String, _ def: Double, min lo: Double = -Double.infinity, max hi: Double = Double.infinity) -> Double {
            guard let (s, mark) = scalar(k) else { return def }
            guard let v = Double(s), v.isFinite else {
                reader.problem(mark, key(k), "expected a number (seconds unless the key ends in _ms), got '\(s)'")
                return def
            }
            guard v >= lo && v <= hi else {
                reader.problem(mark, key(k), "\(s) is out of range \(JSONValue.format(lo))–\(JSONValue.format(hi))")
                return def
            }
            return v
        }

        func bool(_ k: String, _ def: Bool) -> Bool {
            guard let (s, mark) = scalar(k) else { return def }
            switch s.lowercased() {
            case "true", "yes", "on": return true
            case "false", "no", "off": return false
            default:
                reader.problem(mark, key(k), "expected true or false, got '\(s)'")
                return def
            }
        }

        func choice(_ k: String, _ def: String, _ allowed: [String]) -> String {
            guard let (s, mark) = scalar(k) else { return def }
            guard allowed.contains(s) else {
                reader.problem(mark, key(k), "expected one of \(allowed.joined(separator: ", ")), got '\(s)'")
                return def
            }
            return s
        }

        func section(_ k: String) -> Section { Section(reader: reader, path: key(k), node: node(k)) }

        /// A list of mappings.
        func list(_ k: String) -> [Section] {
            guard let n = node(k) else { return [] }
            guard case .sequence(let seq, _) = n else {
                reader.problem(n.mark, key(k), "expected a list, got \(Self.kind(n))")
                return []
            }
            return seq.enumerated().map { i, item in Section(reader: reader, path: "\(key(k))[\(i)]", node: item) }
        }

        /// A mapping of plain string keys to single values (`names: {id: name}`), with each value's mark.
        func stringMap(_ k: String) -> [(key: String, value: String, mark: YAMLMark?)] {
            let m = section(k)
            var out: [(key: String, value: String, mark: YAMLMark?)] = []
            for e in m.entries {
                if let (v, mark) = m.scalar(e.key) { out.append((e.key, v, mark)) }
            }
            return out
        }

        /// A list of plain values (`channels: [a, b]`), each with its mark.
        func stringList(_ k: String) -> [(String, YAMLMark?)] {
            guard let n = node(k) else { return [] }
            guard case .sequence(let seq, _) = n else {
                reader.problem(n.mark, key(k), "expected a list, got \(Self.kind(n))")
                return []
            }
            var out: [(String, YAMLMark?)] = []
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
        func sections(_ k: String) -> [(key: String, section: Section)] {
            let m = section(k)
            return m.entries.map { e in
                m.used.insert(e.key)
                return (e.key, Section(reader: reader, path: m.key(e.key), node: e.value))
            }
        }

        /// A secret: `<k>` (with `${ENV}`) or `<k>_file` (read from that file), never both.
        func secret(_ k: String) -> String? {
            let fileKey = "\(k)_file"
            used.insert(k)
            if has(k) && has(fileKey) {
                reader.problem(entries.first { $0.key == fileKey }?.keyMark, key(fileKey), "give either \(k) or \(fileKey), not both")
            }
            if let (path, mark) = scalar(fileKey) {
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
            if let (v, _) = scalar(k) {
                reader.secrets.append(v)
                return v
            }
            return nil
        }

        func mark(of k: String) -> YAMLMark? { entries.first { $0.key == k }?.value.mark ?? mark }

        func finish() {
            for e in entries where !used.contains(e.key) {
                let known = used.sorted().joined(separator: ", ")
                reader.problem(e.keyMark, key(e.key), "unknown key (known here: \(known))")
            }
        }
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
