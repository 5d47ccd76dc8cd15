/// Where a value sits in the config file: a key of a mapping, an item of a list by position, or the
/// item of a list of mappings whose key has a given value. The text form is the one problems are
/// reported with (`virtual.devices[0].name`), plus item selectors, so that a management request can
/// name any value of the file:
///
///     log.level
///     virtual.devices[name=kitchen].label       the item of virtual.devices whose name is kitchen
///     imp.devices[0].agent_id                   the first item
///     lifx.names.d073d5014c49                   a key of a map of names
///     devices.lifx."kitchen.ceiling".retain     a key with `.`, `[`, `]`, `"` or `=` in it, JSON-quoted
///     nova.names."D0:39:72:AA:BB:CC"            quoting is also allowed where it is not needed
///     groups                                    a new top-level section
///
/// A selector's value is bare (anything but `]`) or JSON-quoted: `[name="a]b"]`.
public struct ConfigPath: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public enum Component: Hashable, Sendable {
        /// A key of a mapping.
        case key(String)
        /// A list item by position, from 0.
        case index(Int)
        /// The one item of a list of mappings whose `key` holds the single value `equals` (as written in
        /// the file, before `${ENV}` expansion).
        case item(key: String, equals: String)
    }

    public var components: [Component]

    public init(_ components: [Component]) { self.components = components }

    /// A path of keys only: `ConfigPath(keys: "devices", "lifx", "kitchen/ceiling")`.
    public init(keys: String...) { components = keys.map(Component.key) }

    /// Reads the text form; throws on a malformed path (the message says where).
    public init(parsing text: String) throws(ConfigPathError) {
        components = try Self.parse(text)
    }

    /// A literal in code: it must be well formed (checked when it is made).
    public init(stringLiteral text: String) {
        do { components = try Self.parse(text) } catch { preconditionFailure("bad config path literal '\(text)': \(error)") }
    }

    public var isEmpty: Bool { components.isEmpty }

    /// The path without its last component; nil for the root.
    public var parent: ConfigPath? { components.isEmpty ? nil : ConfigPath(Array(components.dropLast())) }

    public var last: Component? { components.last }

    public func appending(_ c: Component) -> ConfigPath { ConfigPath(components + [c]) }
    public func appending(key: String) -> ConfigPath { appending(.key(key)) }

    /// Whether `other` is this path or lies under it.
    public func contains(_ other: ConfigPath) -> Bool {
        other.components.count >= components.count && Array(other.components.prefix(components.count)) == components
    }

    /// The canonical text form (keys quoted only when they must be).
    public var description: String {
        var out = ""
        for c in components {
            switch c {
            case .key(let k):
                if !out.isEmpty { out += "." }
                out += Self.bare(k) ? k : Self.quoted(k)
            case .index(let i):
                out += "[\(i)]"
            case .item(let k, let v):
                out += "[\(Self.bare(k) ? k : Self.quoted(k))=\(Self.bareValue(v) ? v : Self.quoted(v))]"
            }
        }
        return out
    }

    static func digit(_ c: Unicode.Scalar) -> Int? { c.value >= 0x30 && c.value <= 0x39 ? Int(c.value - 0x30) : nil }

    static func bare(_ k: String) -> Bool {
        !k.isEmpty && !k.contains(where: { $0 == "." || $0 == "[" || $0 == "]" || $0 == "\"" || $0 == "=" })
            && !k.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    static func bareValue(_ v: String) -> Bool {
        !v.isEmpty && !v.contains(where: { $0 == "]" || $0 == "\"" }) && !v.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    static func quoted(_ s: String) -> String { String(decoding: JSONValue_string(s), as: UTF8.self) }

    // MARK: parsing

    static func parse(_ text: String) throws(ConfigPathError) -> [Component] {
        let s = Array(text.unicodeScalars)
        var i = 0
        var out: [Component] = []
        func fail(_ why: String) -> ConfigPathError { ConfigPathError(path: text, message: "\(why) at character \(i + 1)") }

        /// A JSON string starting at s[i] == '"'.
        func quotedString() throws(ConfigPathError) -> String {
            var v = ""
            i += 1
            while i < s.count {
                let c = s[i]
                if c == "\"" { i += 1; return v }
                if c == "\\" {
                    i += 1
                    guard i < s.count else { break }
                    switch s[i] {
                    case "\"": v += "\""
                    case "\\": v += "\\"
                    case "/": v += "/"
                    case "n": v += "\n"
                    case "t": v += "\t"
                    case "r": v += "\r"
                    case "b": v += "\u{8}"
                    case "f": v += "\u{C}"
                    case "u":
                        guard i + 4 < s.count, let n = UInt32(String(String.UnicodeScalarView(s[(i + 1)...(i + 4)])), radix: 16),
                              let u = Unicode.Scalar(n) else { throw fail("a bad \\u escape") }
                        v.unicodeScalars.append(u)
                        i += 4
                    default: throw fail("an unknown escape")
                    }
                    i += 1
                    continue
                }
                v.unicodeScalars.append(c)
                i += 1
            }
            throw fail("an unterminated quoted key")
        }

        func key(stopAt stops: Set<Unicode.Scalar>) throws(ConfigPathError) -> String {
            if i < s.count, s[i] == "\"" { return try quotedString() }
            var v = ""
            while i < s.count, !stops.contains(s[i]) {
                if s[i] == "\"" { throw fail("a quote inside a bare key (quote the whole key)") }
                v.unicodeScalars.append(s[i])
                i += 1
            }
            if v.isEmpty { throw fail("an empty key") }
            return v
        }

        guard !s.isEmpty else { return [] }
        var expectKey = true
        while i < s.count {
            if s[i] == "[" {
                i += 1
                if i < s.count, Self.digit(s[i]) != nil {
                    var n = 0
                    while i < s.count, let digit = Self.digit(s[i]) {
                        n = n * 10 + digit
                        if n > 1_000_000_000 { throw fail("an index too large") }
                        i += 1
                    }
                    guard i < s.count, s[i] == "]" else { throw fail("expected ] after the index") }
                    i += 1
                    out.append(.index(n))
                } else {
                    let k = try key(stopAt: ["=", "]"])
                    guard i < s.count, s[i] == "=" else { throw fail("expected [index] or [key=value]") }
                    i += 1
                    let v: String
                    if i < s.count, s[i] == "\"" {
                        v = try quotedString()
                    } else {
                        var b = ""
                        while i < s.count, s[i] != "]" { b.unicodeScalars.append(s[i]); i += 1 }
                        v = b
                    }
                    guard i < s.count, s[i] == "]" else { throw fail("expected ] after the selector") }
                    i += 1
                    out.append(.item(key: k, equals: v))
                }
                expectKey = false
                continue
            }
            if !expectKey {
                guard s[i] == "." else { throw fail("expected . or [") }
                i += 1
                guard i < s.count else { throw fail("a path may not end with .") }
            }
            out.append(.key(try key(stopAt: [".", "["])))
            expectKey = false
        }
        return out
    }
}

/// A malformed path in a request.
public struct ConfigPathError: Error, Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var message: String
    public var description: String { "'\(path)' is not a key path: \(message)" }
}

/// JSON string text (with quotes) without going through JSONValue's serializer for one string.
func JSONValue_string(_ s: String) -> [UInt8] {
    var out: [UInt8] = [0x22]
    let hex = Array("0123456789abcdef".utf8)
    for b in s.utf8 {
        switch b {
        case 0x22: out += [0x5C, 0x22]
        case 0x5C: out += [0x5C, 0x5C]
        case 0x0A: out += [0x5C, UInt8(ascii: "n")]
        case 0x0D: out += [0x5C, UInt8(ascii: "r")]
        case 0x09: out += [0x5C, UInt8(ascii: "t")]
        case 0..<0x20, 0x7F: out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
        default: out.append(b)
        }
    }
    out.append(0x22)
    return out
}
