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

/// The cloud's JSON for lights, scenes and changes (docs/upstreams/lifx-cloud.md §1.4, §1.10): the model's
/// values read from it and written into it.
extension LIFXLight {
    /// Parses one element of `GET /lights/:selector` (docs/upstreams/lifx-cloud.md §1.4); nil without an id.
    static func parse(_ j: JSONValue) -> LIFXLight? {
        guard case .string(let id) = j["id"], !id.isEmpty else { return nil }
        var l = LIFXLight(id: id)
        if case .string(let s) = j["label"] { l.label = s }
        if case .bool(let b) = j["connected"] { l.connected = b }
        if case .string(let p) = j["power"] { l.on = p == "on" }
        if let b = j["brightness"]?.doubleValue { l.brightness = percent(b) }
        if let c = j["color"] {
            if let h = c["hue"]?.doubleValue { l.hue = degrees(h) }
            if let s = c["saturation"]?.doubleValue { l.saturation = percent(s) }
            if let k = c["kelvin"]?.doubleValue { l.kelvin = Int(k.rounded()) }
        }
        l.group = ref(j["group"])
        l.location = ref(j["location"])
        if case .string(let e) = j["effect"] { l.effect = e.lowercased() }
        if case .string(let s) = j["last_seen"] { l.lastSeen = s }
        if let p = j["product"] {
            if case .string(let n) = p["name"] { l.model = n }
            if let c = p["capabilities"] {
                if case .bool(let v) = c["has_color"] { l.caps.hasColor = v }
                if case .bool(let v) = c["has_variable_color_temp"] { l.caps.hasVariableColorTemp = v }
                if case .bool(let v) = c["has_ir"] { l.caps.hasIR = v }
                if case .bool(let v) = c["has_multizone"] { l.caps.hasMultizone = v }
                if case .bool(let v) = c["has_matrix"] { l.caps.hasMatrix = v }
                if let v = c["min_kelvin"]?.doubleValue { l.caps.minKelvin = Int(v) }
                if let v = c["max_kelvin"]?.doubleValue { l.caps.maxKelvin = Int(v) }
            }
        }
        return l
    }

    static func ref(_ j: JSONValue?) -> LIFXRef? {
        guard let j, case .string(let id) = j["id"] else { return nil }
        var name = id
        if case .string(let n) = j["name"] { name = n }
        return LIFXRef(id: id.lowercased(), name: name)
    }
}

extension LIFXSet {
    /// A `PUT /lights/:selector/state` body or one `states[]` entry (without its selector).
    var body: [String: JSONValue] {
        var o: [String: JSONValue] = ["duration": .number(duration)]
        if let p = power { o["power"] = p ? "on" : "off" }
        if let c = color.wireString { o["color"] = .string(c) }
        if let b = brightness ?? color.brightness { o["brightness"] = .number((b * 10_000).rounded() / 10_000) }
        return o
    }
}

extension LIFXDelta {
    /// A `POST /lights/:selector/state/delta` body.
    var body: [String: JSONValue] {
        var o: [String: JSONValue] = ["duration": .number(duration)]
        if let p = power { o["power"] = p ? "on" : "off" }
        if let b = brightness { o["brightness"] = .number((b * 10_000).rounded() / 10_000) }
        if let k = kelvin { o["kelvin"] = JSONValue(k) }
        return o
    }
}

extension LIFXScene {
    /// One element of `GET /scenes`; nil without a uuid.
    static func parse(_ j: JSONValue) -> LIFXScene? {
        guard case .string(let uuid) = j["uuid"] else { return nil }
        var name = uuid
        if case .string(let n) = j["name"] { name = n }
        var states: [State] = []
        for s in j["states"]?.arrayValue ?? [] {
            guard case .string(let sel) = s["selector"] else { continue }
            var set = LIFXSet(duration: 0)
            if case .string(let p) = s["power"] { set.power = p == "on" }
            if let b = s["brightness"]?.doubleValue { set.brightness = b }
            if let c = s["color"] {
                set.color.kelvin = c["kelvin"]?.doubleValue.map { Int($0.rounded()) }
                set.color.hue = c["hue"]?.doubleValue
                set.color.saturation = c["saturation"]?.doubleValue
            }
            states.append(State(selector: sel, set: set))
        }
        return LIFXScene(uuid: uuid, name: name, states: states)
    }
}
