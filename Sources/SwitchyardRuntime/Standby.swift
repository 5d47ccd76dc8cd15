#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import ServiceLifecycle
import SwitchyardConfig
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardWeb

/// Hot standby (design.md §18, docs/operations.md "Two bridges, one home"): instances started with the same
/// base topic and client id form a group in which one is active. Every instance keeps a watching connection
/// of its own (client id `<client_id>-<instance>`, a clean session, its role retained on
/// `bridge/instances/<instance>` with a Last Will that says `offline`). A standby instance runs no adapter
/// and sends nothing upstream; when nobody has been active for `standby.takeover_delay`, it connects with the
/// bridge's client id, which the broker hands to one connection at a time, taking the session and the
/// commands it kept, and runs the bridge until that connection ends. Its connection as the active one never
/// reconnects by itself: an instance that loses it (the broker gave it to another, a pause, a cut) stops and
/// watches again, so it never takes the id back from the instance that replaced it.
struct StandbyService: Service {
    let config: SwitchyardConfig
    let instance: String
    let configPath: String?
    let upstreams: [any Upstream]
    let logger: Logger
    let view: StandbyEngineView
    let store: StandbyStore
    let feed: ConsoleFeed?
    let notifier: SystemdNotifier

    func run() async throws {
        let group = StandbyGroup(base: config.mqtt.baseTopic, instance: instance)
        let presence = MosquittoTransport(settings: Self.presenceSettings(config, group: group), logger: Logger(label: "switchyard.standby"))
        let coordinator = StandbyCoordinator(config: config, group: group, presence: presence, configPath: configPath, upstreams: upstreams,
                                             logger: logger, view: view, store: store, feed: feed, notifier: notifier)
        store.presence = presence
        presence.start()
        await coordinator.begin()
        await withDiscardingTaskGroup { g in
            g.addTask { await coordinator.consume(presence.events) }
            g.addTask { await coordinator.serve() }
            try? await gracefulShutdown()
            await coordinator.shutdown()
            await presence.stop(timeout: 5)
            g.cancelAll()
        }
    }

    /// The watching connection: its own client id and clean session, its role as its Last Will's topic. Every
    /// connection of it begins by saying `standby`: an instance whose watching connection ends while it is
    /// active steps down (the group heard its Will), so on a new one it is never active yet
    /// (`StandbyCoordinator.say`).
    static func presenceSettings(_ c: SwitchyardConfig, group: StandbyGroup) -> MQTTSettings {
        var s = BridgeRuntime.mqttSettings(c)
        s.clientID = "\(c.mqtt.clientID)-\(group.instance)"
        s.stateTopic = group.topic(group.instance)
        s.willPayload = group.payload(.offline, since: nil)
        s.birthPayload = nil
        s.birth = { group.payload(.standby) }
        s.persistentSession = false
        // Its inbound is the whole base topic while it watches: room for a house's retained tree.
        s.maxInbound = max(s.maxInbound, 10_000)
        return s
    }
}

/// The group's topics and what an instance says on them.
struct StandbyGroup: Sendable {
    let base: String
    let instance: String
    func topic(_ name: String) -> String { "\(base)/bridge/instances/\(name)" }
    var prefix: String { "\(base)/bridge/instances/" }
    var pingTopic: String { "\(base)/bridge/instances/_ping" }
    /// What an instance says of itself; `since` when it said it (not in its Last Will, which the broker sends
    /// whenever the connection ends).
    func payload(_ role: StandbyWatch.Role, since: Date? = Date()) -> [UInt8] {
        var o: [String: JSONValue] = ["instance": .string(instance), "role": .string(role.rawValue)]
        if let since { o["since"] = .string(Timestamp.rfc3339(since)) }
        return JSONValue.object(o).bytes
    }
    /// `bridge/instances/<name>` → the name, for a name that can be an instance's (not the ping).
    func name(of topic: String) -> String? {
        guard topic.hasPrefix(prefix) else { return nil }
        let name = String(topic.dropFirst(prefix.count))
        return SwitchyardConfig.validInstanceName(name) ? name : nil
    }
}

/// One instance's part in its group: what it watches, when it takes over, the active phase.
actor StandbyCoordinator {
    let config: SwitchyardConfig
    let group: StandbyGroup
    let presence: MosquittoTransport
    let configPath: String?
    let upstreams: [any Upstream]
    let logger: Logger
    let view: StandbyEngineView
    let store: StandbyStore
    let feed: ConsoleFeed?
    let notifier: SystemdNotifier
    let clock = SystemClock()
    /// How long a new active phase holds the client id before its adapters start (design.md §18, rule 3):
    /// an instance the broker took the id from learns it within a trip from the broker, and sends nothing
    /// upstream from then on, so the two never send at once. The engine is subscribed meanwhile: commands
    /// and bridge requests queue, and are served once the adapters start.
    static let handOverPause = 0.5
    var watch: StandbyWatch
    var journal: StandbyJournal
    var role: StandbyWatch.Role = .standby
    var takeovers = 0
    var stopping = false
    /// The active phase, while one runs.
    var phase: Task<Void, Never>?
    /// The watching connection: its number (the `.connected` events read so far, as the transport counts its
    /// connections) and whether it is up.
    var presenceConnection = 0
    var presenceUp = false
    /// The watching connection this active phase says `active` on: the one that was up when it took over.
    /// When that connection ends, the group hears this instance's Will (`offline`) and a standby will take
    /// over: the phase steps down, and `active` is never said on another connection (design.md §18).
    var voice: Int?
    /// The phase was asked to end because its watching connection did (its bridge connection may be up).
    var steppingDown = false
    /// The active phase's connection with the bridge's client id, while one is made or runs.
    var bridge: MosquittoTransport?
    /// This instance's share of the group's spread (0…0.5 of the delay), chosen once.
    let jitter = Double.random(in: 0...0.5)

    init(config: SwitchyardConfig, group: StandbyGroup, presence: MosquittoTransport, configPath: String?, upstreams: [any Upstream],
         logger: Logger, view: StandbyEngineView, store: StandbyStore, feed: ConsoleFeed?, notifier: SystemdNotifier) {
        self.config = config
        self.group = group
        self.presence = presence
        self.configPath = configPath
        self.upstreams = upstreams
        self.logger = logger
        self.view = view
        self.store = store
        self.feed = feed
        self.notifier = notifier
        watch = StandbyWatch(me: group.instance, takeoverDelay: config.standby.takeoverDelay, confirmWithin: config.standby.confirmWithin)
        journal = StandbyJournal(scheme: BridgeRuntime.engineSettings(config).scheme)
    }

    var watching: [String] { ["\(group.base)/#"] }
    var watchingWhileActive: [String] { [group.prefix + "+"] }

    func begin() {
        presence.setSubscriptions(watching)
        notifier.notify("READY=1")
        updateView()
        logger.info("standby: watching the group", metadata: ["instance": "\(group.instance)"])
    }

    // MARK: what the watching connection reads

    func consume(_ events: AsyncStream<TransportEvent>) async {
        for await event in events {
            switch event {
            case .connected:
                presenceConnection += 1
                presenceUp = true
                watch.connected(now: clock.now())
                // Everyone says their role again, live: a claim the broker kept from before is believed only so.
                presence.publish(group.pingTopic, Array(group.instance.utf8), qos: 1, retain: false)
            case .disconnected:
                presenceUp = false
                watch.disconnected()
                if role == .active { stepDown() }
            case .message(let m):
                see(m)
                presence.release(m)
            case .refused:
                break
            }
            updateView()
        }
    }

    func see(_ m: InboundMessage) {
        let now = clock.now()
        if m.topic == group.pingTopic {
            // Asked to say it again: our role, live (retained as before).
            if String(decoding: m.payload, as: UTF8.self) != group.instance { say() }
            return
        }
        if let name = group.name(of: m.topic) {
            let role = m.payload.isEmpty ? nil : (try? JSONValue.parse(m.payload))?["role"]?.stringValue.flatMap(StandbyWatch.Role.init(rawValue:))
            watch.saw(name, role: role, replayed: m.retain, now: now)
            return
        }
        if role == .standby { journal.saw(m, now: now) }
    }

    /// Says this instance's role on its watching connection (retained). `active` only on the connection the
    /// active phase began on (`voice`): a ping read from before that connection ended (a pause) is answered
    /// with nothing, not with a claim the transport would send on the next connection, where the birth has
    /// said `standby` (the phase is stepping down).
    func say() {
        if role == .active && !steppingDown {
            if let voice { presence.sayState(group.payload(.active), onConnection: voice) }
        } else {
            presence.publish(group.topic(group.instance), group.payload(.standby), qos: 1, retain: true)
        }
    }

    /// The watching connection ended during the active phase: the group heard this instance's Will and a
    /// standby will take over after its delay. The phase ends now, as if its bridge connection had ended: that
    /// connection is dropped without a word (the broker sends its Will), so nothing of the phase goes out once
    /// the group has heard it go, and what it had is handed over as when a connection ends.
    func stepDown() {
        guard !stopping else { return }
        if !steppingDown {
            steppingDown = true
            logger.warning("standby: the watching connection ended while active; stepping down", metadata: ["instance": "\(group.instance)"])
        }
        bridge?.abandon()
    }

    // MARK: taking over

    /// Until shutdown: waits for the decision to take over, runs the active phase, watches again.
    func serve() async {
        while !stopping && !Task.isCancelled {
            if case .takeOver(let from, let reason) = watch.decide(now: clock.now(), jitter: jitter) {
                await activate(from: from, reason: reason)
            } else {
                try? await clock.sleep(seconds: 0.1)
            }
        }
    }

    /// The active phase: the bridge as `BridgeRuntime.run` builds it, on a connection that does not
    /// reconnect, until that connection ends or the instance stops.
    func activate(from: String?, reason: String) async {
        let vacantSince = watch.vacantSince ?? clock.now()
        // The file as it is now: a standby instance follows edits made while it waited.
        var config = self.config
        if let configPath {
            do { config = try SwitchyardConfig.load(path: configPath, upstreams: upstreams) } catch {
                logger.error("standby: the config file is invalid; taking over with the one read at start",
                             metadata: ["problems": "\(error.problems.map(\.description).joined(separator: "; "))"])
            }
        }
        var settings = BridgeRuntime.mqttSettings(config)
        settings.reconnects = false
        settings.connectAttempts = 2
        let transport = MosquittoTransport(settings: settings, logger: Logger(label: "switchyard.mqtt"))
        store.current = transport
        bridge = transport
        let published: any MQTTTransport = feed.map { ObservedTransport(transport, observer: $0) } ?? transport
        let engine = BridgeEngine(settings: BridgeRuntime.engineSettings(config), transport: published, logger: Logger(label: "switchyard.core"))
        if let feed { await engine.observe(feed) }
        let adapters = config.upstreams.map { $0.makeAdapter() }
        let restore = journal.restorable
        for a in adapters { await a.restore(states: restore[a.id] ?? [:]) }
        await engine.prepareReplay(journal.takeOver(now: clock.now()).map(\.message))
        await engine.expectDevices(journal.knownDevices)
        let decidedOn = presenceConnection
        logger.info("standby: taking over", metadata: ["instance": "\(group.instance)", "from": "\(from ?? "none")", "reason": "\(reason)"])
        transport.start()
        // The broker answers the connect at once on a healthy link; the transport gives up after its attempts.
        while !transport.stats().connected && transport.endReason == nil && !stopping {
            try? await clock.sleep(seconds: 0.02)
        }
        guard transport.stats().connected, !stopping else {
            logger.warning("standby: could not take the bridge's client id", metadata: ["end": "\(transport.endReason?.rawValue ?? "stopping")"])
            await transport.stop(timeout: 1)
            store.current = nil
            bridge = nil
            return
        }
        // Ours now: the broker has handed the client id and its session to this connection.
        let begins = clock.now().adding(seconds: Self.handOverPause)
        let gap = (clock.now() - (watch.lastActive?.at ?? vacantSince)).seconds
        takeovers += 1
        role = .active
        steppingDown = false
        // Said on the watching connection the decision was made on, if it is still up; else the phase steps
        // down as soon as it runs.
        voice = presenceUp && presenceConnection == decidedOn ? decidedOn : nil
        presence.setSubscriptions(watchingWhileActive)
        say()
        await engine.setInfo(BridgeRuntime.info(config).merging(["standby": standbyInfo()]))
        await engine.setHealthExtra(["standby": standbyInfo()])
        await engine.announce(event: "takeover", ["from": from.map(JSONValue.string) ?? .null, "to": .string(group.instance),
                                                  "reason": .string(reason), "gap_ms": .number((gap * 1000).rounded())])
        // Reloads and management requests, as a lone bridge has them (Management.swift); a later takeover
        // reads the file again, so what a change wrote holds across phases.
        await BridgeRuntime.manage(config: config, configPath: configPath, upstreams: upstreams, engine: engine, console: nil,
                                   logger: logger, notifier: notifier)
        view.current = engine
        updateView()
        let keepalive = Double(config.mqtt.keepalive)
        let lease = UpstreamLease(name: group.instance, begins: { [clock] in try? await clock.sleep(until: begins) }) { [clock] in
            guard let heard = transport.lastHeard, transport.stats().connected, !transport.recentlyResumed else { return false }
            return (clock.now() - heard).seconds < keepalive * 1.25
        }
        let run = Task { await UpstreamLease.$current.withValue(lease) { await engine.run(adapters: adapters) } }
        phase = run
        if voice == nil || steppingDown { stepDown() }
        await run.value
        phase = nil
        view.current = nil
        let endedOnItsOwn = transport.endReason != nil
        if stopping {
            await transport.stop(timeout: 5)
        } else {
            let end = transport.endReason ?? .lost
            logger.warning("standby: the bridge's connection ended; watching again",
                           metadata: ["instance": "\(group.instance)", "end": "\(end.rawValue)"])
            await transport.stop(timeout: 0)
        }
        store.current = nil
        bridge = nil
        // The engine answered what it held with an error, into a connection that had ended: nobody heard it.
        // Handed over (design.md §18): this instance's next takeover replays them, another's result takes them out.
        if endedOnItsOwn && !stopping { journal.handBack(await engine.heldAtStop, now: clock.now()) }
        role = .standby
        voice = nil
        steppingDown = false
        watch.activePhaseEnded(now: clock.now())
        if !stopping {
            presence.setSubscriptions(watching)
            presence.publish(group.topic(group.instance), group.payload(.standby), qos: 1, retain: true)
            presence.publish(group.pingTopic, Array(group.instance.utf8), qos: 1, retain: false)
        }
        updateView()
    }

    /// Graceful shutdown: the active phase ends first (its adapters stop, `bridge/state` goes offline, a clean
    /// disconnect), then the group hears this instance is offline: a standby takes over at once, never beside it.
    func shutdown() async {
        stopping = true
        if let phase {
            phase.cancel()
            await phase.value
            // `activate` returns after the transport has stopped.
            while role == .active { try? await clock.sleep(seconds: 0.02) }
        }
        // The watching connection's stop then says `offline` (its Last Will's payload) and disconnects.
    }

    /// This instance and the group as it knows them (its own role over any claim of its own it heard).
    var snapshot: StandbySnapshot {
        var roles = watch.claims.mapValues(\.role.rawValue)
        roles[group.instance] = role.rawValue
        return StandbySnapshot(instance: group.instance, role: role.rawValue, group: roles, takeovers: takeovers)
    }

    func standbyInfo() -> JSONValue { snapshot.json }

    func updateView() { view.standby = snapshot }
}

/// The console's engine under hot standby: the active phase's engine while there is one, and a snapshot that
/// says this instance waits otherwise (`/readyz` is ready on the active instance only, `/livez` on all).
final class StandbyEngineView: ConsoleEngine, @unchecked Sendable {
    let lock = Locked<(engine: BridgeEngine?, standby: StandbySnapshot?)>((nil, nil))
    let version: String
    let scheme: TopicScheme
    let started = SystemClock().now()
    /// The bounds of the instance (one counter for every phase: the console's own bounds are counted there).
    let bounds = BoundsCounter()

    init(version: String, scheme: TopicScheme) {
        self.version = version
        self.scheme = scheme
    }

    var current: BridgeEngine? {
        get { lock.withLock { $0.engine } }
        set { lock.withLock { $0.engine = newValue } }
    }

    var standby: StandbySnapshot? {
        get { lock.withLock { $0.standby } }
        set {
            let engine = lock.withLock { s -> BridgeEngine? in
                s.standby = newValue
                return s.engine
            }
            if let engine { Task { await engine.setStandby(newValue) } }
        }
    }

    func snapshot() async -> EngineSnapshot {
        let (engine, standby) = lock.withLock { ($0.engine, $0.standby) }
        if let engine {
            var s = await engine.snapshot()
            s.standby = standby
            return s
        }
        return EngineSnapshot(version: version, uptime: (SystemClock().now() - started).seconds.rounded(), adapters: [], scheme: scheme,
                              stopped: false, standby: standby)
    }

    func submit(topic: String, payload: [UInt8]) async {
        await current?.submit(topic: topic, payload: payload)
    }

    func consoleLog(_ level: BridgeLogLevel, _ message: String) async {
        await current?.consoleLog(level, message)
    }

    func isAlive() async -> Bool {
        guard let engine = current else { return true }
        return await engine.isAlive()
    }
}

/// The console feed's retained store under hot standby: the active phase's transport's ledger, or nothing.
final class StandbyStore: RetainedStore, @unchecked Sendable {
    let lock = Locked<(current: MosquittoTransport?, presence: MosquittoTransport?)>((nil, nil))

    var current: MosquittoTransport? {
        get { lock.withLock { $0.current } }
        set { lock.withLock { $0.current = newValue } }
    }

    var presence: MosquittoTransport? {
        get { lock.withLock { $0.presence } }
        set { lock.withLock { $0.presence = newValue } }
    }

    /// The stats of the connection that matters now: the active one, else the watching one.
    func stats() -> TransportStats { (current ?? presence)?.stats() ?? TransportStats() }

    func retainedBody(_ topic: String) -> PayloadBody? { current?.retainedBody(topic) }
    func retained(under prefix: String, containing infix: String?, excluding: [String]) -> [(topic: String, body: PayloadBody)] {
        current?.retained(under: prefix, containing: infix, excluding: excluding) ?? []
    }
    func retainedCount(under prefix: String, excluding: [String]) -> Int {
        current?.retainedCount(under: prefix, excluding: excluding) ?? 0
    }
}

extension JSONValue {
    /// An object with `extra`'s members added (or replacing its own); anything else as it is.
    func merging(_ extra: [String: JSONValue]) -> JSONValue {
        guard case .object(var o) = self else { return self }
        o.merge(extra) { $1 }
        return .object(o)
    }
}
