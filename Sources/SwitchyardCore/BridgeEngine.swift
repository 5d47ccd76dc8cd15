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
        case mirror(path: String, payload: [UInt8], topic: String)
        case refresh(deviceID: String, topic: String)

        /// What the queued work holds on to, as counted against `commandQueueBytes` (measured once, when
        /// it is queued; the queue carries the figure so that taking it off does not measure again).
        var size: Int {
            switch self {
            case .command(let c, let r):
                return JSONValue.object(c.fields).bytes.count + r.topic.utf8.count + (r.transaction?.bytes.count ?? 0) + r.resultTopic.utf8.count
            case .mirror(let path, let payload, let topic): return payload.count + path.utf8.count + topic.utf8.count
            case .refresh(let id, let topic): return id.utf8.count + topic.utf8.count
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
        let context: AdapterContext
        let work: AsyncStream<QueuedWork>
        let queue: AsyncStream<QueuedWork>.Continuation
        let queued = QueueGauge()
        let stop = Latch()
        let stopped = Latch()
        /// The worker has taken every piece of work off the finished queue and every outcome is in.
        let drained = Latch()
    }

    /// The engine's entry for one adapter id: the instance running now, its devices, its status and
    /// counters for bridge/health (upstream requests and errors since the bridge started: carried to the
    /// next instance, like the registry), and the commands waiting for it.
    final class AdapterEntry {
        let hosted: HostedAdapter
        var registry: DeviceRegistry
        var status: AdapterStatus = .starting
        var requests = 0
        var errors = 0
        var lastError: String?
        var lastOK: Date?
        var metrics: [String: JSONValue] = [:]
        var mirrorAvailable: Bool?
        /// False until the adapter's first listing (or status): commands for devices it has not listed
        /// wait in `held` until then.
        var settled = false
        var held: [InboundMessage] = []
        var heldBytes = 0
        /// Set while a reload replaces this adapter: work routed to it waits in `waiting` for the new one
        /// (counted against the same bounds as `held`) instead of meeting a finished queue.
        var replacing = false
        /// Set once the adapter is told to stop: what it reports from then on (a cancelled request's error
        /// among it) changes nothing.
        var stopping = false
        /// A reload's new instance, until it settles (its first listing or a status saying none is coming, at
        /// most `settleTimeout`): commands and refreshes for the devices it carries over wait in `waiting`
        /// too, instead of reaching an instance that does not know them yet.
        var awaitingListing = false
        var waiting: [QueuedWork] = []
        var waitingBytes = 0
        var adapter: any Adapter { hosted.adapter }
        var generation: UInt64 { hosted.context.generation }
        /// Whether the adapter mirrors topics (`MirrorAdapter`), asked once: the router asks it for every
        /// message, and a cast to a protocol existential is a runtime conformance lookup (perf of the
        /// lifx-lan bench: about 10 % of routing a command).
        let isMirror: Bool
        init(hosted: HostedAdapter, registry: DeviceRegistry) {
            self.hosted = hosted
            self.registry = registry
            isMirror = hosted.adapter is any MirrorAdapter
        }
    }

    /// What the actor hands `supervise` to run as a child task of `run`: an adapter to host, a bridge
    /// request to answer, something to do after a delay.
    enum ChildJob: Sendable {
        case host(HostedAdapter)
        case request(path: String, body: JSONValue, transaction: JSONValue?)
        case reannounce(generation: Int, delay: Double)
        case settle(adapter: String, generation: UInt64, after: Double)
        case summariseSuppressed(after: Double)
        case announce(adapter: String, generation: UInt64)
        case sweep(after: Double)
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
    /// `replaceAdapters` in progress, and the calls waiting for it.
    var replacingAdapters = false
    var replacementQueue: [CheckedContinuation<Void, Never>] = []
    /// Upstream requests and errors of adapters a reload removed, for the day their id comes back: an
    /// adapter's totals only grow.
    var retiredTotals: [String: (requests: Int, errors: Int)] = [:]
    var nextTicket: UInt64 = 0
    nonisolated let observers = EngineObservers()
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

    /// Sets the static part of bridge/info (version, broker, redacted config) and publishes it.
    public func setInfo(_ info: JSONValue) {
        self.info = info
        publishInfo()
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
        publishInfo()
        publishDeviceList()
        for a in adapters { startAdapter(a) }
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
        for entry in entries.values { for q in entry.waiting { refuse(q.work, "the bridge stopped before the command was carried out") } }
        answerLeftovers(adapterID: nil, generation: nil, "the bridge stopped before the command was carried out")
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
                case .request(let path, let body, let transaction):
                    group.addTask { await self.serveRequest(path: path, body: body, transaction: transaction) }
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
                        await self.settle(adapter, generation)
                    }
                }
            }
        }
    }

    /// One adapter's life: its `run` and the worker that feeds it commands, until told to stop; then
    /// both are cancelled and awaited, and so is every command outcome still being waited for.
    static func host(_ h: HostedAdapter, engine: BridgeEngine) async {
        let id = h.adapter.id
        await withDiscardingTaskGroup { g in
            g.addTask {
                do {
                    try await h.adapter.run(context: h.context)
                } catch is CancellationError {
                } catch {
                    if !Task.isCancelled { await engine.adapterFailed(id, h.context.generation, error) }
                }
            }
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
        // One replacement at a time: this one suspends while adapters drain and stop, and a second one
        // meanwhile would find the same old entry and start a second instance beside the first.
        while replacingAdapters { await withCheckedContinuation { replacementQueue.append($0) } }
        replacingAdapters = true
        defer {
            replacingAdapters = false
            if !replacementQueue.isEmpty { replacementQueue.removeFirst().resume() }
        }
        for id in adapterOrder where remove.contains(id) {
            guard let entry = entries[id] else { continue }
            entry.replacing = true
            await stopAdapter(entry, drain: true)
            retiredTotals[id] = (entry.requests, entry.errors)
            var out: [RegistryOutput] = []
            entry.registry.removeAll(reason: "adapter removed from config", into: &out)
            emit(out)
            entries[id] = nil
            adapterOrder.removeAll { $0 == id }
            for q in entry.waiting { refuse(q.work, "adapter '\(id)' was removed from the config; command dropped") }
            // Routed again, held commands meet the adapter's absence: "unknown adapter", answered when asked.
            for m in entry.held { handle(m) }
        }
        adapterOrder.removeAll { remove.contains($0) }
        for a in start {
            if let old = entries[a.id] {
                old.replacing = true
                await stopAdapter(old, drain: true)
                // What the old instance learnt of its upstream, where the new one can take it (LIFX: which
                // transport saw which light), so that a reload forgets nothing a listing would not say again.
                await a.inherit(from: old.adapter)
            }
            startAdapter(a)
        }
        publishDeviceList()
        updateSubscriptions()
        publishInfo()
        announceBridge()
        // An adapter this replacement removed may have been the one the sweep of orphaned configs waited
        // for (docs/topics.md "Home Assistant discovery").
        maybeSweep()
    }

    func startAdapter(_ adapter: any Adapter) {
        let id = adapter.id
        nextGeneration += 1
        let (work, queue) = AsyncStream.makeStream(of: QueuedWork.self, bufferingPolicy: .bufferingOldest(settings.commandQueueLimit))
        let hosted = HostedAdapter(adapter: adapter, context: AdapterContext(engine: self, adapterID: id, generation: nextGeneration),
                            work: work, queue: queue)
        // A restart keeps the devices (and their retained topics) until the new listing says otherwise.
        let registry = entries[id]?.registry.carried(reservedPrefixes: adapter.reservedPrefixes)
            ?? DeviceRegistry(adapterID: id, scheme: scheme, discovery: settings.discovery ? discovery : nil,
                              reservedPrefixes: adapter.reservedPrefixes)
        if entries[id] == nil { adapterOrder.append(id) }
        let entry = AdapterEntry(hosted: hosted, registry: registry)
        let old = entries[id]
        if let old {
            // Commands still held for the adapter being replaced wait for the new one's listing.
            entry.held = old.held
            entry.heldBytes = old.heldBytes
        }
        (entry.requests, entry.errors) = old.map { ($0.requests, $0.errors) } ?? retiredTotals.removeValue(forKey: id) ?? (0, 0)
        entry.awaitingListing = old != nil
        entries[id] = entry
        // Devices the old instance listed but whose announcement was still waiting for their first states:
        // announced now, whether or not the new instance ever lists or reports.
        if !registry.pendingAnnouncements.isEmpty { childJobQueue.yield(.announce(adapter: id, generation: nextGeneration)) }
        if case .terminated = childJobQueue.yield(.host(hosted)) {
            hosted.stopped.signal()   // the engine is stopping: it never runs
        }
        childJobQueue.yield(.settle(adapter: id, generation: nextGeneration, after: settings.settleTimeout))
        // Work that arrived while the old instance was stopping goes to the new one, in arrival order.
        for q in old?.waiting ?? [] { enqueue(entry, q.work) }
    }

    /// The adapter has listed its devices (or said it cannot): held commands are routed now.
    func settle(_ adapterID: String, _ generation: UInt64) {
        guard let entry = current(adapterID, generation), !entry.settled else { return }
        entry.settled = true
        if entry.awaitingListing {
            entry.awaitingListing = false
            let waiting = entry.waiting
            entry.waiting = []
            entry.waitingBytes = 0
            for q in waiting { enqueue(entry, q.work) }
        }
        let held = entry.held
        entry.held = []
        entry.heldBytes = 0
        for m in held { handle(m) }
        maybeSweep()
    }

    /// Holds a command for a device its adapter has not listed yet, within the per-adapter bounds.
    func hold(_ m: InboundMessage, for entry: AdapterEntry, _ message: String, transaction: JSONValue?, resultTopic: String) {
        guard entry.held.count < settings.heldLimit, entry.heldBytes + m.payload.count <= settings.heldBytesLimit else {
            Bounds.hit("held_commands")
            reportError("\(message): adapter '\(entry.adapter.id)' has not listed its devices yet and holds no more commands; dropped",
                        topic: m.topic, transaction: transaction, resultTopic: resultTopic)
            return
        }
        entry.held.append(m)
        entry.heldBytes += m.payload.count
    }

    /// Stops one adapter instance. With `drain`, what is already in its queue is carried out first (for at
    /// most `drainTimeout`); whatever it did not answer is answered with an error once it has stopped.
    func stopAdapter(_ entry: AdapterEntry, drain: Bool) async {
        entry.hosted.queue.finish()
        if drain {
            let drained = entry.hosted.drained
            await firstResult(of: { await drained.wait() }, within: settings.drainTimeout, clock: clock, otherwise: ())
        }
        entry.stopping = true
        entry.hosted.stop.signal()
        await entry.hosted.stopped.wait()
        answerLeftovers(adapterID: entry.adapter.id, generation: entry.generation,
                        "adapter '\(entry.adapter.id)' stopped before the command was carried out")
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
        case .disconnected(let reason):
            logger.debug("broker disconnected: publishes wait in the outbox", metadata: ["reason": "\(reason)"])
        case .message(let m):
            handle(m)
        }
    }

    func handle(_ m: InboundMessage) {
        guard !stopped else { return }
        // Discovery configs reach us only while the sweep reads them (and its sentinel ends it).
        if m.topic.hasPrefix(scheme.discoveryPrefix + "/") && m.topic != scheme.haStatusTopic || m.topic == sweepTopic {
            swept(m)
            return
        }
        switch router.route(m, in: Directory(entries: entries, order: adapterOrder)) {
        case .none:
            break
        case .homeAssistantOnline:
            scheduleReannounce()
        case .retainedCommand(let topic):
            // design.md §5: a command replayed from the broker's retained store is ignored, logged once per topic.
            guard retainedCommandTopicsLogged.insert(topic).inserted else { return }
            log(.warning, "ignored a retained command (commands must not be published with retain; clear it with: mosquitto_pub -r -n -t '\(topic)')",
                topic: topic)
        case .request(let path, let payload):
            handleRequest(path: path, payload: payload)
        case .mirror(let adapter, let path, let topic):
            if let entry = entries[adapter] { enqueue(entry, .mirror(path: path, payload: m.payload, topic: topic)) }
        case .command(let adapter, let command, let topic, let transaction, let resultTopic):
            nextTicket += 1
            let reply = Reply(ticket: nextTicket, adapter: adapter, routedAt: clock.now(), topic: topic, transaction: transaction,
                              resultTopic: resultTopic)
            if let entry = entries[adapter] { enqueue(entry, .command(command, reply)) }
        case .refresh(let adapter, let deviceID, let topic):
            if let entry = entries[adapter] { enqueue(entry, .refresh(deviceID: deviceID, topic: topic)) }
        case .reject(let message, let topic, let transaction, let resultTopic):
            observers.commandRefused(topic)
            reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic)
        case .unknownDevice(let adapter, let message, let topic, let transaction, let resultTopic):
            if let entry = entries[adapter], !entry.settled {
                hold(m, for: entry, message, transaction: transaction, resultTopic: resultTopic)
            } else {
                observers.commandRefused(topic)
                reportError(message, topic: topic, transaction: transaction, resultTopic: resultTopic)
            }
        }
    }

    /// The router's view of the adapters.
    struct Directory: InboundDirectory {
        let entries: [String: AdapterEntry]
        let order: [String]
        func isMirror(_ adapter: String) -> Bool? { entries[adapter]?.isMirror }
        func device(_ adapter: String, named name: String) -> (id: String, descriptor: DeviceDescriptor, name: String)? {
            guard let r = entries[adapter]?.registry.record(named: name) else { return nil }
            return (r.descriptor.id, r.descriptor, r.name)
        }
        var adapterIDs: [String] { order }
    }

    /// Queues work for an adapter, within its bounds; while a reload replaces the adapter, the work waits
    /// for the new instance. Refused work is answered at once.
    func enqueue(_ entry: AdapterEntry, _ work: AdapterWork) {
        let adapter = entry.adapter.id
        let size = work.size
        let waitsForListing: Bool
        if case .mirror = work { waitsForListing = false } else { waitsForListing = entry.awaitingListing }
        if entry.replacing || waitsForListing {
            guard entry.waiting.count < settings.heldLimit, entry.waitingBytes + size <= settings.heldBytesLimit else {
                Bounds.hit("held_commands")
                refuse(work, "adapter '\(adapter)' is restarting and holds no more commands; dropped")
                return
            }
            entry.waiting.append(QueuedWork(work: work, size: size))
            entry.waitingBytes += size
            return
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
        case .command(_, let r):
            observers.commandFinished(r, ok: false, at: clock.now())
            reportError(message, topic: r.topic, transaction: r.transaction, resultTopic: r.resultTopic)
        case .mirror(_, _, let topic), .refresh(_, let topic): reportError(message, topic: topic, transaction: nil, resultTopic: nil)
        }
    }

    /// A queued command with a transaction is on the books until `answer` (or `answerLeftovers`) answers it.
    func track(_ r: Reply, _ entry: AdapterEntry) {
        guard r.transaction != nil else { return }
        awaiting[r.ticket] = Awaiting(adapterID: entry.adapter.id, generation: entry.generation, reply: r)
    }

    /// The one result of a command: `ok`, or its error (also on bridge/log). A command answered already
    /// (by `answerLeftovers`, when its adapter stopped) only logs.
    func answer(_ r: Reply, error: String?) {
        let first = r.transaction != nil && awaiting.removeValue(forKey: r.ticket) != nil
        // Its outcome is counted once: a command with a transaction when it leaves `awaiting`.
        if first || r.transaction == nil { observers.commandFinished(r, ok: error == nil, at: clock.now()) }
        if let error {
            reportError(error, topic: r.topic, transaction: first ? r.transaction : nil, resultTopic: r.resultTopic)
        } else if first, let transaction = r.transaction {
            transport.publish(r.resultTopic, json: ["transaction": transaction, "status": "ok"], qos: 1, retain: false)
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
            if pending.isDone && reply.transaction == nil {
                engine.observers.commandFinished(reply, ok: true, at: engine.clock.now())
                return nil
            }
            return {
                var failure: String?
                do { try await pending.wait() } catch { failure = message(of: error, adapter: adapter.id) }
                if failure != nil || reply.transaction != nil {
                    await engine.answer(reply, error: failure)
                } else {
                    engine.observers.commandFinished(reply, ok: true, at: engine.clock.now())
                }
            }
        case .mirror(let path, let payload, let topic):
            guard let mirror = adapter as? any MirrorAdapter else { return nil }
            do {
                try await mirror.command(path: path, payload: payload, context: context)
            } catch {
                await engine.reportError(message(of: error), topic: topic, transaction: nil, resultTopic: nil)
            }
        case .refresh(let deviceID, let topic):
            do {
                try await adapter.refresh(deviceID: deviceID, context: context)
                await engine.republishState(of: deviceID, adapterID: adapter.id, generation: context.generation)
            } catch {
                await engine.reportError(message(of: error), topic: topic, transaction: nil, resultTopic: nil)
            }
        }
        return nil
    }

    /// After a `/get`: the device's state published again, whether or not it changed.
    func republishState(of deviceID: String, adapterID: String, generation: UInt64) {
        if let entry = current(adapterID, generation), let p = entry.registry.state(deviceID, force: true) { publish(p) }
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
