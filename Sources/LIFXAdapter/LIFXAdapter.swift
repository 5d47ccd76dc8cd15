#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore
import SwitchyardHTTP

public struct LIFXSettings: Sendable, Equatable {
    public var token: String?
    public var apiURL = "https://api.lifx.com/v1"
    public var pollInterval = 30.0
    public var defaultTransition = 0.5
    /// An idle queue sends at once; commands arriving within this interval after a send wait and merge.
    public var minInterval = 0.5
    /// Light id → friendly name.
    public var names: [String: String] = [:]
    public var groups = true
    public var locations = true
    public var requestTimeout = 10.0
    /// Scenes are re-listed every this many polls (and on devices/refresh).
    public var scenesEvery = 10
    /// First retry delay after a 5xx or timeout (doubles, 3 attempts in all).
    public var retryDelay = 1.0
    public var verifyTLS = true
    public init() {}
}

/// LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API (lifx.md §1–§2).
///
/// Commands are applied to the published state at once (optimistic), then queued. One request is on
/// the wire at a time; a command for a target that already has a queued request merges into it (last
/// value wins per field), requests to different lights sent together go as one `PUT /lights/states`,
/// and nothing is sent within `min_interval` of the previous send. The rate budget is never exceeded:
/// polls keep a reserve for commands, a 429 waits for the reset and retries. A failed request reverts
/// exactly the lights it touched to their own previous values.
public actor LIFXAdapter: Adapter {
    public nonisolated let id = "lifx"
    public nonisolated var reservedPrefixes: [String] { ["group/", "location/", "scene/"] }

    struct Op {
        enum Kind {
            case set(LIFXSet)
            case delta(LIFXDelta)
            case effect(name: String, body: [String: JSONValue])
            case scene(uuid: String, duration: Double)
        }
        var kind: Kind
        var selector: String
        var lights: [String]
        var previous: [String: LIFXLight.Values]
        var tickets: [Int]
        var label: String
        var attempts = 0

        var isSet: Bool { if case .set = kind { return true }; return false }
    }

    let settings: LIFXSettings
    let http: HTTPClient
    var context: AdapterContext?
    var lights: [String: LIFXLight] = [:]
    var missing: [String: Int] = [:]
    var scenes: [String: LIFXScene] = [:]
    var lastActivated: [String: String] = [:]
    var queue: [Op] = []
    var inFlight: [Op] = []
    var nextTicket = 0
    var outcomes: [Int: Result<Void, AdapterError>] = [:]
    var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
    var budget = RateBudget()
    var lastSend = Date.distantPast
    var retryAt = Date.distantPast
    var nextPoll = Date.distantPast
    var polls = 0
    var pollFailures = 0
    var scenesDue = true
    var sleeper: Task<Void, Never>?
    var merged = 0
    var retries = 0
    var sentRequests = 0

    public init(settings: LIFXSettings) {
        self.settings = settings
        self.http = HTTPClient(options: .init(userAgent: "switchyard", verifyTLS: settings.verifyTLS))
    }

    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        defer {
            http.shutdown()
            for t in Array(waiters.keys) { finish([t], .failure(AdapterError("the LIFX adapter stopped before the command was answered"))) }
        }
        guard let token = settings.token, !token.isEmpty else {
            await context.setStatus(.disabled("no lifx.token configured (set lifx.token, lifx.token_file or ${ENV})"))
            while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
            return
        }
        await dispatchLoop()
    }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        try await accept(command, context: context).wait()
    }

    public func accept(_ command: DeviceCommand, context: AdapterContext) async throws -> PendingCommand {
        self.context = context
        let tickets = try await plan(command)
        return PendingCommand { [self] in
            for t in tickets { try await self.outcome(t) }
        }
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        if deviceID.hasPrefix("scene_") {
            try await listScenes()
            return
        }
        let target = try self.target(deviceID)
        let r = try await call("GET", "/lights/\(Self.encode(target.selector))", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(Self.describe(r, selector: target.selector)) }
        var changed: Set<String> = []
        for j in list { if let l = LIFXLight.parse(j) { merge(l); changed.insert(l.id) } }
        await publish(changed)
    }

    public func refreshAll(context: AdapterContext) async throws {
        scenesDue = true
        guard await pollOnce() else { throw AdapterError("LIFX listing failed: \(lastPollError ?? "unknown error")") }
    }

    public func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? {
        guard path == "scenes" else { return nil }
        let list = scenes.values.sorted { $0.name < $1.name }.map { s -> JSONValue in
            ["id": .string(s.uuid), "name": .string(s.name), "lights": JSONValue(sceneLights(s).count),
             "last_activated": lastActivated[s.uuid].map(JSONValue.string) ?? .null]
        }
        return ["scenes": .array(list)]
    }

    // MARK: targets

    struct Target {
        var selector: String
        var lights: [String]
        var label: String
    }

    func target(_ deviceID: String) throws(AdapterError) -> Target {
        if let l = lights[deviceID] { return Target(selector: "id:\(l.id)", lights: [l.id], label: l.label.isEmpty ? l.id : l.label) }
        for (prefix, sel) in [("group_", "group_id:"), ("location_", "location_id:")] where deviceID.hasPrefix(prefix) {
            let rid = String(deviceID.dropFirst(prefix.count))
            let (members, name) = self.members(prefix, rid)
            if members.isEmpty { throw AdapterError("LIFX \(prefix.dropLast()) has no lights") }
            return Target(selector: sel + rid, lights: members.map(\.id), label: name)
        }
        throw AdapterError("LIFX device '\(deviceID)' is not known")
    }

    /// The lights of a group (`group_`) or location (`location_`) id, sorted by id, and its name.
    func members(_ prefix: String, _ rid: String) -> (lights: [LIFXLight], name: String) {
        let key: KeyPath<LIFXLight, LIFXRef?> = prefix == "group_" ? \.group : \.location
        let members = lights.values.filter { $0[keyPath: key]?.id == rid }.sorted { $0.id < $1.id }
        return (members, members.first?[keyPath: key]?.name ?? rid)
    }

    func lights(matching selector: String) -> [String] {
        let parts = selector.split(separator: ":", maxSplits: 1).map(String.init)
        let all = lights.values
        switch (parts.first ?? "", parts.count > 1 ? parts[1] : "") {
        case ("all", _): return all.map(\.id).sorted()
        case ("id", let v): return all.filter { $0.id == v }.map(\.id)
        case ("group_id", let v): return all.filter { $0.group?.id == v }.map(\.id).sorted()
        case ("location_id", let v): return all.filter { $0.location?.id == v }.map(\.id).sorted()
        case ("label", let v): return all.filter { $0.label == v }.map(\.id).sorted()
        case ("group", let v): return all.filter { $0.group?.name == v }.map(\.id).sorted()
        case ("location", let v): return all.filter { $0.location?.name == v }.map(\.id).sorted()
        default: return []
        }
    }

    func sceneLights(_ s: LIFXScene) -> [String] {
        Array(Set(s.states.flatMap { lights(matching: $0.selector) })).sorted()
    }

    // MARK: commands

    /// Turns a validated command into queued requests and applies it optimistically. Returns the tickets
    /// whose outcomes the command waits for.
    func plan(_ command: DeviceCommand) async throws -> [Int] {
        var f = command.fields
        let duration = f.removeValue(forKey: "transition")?.doubleValue ?? settings.defaultTransition
        if command.deviceID.hasPrefix("scene_") {
            let uuid = String(command.deviceID.dropFirst("scene_".count))
            guard let scene = scenes[uuid] else { throw AdapterError("LIFX scene is not known (refresh with bridge/request/devices/refresh)") }
            guard f["activate"] == .bool(true) else { throw AdapterError("scene: send ACTIVATE or {\"activate\": true}") }
            var previous: [String: LIFXLight.Values] = [:]
            var touched: Set<String> = []
            for st in scene.states {
                for id in lights(matching: st.selector) {
                    if previous[id] == nil { previous[id] = lights[id]!.values }
                    lights[id]!.apply(st.set)
                    touched.insert(id)
                }
            }
            lastActivated[uuid] = Timestamp.rfc3339(Date())
            let ticket = enqueue(Op(kind: .scene(uuid: uuid, duration: duration), selector: "scene_id:\(uuid)", lights: touched.sorted(),
                                    previous: previous, tickets: [], label: scene.name))
            await publish(touched)
            await context?.update(command.deviceID, sceneFields(scene))
            return [ticket]
        }

        let t = try target(command.deviceID)
        let members = t.lights.compactMap { lights[$0] }
        let single = members.count == 1 && t.selector.hasPrefix("id:")
        var set = LIFXSet(duration: duration)
        var delta = LIFXDelta(duration: duration)

        if case .string(let s) = f["state"] {
            switch s {
            case "TOGGLE":
                // Against the optimistic state: off if any (connected) light is on, as LIFX's own toggle does.
                let reachable = members.contains(where: \.connected) ? members.filter(\.connected) : members
                set.power = !reachable.contains { $0.on }
            default: set.power = s == "ON"
            }
        }
        if case .number(let b) = f["brightness"] {
            if b == 0 && set.power == nil { set.power = false } else { set.brightness = b / 100 }
        }
        switch f["color"] {
        case .object(let o)?:
            if let h = o["h"]?.doubleValue { set.color.hue = h }
            if let s = o["s"]?.doubleValue { set.color.saturation = s / 100 }
        case .string(let text)?:
            do {
                set.color = try LIFXColorChange.parse(text)
            } catch {
                throw AdapterError("\(error.description); nothing was sent")
            }
        default: break
        }
        let lo = members.map(\.caps.minKelvin).max() ?? 1500
        let hi = members.map(\.caps.maxKelvin).min() ?? 9000
        if var k = f["color_temp"]?.doubleValue.map({ Int($0) }) ?? set.color.kelvin {
            if k < lo || k > hi {
                let c = min(max(k, lo), hi)
                await context?.log(.info, "color_temp \(k) K is outside \(t.label)'s range \(lo)–\(hi) K; clamped to \(c) K", deviceID: command.deviceID)
                k = c
            }
            set.color = set.color.merged(with: LIFXColorChange(kelvin: k))
        }
        if let step = f["brightness_step"]?.doubleValue {
            if single {
                let base = set.brightness.map { Int(($0 * 100).rounded()) } ?? members[0].brightness
                set.brightness = Double(min(100, max(0, base + Int(step)))) / 100
            } else {
                delta.brightness = step / 100
            }
        }
        if let step = f["color_temp_step"]?.doubleValue {
            if single {
                let base = set.color.kelvin ?? members[0].kelvin
                set.color = set.color.merged(with: LIFXColorChange(kelvin: min(hi, max(lo, base + Int(step)))))
            } else {
                delta.kelvin = Int(step)
            }
        }
        // Like HA and zigbee2mqtt: a brightness or colour without a state turns the light on.
        if set.power == nil, set.brightness != nil || !set.color.isEmpty { set.power = true }

        var tickets: [Int] = []
        var touched: Set<String> = []
        if set.power != nil || set.brightness != nil || !set.color.isEmpty {
            tickets.append(enqueueChange(.set(set), t, &touched))
        }
        if delta.brightness != nil || delta.kelvin != nil {
            tickets.append(enqueueChange(.delta(delta), t, &touched))
        }
        if let fx = f["effect"] {
            let (name, body) = try effect(fx)
            tickets.append(enqueue(Op(kind: .effect(name: name, body: body), selector: t.selector, lights: t.lights, previous: [:],
                                      tickets: [], label: t.label)))
        }
        if tickets.isEmpty { throw AdapterError("nothing to do: the command changes no field") }
        await publish(touched)
        return tickets
    }

    /// Applies a set or delta to the target's lights now and queues (or merges) its request.
    func enqueueChange(_ kind: Op.Kind, _ t: Target, _ touched: inout Set<String>) -> Int {
        var previous: [String: LIFXLight.Values] = [:]
        for id in t.lights {
            guard var l = lights[id] else { continue }
            previous[id] = l.values
            switch kind {
            case .set(let s): l.apply(s)
            case .delta(let d): l.apply(d)
            default: break
            }
            lights[id] = l
            touched.insert(id)
        }
        return enqueue(Op(kind: kind, selector: t.selector, lights: t.lights, previous: previous, tickets: [], label: t.label))
    }

    /// Queues an op, merging sets (and deltas) into the latest queued op for the same lights when it is
    /// for the same selector and kind. Effects and scene activations never merge.
    func enqueue(_ op: Op) -> Int {
        nextTicket += 1
        let ticket = nextTicket
        let mine = Set(op.lights)
        if let i = queue.lastIndex(where: { !Set($0.lights).isDisjoint(with: mine) || $0.selector == op.selector }),
           queue[i].selector == op.selector {
            var merged: Op.Kind?
            switch (queue[i].kind, op.kind) {
            case (.set(let a), .set(let b)): merged = .set(a.merged(with: b))
            case (.delta(let a), .delta(let b)): merged = .delta(a.merged(with: b))
            default: merged = nil
            }
            if let merged {
                queue[i].kind = merged
                queue[i].tickets.append(ticket)
                for (id, v) in op.previous where queue[i].previous[id] == nil { queue[i].previous[id] = v }
                self.merged += 1
                wake()
                return ticket
            }
        }
        var op = op
        op.tickets = [ticket]
        queue.append(op)
        wake()
        return ticket
    }

    static let effectNames = ["breathe", "pulse", "off"]

    /// `"breathe"` or `{"name": "pulse", "color": "red", "period": 2, "cycles": 3, …}` → request body.
    func effect(_ v: JSONValue) throws(AdapterError) -> (String, [String: JSONValue]) {
        var options: [String: JSONValue] = [:]
        let name: String
        switch v {
        case .string(let s): name = s.lowercased()
        case .object(let o):
            options = o
            guard case .string(let n)? = options.removeValue(forKey: "name") else {
                throw AdapterError("effect: give a name (\(Self.effectNames.joined(separator: ", "))), e.g. {\"name\": \"breathe\", \"color\": \"red\"}")
            }
            name = n.lowercased()
        default: throw AdapterError("effect: expected a name or an object")
        }
        guard Self.effectNames.contains(name) else {
            throw AdapterError("effect: unknown effect '\(name)' (expected \(Self.effectNames.joined(separator: ", ")))")
        }
        if name == "off" {
            let extra = options.keys.filter { $0 != "power_off" }
            if !extra.isEmpty { throw AdapterError("effect off: unknown option \(extra.sorted().joined(separator: ", ")) (expected power_off)") }
            return (name, ["power_off": options["power_off"] ?? .bool(false)])
        }
        var body: [String: JSONValue] = [:]
        func colour(_ key: String) throws(AdapterError) -> String? {
            guard case .string(let text)? = options[key] else { return nil }
            do {
                let c = try LIFXColorChange.parse(text)
                var parts = c.wireString.map { [$0] } ?? []
                if let b = c.brightness { parts.append("brightness:\(LIFXColorChange.format(b))") }
                return parts.joined(separator: " ")
            } catch {
                throw AdapterError("effect \(key): \(error.description); nothing was sent")
            }
        }
        // Without a colour, breathe and pulse dip to 10 % brightness and back.
        body["color"] = .string(try colour("color") ?? "brightness:0.1")
        if let from = try colour("from_color") { body["from_color"] = .string(from) }
        for key in ["period", "cycles", "persist", "power_on"] { if let v = options[key] { body[key] = v } }
        if let peak = options["peak"] {
            guard name == "breathe" else { throw AdapterError("effect pulse: peak applies to breathe only") }
            body["peak"] = peak
        }
        return (name, body)
    }

    // MARK: outcomes

    func outcome(_ ticket: Int) async throws {
        if let r = outcomes.removeValue(forKey: ticket) { try r.get(); return }
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in waiters[ticket] = c }
    }

    func finish(_ tickets: [Int], _ result: Result<Void, AdapterError>) {
        for t in tickets {
            if let w = waiters.removeValue(forKey: t) {
                switch result {
                case .success: w.resume()
                case .failure(let e): w.resume(throwing: e)
                }
            } else {
                outcomes[t] = result
            }
        }
    }

    // MARK: dispatch

    func wake() { sleeper?.cancel() }

    /// Sleeps until `date`; `wakeable` sleeps end early when a command is queued.
    func pause(until date: Date, wakeable: Bool) async {
        let seconds = date.timeIntervalSinceNow
        guard seconds > 0 else { return }
        let t = Task { _ = try? await Task.sleep(for: .seconds(seconds)) }
        if wakeable { sleeper = t }
        await withTaskCancellationHandler { await t.value } onCancel: { t.cancel() }
        if wakeable { sleeper = nil }
    }

    func dispatchLoop() async {
        while !Task.isCancelled {
            let now = Date()
            if !queue.isEmpty {
                let at = max(lastSend.addingTimeInterval(settings.minInterval), retryAt, budget.readyAt(now, reserve: 0))
                if at > now { await pause(until: at, wakeable: false); continue }
                let batch = takeBatch()
                lastSend = Date()
                await send(batch)
                continue
            }
            if now >= nextPoll {
                let at = budget.readyAt(now, reserve: max(2, budget.limit / 5))
                if at > now { await pause(until: at, wakeable: true); continue }
                let ok = await pollOnce()
                pollFailures = ok ? 0 : pollFailures + 1
                let backoff = min(settings.pollInterval, 2 * pow(2, Double(min(pollFailures, 6))))
                nextPoll = Date().addingTimeInterval(ok ? settings.pollInterval : backoff)
                continue
            }
            await pause(until: nextPoll, wakeable: true)
        }
    }

    /// The head op, plus the absolute sets right behind it when the head is a set (≤ 50: one `/states`).
    func takeBatch() -> [Op] {
        var batch = [queue.removeFirst()]
        if batch[0].isSet {
            while batch.count < 50, let next = queue.first, next.isSet { batch.append(queue.removeFirst()) }
        }
        return batch
    }

    func request(for batch: [Op]) -> (String, String, JSONValue) {
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
        let sel = Self.encode(op.selector)
        switch op.kind {
        case .set(let s): return ("PUT", "/lights/\(sel)/state", .object(s.body))
        case .delta(let d): return ("POST", "/lights/\(sel)/state/delta", .object(d.body))
        case .effect(let name, let body): return ("POST", "/lights/\(sel)/effects/\(name)", .object(body))
        case .scene(let uuid, let duration): return ("PUT", "/scenes/scene_id:\(uuid)/activate", ["duration": .number(duration)])
        }
    }

    func send(_ batch: [Op]) async {
        inFlight = batch
        let (method, path, body) = request(for: batch)
        let r: CallResult
        do {
            r = try await call(method, path, body, reserve: 0)
            inFlight = []
        } catch {
            // Answered (or failed): no longer in flight, so a revert does not re-apply the op itself.
            inFlight = []
            await failOrRetry(batch, error.description)
            return
        }
        switch r.status {
        case 200, 202, 207:
            await handleResults(batch, r, multi: batch.count > 1)
        case 429:
            budget.exhausted(headers: r.headers, now: Date())
            let wait = max(0, (budget.resetAt ?? Date()).timeIntervalSinceNow)
            await context?.log(.warning, "LIFX rate limit reached (HTTP 429); waiting \(Int(wait.rounded(.up))) s for the reset, then sending again")
            queue.insert(contentsOf: batch, at: 0)
        case 500...599:
            await failOrRetry(batch, "LIFX cloud error (HTTP \(r.status))")
        default:
            if r.status == 401 || r.status == 403 {
                await context?.setStatus(.error(Self.describe(r, selector: batch[0].selector)))
            }
            for op in batch { await fail(op, Self.describe(r, selector: op.selector)) }
        }
        await reportMetrics()
    }

    /// Only absolute sets are retried (3 attempts, backoff); anything else fails at once.
    func failOrRetry(_ batch: [Op], _ message: String) async {
        if batch.allSatisfy({ $0.isSet && $0.attempts < 2 }) {
            retries += 1
            let again = batch.map { op -> Op in
                var o = op
                o.attempts += 1
                return o
            }
            retryAt = Date().addingTimeInterval(settings.retryDelay * pow(2, Double(again[0].attempts - 1)))
            queue.insert(contentsOf: again, at: 0)
            return
        }
        for op in batch { await fail(op, "\(message); \(op.isSet ? "gave up after 3 attempts" : "not retried (not an absolute set)")") }
    }

    func fail(_ op: Op, _ message: String) async {
        revert(op.previous)
        await publish(Set(op.previous.keys))
        finish(op.tickets, .failure(AdapterError("\(op.label): \(message)")))
    }

    /// Restores lights to their own previous values, then re-applies what is still queued for them.
    func revert(_ previous: [String: LIFXLight.Values]) {
        guard !previous.isEmpty else { return }
        for (id, v) in previous { lights[id]?.values = v }
        for op in queue + inFlight {
            for id in op.lights where previous[id] != nil {
                switch op.kind {
                case .set(let s): lights[id]?.apply(s)
                case .delta(let d): lights[id]?.apply(d)
                default: break
                }
            }
        }
    }

    func handleResults(_ batch: [Op], _ r: CallResult, multi: Bool) async {
        let results = r.json?["results"]?.arrayValue
        for (i, op) in batch.enumerated() {
            var perLight: [JSONValue]? = results
            if multi {
                let entry = results.flatMap { i < $0.count ? $0[i] : nil }
                if case .string(let e)? = entry?["error"] {
                    await fail(op, "LIFX: \(e)")
                    continue
                }
                perLight = entry?["results"]?.arrayValue
            }
            var failed: [String] = []
            var okCount = 0
            var touched: Set<String> = []
            for res in perLight ?? [] {
                guard case .string(let lid) = res["id"], lights[lid] != nil else { continue }
                let status = res["status"]?.stringValue ?? "ok"
                let reachable = status == "ok" || status == "accepted"
                if reachable { okCount += 1 } else {
                    failed.append("\(lights[lid]!.label.isEmpty ? lid : lights[lid]!.label) \(status)")
                    if let v = op.previous[lid] { revert([lid: v]) }
                }
                if lights[lid]!.connected != reachable {
                    lights[lid]!.connected = reachable
                }
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

    // MARK: polling

    var lastPollError: String?

    /// Lists lights (and scenes when due), declares devices and publishes what changed.
    func pollOnce() async -> Bool {
        do {
            let r = try await call("GET", "/lights/all", nil, reserve: 0)
            guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(Self.describe(r, selector: "all")) }
            let listed = list.compactMap(LIFXLight.parse)
            if scenesDue || polls % max(1, settings.scenesEvery) == 0 {
                try await listScenes(declare: false)
                scenesDue = false
            }
            polls += 1
            let ids = Set(listed.map(\.id))
            for id in lights.keys where !ids.contains(id) {
                missing[id, default: 0] += 1
                if missing[id]! >= 3 { lights[id] = nil; missing[id] = nil }
            }
            for l in listed { merge(l); missing[l.id] = nil }
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
                for id in lights.keys { await context?.setAvailable(id, false) }
                for d in groupDescriptors() { await context?.setAvailable(d.id, false) }
            }
            return false
        }
    }

    func listScenes(declare: Bool = true) async throws {
        let r = try await call("GET", "/scenes", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(Self.describe(r, selector: "scenes")) }
        scenes = Dictionary(list.compactMap(LIFXScene.parse).map { ($0.uuid, $0) }, uniquingKeysWith: { a, _ in a })
        if declare {
            await self.declare()
            for s in scenes.values { await context?.update("scene_\(s.uuid)", sceneFields(s)) }
        }
    }

    /// Takes a listed light in. Values a queued or in-flight command is changing keep their optimistic
    /// value until that command is answered; `last_seen` moves only with a real change (or hourly), so
    /// a steady light publishes nothing.
    func merge(_ listed: LIFXLight) {
        var l = listed
        if let old = lights[l.id] {
            if (queue + inFlight).contains(where: { $0.lights.contains(l.id) }) { l.values = old.values }
            var a = old, b = l
            a.lastSeen = nil; b.lastSeen = nil
            if a == b, let oldSeen = old.lastSeen.flatMap(Timestamp.parse), let newSeen = l.lastSeen.flatMap(Timestamp.parse),
               newSeen.timeIntervalSince(oldSeen) < 3600 {
                l.lastSeen = old.lastSeen
            }
        }
        lights[l.id] = l
    }

    func declare() async {
        var devices = lights.values.sorted { $0.id < $1.id }.map(lightDescriptor)
        devices += groupDescriptors()
        devices += scenes.values.sorted { $0.uuid < $1.uuid }.map(sceneDescriptor)
        var available: [String: Bool] = [:]
        for l in lights.values { available[l.id] = l.connected }
        for d in devices where d.id.hasPrefix("group_") || d.id.hasPrefix("location_") {
            available[d.id] = (try? target(d.id).lights.contains { lights[$0]?.connected == true }) ?? true
        }
        await context?.setDevices(devices, authoritative: false, available: available)
    }

    /// Publishes the lights' state and availability, and every group or location they belong to.
    func publish(_ ids: Set<String>) async {
        guard let context else { return }
        var groups: Set<String> = [], locations: Set<String> = []
        for id in ids.sorted() {
            guard let l = lights[id] else { continue }
            await context.update(id, l.fields)
            await context.setAvailable(id, l.connected)
            if settings.groups, let g = l.group { groups.insert(g.id) }
            if settings.locations, let loc = l.location { locations.insert(loc.id) }
        }
        for (prefix, refs) in [("group_", groups), ("location_", locations)] {
            for rid in refs.sorted() {
                let (members, name) = self.members(prefix, rid)
                if members.isEmpty { continue }
                await context.update(prefix + rid, LIFXAggregate.fields(members, name: name))
                await context.setAvailable(prefix + rid, members.contains(where: \.connected))
            }
        }
    }

    func sceneFields(_ s: LIFXScene) -> [String: JSONValue] {
        ["name": .string(s.name), "lights": JSONValue(sceneLights(s).count),
         "last_activated": lastActivated[s.uuid].map(JSONValue.string) ?? .null]
    }

    func reportMetrics() async {
        await context?.setMetrics([
            "rate_limit": budget.metrics(Date()), "queue": JSONValue(queue.count), "in_flight": JSONValue(inFlight.count),
            "merged": JSONValue(merged), "retries": JSONValue(retries), "http_requests": JSONValue(sentRequests),
        ])
    }

    // MARK: descriptors

    static func effectCapability() -> Capability {
        Capability("effect", .object([
            Capability("name", .enumeration(effectNames), writable: true),
            Capability("color", .text(maxLength: 200), writable: true),
            Capability("from_color", .text(maxLength: 200), writable: true),
            Capability("period", .number(min: 0.05, max: 86_400, precision: 3), unit: "s", writable: true),
            Capability("cycles", .number(min: 0.01, max: 1_000_000, precision: 2), writable: true),
            Capability("persist", .bool, writable: true),
            Capability("power_on", .bool, writable: true),
            Capability("peak", .number(min: 0, max: 1, precision: 3), writable: true),
            Capability("power_off", .bool, writable: true),
        ], acceptsText: true), writable: true)
    }

    static func lightCapabilities(color: Bool, colorTemp: Bool) -> [Capability] {
        var caps: [Capability] = [.state(), .brightness()]
        if color { caps.append(.color(acceptsText: true)) }
        if colorTemp || color { caps.append(.colorTemp(minKelvin: 1500, maxKelvin: 9000)) }
        caps.append(.colorMode(color ? ["hs", "color_temp"] : ["color_temp"]))
        caps += [
            .transition(), effectCapability(),
            Capability("brightness_step", .integer(min: -100, max: 100), unit: "%", writable: true, readable: false),
            Capability("color_temp_step", .integer(min: -7500, max: 7500), unit: "K", writable: true, readable: false),
            Capability("connected", .bool, role: .diagnostic, deviceClass: "connectivity"),
            Capability("label", .text(maxLength: 64), role: .hidden),
        ]
        return caps
    }

    func lightDescriptor(_ l: LIFXLight) -> DeviceDescriptor {
        var caps = Self.lightCapabilities(color: l.caps.hasColor, colorTemp: l.caps.hasVariableColorTemp)
        caps += [
            Capability("group", .text(maxLength: 64), role: .hidden), Capability("location", .text(maxLength: 64), role: .hidden),
            Capability("model", .text(maxLength: 64), role: .hidden), Capability("capabilities", .object([], acceptsText: false), role: .hidden),
            Capability("last_seen", .text(maxLength: 40), role: .diagnostic, deviceClass: "timestamp"),
        ]
        return DeviceDescriptor(id: l.id, label: l.label, configuredName: settings.names[l.id], model: l.model, manufacturer: "LIFX",
                                category: .light, capabilities: caps)
    }

    func groupDescriptors() -> [DeviceDescriptor] {
        var out: [DeviceDescriptor] = []
        for (enabled, prefix, ns, key) in [(settings.groups, "group_", "group/", \LIFXLight.group), (settings.locations, "location_", "location/", \LIFXLight.location)]
        where enabled {
            var refs: [String: (LIFXRef, color: Bool, temp: Bool)] = [:]
            for l in lights.values.sorted(by: { $0.id < $1.id }) {
                guard let r = l[keyPath: key] else { continue }
                let prev = refs[r.id]
                refs[r.id] = (prev?.0 ?? r, (prev?.color ?? false) || l.caps.hasColor, (prev?.temp ?? false) || l.caps.hasVariableColorTemp)
            }
            for (rid, v) in refs.sorted(by: { $0.key < $1.key }) {
                var caps = Self.lightCapabilities(color: v.color, colorTemp: v.temp)
                caps.append(Capability("lights", .integer(min: 0, max: 10_000), role: .hidden))
                out.append(DeviceDescriptor(id: prefix + rid, label: v.0.name, namespace: ns,
                                            model: prefix == "group_" ? "LIFX group" : "LIFX location", manufacturer: "LIFX",
                                            category: .light, capabilities: caps))
            }
        }
        return out
    }

    func sceneDescriptor(_ s: LIFXScene) -> DeviceDescriptor {
        DeviceDescriptor(id: "scene_\(s.uuid)", label: s.name, namespace: "scene/", model: "LIFX scene", manufacturer: "LIFX",
                         category: .scene, capabilities: [
                            Capability("activate", .bool, writable: true, readable: false), .transition(),
                            Capability("name", .text(maxLength: 128), role: .hidden),
                            Capability("lights", .integer(min: 0, max: 10_000), role: .hidden),
                            Capability("last_activated", .text(maxLength: 40), role: .hidden),
                         ], bareCommands: ["ACTIVATE": ["activate": true]])
    }

    // MARK: HTTP

    struct CallResult {
        var status: Int
        var headers: [String: String]
        var json: JSONValue?
    }

    /// One request within the budget. The token travels only in the Authorization header.
    func call(_ method: String, _ path: String, _ body: JSONValue?, reserve: Int) async throws(AdapterError) -> CallResult {
        while true {
            let at = budget.readyAt(Date(), reserve: reserve)
            if at <= Date() { break }
            await pause(until: at, wakeable: false)
            if Task.isCancelled { throw AdapterError("cancelled") }
        }
        budget.record(Date())
        sentRequests += 1
        var headers = [("Authorization", "Bearer \(settings.token ?? "")"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let request = HTTPRequest(method: method, url: settings.apiURL + path, headers: headers,
                                  body: body.map { Array($0.serialized.utf8) }, timeout: settings.requestTimeout)
        do {
            let r = try await http.send(request)
            budget.update(headers: r.headers, now: Date())
            let ok = (200..<300).contains(r.status)
            await context?.recordRequest(error: ok ? nil : "\(method) \(path): HTTP \(r.status)")
            return CallResult(status: r.status, headers: r.headers, json: r.body.isEmpty ? nil : try? JSONValue.parse(r.body))
        } catch {
            let message = "LIFX cloud unreachable: \(error)"
            await context?.recordRequest(error: message)
            throw AdapterError(message)
        }
    }

    static func describe(_ r: CallResult, selector: String) -> String {
        let detail = r.json?["error"]?.stringValue
        switch r.status {
        case 401: return "LIFX refused the token (HTTP 401 Unauthorized): check lifx.token"
        case 403: return "LIFX token lacks permission (HTTP 403): it needs the remote_control scope"
        case 404: return "no LIFX light matched '\(selector)' (HTTP 404)"
        case 422, 400: return "LIFX rejected the request (HTTP \(r.status)): \(detail ?? "malformed parameters")"
        default: return "LIFX answered HTTP \(r.status)\(detail.map { ": \($0)" } ?? "")"
        }
    }

    /// Selectors go in the path: labels may hold spaces; `:` and `,` stay as LIFX documents them.
    static func encode(_ selector: String) -> String {
        selector.percentEncoded(keeping: ":,|")
    }
}
