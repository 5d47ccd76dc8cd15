#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bridge's own requests (`<base>/bridge/request/<path>` → `<base>/bridge/response/<path>`): the
/// pure parts, unit-tested apart from the engine.
public enum BridgeAPI {
    public static let known = ["health_check", "devices/refresh", "config/reload", "republish"]

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
        case .failure(let e): o = ["status": "error", "error": .string(e.message)]
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
                "inbound_pauses": JSONValue(s.inboundPauses), "oversize": JSONValue(s.oversize),
            ],
            "limits": .object(limits.mapValues { JSONValue($0) }),
            "adapters": .object(adapters),
        ]
    }
}

extension BridgeEngine {
    func handleRequest(path: String, payload: [UInt8]) {
        // Only an adapter's own requests read the body; the bridge's read the transaction alone. Paths are
        // matched without case (`answer`), so the adapter is looked up so too.
        let parts = path.lowercased().split(separator: "/", maxSplits: 1)
        switch BridgeAPI.parse(payload, body: parts.count == 2 && entries[String(parts[0])] != nil) {
        case .failure(let e):
            respond(path, .failure(e), transaction: nil)
            reportError(e.message, topic: scheme.bridge("request/\(path)"), transaction: nil, resultTopic: nil)
        case .success(let (body, transaction)):
            // Answered by a child of `run`: a request that waits on an adapter holds up nothing else.
            if case .terminated = childJobQueue.yield(.request(path: path, body: body, transaction: transaction)) {
                respond(path, .failure(AdapterError("the bridge is stopping")), transaction: transaction)
            }
        }
    }

    func serveRequest(path: String, body: JSONValue, transaction: JSONValue?) async {
        let result: Result<JSONValue, AdapterError>
        do {
            result = .success(try await answer(path: path.lowercased(), body: body))
        } catch let e as AdapterError {
            result = .failure(e)
        } catch {
            result = .failure(AdapterError("\(error)"))
        }
        if case .failure(let e) = result {
            reportError("request \(path) failed: \(e.message)", topic: scheme.bridge("request/\(path)"), transaction: nil, resultTopic: nil)
        }
        respond(path, result, transaction: transaction)
    }

    func respond(_ path: String, _ result: Result<JSONValue, AdapterError>, transaction: JSONValue?) {
        transport.publish(scheme.response(path), json: BridgeAPI.response(result, transaction: transaction), qos: 1, retain: false)
    }

    func answer(path: String, body: JSONValue) async throws -> JSONValue {
        switch path {
        case "health_check":
            return ["healthy": true, "uptime": .number(uptime)]
        case "devices/refresh":
            var refreshed: [JSONValue] = []
            for id in adapterOrder {
                guard let entry = entries[id] else { continue }
                try await entry.adapter.refreshAll(context: entry.hosted.context)
                refreshed.append(.string(id))
            }
            return ["adapters": .array(refreshed), "devices": JSONValue(entries.values.reduce(0) { $0 + $1.registry.devices.count })]
        case "config/reload":
            guard let reloader else { throw AdapterError("config reload is not available") }
            return try await reloader()
        case "republish":
            republishAll()
            return ["republished": true]
        default:
            let parts = path.split(separator: "/", maxSplits: 1).map(String.init)
            if parts.count == 2, let entry = entries[parts[0]],
               let data = try await entry.adapter.request(path: parts[1], payload: body, context: entry.hosted.context) {
                return data
            }
            throw AdapterError("unknown request '\(path)' (known: \(BridgeAPI.known.joined(separator: ", ")))")
        }
    }
}
