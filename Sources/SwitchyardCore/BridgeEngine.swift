#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import Synchronization

/// The core: device registry, state store, command router, bridge API and discovery. It owns every
/// topic the bridge publishes; adapters talk to it through `AdapterContext`, the broker through an
/// `MQTTTransport`. One actor, so state changes and publishes happen in one order.
///
/// `run` is the engine's life, and every adapter lives inside it as a child task (with the worker that
/// feeds it commands); so do bridge requests, the health timer and the re-announcement after a Home
/// Assistant restart. Nothing outlives `run`: when it returns, every adapter's `run` has returned.
/// The pure parts are apart: `InboundRouter` (what a message asks for), `DeviceRegistry` (an adapter's
/// devices and what changes publish), `BridgeAPI.swift` (the requests). docs/architecture.md draws one
/// command's path through it, hop by hop, with the reason for each hop.
public actor BridgeEngine {
    /// What the engine hands an adapter through its queue: a command, a mirror command, a `/get`.
    enum AdapterWork: Sendable {
        case command(DeviceCommand, Reply)
        /// Commands for several of the adapter's devices, taken in one step (`Adapter.acceptBatch`): a group's
        /// or a scene's devices of this adapter (BridgeEngine+Groups.swift).
        case batch([DeviceCommand], [Reply])
        case mirror(path: String, payload: [UInt8], topic: String, replyTo: ReplyTo?)
        case refresh(deviceID: String, topic: String, replyTo: ReplyTo?)

        /// What the queued work holds on to, as counted against `commandQueueBytes` (measured once, when
        /// it is queued; the queue carries the figure so that taking it off does not measure again).
        var size: Int {
            switch self {
            case .command(let c, let r):
                return JSONValue.object(c.fields).bytes.count + r.topic.utf8.count + (r.transaction?.bytes.count ?? 0) + r.resultTopic.utf8.count
                    + (r.replyTo?.footprint ?? 0)
            case .batch(let cs, let rs):
                return zip(cs, rs).reduce(0) { $0 + JSONValue.object($1.0.fields).bytes.count + $1.1.topic.utf8.count + $1.1.resultTopic.utf8.count }
            case .mirror(let path, let payload, let topic, let replyTo):
                return payload.count + path.utf8.count + topic.utf8.count + (replyTo?.footprint ?? 0)
            case .refresh(let id, let topic, let replyTo): return id.utf8.count + topic.utf8.count + (replyTo?.footprint ?? 0)
            }
        }
    }

    /// Where and how a command is answered: decided when it is routed, so that a device removed (or
    /// renamed) while its command is on the wire still gets its result where the publisher waits.
    struct Reply: Sendable {
        /// The engine's number for the command (the key of `awaiting`).
        let ticket: UInt64
        /// The adapter it was routed to, and when: its outcome is reported from these (`EngineObservers`).
        let adapter: String
        let routedAt: MonotonicInstant
        let topic: String
        let transaction: JSONValue?
        let resultTopic: String
        /// An MQTT 5 client's Response Topic and Correlation Data: answered there too.
        let replyTo: ReplyTo?
        /// A member's part of a group command or scene recall: its outcome goes to that fan-out (keyed so in
        /// `GroupCore.fanOuts`), which answers once for all its members.
        var parent: UInt64? = nil

        /// Whether its outcome is published (it gave a transaction, or a Response Topic), or handed to its fan-out.
        var wantsAnswer: Bool { transaction != nil || replyTo != nil || parent != nil }
    }

    /// A command with a transaction that has not been answered yet, and the adapter instance it went to.
    struct Awaiting {
        let adapterID: String
        var generation: UInt64
        let reply: Reply
    }

    /// Work in an adapter's queue, with the bytes it was counted for.
    struct QueuedWork: Sendable {
        let work: AdapterWork
        let size: Int
    }

    /// Bytes of work waiting in one adapter's queue (added by the engine, taken off by the adapter's loop).
    final class QueueGauge: Sendable {
        let bytes = Atomic<Int>(0)
    }

    /// One instance of an adapter as `host` runs it off the actor: the adapter, its context, its command
    /// queue and the signals that stop it and say it has stopped.
    struct HostedAdapter: Sendable {
        let adapter: any Adapter
        let generation: UInt64
        let context: AdapterContext
        let work: AsyncStream<QueuedWork>
        let queue: AsyncStream<QueuedWork>.Continuation
        let queued = QueueGauge()
        /// Its devices the user disabled when it started (told again through `setDisabled` when they change).
        var disabled: Set<String> = []
        let stop = Latch()
        let stopped = Latch()
        /// The worker has taken every piece of work off the finished queue and every outcome is in.
        let drained = Latch()
    }

    /// An instance's lifecycle, with raw messages held for a device it has not listed and routed work
    /// waiting for an instance that can take it.
    typealias Lifecycle = AdapterLifecycle<InboundMessage, QueuedWork>

    /// The engine's entry for one adapter id: the instance running now and its lifecycle, its devices, its
    /// status and counters for bridge/health (upstream requests and errors since the bridge started:
    /// carried to the next instance, like the registry).
    final class AdapterEntry {
        let hosted: HostedAdapter
        var registry: DeviceRegistry
        var life: Lifecycle
        var status: AdapterStatus = .starting
        var requests = 0
        var errors = 0
        var lastError: String?
        var lastOK: Date?
        var metrics: [String: JSONValue] = [:]
        var mirrorAvailable: Bool?
        var adapter: any Adapter { hosted.adapter }
        var generation: UInt64 { hosted.generation }
        /// Whether the adapter mirrors topics (`MirrorAdapter`), asked once: the router asks it for every
        /// message, and a cast to a protocol existential is a runtime conformance lookup.
        let isMirror: Bool
        init(hosted: HostedAdapter, registry: DeviceRegistry, life: Lifecycle) {
            self.hosted = hosted
            self.registry = registry
            self.life = life
            isMirror = hosted.adapter is any MirrorAdapter
        }
    }

    /// What the actor hands `supervise` to run as a child task of `run`: an adapter to host, a bridge
    /// request to answer, something to do after a delay.
    enum ChildJob: Sendable {
        case host(HostedAdapter)
        case request(path: String, body: JSONValue, transaction: JSONValue?, replyTo: ReplyTo?, origin: RequestOrigin, size: Int)
        case reannounce(generation: Int, delay: Double)
        case settle(adapter: String, generation: UInt64, after: Double)
        case summariseSuppressed(after: Double)
        case announce(adapter: String, generation: UInt64)
        case sweep(after: Double)
        /// A paced device's state (debounce, throttle) is due then.
        case pace(adapter: String, device: String, at: MonotonicInstant)
        /// Devices renamed with `homeassistant_rename`: their discovery configs, after Home Assistant let go.
        case announceAnew(adapter: String, devices: [String], after: Double)
        /// An adapter is told its disabled devices.
        case disable(adapter: String, generation: UInt64, devices: Set<String>)
    }

    public private(set) var settings: EngineSettings
    let transport: any MQTTTransport
    let logger: Logger
    let clock: any BridgeClock
    let discovery: DiscoveryBuilder
    let router: InboundRouter
    let startedAt = Date()
    /// The bounds hit by this bridge's work (its `run` binds it as the task's `Bounds.counter`).
    public nonisolated let bounds = BoundsCounter()
    let startedAtMonotonic: MonotonicInstant
    var entries: [String: AdapterEntry] = [:]
    var adapterOrder: [String] = []
    var nextGeneration: UInt64 = 0
    var info: JSONValue = .object([:])
    var retainedCommandTopicsLogged: Set<String> = []
    var subscribedDepths: Set<Int> = []
    var reannounceGeneration = 0
    /// Errors about input logged in the current second, and those beyond `errorLogsPerSecond` that were
    /// only counted (a flood of bad payloads must not become a flood of log lines).
    var errorWindow: (start: MonotonicInstant, logged: Int, suppressed: Int)?
    public static let errorLogsPerSecond = 100
    var stopped = false
    /// `run` has set the subscriptions and serves.
    var serving = false
    /// The bridge device's discovery topics as last announced.
    var bridgeDiscoveryTopics: [String] = []
    /// The clearing of orphaned discovery configs, once per process (see `DiscoverySweep`).
    enum SweepState { case waiting, deferred, collecting(nonce: String, found: Set<String>), migrating(topics: [String]), done }
    var sweep = SweepState.waiting
    /// Discovery configs held until the sweep has migrated the other mode's (`device` mode), and the
    /// re-announcement going out a few devices at a time (BridgeEngine+Publishing.swift).
    var discoveryHold = DiscoveryHold()
    var reannouncing = ReannounceCursor()
    var connectedOnce = false
    var reloader: (@Sendable () async throws -> JSONValue)?
    /// Commands with a transaction, from routing to their one result (see `answer`): whatever ends an
    /// adapter or the engine answers what is still here, so no publisher waits forever.
    var awaiting: [UInt64: Awaiting] = [:]
    /// One `replaceAdapters` at a time: each suspends while adapters drain and stop, and a second one
    /// meanwhile would find the same old entry and start a second instance beside the first.
    let replacements = SerialGate()
    /// Upstream requests and errors of adapters a reload removed, for the day their id comes back: an
    /// adapter's totals only grow.
    var retiredTotals: [String: (requests: Int, errors: Int)] = [:]
    var nextTicket: UInt64 = 0
    nonisolated let observers = EngineObservers()
    /// Hot standby (BridgeEngine+Standby.swift): commands to replay after a takeover, how many were, the
    /// figures the runtime adds to `bridge/health`, and the console's view of the instance.
    var replay: Replay?
    var standbyReplayed = 0
    /// Devices the group's previous active instance listed, by adapter and name (`expectDevices`): their
    /// commands wait for this instance's adapters to list them, until each adapter's start window closes.
    var expectedDevices: [String: Set<String>] = [:]
    /// The commands held for devices not listed yet when `run` ended (each answered then with an error), in
    /// the order they came.
    public private(set) var heldAtStop: [InboundMessage] = []
    var healthExtra: [String: JSONValue] = [:]
    var standby: StandbySnapshot?
    /// The per-device options by adapter and stable id (`setDevicePolicies`), for registries made later too.
    var devicePolicies: [String: [String: DevicePolicy]] = [:]
    /// Paced devices' states (debounce, throttle): when each last went out and when the next is due.
    var pacing: [PaceKey: Pace] = [:]
    /// Requests served outside the engine (the management requests: `setRequestHandler`).
    var requestHandler: RequestHandler?
    /// The groups and scenes the engine serves as its own devices (BridgeEngine+Groups.swift).
    var groupCore = GroupCore()
    let childJobs: AsyncStream<ChildJob>
    let childJobQueue: AsyncStream<ChildJob>.Continuation

    public init(settings: EngineSettings, transport: any MQTTTransport, logger: Logger, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.transport = transport
        self.logger = logger
        self.clock = clock
        self.startedAtMonotonic = clock.now()
        self.discovery = DiscoveryBuilder(scheme: settings.scheme, version: settings.version, supportURL: settings.supportURL,
                                          mode: settings.discoveryMode)
        discoveryHold.active = settings.discovery && settings.discoveryMode == .device
        self.router = InboundRouter(scheme: settings.scheme, maxPayload: settings.maxPayload, commandMaxAge: settings.commandMaxAge,
                                    discovery: settings.discovery)
        (childJobs, childJobQueue) = AsyncStream.makeStream(of: ChildJob.self)
    }

    var scheme: TopicScheme { settings.scheme }

    // MARK: lifecycle

    /// Sets the static part of bridge/info (version, broker, redacted config) and publishes it once `run`
    /// serves: `bridge/info` tells a client the bridge is there, so it goes out only after the engine's
    /// subscriptions, and a request sent on seeing it is heard (a standby takeover sets it before `run`).
    public func setInfo(_ info: JSONValue) {
        self.info = info
        if serving { publishInfo() }
    }

    public func setReloader(_ reloader: @escaping @Sendable () async throws -> JSONValue) {
        self.reloader = reloader
    }

    public func updateHealthInterval(_ seconds: TimeInterval) { settings.healthInterval = seconds }

    /// The bridge's life: publishes the bridge topics, runs `adapters` (each a child task), serves the
    /// broker's messages, and returns when cancelled or when the transport's events end. Before it
    /// returns, every adapter has stopped and every device's availability (and each mirror's) is `offline`.
    /// The transport publishes `bridge/state offline` after this, as the last message.
    public func run(adapters: [any Adapter]) async {
        await Bounds.$counter.withValue(bounds) { await serve(adapters: adapters) }
    }

    func serve(adapters: [any Adapter]) async {
        updateSubscriptions(force: true)
        serving = true
        publishInfo()
        publishDeviceList()
        for a in adapters { startAdapter(a) }
        startGroups()
        announceBridge()
        await withDiscardingTaskGroup { group in
            group.addTask { await self.healthLoop() }
            group.addTask { await self.supervise() }
            for await event in transport.events {
                handle(event)
                if case .message(let m) = event { transport.release(m) }
            }
            stopped = true
            childJobQueue.finish()
            group.cancelAll()
        }
        for entry in entries.values { for q in entry.life.waiting { refuse(q.work, "the bridge stopped before the command was carried out") } }
        answerLeftovers(adapterID: nil, generation: nil, "the bridge stopped before the command was carried out")
        // Stopped before the sweep with a rename's old topics waiting behind its config: both go out now, or those
        // topics would never be cleared (the next start knows only the new name).
        if discoveryHold.defersClears { releaseDiscoveryHold() }
        // Commands held for devices not listed yet (a group's or a scene's wait for every adapter), and those a
        // takeover was to replay whose turn had not come (the phase ended before its sentinel came back):
        // answered too, and kept for the runtime, which under hot standby hands them over when the connection
        // their answers would go out on is gone (`heldAtStop`, design.md §18).
        heldAtStop = (entries.values.flatMap(\.life.held) + unreplayed()).sorted { $0.receivedAtMonotonic < $1.receivedAtMonotonic }
        for m in heldAtStop { refuseHeld(m, "the bridge stopped before the command was carried out") }
        flushPaced()
        publishOffline()
        // An adapter keeps its context, which holds this engine: letting the adapters go breaks that cycle,
        // so that the engine and everything it holds are freed once run has returned (else LeakSanitizer reports it).
        entries.removeAll()
        adapterOrder.removeAll()
    }

    /// Runs what the actor hands over as children of `run`: adapters, requests, the re-announcement.
    nonisolated func supervise() async {
        await withDiscardingTaskGroup { group in
            for await job in childJobs {
                switch job {
                case .host(let h):
                    group.addTask { await Self.host(h, engine: self) }
                case .request(let path, let body, let transaction, let replyTo, let origin, let size):
                    group.addTask { await self.serveRequest(path: path, body: body, transaction: transaction, replyTo: replyTo, origin: origin, size: size) }
                case .pace(let adapter, let device, let at):
                    group.addTask {
                        do { try await self.clock.sleep(until: at) } catch { return }
                        await self.paceDue(adapter, device)
                    }
                case .announceAnew(let adapter, let devices, let after):
                    group.addTask {
                        do { try await self.clock.sleep(seconds: after) } catch { return }
                        await self.announceAnew(adapter, devices)
                    }
                case .disable(let adapter, let generation, let devices):
                    group.addTask { await self.tellDisabled(adapter, generation, devices) }
                case .reannounce(let generation, let delay):
                    group.addTask {
                        do { try await self.clock.sleep(seconds: delay) } catch { return }
                        await self.reannounce(generation)
                    }
                case .announce(let adapter, let generation):
                    group.addTask { await self.flushAnnouncements(adapter, generation) }
                case .sweep(let after):
                    group.addTask {
                        do { try await self.clock.sleep(seconds: after) } catch { return }
                        await self.maybeSweep(deferred: true)
                    }
                case .summariseSuppressed(let after):
                    group.addTask {
                        do { try await self.clock.sleep(seconds: after) } catch { return }
                        await self.summariseSuppressed()
                    }
                case .settle(let adapter, let generation, let after):
                    group.addTask {
                        do { try await self.clock.sleep(seconds: after) } catch { return }
                        await self.startWindowClosed(adapter, generation)
                    }
                }
            }
        }
    }

    /// One adapter's life: its `run` and the worker that feeds it commands, until told to stop; then
    /// both are cancelled and awaited, and so is every command outcome still being waited for.
    static func host(_ h: HostedAdapter, engine: BridgeEngine) async {
        let id = h.adapter.id
        // Nothing of the adapter runs before its upstream lease begins (hot standby's hand-over pause): its
        // commands queue meanwhile, and those for devices it has not listed are held as at any start.
        await UpstreamLease.begun()
        // Cancelled during the pause (the engine stopping): the adapter never starts, so nothing of it reaches
        // its upstream; what was queued for it ends as at any stop.
        let start = !Task.isCancelled
        await withDiscardingTaskGroup { g in
            if start { g.addTask {
                do {
                    if !h.disabled.isEmpty { await h.adapter.setDisabled(h.disabled) }
                    try await h.adapter.run(context: h.context)
                } catch is CancellationError {
                } catch {
                    if !Task.isCancelled { await engine.adapterFailed(id, h.generation, error) }
                }
            } }
            g.addTask {
                await withDiscardingTaskGroup { outcomes in
                    for await q in h.work {
                        h.queued.bytes.subtract(q.size, ordering: .relaxed)
                        if let outcome = await carryOut(q.work, h, engine: engine) { outcomes.addTask { await outcome() } }
                    }
                }
                h.drained.signal()
            }
            await h.stop.wait()
            g.cancelAll()
        }
        h.stopped.signal()
    }

    func adapterFailed(_ id: String, _ generation: UInt64, _ error: any Error) {
        logger.error("adapter stopped", metadata: ["adapter": "\(id)", "error": "\(error)"])
        setStatus(id, generation, .error("\(error)"))
        guard let entry = current(id, generation) else { return }
        release(entry.life.runFailed(), to: entry)
    }

    /// Replaces adapters after a config reload: each of `start` replaces the running adapter of its id
    /// (which is stopped first, its devices kept until the new listing says otherwise) or starts anew;
    /// the ids in `remove` are stopped and their devices removed. Returns once the old adapters have
    /// stopped (and released what they held). Runs on the caller's task: the bounds it hits (held
    /// commands routed again) are this bridge's.
    public func replaceAdapters(start: [any Adapter], remove: Set<String>) async {
        await Bounds.$counter.withValue(bounds) { await replace(start: start, remove: remove) }
    }

    func replace(start: [any Adapter], remove: Set<String>) async {
        _ = try? await replacements.run { await self.replaceNow(start: start, remove: remove) }
    }

    private func replaceNow(start: [any Adapter], remove: Set<String>) async {
        for id in adapterOrder where remove.contains(id) {
            guard let entry = entries[id] else { continue }
            let ending = await stopAdapter(entry, successor: false)
            retiredTotals[id] = (entry.requests, entry.errors)
            var out: [RegistryOutput] = []
            entry.registry.removeAll(reason: "adapter removed from config", into: &out)
            emit(out)
            entries[id] = nil
            adapterOrder.removeAll { $0 == id }
            groupsRelisted(id)
            if case .drop(let left) = ending {
                for q in left.waiting { refuse(q.work, "adapter '\(id)' was removed from the config; command dropped") }
                // Routed again, held commands meet the adapter's absence: "unknown adapter", answered when asked.
                for m in left.held { handle(m) }
            }
        }
        adapterOrder.removeAll { remove.contains($0) }
        for a in start {
            var handOver: Lifecycle.Release?
            if let old = entries[a.id] {
                if case .handOver(let left) = await stopAdapter(old, successor: true) { handOver = left }
                // What the old instance learnt of its upstream, where the new one can take it (LIFX: which
                // transport saw which light), so that a reload forgets nothing a listing would not say again.
                await a.inherit(from: old.adapter)
            }
            startAdapter(a, after: handOver)
        }
        publishDeviceList()
        updateSubscriptions()
        publishInfo()
        announceBridge()
        // An adapter this replacement removed may have been the one the sweep of orphaned configs waited
        // for (docs/topics.md "Home Assistant discovery").
        maybeSweep()
    }

    /// Hosts a new instance of an adapter. `handOver` is what a stopped instance of the same id left: its
    /// held commands stay held, its waiting work is routed to the new instance, which carries the old one's
    /// devices (and their retained topics) until its own listing says otherwise.
    func startAdapter(_ adapter: any Adapter, after handOver: Lifecycle.Release? = nil) {
        let id = adapter.id
        nextGeneration += 1
        let generation = nextGeneration
        let (work, queue) = AsyncStream.makeStream(of: QueuedWork.self, bufferingPolicy: .bufferingOldest(settings.commandQueueLimit))
        var hosted = HostedAdapter(adapter: adapter, generation: generation,
                                   context: AdapterContext(adapterID: id, host: Host(engine: self, adapterID: id, generation: generation)),
                                   work: work, queue: queue)
        let old = entries[id]
        // What came for the old instance between its stop and now (while the new one inherited from it).
        var handOver = handOver
        if let late = old?.life.handOff(), !late.isEmpty {
            handOver = Lifecycle.Release(waiting: (handOver?.waiting ?? []) + late.waiting, held: (handOver?.held ?? []) + late.held,
                                         heldBytes: (handOver?.heldBytes ?? 0) + late.heldBytes)
        }
        var registry = old?.registry.carried(reservedPrefixes: adapter.reservedPrefixes)
            ?? DeviceRegistry(adapterID: id, scheme: scheme, discovery: settings.discovery ? discovery : nil,
                              reservedPrefixes: adapter.reservedPrefixes)
        if old == nil, let p = devicePolicies[id] {
            var none: [RegistryOutput] = []
            _ = registry.setPolicies(p, into: &none)
        }
        hosted.disabled = Set(registry.policies.filter(\.value.disabled).keys)
        if old == nil { adapterOrder.append(id) }
        let life = Lifecycle(bounds: .init(limit: settings.heldLimit, bytes: settings.heldBytesLimit), carried: old != nil,
                             held: handOver?.held ?? [], heldBytes: handOver?.heldBytes ?? 0)
        let entry = AdapterEntry(hosted: hosted, registry: registry, life: life)
        (entry.requests, entry.errors) = old.map { ($0.requests, $0.errors) } ?? retiredTotals.removeValue(forKey: id) ?? (0, 0)
        entries[id] = entry
        // Devices the old instance listed but whose announcement was still waiting for their first states:
        // announced now, whether or not the new instance ever lists or reports.
        if !registry.pendingAnnouncements.isEmpty { childJobQueue.yield(.announce(adapter: id, generation: generation)) }
        if case .terminated = childJobQueue.yield(.host(hosted)) {
            hosted.stopped.signal()   // the engine is stopping: it never runs
        }
        childJobQueue.yield(.settle(adapter: id, generation: generation, after: settings.settleTimeout))
        // Work that arrived while the old instance was stopping goes to the new one, in arrival order.
        for q in handOver?.waiting ?? [] { enqueue(entry, q.work) }
    }

    /// The adapter has listed its devices (or said it cannot, or the settle time passed): what waited for
    /// that is queued and routed now.
    func settle(_ adapterID: String, _ generation: UInt64) {
        guard let entry = current(adapterID, generation), !entry.life.isSettled else { return }
        release(entry.life.settle(), to: entry)
        groupsSettled()
        maybeSweep()
    }

    /// The settle time after an instance started has passed: it is settled if it was not, and no command
    /// waits any more for a device it may still list (those that did are routed again: carried out, or
    /// refused as unknown). The devices the group knew are no longer expected of it.
    func startWindowClosed(_ adapterID: String, _ generation: UInt64) {
        guard let entry = current(adapterID, generation) else { return }
        expectedDevices[adapterID] = nil
        let waited = entry.life.stopAwaiting()
        settle(adapterID, generation)
        release(waited, to: entry)
        // The groups may have waited for a member this adapter was expected to list.
        groupsSettled()
    }

    /// Work a lifecycle transition let go: waiting work queued to the instance, held commands routed again.
    func release(_ r: Lifecycle.Release, to entry: AdapterEntry) {
        for q in r.waiting { enqueue(entry, q.work) }
        for m in r.held { handle(m) }
    }

    /// A held command that will not be carried out: its error on `bridge/log`, and where the command asked
    /// to be answered.
    /// However it would be routed now (its device listed, renamed or disabled meanwhile), it is answered.
    func refuseHeld(_ m: InboundMessage, _ message: String) {
        switch router.route(m, in: Directory(entries: entries, order: adapterOrder, expected: expectedDevices)) {
        case .unknownDevice(_, _, _, let topic, let transaction, let resultTopic, let replyTo),
             .command(_, _, let topic, let transaction, let resultTopic, let replyTo):
            observers.commandRefused(topic)
            reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
        case .reject(_, let topic, let transaction, let resultTopic, let replyTo):
            observers.commandRefused(topic)
            reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
        default:
            reportError(message, topic: m.topic, transaction: nil, resultTopic: nil, replyTo: nil)
        }
    }

    /// A command for a device its adapter has not listed: held until the adapter lists (within the
    /// per-adapter bounds), or refused as unknown once it has; one for a device it may still list
    /// (`expected`) is held until a listing brings it or the adapter's start window closes.
    func hold(_ m: InboundMessage, for entry: AdapterEntry, _ message: String, expected: Bool, transaction: JSONValue?, resultTopic: String,
              replyTo: ReplyTo?) {
        switch entry.life.hold(m, bytes: m.payload.count + (m.replyTo?.footprint ?? 0), expected: expected) {
        case .kept, .enqueue:
            return
        case .refuse(.heldFull):
            Bounds.hit("held_commands")
            reportError("\(message): adapter '\(entry.adapter.id)' has not listed its devices yet and holds no more commands; dropped",
                        topic: m.topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
        case .refuse:
            observers.commandRefused(m.topic)
            reportError(message, topic: m.topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
        }
    }

    /// Stops one adapter instance: what is already in its queue is carried out first (for at most
    /// `drainTimeout`), then its run and worker are cancelled; whatever it did not answer is answered with
    /// an error once it has stopped. Returns what waited for it (`AdapterLifecycle.finish`).
    func stopAdapter(_ entry: AdapterEntry, successor: Bool) async -> Lifecycle.Ending {
        _ = entry.life.beginStop(successor: successor)
        entry.hosted.queue.finish()
        let drained = entry.hosted.drained
        await firstResult(of: { await drained.wait() }, within: settings.drainTimeout, clock: clock, otherwise: ())
        entry.life.cancel()
        entry.hosted.stop.signal()
        await entry.hosted.stopped.wait()
        answerLeftovers(adapterID: entry.adapter.id, generation: entry.generation,
                        "adapter '\(entry.adapter.id)' stopped before the command was carried out")
        return entry.life.finish()
    }

    /// Clean shutdown (design.md §11): `offline` on every device availability topic and every mirror's.
    func publishOffline() {
        for id in adapterOrder {
            guard let entry = entries[id] else { continue }
            for p in entry.registry.offlineAll() { publish(p) }
            if entry.mirrorAvailable != nil {
                transport.publish("\(scheme.base)/\(id)/availability", "offline", qos: 1, retain: true)
            }
        }
    }

    nonisolated func healthLoop() async {
        while !Task.isCancelled {
            let interval = await settings.healthInterval
            do { try await clock.sleep(seconds: interval) } catch { return }
            await publishHealth()
        }
    }

    // MARK: inbound

    func handle(_ event: TransportEvent) {
        switch event {
        case .connected(let sessionPresent):
            logger.debug("broker connected: republished by the transport", metadata: ["mqtt.session_present": "\(sessionPresent)"])
            connectedOnce = true
            // A sweep cut short by the disconnect asks again (its subscription came back with the session).
            if case .collecting(let nonce, _) = sweep { transport.publish(sweepTopic, Array(nonce.utf8), qos: 1, retain: false) }
            maybeSweep()
            askForReplaySentinel()
        case .disconnected(let reason):
            logger.debug("broker disconnected: publishes wait in the outbox", metadata: ["reason": "\(reason)"])
        case .message(let m):
            handle(m)
        case .refused(let topic, let reason):
            Bounds.hit("packet_size")
            // Not about bridge/log itself: a log line too large for the broker must not make another one.
            if topic == scheme.bridge("log") { logger.error("\(reason)") } else { log(.error, reason, topic: topic) }
        }
    }

    func handle(_ m: InboundMessage) {
        guard !stopped else { return }
        // Discovery configs reach us only while the sweep reads them (and its sentinel ends it).
        if m.topic.hasPrefix(scheme.discoveryPrefix + "/") && m.topic != scheme.haStatusTopic || m.topic == sweepTopic {
            swept(m)
            return
        }
        if replay != nil {
            if m.topic == replayTopic { replayed(m); return }
            noteDelivered(m)
        }
        switch router.route(m, in: Directory(entries: entries, order: adapterOrder, expected: expectedDevices)) {
        case .none:
            break
        case .homeAssistantOnline:
            scheduleReannounce()
        case .retainedCommand(let topic):
            // design.md §5: a command replayed from the broker's retained store is ignored, logged once per topic.
            guard retainedCommandTopicsLogged.insert(topic).inserted else { return }
            log(.warning, "ignored a retained command (commands must not be published with retain; clear it with: mosquitto_pub -r -n -t '\(topic)')",
                topic: topic)
        case .request(let path, let payload, let replyTo):
            handleRequest(path: path, payload: payload, replyTo: replyTo, origin: m.fromConsole ? .console : .mqtt)
        case .refusedRequest(let path, let message):
            respond(path, .failure(AdapterError(message)), transaction: nil, replyTo: nil)
            reportError(message, topic: m.topic, transaction: nil, resultTopic: nil)
        case .mirror(let adapter, let path, let topic, let replyTo):
            if let entry = entries[adapter] { enqueue(entry, .mirror(path: path, payload: m.payload, topic: topic, replyTo: replyTo)) }
        case .command(let adapter, let command, let topic, let transaction, let resultTopic, let replyTo):
            nextTicket += 1
            let reply = Reply(ticket: nextTicket, adapter: adapter, routedAt: clock.now(), topic: topic, transaction: transaction,
                              resultTopic: resultTopic, replyTo: replyTo)
            // A group's or a scene's command fans out to the members' adapters at once (BridgeEngine+Groups.swift).
            if groupCore.serves(adapter) { return fanOut(adapter, command, reply) }
            if let entry = entries[adapter] { enqueue(entry, .command(command, reply)) }
        case .refresh(let adapter, let deviceID, let topic, let replyTo):
            if let entry = entries[adapter] { enqueue(entry, .refresh(deviceID: deviceID, topic: topic, replyTo: replyTo)) }
        case .reject(let message, let topic, let transaction, let resultTopic, let replyTo):
            observers.commandRefused(topic)
            reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
        case .unknownDevice(let adapter, let message, let expected, let topic, let transaction, let resultTopic, let replyTo):
            if let entry = entries[adapter] {
                hold(m, for: entry, message, expected: expected, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
            } else {
                observers.commandRefused(topic)
                reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic, replyTo: replyTo)
            }
        }
    }

    /// The router's view of the adapters.
    struct Directory: InboundDirectory {
        let entries: [String: AdapterEntry]
        let order: [String]
        let expected: [String: Set<String>]
        func isMirror(_ adapter: String) -> Bool? { entries[adapter]?.isMirror }
        func device(_ adapter: String, named name: String) -> (id: String, descriptor: DeviceDescriptor, name: String)? {
            guard let r = entries[adapter]?.registry.record(named: name) else { return nil }
            return (r.descriptor.id, r.descriptor, r.name)
        }
        var adapterIDs: [String] { order }
        func retired(_ adapter: String, named name: String) -> String? { entries[adapter]?.registry.retired[name] }
        func expects(_ adapter: String, named name: String) -> Bool { expected[adapter]?.contains(name) == true }
    }

    /// Queues work for an adapter, within its bounds; what its lifecycle keeps (a reload replacing it, a
    /// new instance that has not listed) waits there. Refused work is answered at once.
    func enqueue(_ entry: AdapterEntry, _ work: AdapterWork) {
        let adapter = entry.adapter.id
        let size = work.size
        let arrival: Lifecycle.Arrival
        if case .mirror = work { arrival = .unlisted } else { arrival = .listedDevice }
        switch entry.life.route(QueuedWork(work: work, size: size), bytes: size, arrival) {
        case .kept:
            return
        case .refuse(.waitingFull):
            Bounds.hit("held_commands")
            refuse(work, "adapter '\(adapter)' is restarting and holds no more commands; dropped")
            return
        case .refuse:
            refuse(work, "adapter '\(adapter)' is not running")
            return
        case .enqueue:
            break
        }
        if entry.hosted.queued.bytes.load(ordering: .relaxed) + size > settings.commandQueueBytes {
            Bounds.hit("command_queue")
            refuse(work, "command queue of adapter '\(adapter)' holds \(settings.commandQueueBytes) bytes already; command dropped")
            return
        }
        switch entry.hosted.queue.yield(QueuedWork(work: work, size: size)) {
        case .enqueued:
            entry.hosted.queued.bytes.add(size, ordering: .relaxed)
            if case .command(_, let r) = work { track(r, entry) }
            if case .batch(_, let rs) = work { for r in rs { track(r, entry) } }
        case .dropped:
            Bounds.hit("command_queue")
            refuse(work, "command queue of adapter '\(adapter)' is full (\(settings.commandQueueLimit)); command dropped")
        case .terminated:
            refuse(work, "adapter '\(adapter)' is not running")
        @unknown default: break
        }
    }

    /// Work that will not be carried out: its error, on the result topic when the command asked for one.
    func refuse(_ work: AdapterWork, _ message: String) {
        switch work {
        case .command(_, let r) where r.parent != nil:
            answer(r, error: message)
        case .command(_, let r):
            observers.commandFinished(r, ok: false, at: clock.now())
            reportError(message, topic: r.topic, transaction: r.transaction, resultTopic: r.resultTopic, replyTo: r.replyTo)
        case .batch(_, let rs):
            for r in rs { answer(r, error: message) }
        case .mirror(_, _, let topic, let replyTo), .refresh(_, let topic, let replyTo):
            reportError(message, topic: topic, transaction: nil, resultTopic: nil, replyTo: replyTo)
        }
    }

    /// A queued command with a transaction (or a Response Topic) is on the books until `answer` (or
    /// `answerLeftovers`) answers it.
    func track(_ r: Reply, _ entry: AdapterEntry) {
        guard r.wantsAnswer else { return }
        awaiting[r.ticket] = Awaiting(adapterID: entry.adapter.id, generation: entry.generation, reply: r)
    }

    /// The one result of a command: `ok`, or its error (also on bridge/log). A command answered already
    /// (by `answerLeftovers`, when its adapter stopped) only logs.
    func answer(_ r: Reply, error: String?) {
        if let parent = r.parent { return memberAnswered(r, parent: parent, error: error) }
        let first = r.wantsAnswer && awaiting.removeValue(forKey: r.ticket) != nil
        // Its outcome is counted once: a command with a transaction (or a Response Topic) when it leaves `awaiting`.
        if first || !r.wantsAnswer { observers.commandFinished(r, ok: error == nil, at: clock.now()) }
        if let error {
            reportError(error, topic: r.topic, transaction: first ? r.transaction : nil, resultTopic: r.resultTopic,
                        replyTo: first ? r.replyTo : nil)
        } else if first {
            var result: [String: JSONValue] = ["status": "ok"]
            if let transaction = r.transaction { result["transaction"] = transaction }
            publishAnswer(.object(result), on: r.transaction == nil ? nil : r.resultTopic, replyTo: r.replyTo)
        }
    }

    /// Answers, with `message`, every command still awaiting its result from one adapter instance (or,
    /// with nil, from any).
    func answerLeftovers(adapterID: String?, generation: UInt64?, _ message: String) {
        let left = awaiting.values.filter { a in adapterID.map { a.adapterID == $0 } ?? true && generation.map { a.generation == $0 } ?? true }
        for a in left.sorted(by: { $0.reply.ticket < $1.reply.ticket }) { answer(a.reply, error: message) }
    }

    /// Carries out one piece of work in arrival order, on the adapter's worker: it calls the adapter itself
    /// (one hop, onto the adapter) and comes to the engine only with something to publish. A command's
    /// outcome is awaited off the queue (the returned closure, run as a child of the worker), so an adapter
    /// that merges requests (LIFX) sees the next command while the previous one is still on the wire. A
    /// command that went well without a transaction publishes nothing: the worker reports its outcome to
    /// the observer itself (`EngineObservers` is behind a lock), with no hop to the engine.
    nonisolated static func carryOut(_ work: AdapterWork, _ h: HostedAdapter, engine: BridgeEngine) async -> (@Sendable () async -> Void)? {
        let adapter = h.adapter, context = h.context
        switch work {
        case .command(let cmd, let reply):
            let pending: PendingCommand
            do {
                pending = try await adapter.accept(cmd, context: context)
            } catch {
                await engine.answer(reply, error: message(of: error, adapter: adapter.id))
                return nil
            }
            if pending.isDone && !reply.wantsAnswer {
                engine.observers.commandFinished(reply, ok: true, at: engine.clock.now())
                return nil
            }
            return {
                var failure: String?
                do { try await pending.wait() } catch { failure = message(of: error, adapter: adapter.id) }
                if failure != nil || reply.wantsAnswer {
                    await engine.answer(reply, error: failure)
                } else {
                    engine.observers.commandFinished(reply, ok: true, at: engine.clock.now())
                }
            }
        case .batch(let cmds, let replies):
            let pending = await adapter.acceptBatch(cmds, context: context)
            return {
                await withDiscardingTaskGroup { g in
                    for (i, r) in replies.enumerated() {
                        g.addTask {
                            var failure: String?
                            if i < pending.count {
                                do { try await pending[i].wait() } catch { failure = message(of: error, adapter: adapter.id) }
                            } else {
                                failure = "adapter '\(adapter.id)' gave no outcome for the command"
                            }
                            await engine.answer(r, error: failure)
                        }
                    }
                }
            }
        case .mirror(let path, let payload, let topic, let replyTo):
            guard let mirror = adapter as? any MirrorAdapter else { return nil }
            do {
                try await mirror.command(path: path, payload: payload, context: context)
                if let replyTo { await engine.publishAnswer(["status": "ok"], on: nil, replyTo: replyTo) }
            } catch {
                await engine.reportError(message(of: error), topic: topic, transaction: nil, resultTopic: nil, replyTo: replyTo)
            }
        case .refresh(let deviceID, let topic, let replyTo):
            do {
                try await adapter.refresh(deviceID: deviceID, context: context)
                await engine.republishState(of: deviceID, adapterID: adapter.id, generation: h.generation, replyTo: replyTo)
            } catch {
                await engine.reportError(message(of: error), topic: topic, transaction: nil, resultTopic: nil, replyTo: replyTo)
            }
        }
        return nil
    }

    /// After a `/get`: the device's state published again, whether or not it changed; to a v5 client that
    /// gave a Response Topic, also as the answer there (`{"status":"ok","state":{…}}`).
    func republishState(of deviceID: String, adapterID: String, generation: UInt64, replyTo: ReplyTo? = nil) {
        let entry = current(adapterID, generation)
        if let p = entry?.registry.state(deviceID, force: true) { publish(p) }
        guard let replyTo else { return }
        if let state = entry?.registry.devices[deviceID]?.state {
            publishAnswer(["status": "ok", "state": .object(state)], on: nil, replyTo: replyTo)
        } else {
            publishAnswer(["status": "error", "error": "the device's state is not known (it was removed, or its adapter stopped)"],
                          on: nil, replyTo: replyTo)
        }
    }

    /// A command's error in words; one cut short because its adapter was stopping says so.
    static func message(of error: any Error, adapter: String) -> String {
        Task.isCancelled ? "adapter '\(adapter)' stopped before the command was answered" : message(of: error)
    }

    static func message(of error: any Error) -> String {
        if let e = error as? AdapterError { return e.message }
        return "\(error)"
    }

    // MARK: introspection for tests and the CLI

    public func deviceNames(_ adapterID: String) -> [String: String] {
        (entries[adapterID]?.registry.devices ?? [:]).mapValues(\.name)
    }
}

extension BridgeEngine {
    /// SIGHUP: the same as `bridge/request/config/reload`, answered on `bridge/response/config/reload`.
    public func reloadFromSignal() {
        Bounds.$counter.withValue(bounds) { handleRequest(path: "config/reload", payload: []) }
    }

    /// Answers while the actor is not wedged (for the systemd watchdog).
    public func isAlive() -> Bool { !stopped }
}
