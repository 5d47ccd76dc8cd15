#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A JSON value with a deterministic serialiser (keys sorted), used for every payload the bridge
/// publishes so that "changed?" comparisons and retained payloads are byte-stable.
public enum JSONValue: Sendable, Equatable, Hashable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var objectValue: [String: JSONValue]? { if case .object(let o) = self { return o }; return nil }
    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var doubleValue: Double? { if case .number(let n) = self { return n }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var isNull: Bool { if case .null = self { return true }; return false }

    /// Integral numbers render without a fraction (`40`, not `40.0`).
    public var intValue: Int? {
        if case .number(let n) = self, n.rounded() == n, abs(n) < 9.0e15 { return Int(n) }
        return nil
    }

    // MARK: parsing

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Parses a complete JSON text (object, array or scalar), RFC 8259, nesting limited to 64 levels.
    public static func parse(_ bytes: [UInt8]) throws(ParseError) -> JSONValue {
        var p = JSONParser(bytes: bytes)
        return try p.parseDocument()
    }

    public static func parse(_ text: String) throws(ParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }

    /// One member of a streamed container: which document (the element of a top-level array, else 0),
    /// which of the streamed paths, and the member's key (nil in an array) and value.
    public struct StreamedMember {
        public let document: Int
        public let path: Int
        public let key: String?
        public let value: JSONValue
    }

    /// Parses like `parse`, except that the members of each object or array found at one of `paths`
    /// (keys from the document root, or from each element of a top-level array) are handed to `visit`
    /// one at a time as they are parsed and left out of the result, where that container is empty.
    /// A large message (a snapshot of thousands of entities) then never exists as one tree: only the
    /// member being visited does.
    public static func parse(_ bytes: [UInt8], streaming paths: [[String]],
                             visit: (StreamedMember) -> Void) throws(ParseError) -> JSONValue {
        try withoutActuallyEscaping(visit) { (visit) throws(ParseError) -> JSONValue in
            var p = JSONParser(bytes: bytes)
            p.streamPaths = paths
            p.visit = visit
            return try p.parseDocument()
        }
    }

    // MARK: serialising

    /// No capacity is reserved up front: a short result (`"W"`, `21.5`, `true`) then stays inside the
    /// String itself, with no allocation, which matters where thousands are kept (the HA mirror).
    public var serialized: String {
        var out = ""
        write(into: &out)
        return out
    }

    public var bytes: [UInt8] { Array(serialized.utf8) }

    func write(into out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n): out += JSONValue.format(n)
        case .string(let s): JSONValue.writeString(s, into: &out)
        case .array(let a):
            out += "["
            for (i, v) in a.enumerated() {
                if i > 0 { out += "," }
                v.write(into: &out)
            }
            out += "]"
        case .object(let o):
            out += "{"
            for (i, k) in o.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                JSONValue.writeString(k, into: &out)
                out += ":"
                o[k]!.write(into: &out)
            }
            out += "}"
        }
    }

    public static func format(_ n: Double) -> String {
        if !n.isFinite { return "null" }
        if n.rounded() == n && abs(n) < 1e15 { return String(Int64(n)) }
        return "\(n)"
    }

    static func writeString(_ s: String, into out: inout String) {
        // Most strings need no escape: append them whole (callgrind: the per-scalar loop was the
        // serialiser's main cost).
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) {
            out += "\""
            out += s
            out += "\""
            return
        }
        // Escaped byte by byte into one buffer, appended once: hostile input quoted in an error message is
        // full of quotes, and appending scalar by scalar to a String cost more than parsing it.
        var buf: [UInt8] = []
        buf.reserveCapacity(s.utf8.count + 16)
        appendString(s.utf8, to: &buf)
        out += String(decoding: buf, as: UTF8.self)
    }

    /// Appends `utf8` (valid UTF-8) to `buf` as a JSON string, quotes included: the one byte-level string
    /// writer, for `serialized` and for JSON built from bytes (the console's frames of MQTT payloads).
    public static func appendString(_ utf8: some Sequence<UInt8>, to buf: inout [UInt8]) {
        let hex = hexDigits
        buf.append(0x22)
        for b in utf8 {
            switch b {
            case 0x22: buf += [0x5C, 0x22]
            case 0x5C: buf += [0x5C, 0x5C]
            case 0x0A: buf += [0x5C, UInt8(ascii: "n")]
            case 0x0D: buf += [0x5C, UInt8(ascii: "r")]
            case 0x09: buf += [0x5C, UInt8(ascii: "t")]
            case 0..<0x20: buf += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            default: buf.append(b)
            }
        }
        buf.append(0x22)
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(floatLiteral value: Double) { self = .number(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, b in b }))
    }
    public init(nilLiteral: ()) { self = .null }
}

extension JSONValue {
    public init(_ i: Int) { self = .number(Double(i)) }
    public init(_ d: Double) { self = .number(d) }
    public init(_ s: String) { self = .string(s) }
    public init(_ b: Bool) { self = .bool(b) }
}

struct JSONParser {
    let bytes: [UInt8]
    var i = 0
    var depth = 0
    var streamPaths: [[String]] = []
    var visit: ((JSONValue.StreamedMember) -> Void)?
    var document = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    /// Where a value sits relative to the streamed paths: for each path, how many of its keys were matched
    /// on the way down (nil: left that path).
    typealias Trail = [Int?]

    func fail(_ what: String) -> JSONValue.ParseError {
        JSONValue.ParseError(description: "\(what) at byte \(i)")
    }

    mutating func parseDocument() throws(JSONValue.ParseError) -> JSONValue {
        skipSpace()
        let v: JSONValue
        if streamPaths.isEmpty {
            v = try parseValue()
        } else if i < bytes.count, bytes[i] == UInt8(ascii: "[") {
            v = try parseValue(trail: nil, documents: true)
        } else {
            v = try parseValue(trail: streamPaths.map { _ in 0 })
        }
        skipSpace()
        if i != bytes.count { throw fail("unexpected trailing characters") }
        return v
    }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0a || bytes[i] == 0x0d || bytes[i] == 0x09 { i += 1 }
    }

    mutating func expect(_ literal: String, _ value: JSONValue) throws(JSONValue.ParseError) -> JSONValue {
        let l = Array(literal.utf8)
        guard i + l.count <= bytes.count, Array(bytes[i..<(i + l.count)]) == l else { throw fail("invalid literal") }
        i += l.count
        return value
    }

    /// `trail` nil: not on a streamed path. `documents`: the top-level array whose elements are documents.
    mutating func parseValue(trail: Trail? = nil, documents: Bool = false) throws(JSONValue.ParseError) -> JSONValue {
        guard i < bytes.count else { throw fail("unexpected end") }
        // The container at the end of a streamed path: each member goes to `visit`, none is kept.
        let streamed = trail.flatMap { t in t.indices.first { t[$0] == streamPaths[$0].count } }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            depth += 1
            if depth > 64 { throw fail("nesting too deep") }
            i += 1
            var o: [String: JSONValue] = [:]
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; depth -= 1; return .object(o) }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                let k = try parseString()
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                skipSpace()
                if let streamed {
                    let v = try parseValue()
                    visit?(JSONValue.StreamedMember(document: document, path: streamed, key: k, value: v))
                } else if let trail {
                    // Follow each path whose next key is this one.
                    let next: Trail = trail.indices.map { n in
                        trail[n].flatMap { m in m < streamPaths[n].count && streamPaths[n][m] == k ? m + 1 : nil }
                    }
                    o[k] = try parseValue(trail: next.contains { $0 != nil } ? next : nil)
                } else {
                    o[k] = try parseValue()
                }
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; depth -= 1; return .object(o) }
                throw fail("expected ',' or '}'")
            }
        case UInt8(ascii: "["):
            depth += 1
            if depth > 64 { throw fail("nesting too deep") }
            i += 1
            var a: [JSONValue] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; depth -= 1; return .array(a) }
            while true {
                skipSpace()
                if documents {
                    a.append(try parseValue(trail: streamPaths.map { _ in 0 }))
                    document += 1
                } else if let streamed {
                    let v = try parseValue()
                    visit?(JSONValue.StreamedMember(document: document, path: streamed, key: nil, value: v))
                } else {
                    a.append(try parseValue())
                }
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; depth -= 1; return .array(a) }
                throw fail("expected ',' or ']'")
            }
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        default: return try parseNumber()
        }
    }

    mutating func parseNumber() throws(JSONValue.ParseError) -> JSONValue {
        let start = i
        if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
        let intStart = i
        while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
        if i == intStart { throw fail("invalid value") }
        if bytes[intStart] == 0x30 && i - intStart > 1 { throw fail("leading zero") }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            let f = i
            while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
            if i == f { throw fail("invalid number") }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            let e = i
            while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
            if i == e { throw fail("invalid exponent") }
        }
        guard let d = Double(String(decoding: bytes[start..<i], as: UTF8.self)) else { throw fail("invalid number") }
        // 1e999 is valid JSON but no Double: as infinity it would serialise as null and trap in Int(_:).
        guard d.isFinite else { i = start; throw fail("number out of range") }
        return .number(d)
    }

    mutating func hex4() throws(JSONValue.ParseError) -> UInt32 {
        guard i + 4 <= bytes.count, let v = UInt32(String(decoding: bytes[i..<(i + 4)], as: UTF8.self), radix: 16) else {
            throw fail("invalid \\u escape")
        }
        i += 4
        return v
    }

    mutating func parseString() throws(JSONValue.ParseError) -> String {
        i += 1   // opening quote
        var out: [UInt8] = []
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") {
                i += 1
                guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8") }
                return s
            }
            if c < 0x20 { throw fail("control character in string") }
            if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
            i += 1
            guard i < bytes.count else { break }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5c)
            case UInt8(ascii: "/"): out.append(0x2f)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0c)
            case UInt8(ascii: "n"): out.append(0x0a)
            case UInt8(ascii: "r"): out.append(0x0d)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if scalar >= 0xD800 && scalar < 0xDC00 {
                    guard i + 2 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        throw fail("unpaired surrogate")
                    }
                    i += 2
                    let low = try hex4()
                    guard low >= 0xDC00 && low < 0xE000 else { throw fail("unpaired surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let u = Unicode.Scalar(scalar) else { throw fail("invalid code point") }
                out.append(contentsOf: Array(String(Character(u)).utf8))
            default: throw fail("invalid escape")
            }
        }
        throw fail("unterminated string")
    }
}
