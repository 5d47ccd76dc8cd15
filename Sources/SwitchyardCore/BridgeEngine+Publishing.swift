#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging

/// What adapters ask of the engine (through `AdapterContext`), and the engine's own publishing.
extension BridgeEngine {
    /// An adapter instance's `AdapterHost`: each call names the instance it comes from, and the engine
    /// ignores the calls of one that has stopped or been replaced.
    struct Host: AdapterHost {
        let engine: BridgeEngine
        let adapterID: String
        let generation: UInt64

        nonisolated(nonsending) func setDevices(_ devices: [DeviceDescriptor], authoritative: Bool, available: [String: Bool]) async {
            await engine.setDevices(adapterID, generation, devices, authoritative: authoritative, available: available)
        }
        nonisolated(nonsending) func update(_ deviceID: String, _ fields: [String: JSONValue]) async { await engine.update(adapterID, generation, deviceID, fields) }
        nonisolated(nonsending) func setAvailable(_ deviceID: String, _ available: Bool) async { await engine.setAvailable(adapterID, generation, deviceID, available) }
        nonisolated(nonsending) func report(_ reports: [DeviceReport]) async { await engine.report(adapterID, generation, reports) }
        nonisolated(nonsending) func setStatus(_ status: AdapterStatus) async { await engine.setStatus(adapterID, generation, status) }
        nonisolated(nonsending) func recordRequest(error: String?) async { await engine.recordRequest(adapterID, generation, error: error) }
        nonisolated(nonsending) func log(_ level: BridgeLogLevel, _ message: String, deviceID: String?) async {
            await engine.adapterLog(adapterID, generation, level, message, deviceID: deviceID)
        }
        nonisolated(nonsending) func publish(_ messages: [MirrorMessage]) async { await engine.mirrorPublish(adapterID, generation, messages) }
        nonisolated(nonsending) func setMirrorAvailable(_ available: Bool) async { await engine.setMirrorAvailable(adapterID, generation, available) }
        nonisolated(nonsending) func setMetrics(_ metrics: [String: JSONValue]) async { await engine.setMetrics(adapterID, generation, metrics) }
        nonisolated(nonsending) func event(_ type: String, _ data: [String: JSONValue]) async { await engine.adapterEvent(adapterID, generation, type, data) }
        nonisolated(nonsending) func state(of deviceID: String) async -> [String: JSONValue]? { await engine.currentState(adapterID, deviceID) }
    }

    // MARK: from adapters (each call names the adapter instance it comes from: a stopped one is ignored)

    /// The entry of this adapter instance, while it is the running one and the engine is not stopping.
    func current(_ adapterID: String, _ generation: UInt64) -> AdapterEntry? {
        guard let entry = entries[adapterID], entry.generation == generation, entry.life.acceptsReports, !stopped else { return nil }
        return entry
    }

    func setDevices(_ adapterID: String, _ generation: UInt64, _ listed: [DeviceDescriptor], authoritative: Bool,
                    available: [String: Bool]) {
        guard let entry = current(adapterID, generation) else { return }
        var out: [RegistryOutput] = []
        let changed = entry.registry.setDevices(listed, authoritative: authoritative, available: available, into: &out)
        emit(out)
        if changed {
            publishDeviceList()
            updateSubscriptions()
            groupsRelisted(adapterID)
        }
        // New devices are announced after the adapter's next states (`report`, `update`), or by the
        // supervisor right after this call if those do not come first.
        if !entry.registry.pendingAnnouncements.isEmpty { childJobQueue.yield(.announce(adapter: adapterID, generation: generation)) }
        // A listing from config names every device there is: none of the others the group knew is coming.
        if authoritative { expectedDevices[adapterID] = nil }
        if entry.life.isSettled {
            // Commands that waited for a device this listing may have brought (or identified) are routed again.
            if changed { release(entry.life.relisted(), to: entry) }
        } else {
            settle(adapterID, generation)
        }
    }

    /// What a listing left to announce, now.
    func flushAnnouncements(_ adapterID: String, _ generation: UInt64) {
        guard let entry = current(adapterID, generation), !entry.registry.pendingAnnouncements.isEmpty else { return }
        var out: [RegistryOutput] = []
        entry.registry.flushAnnouncements(into: &out)
        emit(out)
    }

    func update(_ adapterID: String, _ generation: UInt64, _ deviceID: String, _ fields: [String: JSONValue]) {
        guard let entry = current(adapterID, generation), let p = entry.registry.update(deviceID, fields) else { return }
        if !paced(entry, deviceID) { publish(p) }
        flushAnnouncements(adapterID, generation)
        groupsSaw(adapterID, [deviceID])
    }

    func setAvailable(_ adapterID: String, _ generation: UInt64, _ deviceID: String, _ available: Bool) {
        guard let entry = current(adapterID, generation), let p = entry.registry.setAvailable(deviceID, available) else { return }
        publish(p)
        groupsSaw(adapterID, [deviceID])
    }

    func report(_ adapterID: String, _ generation: UInt64, _ reports: [DeviceReport]) {
        guard let entry = current(adapterID, generation) else { return }
        // Handed over a few hundred at a time: the network thread sends the first while the rest are made.
        var batch: [Publication] = []
        batch.reserveCapacity(min(reports.count, Self.handOver))
        for r in reports {
            if !r.fields.isEmpty, let p = entry.registry.update(r.deviceID, r.fields), !paced(entry, r.deviceID) { batch.append(p) }
            if let a = r.available, let p = entry.registry.setAvailable(r.deviceID, a) { batch.append(p) }
            if batch.count >= Self.handOver {
                transport.publish(batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        transport.publish(batch)
        flushAnnouncements(adapterID, generation)
        groupsSaw(adapterID, reports.map(\.deviceID))
    }

    func setStatus(_ adapterID: String, _ generation: UInt64, _ status: AdapterStatus) {
        guard let entry = current(adapterID, generation), entry.status != status else { return }
        let was = entry.status
        entry.status = status
        if case .error(let r) = status {
            log(.error, "\(adapterID): \(r)", metadata: ["adapter": "\(adapterID)"])
            publishEvent("adapter_error", ["adapter": .string(adapterID), "error": .string(r)])
        } else if case .error = was, status == .running {
            publishEvent("upstream_recovered", ["adapter": .string(adapterID)])
        }
        publishInfo()
        // Disabled or failing: no listing is coming for now; held commands get their answer.
        if status != .starting && status != .running { settle(adapterID, generation) }
    }

    func recordRequest(_ adapterID: String, _ generation: UInt64, error: String?) {
        guard let entry = current(adapterID, generation) else { return }
        entry.requests += 1
        if let error { entry.errors += 1; entry.lastError = error } else { entry.lastOK = Date() }
    }

    func mirrorPublish(_ adapterID: String, _ generation: UInt64, _ messages: [MirrorMessage]) {
        guard current(adapterID, generation) != nil else { return }
        let prefix = "\(scheme.base)/\(adapterID)/"
        transport.publish(messages.map { m in
            var p = Publication(prefix + m.relative, m.payload, qos: 1, retain: m.retain)
            if !m.retain { p.properties.expiry = settings.expiry.events }
            return p
        })
    }

    func setMirrorAvailable(_ adapterID: String, _ generation: UInt64, _ available: Bool) {
        guard let entry = current(adapterID, generation), entry.mirrorAvailable != available else { return }
        entry.mirrorAvailable = available
        transport.publish("\(scheme.base)/\(adapterID)/availability", available ? "online" : "offline", qos: 1, retain: true)
    }

    func setMetrics(_ adapterID: String, _ generation: UInt64, _ metrics: [String: JSONValue]) {
        current(adapterID, generation)?.metrics = metrics
    }

    func adapterLog(_ adapterID: String, _ generation: UInt64, _ level: BridgeLogLevel, _ message: String, deviceID: String?) {
        guard let entry = current(adapterID, generation) else { return }
        var topic: String?
        var meta: Logger.Metadata = ["adapter": "\(adapterID)"]
        if let deviceID, let rec = entry.registry.devices[deviceID] {
            topic = scheme.device(adapter: adapterID, name: rec.name)
            meta["device"] = "\(rec.name)"
        }
        log(level, message, topic: topic, metadata: meta)
    }

    func adapterEvent(_ adapterID: String, _ generation: UInt64, _ type: String, _ data: [String: JSONValue]) {
        guard current(adapterID, generation) != nil else { return }
        publishEvent(type, data)
    }

    func currentState(_ adapterID: String, _ deviceID: String) -> [String: JSONValue]? {
        entries[adapterID]?.registry.devices[deviceID]?.state
    }

    // MARK: publishing

    func publish(_ p: Publication) { transport.publish([p]) }

    /// A registry's outputs in order, the publications handed over together (one lock and one wake-up of the
    /// network thread for a listing of thousands, not one each). Its events (`device_added`, …) expire as
    /// `publishEvent`'s do.
    ///
    /// While device configs are held (`DiscoveryHold`), a clear that follows a held config (a rename's old
    /// state, availability and details) is held behind it: the config on the broker that the held one
    /// replaces may still read that topic, and an emptied topic under a standing config is what Home
    /// Assistant must never see (the order `DeviceRegistry.rename` makes, kept).
    func emit(_ outputs: [RegistryOutput]) {
        var batch: [Publication] = []
        var heldConfig = false
        for o in outputs {
            switch o {
            case .publish(var p):
                if !p.retain && settings.expiry.events > 0 && p.topic == scheme.bridge("event") { p.properties.expiry = settings.expiry.events }
                if discoveryHold.takes(p, devicePrefix: devicePrefix) {
                    heldConfig = true
                } else if !(heldConfig && discoveryHold.defers(p, under: scheme.base + "/")) {
                    batch.append(p)
                }
            case .log(let level, let message):
                transport.publish(batch)
                batch.removeAll()
                log(level, message)
            }
        }
        transport.publish(batch)
    }

    /// A topic quoted in a message: at most 200 bytes of UTF-8, then "…" (see `excerpt`).
    nonisolated static func quoted(_ s: String) -> String { s.excerpt(200) }

    /// One error, the same words on bridge/log, in the process log, on `<device>/result` (with a transaction)
    /// and on an MQTT 5 client's Response Topic (`replyTo`).
    /// At most `errorLogsPerSecond` a second reach the logs; the rest are counted and summed up in one
    /// warning when the second is over (an answer is always sent: its publisher asked for it).
    func reportError(_ message: String, topic: String, transaction: JSONValue?, resultTopic: String?, replyTo: ReplyTo? = nil) {
        let now = clock.now()
        if let w = errorWindow, (now - w.start).seconds < 1 {
            if w.logged < Self.errorLogsPerSecond {
                errorWindow = (w.start, w.logged + 1, w.suppressed)
                log(.error, message, topic: topic)
            } else {
                if w.suppressed == 0 { childJobQueue.yield(.summariseSuppressed(after: 1 - (now - w.start).seconds)) }
                errorWindow = (w.start, w.logged, w.suppressed + 1)
                Bounds.hit("error_logs")
            }
        } else {
            summariseSuppressed()
            errorWindow = (now, 1, 0)
            log(.error, message, topic: topic)
        }
        let answered = transaction != nil ? resultTopic : nil
        guard answered != nil || replyTo != nil else { return }
        var result: [String: JSONValue] = ["status": "error", "error": .string(message)]
        if let transaction { result["transaction"] = transaction }
        publishAnswer(.object(result), on: answered, replyTo: replyTo)
    }

    func summariseSuppressed() {
        guard let w = errorWindow, w.suppressed > 0 else { return }
        errorWindow = (w.start, w.logged, 0)
        log(.warning, "\(w.suppressed) more errors about input in the same second were not logged (at most \(Self.errorLogsPerSecond) a second)")
    }

    public func log(_ level: BridgeLogLevel, _ message: String, topic: String? = nil, metadata: Logger.Metadata = [:]) {
        var o: [String: JSONValue] = ["level": .string(level.rawValue), "message": .string(message)]
        var meta = metadata
        // A topic is input too: quoted cut short (MQTT allows 64 KiB).
        if let topic { let t = Self.quoted(topic); o["topic"] = .string(t); meta["mqtt.topic"] = "\(t)" }
        switch level {
        case .info: logger.info("\(message)", metadata: meta)
        case .warning: logger.warning("\(message)", metadata: meta)
        case .error: logger.error("\(message)", metadata: meta)
        }
        var p = Publication(scheme.bridge("log"), json: .object(o), qos: 0, retain: false)
        p.properties.expiry = settings.expiry.logs
        publish(p)
    }

    func publishEvent(_ type: String, _ data: [String: JSONValue]) {
        var p = Publication(scheme.bridge("event"), json: ["type": .string(type), "data": .object(data)], qos: 1, retain: false)
        p.properties.expiry = settings.expiry.events
        publish(p)
    }

    /// Publications handed to the transport at a time by `report`.
    static let handOver = 256
    /// The sweep starts once no more than this many messages wait for the broker.
    static let sweepOutboxLimit = 100

    /// `bridge/info`, written when it is sent (its redacted config lists every configured device), after
    /// the states and availability waiting (`late`).
    func publishInfo() {
        var adapters: [String: JSONValue] = [:]
        for id in adapterOrder { adapters[id] = .string(entries[id]!.status.description) }
        let source = InfoSource(info: info, adapters: adapters, version: settings.version, startedAt: startedAt)
        publish(Publication(scheme.bridge("info"), body: .source(source), retain: true, lane: .late))
    }

    final class InfoSource: PayloadSource {
        let info: JSONValue
        let adapters: [String: JSONValue]
        let version: String
        let startedAt: Date
        init(info: JSONValue, adapters: [String: JSONValue], version: String, startedAt: Date) {
            self.info = info
            self.adapters = adapters
            self.version = version
            self.startedAt = startedAt
        }
        func payload() -> [UInt8] {
            var o = info.objectValue ?? [:]
            o["adapters"] = .object(adapters)
            o["version"] = .string(version)
            o["started_at"] = .string(Timestamp.rfc3339(startedAt))
            return JSONValue.object(o).bytes
        }
    }

    /// `bridge/devices`, written when it is sent, after the states and availability waiting (`late`).
    func publishDeviceList() {
        let list = DeviceRegistry.DeviceList(adapterOrder.compactMap { entries[$0]?.registry.listings })
        publish(Publication(scheme.bridge("devices"), body: .source(list), retain: true, lane: .late))
    }

    func scheduleReannounce() {
        reannounceGeneration += 1
        childJobQueue.yield(.reannounce(generation: reannounceGeneration, delay: Double.random(in: settings.reannounceDelay)))
    }

    /// Only the latest `homeassistant/status` online re-announces (several in a row announce once): discovery,
    /// state and availability of every device, `reannounceBatch` devices every `reannouncePause` seconds.
    ///
    /// Why the states and availability too, though they are retained: Home Assistant subscribes to the
    /// topics of the entities it has just made thousands at a time (500 a SUBSCRIBE, back to back), and the
    /// broker queues the retained replies for it faster than it reads them; past Mosquitto's
    /// `max_queued_messages` (1000 by default) they are dropped, and those entities stay `unavailable` or
    /// `unknown` (docs/performance.md "Home Assistant at a thousand devices"). Its birth comes once it is
    /// done subscribing: sent again then, live and a few at a time, they reach every entity.
    func reannounce(_ generation: Int) {
        guard generation == reannounceGeneration, !stopped else { return }
        if reannouncing.generation != generation {
            reannouncing = ReannounceCursor(generation: generation,
                                            queue: adapterOrder.compactMap { id in entries[id].map { (id, $0.registry.sortedIDs[...]) } })
            announceBridge()
        }
        var left = settings.reannounceBatch
        while left > 0, let first = reannouncing.queue.first {
            let id = first.0
            let chunk = first.1.prefix(left)
            let ids = first.1.dropFirst(chunk.count)
            left -= chunk.count
            if ids.isEmpty { reannouncing.queue.removeFirst() } else { reannouncing.queue[0] = (id, ids) }
            guard let entry = entries[id] else { continue }
            var out: [RegistryOutput] = []
            entry.registry.republish(chunk, configsOnly: reannouncing.configsOnly, into: &out)
            emit(out)
        }
        if !reannouncing.queue.isEmpty {
            childJobQueue.yield(.reannounce(generation: generation, delay: settings.reannouncePause))
        }
    }

    /// The prefix of every device config topic (`<prefix>/device/`).
    var devicePrefix: String { scheme.discoveryPrefix + "/device/" }

    /// The bridge's own device in Home Assistant (connection state, version, republish, adapter statuses);
    /// what an earlier announcement had and this one has not (a removed adapter) is cleared.
    func announceBridge() {
        guard settings.discovery else { return }
        let entries = discovery.bridgeEntries(adapters: adapterOrder)
        var publications: [Publication]
        if settings.discoveryMode == .device {
            publications = [Publication(discovery.deviceConfigTopic(node: discovery.bridgeNode), json: discovery.deviceConfig(entries), retain: true,
                                        lane: .late)]
        } else {
            publications = entries.map { Publication($0.topic, json: $0.payload, retain: true, lane: .late) }
        }
        let topics = publications.map(\.topic)
        for stale in bridgeDiscoveryTopics where !topics.contains(stale) { transport.publish(stale, [], qos: 1, retain: true) }
        publications.removeAll { discoveryHold.takes($0, devicePrefix: devicePrefix) }
        transport.publish(publications)
        bridgeDiscoveryTopics = topics
    }

    /// The bridge device's topics in the other discovery mode (what an install of that mode has).
    var otherBridgeDiscoveryTopics: Set<String> {
        if settings.discoveryMode == .device { return Set(discovery.bridgeEntries(adapters: adapterOrder).map(\.topic)) }
        return [discovery.deviceConfigTopic(node: discovery.bridgeNode)]
    }

    var sweepTopic: String { scheme.bridge("sweep") }
    var discoverySweep: DiscoverySweep {
        DiscoverySweep(discoveryPrefix: scheme.discoveryPrefix, nodePrefix: discovery.nodePrefix, baseTopic: scheme.base)
    }

    /// Starts the sweep of orphaned discovery configs once the broker is connected and every adapter has
    /// listed its devices (or given up): subscribes to the discovery configs, then publishes a sentinel
    /// that comes back after every retained config the broker sends for that subscription.
    /// Not while a start's burst is still going out (more than `sweepOutboxLimit` messages waiting): every
    /// retained config under the discovery prefix (a restart's own 10 000, or other bridges') would come in
    /// while the tree goes out; it waits, checking every half second (`deferred`).
    func maybeSweep(deferred: Bool = false) {
        switch sweep {
        case .waiting: break
        case .deferred: guard deferred else { return }
        case .migrating(let topics):
            if deferred { finishMigration(topics) }
            return
        default: return
        }
        guard settings.discovery, connectedOnce, !stopped, entries.values.allSatisfy(\.life.isSettled) else {
            if case .deferred = sweep { sweep = .waiting }
            return
        }
        if transport.stats().outbox > Self.sweepOutboxLimit {
            sweep = .deferred
            childJobQueue.yield(.sweep(after: 0.5))
            return
        }
        let nonce = randomHex(bytes: 8)
        sweep = .collecting(nonce: nonce, found: [])
        updateSubscriptions(force: true)
        transport.publish(sweepTopic, Array(nonce.utf8), qos: 1, retain: false)
    }

    /// A message on the sweep's subscriptions: a retained config of ours to judge, or the sentinel.
    func swept(_ m: InboundMessage) {
        guard case .collecting(let nonce, var found) = sweep else { return }
        if m.topic == sweepTopic {
            guard String(decoding: m.payload, as: UTF8.self) == nonce else { return }
            sweep = .done
            updateSubscriptions(force: true)
            var current = DiscoverySweep.Current(
                bridgeNode: discovery.bridgeNode, bridgeTopics: Set(bridgeDiscoveryTopics),
                adapters: Dictionary(adapterOrder.compactMap { id in
                    entries[id].map { entry -> (String, (topics: (String) -> Set<String>?, complete: Bool)) in
                        (Naming.normaliseID(id), (entry.registry.discoveryTopicsByNode, entry.registry.listsFromConfig))
                    }
                }, uniquingKeysWith: { a, _ in a }))
            current.bridgeOtherTopics = otherBridgeDiscoveryTopics
            for id in adapterOrder { if let entry = entries[id] { current.otherTopics[Naming.normaliseID(id)] = entry.registry.otherDiscoveryTopicsByNode } }
            var orphans: [String] = [], migrations: [String] = []
            for t in found.sorted() {
                switch discoverySweep.verdict(t, current: current) {
                case .keep: break
                case .orphan: orphans.append(t)
                case .migrate: migrations.append(t)
                }
            }
            for t in orphans { transport.publish(t, [], qos: 1, retain: true) }
            if !orphans.isEmpty {
                logger.info("cleared orphaned discovery configs", metadata: ["count": "\(orphans.count)"])
            }
            startMigration(migrations)
            return
        }
        // Retained copies only: a live config is one we (or something else) are publishing now.
        guard m.retain, !m.payload.isEmpty, discoverySweep.node(of: m.topic) != nil, discoverySweep.isOurs(payload: m.payload) else { return }
        found.insert(m.topic)
        sweep = .collecting(nonce: nonce, found: found)
    }

    /// The other mode's configs of what the bridge announces now (docs/topics.md "Discovery modes"): Home
    /// Assistant is asked to let go of each (`{"migrate_discovery": true}`, not retained: it only matters to a
    /// Home Assistant listening now), keeping its entity, id and history; after `migrationGrace` they are
    /// cleared and this mode's configs go out (`finishMigration`). Without any, those go out now.
    func startMigration(_ topics: [String]) {
        guard !topics.isEmpty else { return finishMigration([]) }
        logger.info("migrating Home Assistant discovery", metadata: ["mode": "\(settings.discoveryMode.rawValue)", "configs": "\(topics.count)"])
        sweep = .migrating(topics: topics)
        transport.publish(topics.map { Publication($0, json: ["migrate_discovery": true], retain: false) })
        childJobQueue.yield(.sweep(after: settings.migrationGrace))
    }

    func finishMigration(_ topics: [String]) {
        sweep = .done
        for t in topics { transport.publish(t, [], qos: 1, retain: true) }
        releaseDiscoveryHold()
        // Per entity again (`entity` mode after `device`): the configs Home Assistant ignored while the device
        // configs stood go out once more.
        if settings.discoveryMode == .entity && !topics.isEmpty {
            reannounceGeneration += 1
            reannouncing = ReannounceCursor(generation: reannounceGeneration,
                                            queue: adapterOrder.compactMap { id in entries[id].map { (id, $0.registry.sortedIDs[...]) } }, configsOnly: true)
            announceBridge()
            reannounce(reannounceGeneration)
        }
        if !topics.isEmpty { logger.info("migrated Home Assistant discovery", metadata: ["configs": "\(topics.count)"]) }
    }

    /// What `DiscoveryHold` held goes out: the device configs, then the clears held behind them, but for a
    /// topic a device has again by now (a device renamed and back meanwhile: its state is there again).
    func releaseDiscoveryHold() {
        let (configs, clears) = discoveryHold.release()
        transport.publish(configs)
        transport.publish(clears.filter { !isDeviceTopic($0) }.map { Publication($0, [], retain: true) })
    }

    /// Whether a device has `topic` as its state, availability or details topic now.
    func isDeviceTopic(_ topic: String) -> Bool {
        for (id, entry) in entries {
            for prefix in [scheme.device(adapter: id, name: ""), scheme.deviceDetails(adapter: id, name: "")] where topic.hasPrefix(prefix) {
                let rest = String(topic.dropFirst(prefix.count))
                let names = rest.hasSuffix("/availability") ? [rest, String(rest.dropLast("/availability".count))] : [rest]
                for name in names where entry.registry.byName[name] != nil {
                    if [scheme.device(adapter: id, name: name), scheme.availability(adapter: id, name: name),
                        scheme.deviceDetails(adapter: id, name: name)].contains(topic) { return true }
                }
            }
        }
        return false
    }

    /// Re-announces discovery, state and availability of every device (HA birth, `republish` request).
    func republishAll() {
        announceBridge()
        for id in adapterOrder {
            guard let entry = entries[id] else { continue }
            var out: [RegistryOutput] = []
            entry.registry.republishAll(into: &out)
            emit(out)
        }
    }

    var uptime: Double { (clock.now() - startedAtMonotonic).seconds.rounded() }

    public func publishHealth() {
        var adapters: [String: JSONValue] = [:]
        for id in adapterOrder {
            let a = entries[id]!
            adapters[id] = BridgeAPI.adapterHealth(status: a.status, devices: a.registry.devices.count, requests: a.requests, errors: a.errors,
                                                   lastError: a.lastError, lastOK: a.lastOK, metrics: a.metrics)
        }
        var health = BridgeAPI.health(uptime: uptime, rss: ProcessStats.residentBytes(), transport: transport.stats(), adapters: adapters,
                                      limits: bounds.snapshot)
        if !healthExtra.isEmpty, case .object(var o) = health {
            o.merge(healthExtra) { $1 }
            health = .object(o)
        }
        transport.publish(scheme.bridge("health"), json: health, qos: 1, retain: true)
    }

    func updateSubscriptions(force: Bool = false) {
        var depths: Set<Int> = [1, 2]
        for entry in entries.values { depths.formUnion(entry.registry.nameDepths) }
        guard force || depths != subscribedDepths else { return }
        subscribedDepths = depths
        var filters = scheme.commandFilters(depths: depths)
        if settings.discovery { filters.append(scheme.haStatusTopic) }
        if case .collecting = sweep { filters += discoverySweep.filters + [sweepTopic] }
        if replay?.asked == true { filters.append(replayTopic) }
        transport.setSubscriptions(filters)
    }

}

/// Device configs waiting for the sweep (`device` mode): until the configs of an earlier per-entity install
/// are migrated, a device config naming the same entities would be refused by Home Assistant as conflicting.
/// The latest config of each topic is kept, in first-held order; a clear goes out at once and drops what
/// was held for its topic. Clears of device topics that came behind a held config (`defers`) wait too, and
/// go out after the configs.
struct DiscoveryHold {
    var active = false
    private var order: [String] = []
    private var held: [String: Publication] = [:]
    /// Topics to clear once the configs are out, in first-deferred order.
    private var clears: [String] = []
    private var clearing: Set<String> = []
    /// Clears wait behind held configs.
    var defersClears: Bool { !clears.isEmpty }

    /// Whether `p` is held (else it goes out).
    mutating func takes(_ p: Publication, devicePrefix: String) -> Bool {
        guard active, p.topic.hasPrefix(devicePrefix) else { return false }
        if case .bytes(let b) = p.body, b.isEmpty {
            held[p.topic] = nil
            return false
        }
        if held.updateValue(p, forKey: p.topic) == nil { order.append(p.topic) }
        return true
    }

    /// Whether `p`, which came behind a held config, waits for it: a retained clear of a topic under `base`.
    mutating func defers(_ p: Publication, under base: String) -> Bool {
        guard active, p.retain, p.topic.hasPrefix(base), case .bytes(let b) = p.body, b.isEmpty else { return false }
        if clearing.insert(p.topic).inserted { clears.append(p.topic) }
        return true
    }

    /// What was held, in order: the configs, and the topics to clear after them; nothing is held from now on.
    mutating func release() -> (configs: [Publication], clears: [String]) {
        active = false
        defer { order = []; held = [:]; clears = []; clearing = [] }
        return (order.compactMap { held[$0] }, clears)
    }
}

/// A re-announcement in progress: the devices still to go, by adapter.
struct ReannounceCursor {
    var generation = 0
    var queue: [(String, ArraySlice<String>)] = []
    var configsOnly = false
}
