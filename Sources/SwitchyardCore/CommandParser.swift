#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Turns a `/set` or `/set/<field>` payload into validated fields (docs/topics.md "Devices").
public enum CommandParser {
    public struct Parsed: Sendable, Equatable {
        public var fields: [String: JSONValue]
        public var transaction: JSONValue?
    }

    public struct Failure: Error, Sendable, Equatable {
        public var message: String
        /// The transaction, when it could be read before the payload failed.
        public var transaction: JSONValue?
    }

    /// A `transaction` is echoed on the result (and on request responses) only up to this many bytes of
    /// JSON; a longer one is refused, so nobody can make the bridge hold and repeat large values.
    public static let maxTransactionBytes = 256

    /// The words for a transaction over `maxTransactionBytes`, or nil when it is fine.
    public static func transactionProblem(_ t: JSONValue?) -> String? {
        guard let t else { return nil }
        let n = t.bytes.count
        guard n > maxTransactionBytes else { return nil }
        Bounds.hit("transaction")
        return "transaction of \(n) bytes is over \(maxTransactionBytes); refused"
    }

    public static let stateWords: [String: [String: JSONValue]] = [
        "ON": ["state": "ON"], "OFF": ["state": "OFF"], "TOGGLE": ["state": "TOGGLE"],
    ]

    /// Reads the raw fields of a command: a JSON object, or a bare word for `/set` (ON/OFF/TOGGLE, or
    /// what the device declares in `bareWords`); a plain value (numbers and JSON literals parsed,
    /// anything else taken as a string) for `/set/<field>`.
    ///
    /// Cheap for what cannot be a command (a flood must not cost more than it takes to receive): the
    /// payload is read as bytes, never as one String; a bare word is looked for only in a payload as short as
    /// the longest word; a JSON payload is validated as it is read, and of an object only the members whose
    /// key `keep` accepts (the device's fields; `transaction` always) are built: the others stand in the
    /// result as `null`, enough for `validate` to name them as unknown. A value that is not an object is
    /// quoted from its first bytes, never built whole.
    public static func read(payload: [UInt8], field: String?, bareWords: [String: [String: JSONValue]] = stateWords,
                            keep: (String) -> Bool = { _ in true }) -> Result<Parsed, Failure> {
        let bytes = trimmed(payload)
        if let field {
            if bytes.isEmpty { return .failure(Failure(message: "empty payload for field '\(field)'")) }
            let value = (try? JSONValue.parse(bytes)) ?? .string(String(decoding: bytes, as: UTF8.self))
            return .success(Parsed(fields: [field: value], transaction: nil))
        }
        let expected = bareWords.isEmpty ? "a JSON object" : "a JSON object or \(bareWords.keys.sorted().joined(separator: ", "))"
        if bytes.isEmpty { return .failure(Failure(message: "empty payload: expected \(expected)")) }
        // A word's upper case is at least half as long (ı → I): a payload three times the longest word is none.
        if bytes.count <= 3 * (bareWords.keys.map(\.utf8.count).max() ?? 0),
           let fields = bareWords[String(decoding: bytes, as: UTF8.self).uppercased()] {
            return .success(Parsed(fields: fields, transaction: nil))
        }
        let document: JSONValue.Document
        do {
            document = try JSONValue.parse(bytes) { $0 == "transaction" || keep($0) }
        } catch {
            let quoted = String(decoding: bytes.prefix(JSONValue.excerptBytes + 8), as: UTF8.self).excerpt()
            return .failure(Failure(message: "malformed JSON: expected \(expected), got '\(quoted)'"))
        }
        guard case .object(var o) = document else {
            if case .other(let excerpt) = document { return .failure(Failure(message: "expected \(expected), got \(excerpt)")) }
            return .failure(Failure(message: "expected \(expected)"))
        }
        let transaction = o.removeValue(forKey: "transaction")
        if let problem = transactionProblem(transaction) { return .failure(Failure(message: problem)) }
        if o.isEmpty { return .failure(Failure(message: "no fields to set", transaction: transaction)) }
        return .success(Parsed(fields: o, transaction: transaction))
    }

    /// The payload as `String(decoding:).trimmingWhitespace()` would give it (invalid UTF-8 repaired,
    /// Unicode whitespace trimmed), without making a String of it in the common case: ASCII whitespace is
    /// trimmed off the bytes, and only a payload with a byte beyond ASCII goes through text.
    static func trimmed(_ payload: [UInt8]) -> [UInt8] {
        func space(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0D) }
        var lo = 0, hi = payload.count
        while lo < hi, space(payload[lo]) { lo += 1 }
        while hi > lo, space(payload[hi - 1]) { hi -= 1 }
        let ascii = payload.withUnsafeBufferPointer { b in
            var k = lo
            while k < hi { if b[k] >= 0x80 { return false }; k += 1 }
            return true
        }
        if ascii { return Array(payload[lo..<hi]) }
        return Array(String(decoding: payload[lo..<hi], as: UTF8.self).trimmingWhitespace().utf8)
    }

    static let problemsShown = 4

    /// Validates every field against the device's capabilities; all problems are reported in one message
    /// (the first `problemsShown` in words, the rest counted: a thousand unknown fields cost no thousand messages).
    public static func validate(_ fields: [String: JSONValue], against device: DeviceDescriptor) -> Result<[String: JSONValue], Failure> {
        var out: [String: JSONValue] = [:]
        var problems: [String] = []
        var more = 0
        func problem(_ words: @autoclosure () -> String) {
            if problems.count < Self.problemsShown { problems.append(words()) } else { more += 1 }
        }
        for key in fields.keys.sorted() {
            guard let cap = device.capability(key) else {
                problem("unknown field '\(key.excerpt(40))' (writable: \(device.capabilities.filter(\.writable).map(\.name).joined(separator: ", ")))")
                continue
            }
            do {
                out[key] = try cap.validate(fields[key]!)
            } catch {
                problem(error.description)
            }
        }
        // A payload of a thousand bad fields makes one message of a few problems, not of a thousand.
        if more > 0 { problems.append("and \(more) more problems") }
        if !problems.isEmpty { return .failure(Failure(message: problems.joined(separator: "; "))) }
        return .success(out)
    }
}

