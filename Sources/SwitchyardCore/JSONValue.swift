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
        try bytes.withUnsafeBufferPointer { (b) throws(ParseError) -> JSONValue in
            var p = JSONParser(bytes: b)
            return try p.parseDocument()
        }
    }

    /// The same, read in place from the String's own UTF-8 (a large WebSocket message is not copied first).
    public static func parse(_ text: String) throws(ParseError) -> JSONValue {
        try withUTF8(of: text) { (b) throws(ParseError) -> JSONValue in
            var p = JSONParser(bytes: b)
            return try p.parseDocument()
        }
    }

    /// A String's own UTF-8 bytes, in place (copied only when the String is not stored as UTF-8).
    static func withUTF8<R>(of text: String, _ body: (UnsafeBufferPointer<UInt8>) throws(ParseError) -> R) throws(ParseError) -> R {
        var text = text
        let r = text.withUTF8 { b in Result { () throws(ParseError) -> R in try body(b) } }
        return try r.get()
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
        try bytes.withUnsafeBufferPointer { (b) throws(ParseError) -> JSONValue in try parse(b, streaming: paths, visit: visit) }
    }

    /// The same over a String's own UTF-8, without copying it.
    public static func parse(_ text: String, streaming paths: [[String]],
                             visit: (StreamedMember) -> Void) throws(ParseError) -> JSONValue {
        try withUTF8(of: text) { (b) throws(ParseError) -> JSONValue in try parse(b, streaming: paths, visit: visit) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, streaming paths: [[String]],
                      visit: (StreamedMember) -> Void) throws(ParseError) -> JSONValue {
        try withoutActuallyEscaping(visit) { (visit) throws(ParseError) -> JSONValue in
            var p = JSONParser(bytes: bytes)
            p.streamPaths = paths
            p.visit = visit
            return try p.parseDocument()
        }
    }

    /// What `parse(_:keeping:)` found: a top-level object (the members it was told to keep built, the others
    /// `.null`, validated but never built), or any other valid JSON, of which only the start is kept, as the
    /// canonical text an error message quotes (`excerpt`, at most `excerptBytes` bytes plus the cut scalar).
    public enum Document: Sendable, Equatable {
        case object([String: JSONValue])
        case other(excerpt: String)
    }

    /// Reads a payload that is worth building only if it is an object: every byte is validated (nesting, UTF-8,
    /// numbers) before or while anything is built, a member whose key `keep` refuses is checked but not
    /// built, and a value that is not an object is not built beyond what a message quotes of it. A flood of
    /// large arrays or of objects with a thousand unknown keys then costs a scan, not a tree.
    public static func parse(_ bytes: [UInt8], keeping keep: (String) -> Bool) throws(ParseError) -> Document {
        try bytes.withUnsafeBufferPointer { (b) throws(ParseError) -> Document in
            var p = JSONParser(bytes: b)
            p.skipSpace()
            let d: Document
            if p.i < b.count, b[p.i] == UInt8(ascii: "{") {
                d = .object(try p.parseObject(keeping: keep))
            } else {
                var w = JSONWriter(limit: excerptBytes + 4)
                try p.excerptValue(into: &w)
                d = .other(excerpt: String(decoding: w.out, as: UTF8.self).excerpt(excerptBytes))
            }
            p.skipSpace()
            if p.i != b.count { throw p.fail("unexpected trailing characters") }
            return d
        }
    }

    /// How much of a value an error message quotes (`excerpt`).
    public static let excerptBytes = 80

    // MARK: serialising

    /// The JSON text as a String. A short result (`"W"`, `21.5`, `true`) stays inside the String itself,
    /// with no allocation, which matters where thousands are kept (the HA mirror).
    public var serialized: String { String(decoding: bytes, as: UTF8.self) }

    /// The JSON text, written straight into bytes: appending to a String piece by piece costs many times
    /// more a byte, and every payload the bridge publishes is written here.
    public var bytes: [UInt8] { bytes(reserving: 0) }

    /// The same into a buffer of `capacity` bytes reserved up front (a large payload whose size is known
    /// roughly: no doubling on the way).
    func bytes(reserving capacity: Int) -> [UInt8] {
        var w = JSONWriter(capacity: capacity)
        w.write(self)
        return w.out
    }

    /// The JSON text cut after `limit` bytes (plus up to 4, so that a cut scalar can be recognised): what
    /// an error message quotes, without serialising all of a large value first.
    func prefixBytes(_ limit: Int) -> [UInt8] {
        var w = JSONWriter(limit: limit + 4)
        w.write(self)
        return w.out
    }

    public static func format(_ n: Double) -> String { String(decoding: formatBytes(n), as: UTF8.self) }

    /// Integral numbers without a fraction (`40`, not `40.0`), the rest as Swift's shortest round-trip form.
    static func formatBytes(_ n: Double) -> [UInt8] {
        var w = JSONWriter()
        w.number(n)
        return w.out
    }
}

/// Writes JSON text into a byte buffer: object keys sorted (the serialisation is canonical, so that
/// "changed?" comparisons and retained payloads are byte-stable), strings escaped as RFC 8259 requires.
/// With a `limit`, it stops once that many bytes are written (the result is then a prefix).
struct JSONWriter {
    var out: [UInt8] = []
    let limit: Int

    init(limit: Int = .max, capacity: Int = 0) {
        self.limit = limit
        if capacity > 0 { out.reserveCapacity(capacity) }
    }

    var full: Bool { out.count >= limit }

    mutating func write(_ v: JSONValue) {
        if full { return }
        switch v {
        case .null: literal("null")
        case .bool(let b): literal(b ? "true" : "false")
        case .number(let n): number(n)
        case .string(let s): string(s)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            var first = true
            for e in a {
                if full { return }
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                write(e)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            if o.count == 1, let (k, e) = o.first {
                string(k)
                out.append(UInt8(ascii: ":"))
                write(e)
            } else {
                var first = true
                for k in o.keys.sorted() {
                    if full { return }
                    if !first { out.append(UInt8(ascii: ",")) }
                    first = false
                    string(k)
                    out.append(UInt8(ascii: ":"))
                    write(o[k]!)
                }
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    mutating func literal(_ s: StaticString) {
        s.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    mutating func number(_ n: Double) {
        if !n.isFinite { literal("null"); return }
        if n.rounded() == n && abs(n) < 1e15 {
            var v = Int64(n)
            if v == 0 { out.append(UInt8(ascii: "0")); return }
            if v < 0 { out.append(UInt8(ascii: "-")); v = -v }
            // Digits into a small stack tuple, most significant first.
            var digits: (UInt64, UInt64) = (0, 0)
            var count = 0
            withUnsafeMutableBytes(of: &digits) { d in
                var x = UInt64(v)
                while x > 0 { d[15 - count] = UInt8(ascii: "0") + UInt8(x % 10); x /= 10; count += 1 }
                out.append(contentsOf: d[(16 - count)...])
            }
            return
        }
        out.append(contentsOf: "\(n)".utf8)
    }

    mutating func string(_ s: String) { string(utf8: s.utf8) }

    /// `u` (valid UTF-8) as a JSON string, quotes included.
    mutating func string(utf8 u: some Collection<UInt8>) {
        out.append(UInt8(ascii: "\""))
        let room = limit == .max ? Int.max : max(0, limit - out.count)
        // Most strings need no escape: appended whole (one copy of the String's own bytes).
        if u.count <= room, !u.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) {
            out.append(contentsOf: u)
            out.append(UInt8(ascii: "\""))
            return
        }
        let hex = hexDigits
        for b in u {
            if full { return }
            switch b {
            case 0x22: out += [0x5C, 0x22]
            case 0x5C: out += [0x5C, 0x5C]
            case 0x0A: out += [0x5C, UInt8(ascii: "n")]
            case 0x0D: out += [0x5C, UInt8(ascii: "r")]
            case 0x09: out += [0x5C, UInt8(ascii: "t")]
            case 0..<0x20: out += [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0xF)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
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
    let bytes: UnsafeBufferPointer<UInt8>
    var i = 0
    var depth = 0
    var streamPaths: [[String]] = []
    var visit: ((JSONValue.StreamedMember) -> Void)?
    var document = 0

    init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

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

    /// The members of an object (at `i`), each built only when `keep` says so (else `.null`).
    mutating func parseObject(keeping keep: (String) -> Bool) throws(JSONValue.ParseError) -> [String: JSONValue] {
        var o: [String: JSONValue] = [:]
        try walk(object: true) { (p, k) throws(JSONValue.ParseError) in
            if keep(k!) { o[k!] = try p.parseValue() } else { try p.skipValue(); o[k!] = .null }
        }
        return o
    }

    /// Walks the object or array at `i`: brackets, keys, colons, commas and the nesting limit, with the same
    /// errors wherever a container is read; `each` reads one member's value (the key given in an object,
    /// parsed only when `keys`).
    mutating func walk(object: Bool, keys: Bool = true,
                       _ each: (inout JSONParser, String?) throws(JSONValue.ParseError) -> Void) throws(JSONValue.ParseError) {
        let close = object ? UInt8(ascii: "}") : UInt8(ascii: "]")
        depth += 1
        if depth > 64 { throw fail("nesting too deep") }
        i += 1
        skipSpace()
        if i < bytes.count, bytes[i] == close { i += 1; depth -= 1; return }
        while true {
            skipSpace()
            var key: String?
            if object {
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                if keys { key = try parseString() } else { try skipString() }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                skipSpace()
            }
            try each(&self, key)
            skipSpace()
            guard i < bytes.count else { throw fail("unexpected end") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == close { i += 1; depth -= 1; return }
            throw fail(object ? "expected ',' or '}'" : "expected ',' or ']'")
        }
    }

    /// Checks a value as `parseValue` would (the same errors) without building it.
    mutating func skipValue() throws(JSONValue.ParseError) {
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            try walk(object: bytes[i] == UInt8(ascii: "{"), keys: false) { (p, _) throws(JSONValue.ParseError) in try p.skipValue() }
        case UInt8(ascii: "\""): try skipString()
        default: _ = try parseValue()   // a literal or a number: nothing to allocate
        }
    }

    /// Checks a string as `parseString` would; an ASCII run without escapes is only scanned.
    mutating func skipString() throws(JSONValue.ParseError) {
        var j = i + 1
        while j < bytes.count, bytes[j] < 0x80, bytes[j] != UInt8(ascii: "\""), bytes[j] != UInt8(ascii: "\\"), bytes[j] >= 0x20 { j += 1 }
        if j < bytes.count, bytes[j] == UInt8(ascii: "\"") { i = j + 1; return }
        _ = try parseString()
    }

    /// Writes the canonical JSON of the value at `i` into `w` until `w` is full, then only checks the rest:
    /// an array is written element by element, so a large one is never built to quote its start.
    mutating func excerptValue(into w: inout JSONWriter) throws(JSONValue.ParseError) {
        guard !w.full else { return try skipValue() }
        guard i < bytes.count, bytes[i] == UInt8(ascii: "[") else { return w.write(try parseValue()) }
        w.out.append(UInt8(ascii: "["))
        var first = true
        try walk(object: false) { (p, _) throws(JSONValue.ParseError) in
            if !first && !w.full { w.out.append(UInt8(ascii: ",")) }
            first = false
            try p.excerptValue(into: &w)
        }
        if !w.full { w.out.append(UInt8(ascii: "]")) }
    }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x0a || bytes[i] == 0x0d || bytes[i] == 0x09 { i += 1 }
    }

    mutating func expect(_ literal: StaticString, _ value: JSONValue) throws(JSONValue.ParseError) -> JSONValue {
        let n = literal.utf8CodeUnitCount
        guard i + n <= bytes.count, literal.withUTF8Buffer({ l in bytes[i..<(i + n)].elementsEqual(l) }) else { throw fail("invalid literal") }
        i += n
        return value
    }

    /// `trail` nil: not on a streamed path. `documents`: the top-level array whose elements are documents.
    mutating func parseValue(trail: Trail? = nil, documents: Bool = false) throws(JSONValue.ParseError) -> JSONValue {
        guard i < bytes.count else { throw fail("unexpected end") }
        // The container at the end of a streamed path: each member goes to `visit`, none is kept.
        let streamed = trail.flatMap { t in t.indices.first { t[$0] == streamPaths[$0].count } }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            var o: [String: JSONValue] = [:]
            try walk(object: true) { (p, key) throws(JSONValue.ParseError) in
                let k = key!
                if let streamed {
                    let v = try p.parseValue()
                    p.visit?(JSONValue.StreamedMember(document: p.document, path: streamed, key: k, value: v))
                } else if let trail {
                    // Follow each path whose next key is this one.
                    let paths = p.streamPaths
                    let next: Trail = trail.indices.map { n in trail[n].flatMap { m in m < paths[n].count && paths[n][m] == k ? m + 1 : nil } }
                    o[k] = try p.parseValue(trail: next.contains { $0 != nil } ? next : nil)
                } else {
                    o[k] = try p.parseValue()
                }
            }
            return .object(o)
        case UInt8(ascii: "["):
            var a: [JSONValue] = []
            try walk(object: false) { (p, _) throws(JSONValue.ParseError) in
                if documents {
                    a.append(try p.parseValue(trail: p.streamPaths.map { _ in 0 }))
                    p.document += 1
                } else if let streamed {
                    let v = try p.parseValue()
                    p.visit?(JSONValue.StreamedMember(document: p.document, path: streamed, key: nil, value: v))
                } else {
                    a.append(try p.parseValue())
                }
            }
            return .array(a)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): return try expect("true", .bool(true))
        case UInt8(ascii: "f"): return try expect("false", .bool(false))
        case UInt8(ascii: "n"): return try expect("null", .null)
        default: return try parseNumber()
        }
    }

    mutating func parseNumber() throws(JSONValue.ParseError) -> JSONValue {
        let start = i
        let negative = i < bytes.count && bytes[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        let intStart = i
        while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1 }
        if i == intStart { throw fail("invalid value") }
        if bytes[intStart] == 0x30 && i - intStart > 1 { throw fail("leading zero") }
        let intEnd = i
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
        // A plain integer of up to 15 digits is exact as a Double: converted here, without text.
        if i == intEnd, intEnd - intStart <= 15 {
            var v: Int64 = 0
            for k in intStart..<intEnd { v = v * 10 + Int64(bytes[k] - 0x30) }
            return .number(Double(negative ? -v : v))
        }
        // A long number's magnitude is read from its digits and exponent first: thousands of digits (a flood)
        // are refused, or taken as 0, without a conversion that costs as many steps as it has digits.
        if i - start > 32 {
            let m = magnitude(intStart: intStart, intEnd: intEnd)
            if m >= 309 { i = start; throw fail("number out of range") }
            if m <= -400 { return .number(negative ? -0.0 : 0) }
        }
        guard let d = Double(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<i]), as: UTF8.self)) else { throw fail("invalid number") }
        // 1e999 is valid JSON but no Double: as infinity it would serialise as null and trap in Int(_:).
        guard d.isFinite else { i = start; throw fail("number out of range") }
        return .number(d)
    }

    /// The decimal exponent of the number just scanned (ending at `i`): its value is in [10^m, 10^(m+1));
    /// `Int.min` for zero.
    func magnitude(intStart: Int, intEnd: Int) -> Int {
        var m: Int
        var k = intEnd
        if !(intEnd - intStart == 1 && bytes[intStart] == 0x30) {
            m = intEnd - intStart - 1
        } else {
            // 0.000ddd: the zeros after the point count down; no other digit: the number is 0.
            guard k < i, bytes[k] == UInt8(ascii: ".") else { return .min }
            k += 1
            var zeros = 0
            while k < i, bytes[k] == 0x30 { zeros += 1; k += 1 }
            guard k < i, bytes[k] >= 0x31, bytes[k] <= 0x39 else { return .min }
            m = -(zeros + 1)
        }
        while k < i, bytes[k] != UInt8(ascii: "e"), bytes[k] != UInt8(ascii: "E") { k += 1 }
        if k < i {
            k += 1
            var sign = 1
            if bytes[k] == UInt8(ascii: "-") { sign = -1; k += 1 } else if bytes[k] == UInt8(ascii: "+") { k += 1 }
            var e = 0
            while k < i { e = min(e * 10 + Int(bytes[k] - 0x30), 100_000_000); k += 1 }
            if m != .min { m += sign * e }
        }
        return m
    }

    /// Exactly four hex digits (no sign: `UInt32(_:radix:)` would take `+041`).
    mutating func hex4() throws(JSONValue.ParseError) -> UInt32 {
        guard i + 4 <= bytes.count else { throw fail("invalid \\u escape") }
        var v: UInt32 = 0
        for b in bytes[i..<(i + 4)] {
            let d: UInt8
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = b - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = b - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = b - UInt8(ascii: "A") + 10
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | UInt32(d)
        }
        i += 4
        return v
    }

    mutating func parseString() throws(JSONValue.ParseError) -> String {
        i += 1   // opening quote
        // Without an escape (nearly always), the String is made from the bytes in place, validated once.
        var j = i
        while j < bytes.count, bytes[j] != UInt8(ascii: "\""), bytes[j] != UInt8(ascii: "\\"), bytes[j] >= 0x20 { j += 1 }
        if j < bytes.count, bytes[j] == UInt8(ascii: "\"") {
            guard let s = String(validating: UnsafeBufferPointer(rebasing: bytes[i..<j]), as: UTF8.self) else {
                i = j + 1
                throw fail("invalid UTF-8")
            }
            i = j + 1
            return s
        }
        var out: [UInt8] = Array(bytes[i..<j])
        i = j
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

extension JSONValue {
    /// Appends `utf8` (valid UTF-8) to `buf` as a JSON string, quotes included: the writer's own escaping,
    /// for JSON built from bytes (the console's frames of MQTT payloads).
    public static func appendString(_ utf8: some Collection<UInt8>, to buf: inout [UInt8]) {
        var w = JSONWriter()
        swap(&w.out, &buf)
        w.string(utf8: utf8)
        swap(&w.out, &buf)
    }
}
