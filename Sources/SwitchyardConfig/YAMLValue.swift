import SwitchyardCore

/// A value to write into the config file. Strings are what the bridge will read (a `$` is written
/// `$$`, so that nothing in a written string is taken for an `${ENV}` reference); `reference` writes an
/// `${NAME}` reference itself. Mappings keep their order: a new mapping is written in the order given.
public indirect enum YAMLValue: Sendable, Equatable, CustomStringConvertible,
    ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    case null
    case bool(Bool)
    case int(Int)
    case number(Double)
    case string(String)
    /// `${NAME}`: the value comes from the environment when the file is read.
    case reference(String)
    /// A single value's text exactly as the file is to hold it: `${ENV}` references and `$$` as written
    /// (a value copied from the file, or text a person typed as YAML would hold it).
    case raw(String)
    case list([YAMLValue])
    case map([Entry])

    public struct Entry: Sendable, Equatable {
        public var key: String
        public var value: YAMLValue
        public init(_ key: String, _ value: YAMLValue) {
            self.key = key
            self.value = value
        }
    }

    public init(stringLiteral v: String) { self = .string(v) }
    public init(integerLiteral v: Int) { self = .int(v) }
    public init(floatLiteral v: Double) { self = .number(v) }
    public init(booleanLiteral v: Bool) { self = .bool(v) }
    public init(arrayLiteral elements: YAMLValue...) { self = .list(elements) }
    public init(dictionaryLiteral elements: (String, YAMLValue)...) { self = .map(elements.map { Entry($0.0, $0.1) }) }
    public init(nilLiteral: ()) { self = .null }

    /// A JSON value (a request's payload) as a value to write. JSON objects have no order: their keys are
    /// written in `order`'s order first (e.g. the schema's), then sorted.
    public init(_ json: JSONValue, order: (ConfigPath) -> [String] = { _ in [] }, at path: ConfigPath = ConfigPath([])) {
        switch json {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .number(let n):
            if let i = json.intValue { self = .int(i) } else { self = .number(n) }
        case .string(let s): self = .string(s)
        case .array(let a): self = .list(a.map { YAMLValue($0, order: order, at: path.appending(.index(0))) })
        case .object(let o):
            let first = order(path).filter { o[$0] != nil }
            let rest = o.keys.filter { !first.contains($0) }.sorted()
            self = .map((first + rest).map { Entry($0, YAMLValue(o[$0]!, order: order, at: path.appending(key: $0))) })
        }
    }

    /// The value as JSON (references as their `${NAME}` text).
    public var json: JSONValue {
        switch self {
        case .null: .null
        case .bool(let b): .bool(b)
        case .int(let i): .number(Double(i))
        case .number(let n): .number(n)
        case .string(let s): .string(s)
        case .reference(let n): .string("${\(n)}")
        case .raw(let s): .string(s)
        case .list(let a): .array(a.map(\.json))
        case .map(let m): .object(Dictionary(m.map { ($0.key, $0.value.json) }, uniquingKeysWith: { _, b in b }))
        }
    }

    public var description: String { json.serialized }

    /// Whether the value's text is a number or a boolean, which is written plain.
    var isTyped: Bool {
        switch self {
        case .string, .reference: return false
        case .raw(let s): return s == "true" || s == "false" || Int(s) != nil || (Double(s).map { $0.isFinite } ?? false) && !s.contains(where: { $0.isLetter && $0 != "e" && $0 != "E" })
        default: return true
        }
    }

    var isCollection: Bool {
        switch self {
        case .list, .map: true
        default: false
        }
    }

    /// The scalar's text as the file must hold it (before quoting): `$` doubled in strings.
    var scalarText: String? {
        switch self {
        case .null: "null"
        case .bool(let b): b ? "true" : "false"
        case .int(let i): String(i)
        case .number(let n): JSONValue.format(n)
        case .string(let s): s.replacing("$", with: "$$")
        case .reference(let n): "${\(n)}"
        case .raw(let s): s
        case .list, .map: nil
        }
    }

    /// The value as the file's tree holds it: scalars as their raw text.
    var tree: YAMLTree {
        switch self {
        case .null: .null
        case .list(let a): .sequence(a.map(\.tree))
        case .map(let m): .mapping(m.map { YAMLTree.Pair(key: $0.key, value: $0.value.tree) })
        default: .scalar(scalarText ?? "")
        }
    }
}

extension YAMLValue {
    /// A value as the file holds it (scalars written back as their text).
    init(tree: YAMLTree) {
        switch tree {
        case .null: self = .null
        case .scalar(let s): self = .raw(s)
        case .mapping(let pairs): self = .map(pairs.map { Entry($0.key, YAMLValue(tree: $0.value)) })
        case .sequence(let items): self = .list(items.map(YAMLValue.init(tree:)))
        }
    }
}

/// How a scalar is written in YAML, and what text a value needs to read back as itself.
enum YAMLScalarStyle: Sendable, Equatable {
    case plain, single, double, literal, folded
}

enum YAMLQuoting {
    /// Plain scalars YAML 1.1 or 1.2 resolves to something other than a string (null, booleans, numbers).
    static let special: Set<String> = [
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE",
        "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF", ".inf", ".Inf", ".INF", "-.inf", "-.Inf", "-.INF",
        "+.inf", "+.Inf", "+.INF", ".nan", ".NaN", ".NAN", "<<", "=",
    ]

    /// Whether `s` can be written plain and read back as the string `s` (in a flow collection when
    /// `flow`). `typed`: the text of a number, boolean or null that is meant to be read as such.
    static func plainIsSafe(_ s: String, flow: Bool, typed: Bool = false) -> Bool {
        guard let first = s.unicodeScalars.first, let last = s.unicodeScalars.last else { return false }
        if !typed {
            if special.contains(s) { return false }
            // Anything that starts like a number (1, -1, .5, +1, 0x1F, 1:30) is quoted.
            let scalars = Array(s.unicodeScalars)
            if isDigit(first) { return false }
            if (first == "-" || first == "+" || first == "."), scalars.count > 1, isDigit(scalars[1]) || scalars[1] == "." { return false }
        }
        if " \t".unicodeScalars.contains(first) || " \t".unicodeScalars.contains(last) { return false }
        if "-?:,[]{}#&*!|>'\"%@`".unicodeScalars.contains(first) {
            // `-x`, `?x` and `:x` are plain in YAML, but `-` alone, `- x` and the rest are not: quote them all
            // but a negative number meant as one.
            if !(typed && first == "-") { return false }
        }
        if last == ":" { return false }
        for u in s.unicodeScalars {
            if u.value < 0x20 || u.value == 0x7F || u.value == 0x85 || u.value == 0x2028 || u.value == 0x2029 || u.value == 0xFEFF { return false }
            if (0x80...0x9F).contains(u.value) || (0xD800...0xDFFF).contains(u.value) || u.value == 0xFFFE || u.value == 0xFFFF { return false }
            if flow && ",[]{}".unicodeScalars.contains(u) { return false }
        }
        if s.contains(": ") || s.contains(" #") || s.contains(":\t") || s.contains("\t#") { return false }
        return true
    }

    static func isDigit(_ u: Unicode.Scalar) -> Bool { u.value >= 0x30 && u.value <= 0x39 }

    /// `s` in double quotes, escaped.
    static func double(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                let v = u.value
                if v < 0x20 || v == 0x7F || (0x80...0x9F).contains(v) || v == 0x2028 || v == 0x2029 || v == 0xFEFF || v == 0xFFFE || v == 0xFFFF {
                    let hex = String(v, radix: 16, uppercase: true)
                    out += v <= 0xFF ? "\\x" + String(repeating: "0", count: 2 - hex.count) + hex
                        : "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }

    /// `s` in single quotes, or nil when it cannot be (line breaks and non-printable characters).
    static func single(_ s: String) -> String? {
        for u in s.unicodeScalars {
            let v = u.value
            if v < 0x20 || v == 0x7F || (0x80...0x9F).contains(v) || v == 0x2028 || v == 0x2029 || v == 0xFEFF || v == 0xFFFE || v == 0xFFFF { return nil }
        }
        // Leading or trailing spaces survive single quotes on one line.
        return "'" + s.replacing("'", with: "''") + "'"
    }

    /// The text for a scalar: in `preferred` style when it can hold it, plain when safe, else double-quoted.
    static func render(_ text: String, typed: Bool, preferred: YAMLScalarStyle?, flow: Bool) -> String {
        switch preferred {
        case .double?: return double(text)
        case .single?: if let s = single(text) { return s }
        default: break
        }
        if plainIsSafe(text, flow: flow, typed: typed) { return text }
        return double(text)
    }
}
