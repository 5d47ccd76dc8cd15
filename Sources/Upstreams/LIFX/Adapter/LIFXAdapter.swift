#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

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

    var cloudEnabled: Bool { !(token ?? "").isEmpty }
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

/// LIFX lights, groups, locations and scenes over two transports, the cloud HTTP API and the LAN protocol
/// (docs/topics.md "LIFX"). This actor is the router between them and the model: `LIFXHome` (a value) says
/// what the lights are, which transport sees each and what changed; `LIFXCloud` and `LIFXLAN` each own
/// their requests and tell the router what they saw; the router plans commands (`LIFXCommandPlanner`),
/// applies them to the model at once (optimistic), hands each light's part to the transport that reaches
/// it, and publishes. A command waits for the outcomes its transports give it (`LIFXOutcome`).
public actor LIFXAdapter: Adapter {
    public static let id = "lifx"
    public nonisolated var id: String { Self.id }
    /// Name prefixes of groups, locations and scenes, refused for light names.
    public static let namespaces = ["group/", "location/", "scene/"]
    public nonisolated var reservedPrefixes: [String] { Self.namespaces }

    let settings: LIFXSettings
    let clock: any BridgeClock
    /// Every outcome of this adapter's commands that still exists: none once every command has its result.
    nonisolated let census = LIFXOutcome.Census()
    var context: AdapterContext?
    var home: LIFXHome
    /// The transports of the current run.
    var cloud: LIFXCloud?
    var lan: LIFXLAN?
    /// Signalled once `run` has made its transports. A command that comes before they are made, the LAN's
    /// socket and the cloud's client open (a reload's new instance is routed commands at once, its devices
    /// carried over) waits for them, at most `startWait` seconds, instead of being refused as "not
    /// connected" or "not reachable on the LAN".
    let made = Latch()
    static let startWait = 10.0
    /// The LAN's devices when it last stopped, for a reload's new instance.
    var lanSeeds: [LIFXLAN.Seed] = []
    /// The cloud's first listing has come or failed (until then nothing is listed: see `declare`).
    var cloudHeard = false
    var metrics: (cloud: [String: JSONValue], lan: [String: JSONValue]) = ([:], [:])

    public init(settings: LIFXSettings, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.clock = clock
        home = LIFXHome(lanGrace: settings.lan.offlineAfter)
    }

    /// Outcomes that exist now (a command's outcome is gone once it is answered and taken).
    public nonisolated var outstandingOutcomes: Int { census.count }

    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        guard settings.cloudEnabled || settings.lan.enabled else {
            await context.setStatus(.disabled("no lifx.token configured and lifx.lan is off (set lifx.token, lifx.token_file or ${ENV}, or lan.enabled)"))
            while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
            return
        }
        let lan = settings.lan.enabled
            ? LIFXLAN(settings: settings.lan, clock: clock, seeds: lanSeeds) { [weak self] e in await self?.take(e) } : nil
        let cloud = settings.cloudEnabled
            ? LIFXCloud(settings: settings, clock: clock, context: context) { [weak self] e in await self?.take(e) } : nil
        self.lan = lan
        self.cloud = cloud
        defer {
            self.lan = nil
            self.cloud = nil
        }
        // LAN only: nothing calls the cloud.
        made.signal()
        if cloud == nil { await context.setStatus(.running) }
        do {
            try await withThrowingDiscardingTaskGroup { g in
                if let lan { g.addTask { try await lan.run() } }
                if let cloud { g.addTask { try await cloud.run() } }
            }
        } catch {
            if let lan { lanSeeds = await lan.seeds }
            throw error
        }
        if let lan { lanSeeds = await lan.seeds }
    }

    /// A reload's new instance keeps what the old one knew: its lights (the LAN's among them, which no cloud
    /// listing names), which transport saw each and when, the scenes, and where the LAN's devices answer
    /// (without the old run's requests), so that commands go over the LAN from the first moment.
    public func inherit(from previous: any Adapter) async {
        guard let old = previous as? LIFXAdapter else { return }
        let (home, seeds) = await old.handover
        self.home = home.regraced(lanGrace: settings.lan.offlineAfter)
        if settings.lan.enabled { lanSeeds = seeds }
    }

    var handover: (LIFXHome, [LIFXLAN.Seed]) { (home, lanSeeds) }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        try await accept(command, context: context).wait()
    }

    public func accept(_ command: DeviceCommand, context: AdapterContext) async throws -> PendingCommand {
        self.context = context
        let waits = try await plan(command)
        return PendingCommand { try await Self.all(waits) }
    }

    /// Returns once `run` has made the transports, the LAN's socket and the cloud's client (those there are)
    /// open.
    func transportsStarted() async {
        await made.wait()
        await lan?.opened.wait()
        await cloud?.opened.wait()
    }

    /// Waits for every part of a command; the first failure (in order) is the command's. Every part is
    /// waited for, a failed first one included.
    static func all(_ waits: [@Sendable () async throws -> Void]) async throws {
        var failure: (any Error)?
        for w in waits {
            do { try await w() } catch { if failure == nil { failure = error } }
        }
        if let failure { throw failure }
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        if deviceID.hasPrefix("scene_") {
            guard let cloud else { throw AdapterError("the LIFX cloud is not connected") }
            home.scenes = Dictionary(try await cloud.listScenes().map { ($0.uuid, $0) }, uniquingKeysWith: { a, _ in a })
            await declare()
            await publishScenes()
            return
        }
        let id = LIFXCeilingPart.parse(deviceID)?.serial ?? deviceID
        if home.onLAN(id, now: clock.now()), let lan {
            await lan.poll(id)
            return
        }
        guard let cloud else { throw AdapterError("\(deviceID) is not reachable on the LAN (and no lifx.token is set)") }
        let t = try home.target(id)
        let (lights, pending) = try await cloud.read(t.selector)
        await apply(home.cloudRead(lights, pending: pending, now: clock.now()))
    }

    public func refreshAll(context: AdapterContext) async throws {
        await lan?.refresh()
        try await cloud?.listNow()
    }

    public func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? {
        guard path == "scenes" else { return nil }
        let list = home.scenes.values.sorted { $0.name < $1.name }.map { s -> JSONValue in
            ["id": .string(s.uuid), "name": .string(s.name), "lights": JSONValue(home.sceneLights(s).count),
             "last_activated": home.lastActivated[s.uuid].map(JSONValue.string) ?? .null]
        }
        return ["scenes": .array(list)]
    }

    // MARK: commands

    /// Plans a validated command, applies it to the model at once and hands each light's part to the transport
    /// that reaches it (LAN parts first: their first datagram leaves now), then publishes the new state.
    /// Returns what the command waits for. Everything is checked before anything changes: a refused command
    /// leaves the state as it was and sends nothing.
    func plan(_ command: DeviceCommand) async throws -> [@Sendable () async throws -> Void] {
        if !made.isSignalled || cloud?.opened.isSignalled == false || lan?.opened.isSignalled == false {
            await firstResult(of: { await self.transportsStarted() }, within: Self.startWait, clock: clock, otherwise: ())
        }
        if command.deviceID.hasPrefix("scene_") { return [try await activate(command)] }
        if let (serial, part) = LIFXCeilingPart.parse(command.deviceID) { return try await plan(command, part, of: serial) }
        let now = clock.now()
        let t = try home.target(command.deviceID)
        var fields = command.fields
        // Fields only the LAN path drives (declared on LAN lights with the feature): checked here, sent below.
        let lanOnly = LIFXLANFields(zones: fields.removeValue(forKey: "zones"), infrared: fields.removeValue(forKey: "infrared"),
                                    cleanCycle: fields.removeValue(forKey: "clean_cycle"), cleanDuration: fields.removeValue(forKey: "clean_duration"))
        let members = t.lights.compactMap { home.lights[$0] }
        let plan = fields.keys.contains(where: { $0 != "transition" }) || lanOnly.isEmpty
            ? try LIFXCommandPlanner.plan(fields, target: t, members: members, defaultTransition: settings.defaultTransition)
            : LIFXCommandPlanner.Plan()
        let duration = fields["transition"]?.doubleValue ?? settings.defaultTransition
        let extra = lanOnly.isEmpty ? nil : try home.planLAN(lanOnly, target: t, after: plan, onLAN: { self.lan != nil && self.home.onLAN($0, now: now) })
        // Lights the LAN reaches are commanded over the LAN; the rest over the cloud.
        let lanIDs = lan == nil ? [] : t.lights.filter { home.onLAN($0, now: now) }
        let cloudIDs = t.lights.filter { !lanIDs.contains($0) }
        if !cloudIDs.isEmpty && cloud == nil {
            throw AdapterError(settings.lan.enabled && !settings.cloudEnabled
                ? "\(t.label) is not reachable on the LAN (and no lifx.token is set)" : "the LIFX cloud is not connected")
        }
        if let e = plan.effect {
            // An effect a string named (the core passes effect strings through) that no light of the target runs.
            if !members.contains(where: { LIFXHome.runs(e, $0) }) {
                throw AdapterError("effect \(e.name): \(t.label) cannot run it (its effects: \(LIFXCommandPlanner.effectNames(for: members).joined(separator: ", ")))")
            }
            if e.name == "sky", !cloudIDs.isEmpty {
                throw AdapterError("effect sky: goes over the LAN only, and \(t.label) is not reachable on the LAN now")
            }
        }
        for note in plan.notes + (extra?.notes ?? []) { await context?.log(.info, note, deviceID: command.deviceID) }
        var parts: [String: LIFXLANPart] = [:]
        var cloudOps: [LIFXOp] = []
        var touched: Set<String> = []
        let cloudSelector = lanIDs.isEmpty ? t.selector : cloudIDs.map { "id:\($0)" }.joined(separator: ",")
        for kind in plan.kinds {
            switch kind {
            case .set, .delta:
                let previous = home.apply(to: t.lights) { l in
                    if case .set(let s) = kind { l.apply(s) } else if case .delta(let d) = kind { l.apply(d) }
                }
                touched.formUnion(t.lights)
                var d = duration
                if case .set(let s) = kind { d = s.duration } else if case .delta(let x) = kind { d = x.duration }
                for id in lanIDs { parts[id, default: LIFXLANPart()].duration = d }
                if !cloudIDs.isEmpty {
                    cloudOps.append(op(kind, cloudSelector, cloudIDs, t.label, previous: previous.filter { cloudIDs.contains($0.key) }))
                }
            case .effect:
                // The effect's own colour (from_color) is set at once, unless a change before it set a transition.
                let changed = plan.kinds.contains { if case .effect = $0 { return false }; return true }
                for id in lanIDs where home.applyEffect(plan.effect!, to: id) {
                    touched.insert(id)
                    parts[id, default: LIFXLANPart()].effect = plan.effect
                    if !changed { parts[id]!.duration = 0 }
                }
                if !cloudIDs.isEmpty { cloudOps.append(op(kind, cloudSelector, cloudIDs, t.label)) }
            default:
                cloudOps.append(op(kind, t.selector, t.lights, t.label))
            }
        }
        if let extra {
            // What planLAN worked out on top of the rest of the command (which is applied by now).
            home.edit(extra.id) { l in
                l.zones = extra.light.zones
                l.infrared = extra.light.infrared
                l.clean = extra.light.clean
                if plan.kinds.isEmpty { l.on = extra.light.on }
            }
            touched.insert(extra.id)
            parts[extra.id, default: LIFXLANPart()].clean = extra.clean
            if parts[extra.id]!.duration == nil { parts[extra.id]!.duration = duration }
        }
        var waits = await submit(parts)
        waits += await enqueue(cloudOps)
        await publish(touched)
        return waits
    }

    /// The parts of one command for the LAN's lights, handed over in one call.
    func submit(_ parts: [String: LIFXLANPart]) async -> [@Sendable () async throws -> Void] {
        guard !parts.isEmpty, let lan else { return [] }
        let subs = parts.sorted { $0.key < $1.key }.compactMap { id, p -> LIFXLANSubmission? in
            guard let l = home.lights[id] else { return nil }
            return LIFXLANSubmission(serial: id, label: l.label.isEmpty ? id : l.label, want: l.lanWant, duration: p.duration ?? 0,
                                     effect: p.effect, clean: p.clean, outcome: LIFXOutcome(census))
        }
        await lan.submit(subs)
        return subs.map { s in { try await lan.complete(s.serial, s.outcome) } }
    }

    /// The cloud's requests of one command, queued in order in one call.
    func enqueue(_ ops: [LIFXOp]) async -> [@Sendable () async throws -> Void] {
        guard !ops.isEmpty else { return [] }
        let outcomes = ops.map { _ in LIFXOutcome(census) }
        if let cloud { await cloud.enqueue(Array(zip(ops, outcomes))) } else { for o in outcomes { o.fail("the LIFX cloud is not connected") } }
        return outcomes.map { o in { try await o.wait() } }
    }

    func op(_ kind: LIFXOp.Kind, _ selector: String, _ lights: [String], _ label: String,
            previous: [String: LIFXLight.Values] = [:]) -> LIFXOp {
        var o = LIFXOp(kind: kind, selector: selector, lights: lights, previous: previous, label: label)
        for id in lights { if let l = home.lights[id], !l.label.isEmpty { o.labels[id] = l.label } }
        return o
    }

    /// A command for a LIFX Ceiling's uplight or downlight: its zones of the matrix (and the power), over the LAN.
    func plan(_ command: DeviceCommand, _ part: LIFXCeilingPart, of serial: String) async throws -> [@Sendable () async throws -> Void] {
        guard let l = home.lights[serial], l.caps.isCeiling, l.matrix != nil else {
            throw AdapterError("the zones of this LIFX Ceiling are not read yet; try again in a moment")
        }
        guard lan != nil, home.onLAN(serial, now: clock.now()) else {
            throw AdapterError("\(l.label)'s \(part.rawValue) is controlled over the LAN only, and the LAN does not reach it now")
        }
        let change = try LIFXCeiling.Change(command.fields, kelvinRange: l.caps.kelvinRange)
        home.edit(serial) { LIFXCeiling.apply(change, to: part, of: &$0) }
        var p = LIFXLANPart()
        p.duration = command.fields["transition"]?.doubleValue ?? settings.defaultTransition
        let waits = await submit([serial: p])
        await publish([serial])
        return waits
    }

    func activate(_ command: DeviceCommand) async throws -> @Sendable () async throws -> Void {
        let uuid = String(command.deviceID.dropFirst("scene_".count))
        guard let scene = home.scenes[uuid] else { throw AdapterError("LIFX scene is not known (refresh with bridge/request/devices/refresh)") }
        let duration = try LIFXCommandPlanner.sceneActivation(command.fields, defaultTransition: settings.defaultTransition)
        var previous: [String: LIFXLight.Values] = [:]
        for st in scene.states {
            let ids = home.lights(matching: st.selector)
            for (id, v) in home.apply(to: ids, { $0.apply(st.set) }) where previous[id] == nil { previous[id] = v }
        }
        home.lastActivated[uuid] = Timestamp.rfc3339(Date())
        let waits = await enqueue([op(.scene(uuid: uuid, duration: duration), "scene_id:\(uuid)", previous.keys.sorted(), scene.name, previous: previous)])
        await publish(Set(previous.keys))
        await publishScenes([uuid])
        return waits[0]
    }

    // MARK: what the transports say

    func take(_ e: LIFXLAN.Event) async {
        let now = clock.now()
        switch e {
        case .found(let serial, let facts, let reading):
            await apply(home.lanFound(serial, facts: facts, reading: reading, now: now, wall: Date()))
        case .read(let serial, let reading, let pending):
            await apply(home.lanRead(serial, reading, commandPending: pending, now: now, wall: Date()))
        case .heard(let heard, let m):
            if let m {
                metrics.lan = m
                await reportMetrics()
            }
            await apply(home.lanHeard(heard, now: now))
        case .reverted(let serial, let reading):
            await apply(home.lanReverted(serial, to: reading))
        }
    }

    func take(_ e: LIFXCloud.Event) async {
        let now = clock.now()
        switch e {
        case .listed(let lights, let scenes, let pending):
            let first = !cloudHeard
            cloudHeard = true
            if let scenes { home.scenes = Dictionary(scenes.map { ($0.uuid, $0) }, uniquingKeysWith: { a, _ in a }) }
            var c = home.cloudListed(lights, pending: pending, now: now)
            // Until the first listing nothing was declared: what the LAN found meanwhile is published now.
            if first { c.touched.formUnion(home.lights.keys) }
            await apply(c)
            await publishScenes()
        case .listingFailed(let consecutive):
            let first = !cloudHeard
            cloudHeard = true
            // Unreachable over the cloud after three failed listings in a row; what the LAN hears stays available.
            if consecutive >= 3 { await apply(home.cloudUnreachable(now: now)) }
            if first { await apply(LIFXHome.Changes(relist: true, touched: Set(home.lights.keys))) }
        case .answered(let reached, let revert, let queued):
            home.revert(revert, reapplying: queued)
            var c = LIFXHome.Changes(touched: Set(revert.keys))
            for (id, ok) in reached.sorted(by: { $0.key < $1.key }) { c.formUnion(home.cloudReached(id, ok, now: now)) }
            await apply(c)
        case .metrics(let m):
            metrics.cloud = m
            await reportMetrics()
        }
    }

    func apply(_ c: LIFXHome.Changes) async {
        if !c.removed.isEmpty { await lan?.forget(c.removed) }
        if c.relist { await declare() }
        await publish(c.touched)
    }

    // MARK: publishing

    /// Lists every light, group, location, Ceiling part and scene. With a cloud, not before its first listing
    /// has come (or failed): the first listing is what the core waits for before it refuses commands for
    /// devices it does not know, and the LAN alone names only its own lights.
    func declare() async {
        if settings.cloudEnabled && !cloudHeard { return }
        let (devices, available) = LIFXDescriptors.all(home, settings)
        await context?.setDevices(devices, authoritative: false, available: available)
    }

    /// The lights' state and availability, and that of every group, location and Ceiling part they are in.
    func publish(_ ids: Set<String>) async {
        guard !ids.isEmpty else { return }
        await context?.report(home.reports(ids, groups: settings.groups, locations: settings.locations))
    }

    func publishScenes(_ uuids: [String]? = nil) async {
        let list = (uuids ?? home.scenes.keys.sorted()).compactMap { home.scenes[$0] }
        await context?.report(list.map { DeviceReport("scene_\($0.uuid)", fields: home.sceneFields($0)) })
    }

    func reportMetrics() async {
        var m = metrics.cloud
        if settings.lan.enabled { m["lan"] = .object(metrics.lan) }
        m["outcomes"] = JSONValue(census.count)
        await context?.setMetrics(m)
    }
}

/// One light's part of a command for the LAN: the transition, a one-shot effect or clean cycle.
struct LIFXLANPart {
    var duration: Double?
    var effect: LIFXEffect?
    var clean: LIFXCleanRequest?
}
