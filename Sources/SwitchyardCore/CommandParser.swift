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
    public static func read(payload: [UInt8], field: String?,
                            bareWords: [String: [String: JSONValue]] = stateWords) -> Result<Parsed, Failure> {
        let text = String(decoding: payload, as: UTF8.self).trimmingWhitespace()
        if let field {
            if text.isEmpty { return .failure(Failure(message: "empty payload for field '\(field)'")) }
            let value = (try? JSONValue.parse(text)) ?? .string(text)
            return .success(Parsed(fields: [field: value], transaction: nil))
        }
        let expected = bareWords.isEmpty ? "a JSON object" : "a JSON object or \(bareWords.keys.sorted().joined(separator: ", "))"
        if text.isEmpty { return .failure(Failure(message: "empty payload: expected \(expected)")) }
        if let fields = bareWords[text.uppercased()] { return .success(Parsed(fields: fields, transaction: nil)) }
        let value: JSONValue
        do {
            value = try JSONValue.parse(text)
        } catch {
            return .failure(Failure(message: "malformed JSON: expected \(expected), got '\(text.excerpt())'"))
        }
        guard case .object(var o) = value else {
            return .failure(Failure(message: "expected \(expected), got \(value.excerpt)"))
        }
        let transaction = o.removeValue(forKey: "transaction")
        if let problem = transactionProblem(transaction) { return .failure(Failure(message: problem)) }
        if o.isEmpty { return .failure(Failure(message: "no fields to set", transaction: transaction)) }
        return .success(Parsed(fields: o, transaction: transaction))
    }

    static let problemsShown = 4

    /// Validates every field against the device's capabilities; all problems are reported in one message.
    public static func validate(_ fields: [String: JSONValue], against device: DeviceDescriptor) -> Result<[String: JSONValue], Failure> {
        var out: [String: JSONValue] = [:]
        var problems: [String] = []
        let writable = device.capabilities.filter(\.writable).map(\.name)
        for key in fields.keys.sorted() {
            guard let cap = device.capability(key) else {
                problems.append("unknown field '\(key.excerpt(40))' (writable: \(writable.joined(separator: ", ")))")
                continue
            }
            do {
                out[key] = try cap.validate(fields[key]!)
            } catch {
                problems.append(error.description)
            }
        }
        // A payload of a thousand bad fields makes one message of a few problems, not of a thousand.
        if problems.count > Self.problemsShown {
            problems = problems.prefix(Self.problemsShown) + ["and \(problems.count - Self.problemsShown) more problems"]
        }
        if !problems.isEmpty { return .failure(Failure(message: problems.joined(separator: "; "))) }
        return .success(out)
    }
}

