#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The bridge's requests as the engine serves them: read (`BridgeAPI.parse`), answered by a child of
/// `run` so that a request that waits on an adapter holds up nothing else, and responded to on
/// `bridge/response/<path>` (`BridgeAPI.response`), and on an MQTT 5 client's Response Topic when it gave one.
extension BridgeEngine {
    func handleRequest(path: String, payload: [UInt8], replyTo: ReplyTo? = nil, origin: RequestOrigin = .mqtt) {
        // Only an adapter's own requests, the handler's (management) and the groups' and scenes' read the body;
        // the bridge's read the transaction alone. Paths are matched without case (`answer`), so the adapter is
        // looked up so too.
        let lower = path.lowercased()
        let parts = lower.split(separator: "/", maxSplits: 1)
        let handled = requestHandler?.handles(lower) == true
        // The management requests' bound, and the same for those that write groups and scenes.
        let bounded = handled ? requestHandler : groupCore.editor.flatMap { $0.handles(lower) ? $0 : nil }
        if let bound = bounded?.maxPayload, payload.count > bound {
            Bounds.hit("request_payload")
            let message = "request \(path): payload of \(payload.count) bytes is over the \(bound) bytes a management request may have; nothing was changed"
            respond(path, .failure(AdapterError(message)), transaction: nil, replyTo: replyTo)
            reportError(message, topic: scheme.bridge("request/\(path)"), transaction: nil, resultTopic: nil)
            return
        }
        let body = handled || parts.count == 2 && entries[String(parts[0])] != nil || GroupCore.requestPaths.contains(lower)
        switch BridgeAPI.parse(payload, body: body) {
        case .failure(let e):
            respond(path, .failure(e), transaction: nil, replyTo: replyTo)
            reportError(e.message, topic: scheme.bridge("request/\(path)"), transaction: nil, resultTopic: nil)
        case .success(let (body, transaction)):
            // Answered by a child of `run`: a request that waits on an adapter holds up nothing else.
            if case .terminated = childJobQueue.yield(.request(path: path, body: body, transaction: transaction, replyTo: replyTo, origin: origin,
                                                               size: payload.count)) {
                respond(path, .failure(AdapterError("the bridge is stopping")), transaction: transaction, replyTo: replyTo)
            }
        }
    }

    func serveRequest(path: String, body: JSONValue, transaction: JSONValue?, replyTo: ReplyTo?, origin: RequestOrigin = .mqtt, size: Int = 0) async {
        let result: Result<JSONValue, AdapterError>
        // A request may ask an adapter (a refresh, a Home Assistant call, LIFX scenes): none has started before
        // the upstream lease begins (hot standby's hand-over pause), so it waits for that like the commands.
        await UpstreamLease.begun()
        do {
            let req = BridgeRequest(path: path.lowercased(), body: body, origin: origin, size: size)
            if let handler = requestHandler, handler.handles(req.path) {
                result = .success(try await handler.handle(req))
            } else if let data = try await groupRequest(req) {
                result = .success(data)
            } else {
                result = .success(try await answer(path: path.lowercased(), body: body))
            }
        } catch let e as AdapterError {
            result = .failure(e)
        } catch {
            result = .failure(AdapterError("\(error)"))
        }
        if case .failure(let e) = result {
            reportError("request \(path) failed: \(e.message)", topic: scheme.bridge("request/\(path)"), transaction: nil, resultTopic: nil)
        }
        respond(path, result, transaction: transaction, replyTo: replyTo)
    }

    /// On `bridge/response/<path>` always (3.1.1 clients and scripts read it there), and on the v5 client's
    /// Response Topic with its Correlation Data.
    func respond(_ path: String, _ result: Result<JSONValue, AdapterError>, transaction: JSONValue?, replyTo: ReplyTo?) {
        publishAnswer(BridgeAPI.response(result, transaction: transaction), on: scheme.response(path), replyTo: replyTo)
    }

    /// An answer (a result, a response): on its own topic when it has one (`on`), and on the v5 client's Response
    /// Topic with its Correlation Data; once, with the Correlation Data, when the two are one topic. QoS 1, not
    /// retained, expiring after `mqtt.message_expiry.results` (docs/topics.md "MQTT 5").
    func publishAnswer(_ payload: JSONValue, on topic: String?, replyTo: ReplyTo?) {
        let bytes = payload.bytes
        var batch: [Publication] = []
        if let topic {
            var p = Publication(topic, bytes, qos: 1, retain: false)
            p.properties = MessageProperties(expiry: settings.expiry.results, correlationData: replyTo?.topic == topic ? replyTo?.correlationData : nil)
            batch.append(p)
        }
        if let replyTo, replyTo.topic != topic {
            var p = Publication(replyTo.topic, bytes, qos: 1, retain: false)
            p.properties = MessageProperties(expiry: settings.expiry.results, correlationData: replyTo.correlationData)
            batch.append(p)
        }
        transport.publish(batch)
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
            throw AdapterError("unknown request '\(path)' (known: \((BridgeAPI.known + (requestHandler?.paths ?? [])).joined(separator: ", ")))")
        }
    }
}
