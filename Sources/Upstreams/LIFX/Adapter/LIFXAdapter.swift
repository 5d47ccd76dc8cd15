#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
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
/// (docs/topics.md "LIFX"). This actor is the router between them and the model, and does nothing else:
/// `LIFXHome` (Model/, a value) says what the lights are, which transport sees each and what changed, and
/// plans each command (`LIFXHome.plan`: which transport gets what, and the lights as the command leaves them);
/// `LIFXCloud` (Cloud/) and `LIFXLAN` (LAN/) each own their requests and report what they saw through a
/// closure (`LIFXReport`). The router hands the model what the transports report and publishes what changed;
/// for a command it takes the plan in at once (optimistic), gives each part to its transport, publishes, and
/// waits for the outcomes the transports give it (`LIFXOutcome`).
public actor LIFXAdapter: Adapter {
    public static let id = "lifx"
    public nonisolated var id: String { Self.id }
    /// Name prefixes of groups, locations and scenes, refused for light names.
    public static let namespaces = ["group/", "location/", "scene/"]
    public nonisolated var reservedPrefixes: [String] { Self.namespaces }

    let settings: LIFXSettings
    let clock: any BridgeClock
    /// Where each run gets its HTTP client and its UDP socket (the real ones, or the twins in the unit tier).
    let http: any HTTPConnector
    let network: any LIFXLANNetwork
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

    /// `http` and `network` are where each run gets its HTTP client and its UDP socket: libcurl and the
    /// kernel's UDP in the bridge, `HTTPTwin` and `LIFXLANTwin` in the unit tier.
    public init(settings: LIFXSettings, clock: any BridgeClock = SystemClock(), http: any HTTPConnector = CurlConnector(),
                network: any LIFXLANNetwork = LIFXUDPNetwork()) {
        self.settings = settings
        self.clock = clock
        self.http = http
        self.network = network
        home = LIFXHome(lanGrace: settings.lan.offlineAfter)
    }

    /// Outcomes that exist now (a command's outcome is gone once it is answered and taken).
    public nonisolated var outstandingOutcomes: Int { census.count }

    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        guard settings.cloudEnabled || settings.lan.enabled else {
            await context.setStatus(.disabled("no lifx.token configured and lifx.lan is off (set lifx.token, lifx.token_file or ${ENV}, or lan.enabled)"))
            while !Task.isCancelled { try await clock.sleep(seconds: 3600) }
            return
        }
        let lan = settings.lan.enabled
            ? LIFXLAN(settings: settings.lan, clock: clock, network: network, seeds: lanSeeds) { [weak self] r in await self?.take(r) } : nil
        let cloud = settings.cloudEnabled
            ? LIFXCloud(settings: settings, clock: clock, connector: http) { [weak self] r in await self?.take(r) } : nil
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
        let waits = try await carryOut([LIFXCommand(command)], deviceID: command.deviceID)
        return PendingCommand { try await Self.all(waits) }
    }

    /// Commands for several of this adapter's devices at once (a group's or a scene's members, design.md §20):
    /// lights given the same fields (and of the same kelvin range) are one command for those lights
    /// (`LIFXCommand.Target.lights`), and every
    /// command is planned as one, so that the cloud gets one request per kind of change for all its lights
    /// (their ids in one selector, `LIFXHome.selectorsPerRequest` at most) and the LAN one hand-over. Each
    /// device's outcome is its parts': a cloud request that reached the other lights but none of this
    /// device's fails it alone. When the plan refuses one of them, or two of them touch one light (a light and
    /// its LIFX group), each goes alone, so that the rest still go and each refusal names its device.
    public func acceptBatch(_ commands: [DeviceCommand], context: AdapterContext) async -> [PendingCommand] {
        self.context = context
        let lights = commands.map { Set(lightIDs(of: $0.deviceID)) }
        var touched: Set<String> = []
        var overlap = false
        for l in lights {
            if !touched.isDisjoint(with: l) { overlap = true }
            touched.formUnion(l)
        }
        if !overlap {
            // Lights are put together only with the same kelvin range: a command for several lights takes the
            // range they share, and each light is to be clamped to its own.
            var planned: [LIFXCommand] = []
            var ranges: [ClosedRange<Int>?] = []
            for c in commands {
                let range = home.lights[c.deviceID]?.caps.kelvinRange
                if range != nil,
                   let i = planned.indices.first(where: { i in
                       if case .lights = planned[i].target { planned[i].fields == c.fields && ranges[i] == range } else { false }
                   }),
                   case .lights(let ids) = planned[i].target {
                    planned[i].target = .lights(ids + [c.deviceID])
                } else if range != nil {
                    planned.append(LIFXCommand(.lights([c.deviceID]), c.fields))
                    ranges.append(range)
                } else {
                    planned.append(LIFXCommand(c))
                    ranges.append(nil)
                }
            }
            if let parts = try? await carryOutParts(planned) {
                return zip(commands, lights).map { c, mine in
                    let waits = mine.isEmpty ? parts : parts.filter { !mine.isDisjoint(with: $0.lights) }
                    return PendingCommand { try await Self.wait(waits, for: mine) }
                }
            }
        }
        var out: [PendingCommand] = []
        for c in commands {
            do { out.append(try await accept(c, context: context)) } catch { out.append(.failed(error)) }
        }
        return out
    }

    /// Waits for a device's parts of a batch; the first failure is its. A cloud request that succeeded but
    /// reached none of the device's lights it named fails the device.
    static func wait(_ parts: [Part], for lights: Set<String>) async throws {
        var failure: (any Error)?
        for p in parts {
            do {
                try await p.wait()
                let mine = lights.intersection(p.lights), unreached = p.outcome.unreached
                if !mine.isEmpty, mine.allSatisfy({ unreached[$0] != nil }) {
                    throw AdapterError("\(mine.sorted().map { unreached[$0]! }.joined(separator: ", ")) (LIFX did not reach the light)")
                }
            } catch {
                if failure == nil { failure = error }
            }
        }
        if let failure { throw failure }
    }

    /// The lights a device's command changes: a light's own, a group's or location's, a Ceiling part's
    /// Ceiling, a scene's.
    func lightIDs(of deviceID: String) -> [String] {
        if home.lights[deviceID] != nil { return [deviceID] }
        if let (serial, _) = LIFXCeilingPart.parse(deviceID) { return [serial] }
        if deviceID.hasPrefix("scene_"), let s = home.scenes[String(deviceID.dropFirst("scene_".count))] { return home.sceneLights(s) }
        return (try? home.target(deviceID).lights) ?? []
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

    /// The transports this run has, as the model plans with them.
    var transports: LIFXTransports {
        LIFXTransports(lan: lan != nil, cloud: cloud != nil, lanOnly: settings.lan.enabled && !settings.cloudEnabled)
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        switch try home.readRoute(deviceID, transports: transports, now: clock.now()) {
        case .scenes:
            guard let cloud else { throw AdapterError("the LIFX cloud is not connected") }
            home.scenes = Dictionary(try await cloud.listScenes().map { ($0.uuid, $0) }, uniquingKeysWith: { a, _ in a })
            await declare()
            await publishScenes()
        case .lan(let serial):
            await lan?.poll(serial)
        case .cloud(let selector):
            guard let cloud else { throw AdapterError("the LIFX cloud is not connected") }
            let (lights, pending) = try await cloud.read(selector)
            await apply(home.cloudRead(lights, pending: pending, now: clock.now()))
        }
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

    /// Carries out commands: the model plans them (`LIFXHome.plan`, everything checked before anything
    /// changes: a refused command leaves the state as it was and sends nothing), the plan is taken in at once,
    /// its LAN orders go to the LAN (their first datagrams leave now) and its requests to the cloud, and the
    /// new state is published. Returns what the commands wait for. Several commands (`LIFXCommand.Target.lights`,
    /// or a list) are planned as one: one cloud request per kind of change, one LAN hand-over.
    func carryOut(_ commands: [LIFXCommand], deviceID: String? = nil) async throws -> [@Sendable () async throws -> Void] {
        try await carryOutParts(commands, deviceID: deviceID).map(\.wait)
    }

    /// One part of a planned command: what it waits for, the lights it concerns, and the outcome the
    /// transport answers (which says, for a cloud request, the lights it did not reach).
    struct Part: Sendable {
        var lights: [String]
        var outcome: LIFXOutcome
        var wait: @Sendable () async throws -> Void
    }

    /// `carryOut`, with each part's lights.
    func carryOutParts(_ commands: [LIFXCommand], deviceID: String? = nil) async throws -> [Part] {
        if !made.isSignalled || cloud?.opened.isSignalled == false || lan?.opened.isSignalled == false {
            await firstResult(of: { await self.transportsStarted() }, within: Self.startWait, clock: clock, otherwise: ())
        }
        let plan = try home.plan(commands, transports: transports, now: clock.now(), wall: Date(),
                                 defaultTransition: settings.defaultTransition)
        home.take(plan)
        var parts = await submit(plan.lan)
        parts += await enqueue(plan.cloud)
        for note in plan.notes { await context?.log(.info, note, deviceID: deviceID) }
        await publish(plan.touched)
        if !plan.activated.isEmpty { await publishScenes(plan.activated.keys.sorted()) }
        return parts
    }

    /// The plan's LAN orders, handed over in one call, each with the outcome its command waits for.
    func submit(_ orders: [LIFXLANOrder]) async -> [Part] {
        guard !orders.isEmpty else { return [] }
        let parts = orders.map { LIFXLANSubmission(order: $0, outcome: LIFXOutcome(census)) }
        guard let lan else {
            for p in parts { p.outcome.fail("\(p.order.label) is not reachable on the LAN") }
            return parts.map { p in Part(lights: [p.order.serial], outcome: p.outcome) { try await p.outcome.wait() } }
        }
        await lan.submit(parts)
        return parts.map { p in Part(lights: [p.order.serial], outcome: p.outcome) { try await lan.complete(p.order.serial, p.outcome) } }
    }

    /// The plan's cloud requests, queued in order in one call.
    func enqueue(_ orders: [LIFXCloudOrder]) async -> [Part] {
        guard !orders.isEmpty else { return [] }
        let outcomes = orders.map { _ in LIFXOutcome(census) }
        if let cloud { await cloud.enqueue(Array(zip(orders, outcomes))) } else { for o in outcomes { o.fail("the LIFX cloud is not connected") } }
        return zip(orders, outcomes).map { order, o in Part(lights: order.lights, outcome: o) { try await o.wait() } }
    }

    // MARK: what the transports say

    func take(_ r: LIFXReport<LIFXLAN.Event>) async {
        guard case .saw(let e) = r else { return await bridge(r, from: .lan) }
        let now = clock.now()
        switch e {
        case .found(let serial, let identity, let reading):
            await apply(home.lanFound(serial, identity: identity, reading: reading, now: now, wall: Date()))
        case .read(let serial, let reading, let pending):
            await apply(home.lanRead(serial, reading, commandPending: pending, now: now, wall: Date()))
        case .heard(let heard):
            await apply(home.lanHeard(heard, now: now))
        case .reverted(let serial, let reading):
            await apply(home.lanReverted(serial, to: reading))
        }
    }

    func take(_ r: LIFXReport<LIFXCloud.Event>) async {
        guard case .saw(let e) = r else { return await bridge(r, from: .cloud) }
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
        }
    }

    /// What either transport says of itself, passed on to the engine.
    func bridge<Saw>(_ r: LIFXReport<Saw>, from transport: LIFXPresence.Transport) async {
        switch r {
        case .saw: break
        case .metrics(let m):
            if transport == .lan { metrics.lan = m } else { metrics.cloud = m }
            await reportMetrics()
        case .request(let error): await context?.recordRequest(error: error)
        case .log(let level, let message): await context?.log(level, message)
        case .status(let status): await context?.setStatus(status)
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
