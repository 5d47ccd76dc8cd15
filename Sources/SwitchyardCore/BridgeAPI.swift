#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bridge's own requests (`<base>/bridge/request/<path>` → `<base>/bridge/response/<path>`): the
/// pure parts, unit-tested apart from the engine.
public enum BridgeAPI {
    public static let known = ["health_check", "devices/refresh", "config/reload", "republish", "scene/recall", "scene/store", "scene/remove",
                               "group/add", "group/remove", "group/rename", "group/members/add", "group/members/remove"]

    /// A request's payload: empty or a JSON value, and its `transaction` if any. Without `body` (a request
    /// that reads nothing but the transaction), the payload is only validated and its transaction built.
    public static func parse(_ payload: [UInt8], body: Bool = true) -> Result<(body: JSONValue, transaction: JSONValue?), AdapterError> {
        let bytes = CommandParser.trimmed(payload)
        guard !bytes.isEmpty else { return .success((.object([:]), nil)) }
        let v: JSONValue
        do {
            if body {
                v = try JSONValue.parse(bytes)
            } else if case .object(let o) = try JSONValue.parse(bytes, keeping: { $0 == "transaction" }) {
                v = .object(o.filter { $0.key == "transaction" })
            } else {
                v = .object([:])
            }
        } catch {
            return .failure(AdapterError("malformed JSON in request"))
        }
        if let problem = CommandParser.transactionProblem(v["transaction"]) { return .failure(AdapterError(problem)) }
        return .success((v, v["transaction"]))
    }

    /// What `bridge/response/<path>` carries.
    public static func response(_ result: Result<JSONValue, AdapterError>, transaction: JSONValue?) -> JSONValue {
        var o: [String: JSONValue]
        switch result {
        case .success(let data): o = ["status": "ok", "data": data]
        case .failure(let e):
            o = ["status": "error", "error": .string(e.message)]
            if let d = e.details { o["details"] = d }
        }
        if let transaction { o["transaction"] = transaction }
        return .object(o)
    }

    /// One adapter's entry in `bridge/health` (its own figures, `metrics`, come first and are overridden).
    public static func adapterHealth(status: AdapterStatus, devices: Int, requests: Int, errors: Int, lastError: String?,
                                     lastOK: Date?, metrics: [String: JSONValue] = [:]) -> JSONValue {
        var entry = metrics
        entry["status"] = .string(status.description)
        entry["devices"] = JSONValue(devices)
        entry["requests"] = JSONValue(requests)
        entry["errors"] = JSONValue(errors)
        entry["last_error"] = lastError.map(JSONValue.string) ?? .null
        entry["last_ok"] = lastOK.map { .string(Timestamp.rfc3339($0)) } ?? .null
        return .object(entry)
    }

    /// The `bridge/health` payload.
    public static func health(uptime: Double, rss: Int?, transport s: TransportStats, adapters: [String: JSONValue],
                              limits: [String: Int] = [:]) -> JSONValue {
        [
            "uptime": .number(uptime),
            "rss_bytes": rss.map { JSONValue($0) } ?? .null,
            "mqtt": [
                "connected": .bool(s.connected), "outbox": JSONValue(s.outbox), "dropped": JSONValue(s.dropped),
                "outbox_event_bytes": JSONValue(s.outboxEventBytes),
                "published": JSONValue(s.published), "received": JSONValue(s.received), "connects": JSONValue(s.connects),
                "inbound_pauses": JSONValue(s.inboundPauses), "oversize": JSONValue(s.oversize), "expired": JSONValue(s.expired),
                // What the broker's MQTT 5 CONNACK said (null: nothing, or 3.1.1).
                "broker": [
                    "receive_maximum": s.receiveMaximum.map { JSONValue($0) } ?? .null,
                    "maximum_packet_size": s.maximumPacketSize.map { JSONValue($0) } ?? .null,
                    "topic_alias_maximum": s.topicAliasMaximum.map { JSONValue($0) } ?? .null,
                ],
            ],
            "limits": .object(limits.mapValues { JSONValue($0) }),
            "adapters": .object(adapters),
        ]
    }
}
