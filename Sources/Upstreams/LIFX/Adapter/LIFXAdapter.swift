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
    public var lan = LIFXLANSettings()
    public init() {}
}

/// `lifx.lan`: the LAN protocol (docs/upstreams/lifx-lan.md), on the same topics as the cloud.
public struct LIFXLANSettings: Sendable, Equatable {
    public var enabled = false
    /// Unicast discovery targets besides broadcast ("192.168.1.40", "10.0.0.7:56700").
    public var hosts: [String] = []
    /// Broadcast addresses for discovery; nil = every up interface's directed broadcast, [] = none.
    public var broadcast: [String]? = nil
    public var pollInterval = 10.0
    /// A light that has not answered anything for this long is unavailable (one lost reply changes nothing).
    public var offlineAfter = 90.0
    /// The local UDP port (0: the kernel's choice; a fixed one helps through firewalls).
    public var localPort = 0
    /// Waits between discovery rounds, the last repeating (not a config key: tests shorten the slow phase).
    public var discoveryGaps: [Double] = [1, 2, 4, 8, 15, 30, 60]
    public init() {}
}

/// LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API (docs/upstreams/lifx-cloud.md).
///
/// Commands are applied to the published state at once (optimistic), then queued: `LIFXCommandPlanner`
/// turns a command into requests, `LIFXRequestQueue` merges and paces them, `LIFXCloudAPI` sends them
/// within the rate budget and reads the answers. A failed request reverts exactly the lights it touched
/// to their own previous values. Every timer runs on `clock` (monotonic; a test moves a manual one).
public actor LIFXAdapter: Adapter {
    public static let id = "lifx"
    public nonisolated var id: String { Self.id }
    /// Name prefixes of groups, locations and scenes, refused for light names.
    public static let namespaces = ["group/", "location/", "scene/"]
    public nonisolated var reservedPrefixes: [String] { Self.namespaces }

    let settings: LIFXSettings
    let clock: any BridgeClock
    /// The client of the current run (opened and closed by `run`).
    var http: HTTPClient?
    var context: AdapterContext?
    var lights: [String: LIFXLight] = [:]
    /// Which transports see each light (removal, availability and routing follow it).
    var presence: LIFXPresence
    var scenes: [String: LIFXScene] = [:]
    var lastActivated: [String: String] = [:]
    var queue: LIFXRequestQueue
    var outcomes: [Int: Result<Void, AdapterError>] = [:]
    var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
    var budget = RateBudget()
    var nextPoll = MonotonicInstant.distantPast
    var polls = 0
    var pollFailures = 0
    var scenesDue = true
    var sentRequests = 0
    var lastPollError: String?
    /// Set while the dispatch loop waits for something that a new command makes moot.
    var wakeUp: Latch?
    // The LAN path (lifx.lan): the client of the current run, what it knows of each device (by serial =
    // light id), and the work its loop hands to child tasks.
    var lan: LIFXLANClient?
    var lanDevices: [String: LIFXLANDevice] = [:]
    var lanWork: AsyncStream<LANWork>.Continuation?
    var nextLANTicket = -1
    var lanMetrics: [String: JSONValue]?
    /// A device stopped answering: discovery goes fast again (it may have moved).
    var lanLost = false
    /// Replies with values no device reports, dropped.
    var lanInvalid = 0

    public init(settings: LIFXSettings, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.clock = clock
        self.queue = LIFXRequestQueue(minInterval: settings.minInterval, retryDelay: settings.retryDelay)
        self.presence = LIFXPresence(lanGrace: settings.lan.offlineAfter)
    }

    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        defer {
            for t in Array(waiters.keys) { finish([t], .failure(AdapterError("the LIFX adapter stopped before the command was answered"))) }
        }
        let cloud = settings.token.map { !$0.isEmpty } ?? false
        guard cloud || settings.lan.enabled else {
            await context.setStatus(.disabled("no lifx.token configured and lifx.lan is off (set lifx.token, lifx.token_file or ${ENV}, or lan.enabled)"))
            while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
            return
        }
        try await withLAN {
            if cloud {
                try await HTTPClient.withClient(options: .init(userAgent: "switchyard", verifyTLS: settings.verifyTLS)) { http in
                    self.http = http
                    defer { self.http = nil }
                    await dispatchLoop()
                }
            } else {
                // LAN only: nothing calls the cloud.
                await context.setStatus(.running)
                while !Task.isCancelled { try? await clock.sleep(seconds: 3600) }
            }
        }
    }

    /// A reload's new instance keeps what the old one knew: its lights (the LAN's among them, which no cloud
    /// listing names), which transport saw each and when, and the scenes. The LAN finds its devices again
    /// at once (discovery starts with the run); until then they keep their state and availability.
    public func inherit(from previous: any Adapter) async {
        guard let old = previous as? LIFXAdapter else { return }
        let (lights, presence, scenes, lanDevices) = await old.model
        self.lights = lights
        self.presence = presence.regraced(lanGrace: settings.lan.offlineAfter)
        self.scenes = scenes
        // The LAN devices by address and product, without the old run's requests in flight: commands go
        // over the LAN from the first moment (a light only the LAN knows has no other way).
        guard settings.lan.enabled else { return }
        let now = clock.now()
        self.lanDevices = lanDevices.mapValues { d in
            var d = d
            d.polling = false
            d.sending = false
            d.dirty = false
            d.waiters = []
            d.effect = nil
            d.clean = nil
            d.nextPoll = now
            return d
        }
    }

    var model: ([String: LIFXLight], LIFXPresence, [String: LIFXScene], [String: LIFXLANDevice]) { (lights, presence, scenes, lanDevices) }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        try await accept(command, context: context).wait()
    }

    public func accept(_ command: DeviceCommand, context: AdapterContext) async throws -> PendingCommand {
        self.context = context
        let tickets = try await plan(command)
        return PendingCommand { [self] in
            // Every ticket's outcome is taken, a failed first one included: an outcome nobody takes would
            // stay in `outcomes` for as long as the adapter runs. The first failure is the command's.
            var failure: (any Error)?
            for t in tickets {
                do { try await self.outcome(t) } catch { if failure == nil { failure = error } }
            }
            if let failure { throw failure }
        }
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        if deviceID.hasPrefix("scene_") {
            try await listScenes()
            return
        }
        if onLAN(deviceID) {
            await poll(deviceID)
            return
        }
        let target = try self.target(deviceID)
        let r = try await call("GET", "/lights/\(LIFXCloudAPI.encode(target.selector))", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: target.selector)) }
        var changed: Set<String> = []
        for j in list { if let l = LIFXLight.parse(j) { merge(l); changed.insert(l.id) } }
        await publish(changed)
    }

    public func refreshAll(context: AdapterContext) async throws {
        for serial in lanDevices.keys.sorted() { await poll(serial) }
        await lan?.discover(discoveryTargets)
        guard http != nil else { return }
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

    /// The fields of a command only the LAN path drives.
    struct LANFields {
        var zones: JSONValue?
        var infrared: JSONValue?
        var cleanCycle: JSONValue?
        var cleanDuration: JSONValue?
        var isEmpty: Bool { zones == nil && infrared == nil && cleanCycle == nil && cleanDuration == nil }
    }

    func target(_ deviceID: String) throws(AdapterError) -> LIFXTarget {
        if let l = lights[deviceID] { return LIFXTarget(selector: "id:\(l.id)", lights: [l.id], label: l.label.isEmpty ? l.id : l.label) }
        for (prefix, sel) in [("group_", "group_id:"), ("location_", "location_id:")] where deviceID.hasPrefix(prefix) {
            let rid = String(deviceID.dropFirst(prefix.count))
            let (members, name) = self.members(prefix, rid)
            if members.isEmpty { throw AdapterError("LIFX \(prefix.dropLast()) has no lights") }
            return LIFXTarget(selector: sel + rid, lights: members.map(\.id), label: name)
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

    /// Plans a validated command, applies it optimistically and queues its requests. Returns the tickets
    /// whose outcomes the command waits for. Everything is checked before anything changes: a refused
    /// command leaves the state as it was and sends nothing.
    func plan(_ command: DeviceCommand) async throws -> [Int] {
        if command.deviceID.hasPrefix("scene_") { return [try await activate(command)] }
        let t = try target(command.deviceID)
        // Fields only the LAN path drives (declared on LAN lights with the feature): checked here, sent below.
        var fields = command.fields
        let lanOnly = LANFields(zones: fields.removeValue(forKey: "zones"), infrared: fields.removeValue(forKey: "infrared"),
                                cleanCycle: fields.removeValue(forKey: "clean_cycle"), cleanDuration: fields.removeValue(forKey: "clean_duration"))
        let members = t.lights.compactMap { lights[$0] }
        let plan = fields.keys.contains(where: { $0 != "transition" }) || lanOnly.isEmpty
            ? try LIFXCommandPlanner.plan(fields, target: t, members: members, defaultTransition: settings.defaultTransition)
            : LIFXCommandPlanner.Plan()
        let duration = fields["transition"]?.doubleValue ?? settings.defaultTransition
        var extra: (id: String, light: LIFXLight, clean: (on: Bool, seconds: Int)?, notes: [String])?
        if !lanOnly.isEmpty { extra = try planLAN(lanOnly, target: t, after: plan) }
        // Lights found on the LAN are commanded over the LAN; the rest over the cloud.
        let lanIDs = t.lights.filter(onLAN)
        let cloudIDs = t.lights.filter { !onLAN($0) }
        if !cloudIDs.isEmpty && http == nil {
            throw AdapterError(settings.lan.enabled && (settings.token ?? "").isEmpty
                ? "\(t.label) is not reachable on the LAN (and no lifx.token is set)" : "the LIFX cloud is not connected")
        }
        // An effect a string named (the core passes effect strings through) that no light of the target runs.
        if let e = plan.effect, !members.contains(where: { Self.runs(e, $0) }) {
            let names = LIFXCommandPlanner.effectNames(multizone: members.contains { $0.caps.hasMultizone }, matrix: members.contains { $0.caps.hasMatrix })
            throw AdapterError("effect \(e.name): \(t.label) cannot run it (its effects: \(names.joined(separator: ", ")))")
        }
        for note in plan.notes + (extra?.notes ?? []) { await context?.log(.info, note, deviceID: command.deviceID) }
        var tickets: [Int] = []
        var touched: Set<String> = []
        let cloudSelector = lanIDs.isEmpty ? t.selector : cloudIDs.map { "id:\($0)" }.joined(separator: ",")
        for kind in plan.kinds {
            switch kind {
            case .set, .delta:
                let previous = apply(to: t.lights, &touched) { l in
                    if case .set(let s) = kind { l.apply(s) } else if case .delta(let d) = kind { l.apply(d) }
                }
                var d = duration
                if case .set(let s) = kind { d = s.duration } else if case .delta(let x) = kind { d = x.duration }
                for id in lanIDs { tickets.append(lanCommand(id, duration: d)) }
                if !cloudIDs.isEmpty {
                    var op = LIFXOp(kind: kind, selector: cloudSelector, lights: cloudIDs, label: t.label)
                    op.previous = previous.filter { cloudIDs.contains($0.key) }
                    tickets.append(enqueue(op))
                }
            case .effect:
                // The effect's own colour (from_color) is set at once, unless a change before it set a transition.
                let changed = plan.kinds.contains { if case .effect = $0 { return false }; return true }
                for id in lanIDs where applyEffect(plan.effect!, to: id) {
                    touched.insert(id)
                    tickets.append(lanCommand(id, duration: changed ? nil : 0, effect: plan.effect))
                }
                if !cloudIDs.isEmpty { tickets.append(enqueue(LIFXOp(kind: kind, selector: cloudSelector, lights: cloudIDs, label: t.label))) }
            default:
                tickets.append(enqueue(LIFXOp(kind: kind, selector: t.selector, lights: t.lights, label: t.label)))
            }
        }
        if let extra, var l = lights[extra.id] {
            // What planLAN worked out on top of the rest of the command (which is applied by now).
            l.zones = extra.light.zones
            l.infrared = extra.light.infrared
            l.clean = extra.light.clean
            if plan.kinds.isEmpty { l.on = extra.light.on }
            lights[extra.id] = l
            touched.insert(extra.id)
            tickets.append(lanCommand(extra.id, duration: duration, clean: extra.clean))
        }
        await publish(touched)
        return tickets
    }

    /// Whether a light can run an effect (move needs zones, morph and flame a matrix).
    static func runs(_ e: LIFXEffect, _ l: LIFXLight) -> Bool {
        switch e.name {
        case "move": return l.caps.hasMultizone
        case "morph", "flame": return l.caps.hasMatrix
        default: return true
        }
    }

    /// `zones`, `infrared`, `clean_cycle`/`clean_duration` of a command, checked against the one LAN light
    /// they go to; the light as they leave it (on top of the rest of the command, applied later).
    func planLAN(_ f: LANFields, target t: LIFXTarget, after plan: LIFXCommandPlanner.Plan) throws(AdapterError)
        -> (id: String, light: LIFXLight, clean: (on: Bool, seconds: Int)?, notes: [String]) {
        guard t.lights.count == 1, let id = t.lights.first, onLAN(id), var l = lights[id] else {
            throw AdapterError("zones, infrared and the clean cycle go to one light reached over the LAN")
        }
        // The rest of the command first (a brightness for the whole strip, then zones on top).
        for kind in plan.kinds {
            if case .set(let s) = kind { l.apply(s) } else if case .delta(let d) = kind { l.apply(d) }
        }
        var notes: [String] = []
        if let z = f.zones {
            guard var zones = l.zones else { throw AdapterError("the zones of \(t.label) are not read yet; try again in a moment") }
            notes = try LIFXZone.apply(segments: z.arrayValue ?? [], to: &zones, kelvinRange: l.caps.kelvinRange)
            l.zones = zones
            // Like a colour without a state: the light comes on.
            if plan.kinds.isEmpty { l.on = true }
        }
        if let ir = f.infrared?.intValue { l.infrared = ir }
        var clean: (on: Bool, seconds: Int)?
        if let c = f.cleanCycle {
            let on = c == "ON"
            clean = (on, f.cleanDuration?.intValue ?? 0)
            var state = l.clean ?? LIFXClean()
            state.active = on
            if !on { state.remaining = 0 } else if let s = f.cleanDuration?.intValue, s > 0 { state.remaining = s }
            l.clean = state
        } else if f.cleanDuration != nil {
            throw AdapterError("clean_duration goes with clean_cycle ON (e.g. {\"clean_cycle\": \"ON\", \"clean_duration\": 3600})")
        }
        return (id, l, clean, notes)
    }

    /// Applies a change to lights now; returns their previous values (for a revert).
    func apply(to ids: [String], _ touched: inout Set<String>, _ change: (inout LIFXLight) -> Void) -> [String: LIFXLight.Values] {
        var previous: [String: LIFXLight.Values] = [:]
        for id in ids {
            guard var l = lights[id] else { continue }
            previous[id] = l.values
            change(&l)
            lights[id] = l
            touched.insert(id)
        }
        return previous
    }

    func activate(_ command: DeviceCommand) async throws -> Int {
        let uuid = String(command.deviceID.dropFirst("scene_".count))
        guard let scene = scenes[uuid] else { throw AdapterError("LIFX scene is not known (refresh with bridge/request/devices/refresh)") }
        let duration = try LIFXCommandPlanner.sceneActivation(command.fields, defaultTransition: settings.defaultTransition)
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
        let ticket = enqueue(LIFXOp(kind: .scene(uuid: uuid, duration: duration), selector: "scene_id:\(uuid)", lights: touched.sorted(),
                                    previous: previous, label: scene.name))
        await publish(touched)
        await context?.update(command.deviceID, sceneFields(scene))
        return ticket
    }

    func enqueue(_ op: LIFXOp) -> Int {
        let ticket = queue.enqueue(op)
        wakeUp?.signal()
        return ticket
    }

    /// Restores lights to their own previous values, then re-applies what is still queued for them.
    func revert(_ previous: [String: LIFXLight.Values]) {
        guard !previous.isEmpty else { return }
        for (id, v) in previous { lights[id]?.values = v }
        for op in queue.unanswered {
            for id in op.lights where previous[id] != nil {
                switch op.kind {
                case .set(let s): lights[id]?.apply(s)
                case .delta(let d): lights[id]?.apply(d)
                default: break
                }
            }
        }
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

    /// Waits until `deadline` on the clock; a `wakeable` wait ends early when a command is queued.
    func pause(until deadline: MonotonicInstant, wakeable: Bool) async {
        guard deadline > clock.now() else { return }
        guard wakeable else {
            try? await clock.sleep(until: deadline)
            return
        }
        let latch = Latch()
        wakeUp = latch
        defer { wakeUp = nil }
        let clock = self.clock
        await withTaskGroup(of: Void.self) { g in
            g.addTask { try? await clock.sleep(until: deadline) }
            g.addTask { await latch.wait() }
            await g.next()
            g.cancelAll()
        }
    }

    /// Sends what is queued, paced (min_interval, retries, the budget), and polls when nothing is.
    func dispatchLoop() async {
        while !Task.isCancelled {
            let now = clock.now()
            if let at = queue.sendableAt(budgetAllows: budget.readyAt(now, reserve: 0)) {
                if at > now { await pause(until: at, wakeable: false); continue }
                await send(queue.takeBatch(now: now))
                continue
            }
            if now >= nextPoll {
                let at = budget.readyAt(now, reserve: max(2, budget.limit / 5))
                if at > now { await pause(until: at, wakeable: true); continue }
                let ok = await pollOnce()
                pollFailures = ok ? 0 : pollFailures + 1
                let backoff = min(settings.pollInterval, 2 * pow(2, Double(min(pollFailures, 6))))
                nextPoll = clock.now().adding(seconds: ok ? settings.pollInterval : backoff)
                continue
            }
            await pause(until: nextPoll, wakeable: true)
        }
    }

    // MARK: state

    /// Takes a listed light in. Values a queued or in-flight command is changing keep their optimistic
    /// value until that command is answered; `last_seen` moves only with a real change (or hourly), so
    /// a steady light publishes nothing.
    func merge(_ listed: LIFXLight) {
        var l = listed
        // A light reached over the LAN keeps what the LAN says (its state, label, capabilities from the
        // product list, zones…); the cloud adds what the LAN lacks (last_seen, and its group where the LAN has none).
        if onLAN(l.id), var lan = lights[l.id] {
            lan.lastSeen = l.lastSeen
            if lan.group == nil { lan.group = l.group }
            if lan.location == nil { lan.location = l.location }
            lights[l.id] = lan
            return
        }
        if let old = lights[l.id], lanDevices[l.id]?.identified == true {
            // Known on the LAN but silent there past offline_after: the cloud's values and reachability, the
            // LAN's facts about the product (so its capabilities, and its discovery, stay as they were).
            l.caps = old.caps
            l.model = old.model ?? l.model
            l.firmware = old.firmware
            l.zones = old.zones
            l.infrared = old.infrared
            l.clean = old.clean
            l.group = old.group ?? l.group
            l.location = old.location ?? l.location
        }
        if let old = lights[l.id] {
            if queue.changes(light: l.id) { l.values = old.values }
            var a = old, b = l
            a.lastSeen = nil; b.lastSeen = nil
            if a == b, let oldSeen = old.lastSeen.flatMap(Timestamp.parse), let newSeen = l.lastSeen.flatMap(Timestamp.parse),
               newSeen.timeIntervalSince(oldSeen) < 3600 {
                l.lastSeen = old.lastSeen
            }
        }
        lights[l.id] = l
    }

    /// Lists every light, group, location and scene. With a cloud, not before its first listing has come
    /// (or failed): the first listing is what the core waits for before it refuses commands for devices it
    /// does not know, and the LAN alone names only its own lights (found by the soak run: a command for a
    /// cloud light was refused because a LAN light was identified first).
    func declare() async {
        let cloud = settings.token.map { !$0.isEmpty } ?? false
        if cloud && polls == 0 && lastPollError == nil { return }
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
        var m: [String: JSONValue] = [:]
        if http != nil {
            m = [
                "rate_limit": budget.metrics(clock.now(), wallNow: Date()), "queue": JSONValue(queue.queue.count),
                "in_flight": JSONValue(queue.inFlight.count), "merged": JSONValue(queue.merged), "retries": JSONValue(queue.retries),
                "http_requests": JSONValue(sentRequests),
            ]
        }
        if let lanMetrics { m["lan"] = .object(lanMetrics) }
        await context?.setMetrics(m)
    }

}
