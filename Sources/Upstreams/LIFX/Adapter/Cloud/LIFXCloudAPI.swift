#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// The LIFX cloud HTTP API's requests and answers (docs/upstreams/lifx-cloud.md): pure shapes, unit-tested.
enum LIFXCloudAPI {
    /// The method, path and body of a queued batch: one `PUT /lights/states` for several sets, else the
    /// op's own endpoint.
    static func request(for batch: [LIFXOp]) -> (method: String, path: String, body: JSONValue) {
        if batch.count > 1 {
            let states: [JSONValue] = batch.map { op in
                guard case .set(let s) = op.kind else { return .null }
                var o = s.body
                o["selector"] = .string(op.selector)
                return .object(o)
            }
            return ("PUT", "/lights/states", ["states": .array(states)])
        }
        let op = batch[0]
        let sel = encode(op.selector)
        switch op.kind {
        case .set(let s): return ("PUT", "/lights/\(sel)/state", .object(s.body))
        case .delta(let d): return ("POST", "/lights/\(sel)/state/delta", .object(d.body))
        case .effect(let name, let body): return ("POST", "/lights/\(sel)/effects/\(name)", .object(body))
        case .scene(let uuid, let duration): return ("PUT", "/scenes/scene_id:\(uuid)/activate", ["duration": .number(duration)])
        }
    }

    /// What the cloud said about one op of a batch: an error for the whole op, or each light's status.
    struct OpResult: Equatable {
        var error: String?
        var lights: [(id: String, status: String)]
        static func == (a: OpResult, b: OpResult) -> Bool {
            a.error == b.error && a.lights.map(\.id) == b.lights.map(\.id) && a.lights.map(\.status) == b.lights.map(\.status)
        }
    }

    /// Reads a 200/207 answer: `{"results": [{id, status}]}`, or for `/lights/states` one entry per op,
    /// each with its own `results` or an `error`. A light without a status counts as `ok`.
    static func results(_ json: JSONValue?, ops: Int, multi: Bool) -> [OpResult] {
        let results = json?["results"]?.arrayValue
        return (0..<ops).map { i in
            var perLight = results
            if multi {
                let entry = results.flatMap { i < $0.count ? $0[i] : nil }
                if case .string(let e)? = entry?["error"] { return OpResult(error: "LIFX: \(e)", lights: []) }
                perLight = entry?["results"]?.arrayValue
            }
            let lights = (perLight ?? []).compactMap { r -> (id: String, status: String)? in
                guard case .string(let id) = r["id"] else { return nil }
                return (id, r["status"]?.stringValue ?? "ok")
            }
            return OpResult(error: nil, lights: lights)
        }
    }

    static func describe(status: Int, json: JSONValue?, selector: String) -> String {
        let detail = json?["error"]?.stringValue
        switch status {
        case 401: return "LIFX refused the token (HTTP 401 Unauthorized): check lifx.token"
        case 403: return "LIFX token lacks permission (HTTP 403): it needs the remote_control scope"
        case 404: return "no LIFX light matched '\(selector)' (HTTP 404)"
        case 422, 400: return "LIFX rejected the request (HTTP \(status)): \(detail ?? "malformed parameters")"
        default: return "LIFX answered HTTP \(status)\(detail.map { ": \($0)" } ?? "")"
        }
    }

    /// Selectors go in the path: labels may hold spaces; `:` and `,` stay as LIFX documents them.
    static func encode(_ selector: String) -> String {
        selector.percentEncoded(keeping: ":,|")
    }
}
