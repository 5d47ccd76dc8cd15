#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore
import SwitchyardHTTP

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

/// The adapter's calls to the cloud: every request within the budget, the answers taken in.
extension LIFXAdapter {
    struct CallResult {
        var status: Int
        var headers: [String: String]
        var json: JSONValue?
    }

    /// One request within the budget. The token travels only in the Authorization header.
    func call(_ method: String, _ path: String, _ body: JSONValue?, reserve: Int) async throws(AdapterError) -> CallResult {
        while true {
            let at = budget.readyAt(clock.now(), reserve: reserve)
            if at <= clock.now() { break }
            await pause(until: at, wakeable: false)
            if Task.isCancelled { throw AdapterError("cancelled") }
        }
        guard let http else { throw AdapterError("the LIFX adapter is not running") }
        budget.record(clock.now())
        sentRequests += 1
        var headers = [("Authorization", "Bearer \(settings.token ?? "")"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let request = HTTPRequest(method: method, url: settings.apiURL + path, headers: headers,
                                  body: body.map { Array($0.serialized.utf8) }, timeout: settings.requestTimeout)
        do {
            let r = try await http.send(request)
            budget.update(headers: r.headers, now: clock.now(), wallNow: Date())
            let ok = (200..<300).contains(r.status)
            await context?.recordRequest(error: ok ? nil : "\(method) \(path): HTTP \(r.status)")
            return CallResult(status: r.status, headers: r.headers, json: r.body.isEmpty ? nil : try? JSONValue.parse(r.body))
        } catch {
            let message = "LIFX cloud unreachable: \(error)"
            await context?.recordRequest(error: message)
            throw AdapterError(message)
        }
    }

    func describe(_ r: CallResult, selector: String) -> String { LIFXCloudAPI.describe(status: r.status, json: r.json, selector: selector) }

    /// Sends a batch and takes the answer in: results, a 429 wait, a retry or the failure.
    func send(_ batch: [LIFXOp]) async {
        let (method, path, body) = LIFXCloudAPI.request(for: batch)
        let r: CallResult
        do {
            r = try await call(method, path, body, reserve: 0)
            queue.answered()
        } catch {
            // Answered (or failed): no longer in flight, so a revert does not re-apply the op itself.
            queue.answered()
            await failOrRetry(batch, error.description)
            return
        }
        switch r.status {
        case 200, 202, 207:
            await handleResults(batch, LIFXCloudAPI.results(r.json, ops: batch.count, multi: batch.count > 1))
        case 429:
            budget.exhausted(headers: r.headers, now: clock.now(), wallNow: Date())
            let wait = max(0, ((budget.resetAt ?? clock.now()) - clock.now()).seconds)
            await context?.log(.warning, "LIFX rate limit reached (HTTP 429); waiting \(Int(wait.rounded(.up))) s for the reset, then sending again")
            queue.requeue(batch)
        case 500...599:
            await failOrRetry(batch, "LIFX cloud error (HTTP \(r.status))")
        default:
            if r.status == 401 || r.status == 403 {
                await context?.setStatus(.error(describe(r, selector: batch[0].selector)))
            }
            for op in batch { await fail(op, describe(r, selector: op.selector)) }
        }
        await reportMetrics()
    }

    /// Only absolute sets are retried (3 attempts, backoff); anything else fails at once.
    func failOrRetry(_ batch: [LIFXOp], _ message: String) async {
        if queue.retry(batch, now: clock.now()) { return }
        for op in batch { await fail(op, "\(message); \(op.isSet ? "gave up after 3 attempts" : "not retried (not an absolute set)")") }
    }

    func fail(_ op: LIFXOp, _ message: String) async {
        revert(op.previous)
        await publish(Set(op.previous.keys))
        finish(op.tickets, .failure(AdapterError("\(op.label): \(message)")))
    }

    func handleResults(_ batch: [LIFXOp], _ results: [LIFXCloudAPI.OpResult]) async {
        for (op, result) in zip(batch, results) {
            if let e = result.error {
                await fail(op, e)
                continue
            }
            var failed: [String] = []
            var okCount = 0
            var touched: Set<String> = []
            for (lid, status) in result.lights {
                guard let light = lights[lid] else { continue }
                let reachable = status == "ok" || status == "accepted"
                if reachable { okCount += 1 } else {
                    failed.append("\(light.label.isEmpty ? lid : light.label) \(status)")
                    if let v = op.previous[lid] { revert([lid: v]) }
                }
                lights[lid]?.connected = reachable
                touched.insert(lid)
            }
            await publish(touched)
            if failed.isEmpty {
                finish(op.tickets, .success(()))
            } else if okCount == 0 {
                finish(op.tickets, .failure(AdapterError("\(op.label): \(failed.joined(separator: ", ")) (LIFX did not reach the light)")))
            } else {
                await context?.log(.warning, "\(op.label): \(failed.joined(separator: ", ")); the other lights accepted the command")
                finish(op.tickets, .success(()))
            }
        }
    }

    /// Lists lights (and scenes when due), declares devices and publishes what changed.
    func pollOnce() async -> Bool {
        do {
            let r = try await call("GET", "/lights/all", nil, reserve: 0)
            guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: "all")) }
            let listed = list.compactMap(LIFXLight.parse)
            if scenesDue || polls % max(1, settings.scenesEvery) == 0 {
                try await listScenes(declare: false)
                scenesDue = false
            }
            polls += 1
            // A light the cloud stops listing goes only when the LAN does not see it either.
            let connected = Dictionary(listed.map { ($0.id, $0.connected) }, uniquingKeysWith: { a, _ in a })
            for id in presence.cloudListed(connected, now: clock.now()) {
                lights[id] = nil
                lanDevices[id] = nil   // heard again, it is identified again
            }
            for l in listed { merge(l) }
            await declare()
            await publish(Set(lights.keys))
            for s in scenes.values { await context?.update("scene_\(s.uuid)", sceneFields(s)) }
            lastPollError = nil
            await context?.setStatus(.running)
            await reportMetrics()
            return true
        } catch {
            let message = (error as? AdapterError)?.message ?? "\(error)"
            lastPollError = message
            await context?.setStatus(.error("LIFX listing failed: \(message)"))
            if pollFailures >= 2 {
                // Unreachable over the cloud; what the LAN hears stays available.
                let now = clock.now()
                for id in lights.keys where !presence.lanSees(id, now: now) { await context?.setAvailable(id, false) }
                for d in groupDescriptors() where !((try? target(d.id).lights.contains { presence.lanSees($0, now: now) }) ?? false) {
                    await context?.setAvailable(d.id, false)
                }
            }
            return false
        }
    }

    func listScenes(declare: Bool = true) async throws {
        let r = try await call("GET", "/scenes", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: "scenes")) }
        scenes = Dictionary(list.compactMap(LIFXScene.parse).map { ($0.uuid, $0) }, uniquingKeysWith: { a, _ in a })
        if declare {
            await self.declare()
            for s in scenes.values { await context?.update("scene_\(s.uuid)", sceneFields(s)) }
        }
    }
}
