#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging

public struct EngineSettings: Sendable {
    public var scheme: TopicScheme
    public var discovery: Bool
    public var version: String
    /// Commands older than this (when their age is known) are dropped.
    public var commandMaxAge: TimeInterval
    public var maxPayload: Int
    public var healthInterval: TimeInterval
    public var commandQueueLimit: Int
    /// Delay before re-announcing after `homeassistant/status` = online.
    public var reannounceDelay: ClosedRange<Double>

    public init(scheme: TopicScheme, discovery: Bool = true, version: String, commandMaxAge: TimeInterval = 30,
                maxPayload: Int = 256 * 1024, healthInterval: TimeInterval = 60, commandQueueLimit: Int = 1000,
                reannounceDelay: ClosedRange<Double> = 0.5...3) {
        self.scheme = scheme
        self.discovery = discovery
        self.version = version
        self.commandMaxAge = commandMaxAge
        self.maxPayload = maxPayload
        self.healthInterval = healthInterval
        self.commandQueueLimit = commandQueueLimit
        self.reannounceDelay = reannounceDelay
    }
}

/// The core: device registry, state store, command router, bridge API and discovery. It owns every
/// topic the bridge publishes; adapters talk to it through `AdapterContext`, the broker through an
/// `MQTTTransport`. One actor, so state changes and publishes happen in one order.
public actor BridgeEngine {
    struct DeviceRecord {
        var descriptor: DeviceDescriptor
        var name: String               // full name inside the adapter, namespace included
        var state: [String: JSONValue] = [:]
        var publishedState: String?
        var available: Bool?
        var missing = 0
        var discoveryTopics: [String] = []
    }

    enum Work: Sendable {
        case command(DeviceCommand, topic: String, transaction: JSONValue?)
        case mirror(path: String, payload: [UInt8], topic: String)
        case refresh(deviceID: String, topic: String)
    }

    final class Slot {
        let adapter: any Adapter
        var status: AdapterStatus = .starting
        var devices: [String: DeviceRecord] = [:]
        var byName: [String: String] = [:]
        var runTask: Task<Void, Never>?
        var workerTask: Task<Void, Never>?
        var queue: AsyncStream<Work>.Continuation?
        var requests = 0
        var errors = 0
        var lastError: String?
        var lastOK: Date?
        var metrics: [String: JSONValue] = [:]
        var mirrorAvailable: Bool?
        init(adapter: any Adapter) { self.adapter = adapter }
    }

    public private(set) var settings: EngineSettings
    let transport: any MQTTTransport
    let logger: Logger
    let discovery: DiscoveryBuilder
    let startedAt = Date()
    var slots: [String: Slot] = [:]
    var slotOrder: [String] = []
    var info: JSONValue = .object([:])
    var retainedCommandTopicsLogged: Set<String> = []
    var subscribedDepths: Set<Int> = []
    var reannounceTask: Task<Void, Never>?
    var requestTasks: [UUID: Task<Void, Never>] = [:]
    var stopped = false
    var reloader: (@Sendable () async throws -> JSONValue)?

    public init(settings: EngineSettings, transport: any MQTTTransport, logger: Logger) {
        self.settings = settings
        self.transport = transport
        self.logger = logger
        self.discovery = DiscoveryBuilder(scheme: settings.scheme, version: settings.version)
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

    /// Starts the adapters and publishes the bridge topics. Call once, before `run()`.
    public func start(adapters: [any Adapter]) {
        updateSubscriptions(force: true)
        publishInfo()
        publishDeviceList()
        for a in adapters { startAdapter(a) }
    }

    /// Replaces adapters after a config reload: ids in `restart` are stopped and started again with
    /// the new instance, ids no longer present are stopped and their devices removed.
    public func replaceAdapters(_ adapters: [any Adapter], restart: Set<String>) async {
        let newIDs = Set(adapters.map(\.id))
        for id in slotOrder where !newIDs.contains(id) || restart.contains(id) {
            await stopAdapter(id, removeDevices: !newIDs.contains(id))
        }
        for a in adapters where slots[a.id] == nil || restart.contains(a.id) { startAdapter(a) }
        publishInfo()
    }

    func startAdapter(_ adapter: any Adapter) {
        let id = adapter.id
        let slot: Slot
        if let existing = slots[id] {
            // Restart keeps the devices (and their retained topics) until the new listing says otherwise.
            slot = Slot(adapter: adapter)
            slot.devices = existing.devices
            slot.byName = existing.byName
        } else {
            slot = Slot(adapter: adapter)
            slotOrder.append(id)
        }
        slots[id] = slot
        let context = AdapterContext(engine: self, adapterID: id)
        let (stream, continuation) = AsyncStream.makeStream(of: Work.self, bufferingPolicy: .bufferingOldest(settings.commandQueueLimit))
        slot.queue = continuation
        let logger = self.logger
        slot.runTask = Task {
            do {
                try await adapter.run(context: context)
            } catch is CancellationError {
            } catch {
                logger.error("adapter stopped", metadata: ["adapter": "\(id)", "error": "\(error)"])
                await context.setStatus(.error("\(error)"))
            }
        }
        slot.workerTask = Task { [weak self] in
            for await work in stream {
                guard let self else { return }
                await self.execute(work, adapter: adapter, context: context)
            }
        }
    }

    func stopAdapter(_ id: String, removeDevices: Bool) async {
        guard let slot = slots[id] else { return }
        slot.queue?.finish()
        slot.runTask?.cancel()
        slot.workerTask?.cancel()
        await slot.runTask?.value
        await slot.workerTask?.value
        if removeDevices {
            for (deviceID, _) in slot.devices { removeDevice(id, deviceID, reason: "adapter removed from config") }
            slots[id] = nil
            slotOrder.removeAll { $0 == id }
            publishDeviceList()
        }
    }

    /// Consumes transport events until the stream ends or the task is cancelled.
    public func run() async {
        let scheduleHealth = Task { [weak self] in
            while !Task.isCancelled {
                guard let interval = await self?.settings.healthInterval else { return }
                try? await Task.sleep(for: .seconds(interval))
                if Task.isCancelled { return }
                await self?.publishHealth()
            }
        }
        defer { scheduleHealth.cancel() }
        for await event in transport.events {
            if stopped { break }
            handle(event)
        }
    }

    /// Clean shutdown (Decision 11): stop adapters, then `offline` on every device availability topic.
    /// The transport publishes `bridge/state offline` after this, as the last message.
    public func shutdown() async {
        stopped = true
        reannounceTask?.cancel()
        for t in requestTasks.values { t.cancel() }
        for id in slotOrder { await stopAdapter(id, removeDevices: false) }
        for id in slotOrder {
            guard let slot = slots[id] else { continue }
            for (_, rec) in slot.devices.sorted(by: { $0.key < $1.key }) {
                transport.publish(scheme.availability(adapter: id, name: rec.name), "offline", qos: 1, retain: true)
            }
            if slot.mirrorAvailable != nil {
                transport.publish("\(scheme.base)/\(id)/availability", "offline", qos: 1, retain: true)
            }
        }
    }

    // MARK: inbound

    func handle(_ event: TransportEvent) {
        switch event {
        case .connected(let sessionPresent):
            logger.debug("broker connected: republished by the transport", metadata: ["mqtt.session_present": "\(sessionPresent)"])
        case .disconnected(let reason):
            logger.debug("broker disconnected: publishes wait in the outbox", metadata: ["reason": "\(reason)"])
        case .message(let m):
            handle(m)
        }
    }

    func handle(_ m: InboundMessage) {
        if m.payload.count > settings.maxPayload {
            log(.error, "payload of \(m.payload.count) bytes is over mqtt.max_payload (\(settings.maxPayload)); ignored", topic: m.topic)
            return
        }
        switch scheme.classify(m.topic) {
        case .haStatus:
            if settings.discovery, String(decoding: m.payload, as: UTF8.self).trimmingWhitespace() == "online" {
                scheduleReannounce()
            }
        case .request(let path):
            if m.retain { ignoreRetained(m.topic); return }
            handleRequest(path: path, payload: m.payload)
        case .set(let adapter, let device, let field):
            if m.retain { ignoreRetained(m.topic); return }
            if tooOld(m) { return }
            if let slot = slots[adapter], slot.adapter is any MirrorAdapter {
                let path = "\(device)/set" + (field.map { "/\($0)" } ?? "")
                enqueue(slot, .mirror(path: path, payload: m.payload, topic: m.topic), topic: m.topic, transaction: nil, resultTopic: nil)
                return
            }
            handleSet(adapter: adapter, device: device, field: field, message: m)
        case .get(let adapter, let device):
            if m.retain { ignoreRetained(m.topic); return }
            if let slot = slots[adapter], slot.adapter is any MirrorAdapter {
                enqueue(slot, .mirror(path: "\(device)/get", payload: m.payload, topic: m.topic), topic: m.topic, transaction: nil, resultTopic: nil)
                return
            }
            guard let (slot, id) = resolve(adapter: adapter, device: device, topic: m.topic, transaction: nil) else { return }
            enqueue(slot, .refresh(deviceID: id, topic: m.topic), topic: m.topic, transaction: nil, resultTopic: nil)
        case .other:
            break
        }
    }

    /// Decision 5: a command replayed from the broker's retained store is ignored, logged once per topic.
    func ignoreRetained(_ topic: String) {
        guard retainedCommandTopicsLogged.insert(topic).inserted else { return }
        log(.warning, "ignored a retained command (commands must not be published with retain; clear it with: mosquitto_pub -r -n -t '\(topic)')", topic: topic)
    }

    /// Decision 3: age is known when the publisher sets an MQTT v5 user property `timestamp`
    /// (RFC 3339 or epoch seconds). Under 3.1.1 it is unknowable and the command is applied.
    func tooOld(_ m: InboundMessage) -> Bool {
        guard let ts = m.userProperties["timestamp"], let sent = Timestamp.parse(ts) else { return false }
        let age = m.receivedAt.timeIntervalSince(sent)
        guard age > settings.commandMaxAge else { return false }
        log(.error, "command is \(Int(age)) s old, over mqtt.command_max_age (\(Int(settings.commandMaxAge)) s); dropped", topic: m.topic)
        return true
    }

    func resolve(adapter: String, device: String, topic: String, transaction: JSONValue?) -> (Slot, String)? {
        guard let slot = slots[adapter] else {
            reportError("unknown adapter '\(adapter)' (running: \(slotOrder.joined(separator: ", ")))", topic: topic,
                        transaction: transaction, resultTopic: nil)
            return nil
        }
        guard let id = slot.byName[device] else {
            reportError("unknown device '\(device)' for adapter '\(adapter)'", topic: topic, transaction: transaction, resultTopic: nil)
            return nil
        }
        return (slot, id)
    }

    func handleSet(adapter: String, device: String, field: String?, message m: InboundMessage) {
        let parsed: CommandParser.Parsed
        let known = slots[adapter].flatMap { s in s.byName[device].flatMap { s.devices[$0]?.descriptor } }
        switch CommandParser.read(payload: m.payload, field: field, bareWords: known?.bareCommands ?? CommandParser.stateWords) {
        case .success(let p): parsed = p
        case .failure(let f):
            reportError(f.message, topic: m.topic, transaction: f.transaction,
                        resultTopic: f.transaction == nil ? nil : knownResultTopic(adapter, device))
            return
        }
        guard let (slot, id) = resolve(adapter: adapter, device: device, topic: m.topic, transaction: parsed.transaction) else { return }
        let rec = slot.devices[id]!
        let resultTopic = scheme.result(adapter: adapter, name: rec.name)
        switch CommandParser.validate(parsed.fields, against: rec.descriptor) {
        case .failure(let f):
            reportError(f.message, topic: m.topic, transaction: parsed.transaction, resultTopic: resultTopic)
        case .success(let fields):
            enqueue(slot, .command(DeviceCommand(deviceID: id, fields: fields), topic: m.topic, transaction: parsed.transaction),
                    topic: m.topic, transaction: parsed.transaction, resultTopic: resultTopic)
        }
    }

    func knownResultTopic(_ adapter: String, _ device: String) -> String? {
        guard let slot = slots[adapter], let id = slot.byName[device], let rec = slot.devices[id] else { return nil }
        return scheme.result(adapter: adapter, name: rec.name)
    }

    func enqueue(_ slot: Slot, _ work: Work, topic: String, transaction: JSONValue?, resultTopic: String?) {
        guard let q = slot.queue else {
            reportError("adapter '\(slot.adapter.id)' is not running", topic: topic, transaction: transaction, resultTopic: resultTopic)
            return
        }
        if case .dropped = q.yield(work) {
            reportError("command queue of adapter '\(slot.adapter.id)' is full (\(settings.commandQueueLimit)); command dropped",
                        topic: topic, transaction: transaction, resultTopic: resultTopic)
        }
    }

    func execute(_ work: Work, adapter: any Adapter, context: AdapterContext) async {
        switch work {
        case .command(let cmd, let topic, let transaction):
            do {
                // Accepted in arrival order; the outcome is awaited off the queue so the adapter can merge
                // the commands that follow while this one is on the wire.
                let pending = try await adapter.accept(cmd, context: context)
                Task { [weak self] in
                    do {
                        try await pending.wait()
                        await self?.commandDone(adapter.id, cmd.deviceID, transaction: transaction)
                    } catch {
                        await self?.commandFailed(adapter.id, cmd.deviceID, error, topic: topic, transaction: transaction)
                    }
                }
            } catch {
                commandFailed(adapter.id, cmd.deviceID, error, topic: topic, transaction: transaction)
            }
        case .mirror(let path, let payload, let topic):
            do {
                guard let mirror = adapter as? any MirrorAdapter else { return }
                try await mirror.command(path: path, payload: payload, context: context)
            } catch {
                reportError(Self.message(of: error), topic: topic, transaction: nil, resultTopic: nil)
            }
        case .refresh(let deviceID, let topic):
            do {
                try await adapter.refresh(deviceID: deviceID, context: context)
                publishState(adapter.id, deviceID, force: true)
            } catch {
                reportError(Self.message(of: error), topic: topic, transaction: nil, resultTopic: nil)
            }
        }
    }

    func commandDone(_ adapterID: String, _ deviceID: String, transaction: JSONValue?) {
        if let transaction, let rt = resultTopic(adapterID, deviceID) {
            transport.publish(rt, json: ["transaction": transaction, "status": "ok"], qos: 1, retain: false)
        }
    }

    func commandFailed(_ adapterID: String, _ deviceID: String, _ error: any Error, topic: String, transaction: JSONValue?) {
        reportError(Self.message(of: error), topic: topic, transaction: transaction, resultTopic: resultTopic(adapterID, deviceID))
    }

    func resultTopic(_ adapter: String, _ deviceID: String) -> String? {
        guard let rec = slots[adapter]?.devices[deviceID] else { return nil }
        return scheme.result(adapter: adapter, name: rec.name)
    }

    static func message(of error: any Error) -> String {
        if let e = error as? AdapterError { return e.message }
        return "\(error)"
    }

    // MARK: bridge requests

    func handleRequest(path: String, payload: [UInt8]) {
        let text = String(decoding: payload, as: UTF8.self).trimmingWhitespace()
        var body: JSONValue = .object([:])
        if !text.isEmpty {
            guard let v = try? JSONValue.parse(text) else {
                respond(path, .failure(AdapterError("malformed JSON in request")), transaction: nil)
                log(.error, "malformed JSON in request", topic: scheme.bridge("request/\(path)"))
                return
            }
            body = v
        }
        let transaction = body["transaction"]
        let key = UUID()
        requestTasks[key] = Task {
            let result: Result<JSONValue, AdapterError>
            do {
                result = .success(try await self.answer(path: path.lowercased(), body: body))
            } catch let e as AdapterError {
                result = .failure(e)
            } catch {
                result = .failure(AdapterError("\(error)"))
            }
            self.finishRequest(key, path: path, result: result, transaction: transaction)
        }
    }

    func finishRequest(_ key: UUID, path: String, result: Result<JSONValue, AdapterError>, transaction: JSONValue?) {
        requestTasks[key] = nil
        if case .failure(let e) = result { log(.error, "request \(path) failed: \(e.message)", topic: scheme.bridge("request/\(path)")) }
        respond(path, result, transaction: transaction)
    }

    func respond(_ path: String, _ result: Result<JSONValue, AdapterError>, transaction: JSONValue?) {
        var o: [String: JSONValue]
        switch result {
        case .success(let data): o = ["status": "ok", "data": data]
        case .failure(let e): o = ["status": "error", "error": .string(e.message)]
        }
        if let transaction { o["transaction"] = transaction }
        transport.publish(scheme.response(path), json: .object(o), qos: 1, retain: false)
    }

    func answer(path: String, body: JSONValue) async throws -> JSONValue {
        switch path {
        case "health_check":
            return ["healthy": true, "uptime": .number(Date().timeIntervalSince(startedAt).rounded())]
        case "devices/refresh":
            var refreshed: [JSONValue] = []
            for id in slotOrder {
                guard let slot = slots[id], slot.runTask != nil else { continue }
                try await slot.adapter.refreshAll(context: AdapterContext(engine: self, adapterID: id))
                refreshed.append(.string(id))
            }
            return ["adapters": .array(refreshed), "devices": JSONValue(slots.values.reduce(0) { $0 + $1.devices.count })]
        case "config/reload":
            guard let reloader else { throw AdapterError("config reload is not available") }
            return try await reloader()
        case "republish":
            republishAll()
            return ["republished": true]
        default:
            let parts = path.split(separator: "/", maxSplits: 1).map(String.init)
            if parts.count == 2, let slot = slots[parts[0]],
               let data = try await slot.adapter.request(path: parts[1], payload: body, context: AdapterContext(engine: self, adapterID: parts[0])) {
                return data
            }
            throw AdapterError("unknown request '\(path)' (known: health_check, devices/refresh, config/reload, republish)")
        }
    }

    // MARK: from adapters

    func setDevices(_ adapterID: String, _ listed: [DeviceDescriptor], authoritative: Bool, available: [String: Bool] = [:]) {
        guard let slot = slots[adapterID], !stopped else { return }
        let listedIDs = Set(listed.map(\.id))
        var removed: [String] = []
        for (id, rec) in slot.devices where !listedIDs.contains(id) {
            if authoritative || rec.missing + 1 >= 3 {
                removed.append(id)
            } else {
                slot.devices[id]!.missing += 1
            }
        }
        for id in removed.sorted() { removeDevice(adapterID, id, reason: authoritative ? "removed from config" : "absent from 3 listings") }

        // Names are assigned over everything still known, so a device that is briefly missing keeps its name.
        var all = listed
        for (id, rec) in slot.devices where !listedIDs.contains(id) { all.append(rec.descriptor) }
        let assignment = Naming.assign(all, reservedPrefixes: slot.adapter.reservedPrefixes)
        var changedList = !removed.isEmpty
        for d in listed {
            let name = d.namespace + assignment.names[d.id]!
            if var rec = slot.devices[d.id] {
                rec.missing = 0
                let oldName = rec.name
                let descriptorChanged = rec.descriptor != d
                rec.descriptor = d
                if oldName != name {
                    if let w = assignment.warnings[d.id] { log(.warning, "\(adapterID): \(w)") }
                    renameDevice(adapterID, slot, &rec, to: name)
                    changedList = true
                } else if descriptorChanged {
                    slot.devices[d.id] = rec
                    publishDetails(adapterID, rec)
                    announce(adapterID, &rec)
                    changedList = true
                }
                slot.devices[d.id] = rec
            } else {
                if let w = assignment.warnings[d.id] { log(.warning, "\(adapterID): \(w)") }
                var rec = DeviceRecord(descriptor: d, name: name)
                slot.byName[name] = d.id
                publishDetails(adapterID, rec)
                announce(adapterID, &rec)
                slot.devices[d.id] = rec
                setAvailable(adapterID, d.id, available[d.id] ?? true)
                publishEvent("device_added", ["adapter": .string(adapterID), "id": .string(d.id), "name": .string(name)])
                changedList = true
            }
        }
        if changedList {
            publishDeviceList()
            updateSubscriptions()
        }
    }

    func renameDevice(_ adapterID: String, _ slot: Slot, _ rec: inout DeviceRecord, to name: String) {
        let old = rec.name
        for t in [scheme.device(adapter: adapterID, name: old), scheme.availability(adapter: adapterID, name: old),
                  scheme.deviceDetails(adapter: adapterID, name: old)] {
            transport.publish(t, [], qos: 1, retain: true)
        }
        slot.byName[old] = nil
        slot.byName[name] = rec.descriptor.id
        rec.name = name
        publishDetails(adapterID, rec)
        announce(adapterID, &rec)
        slot.devices[rec.descriptor.id] = rec
        publishState(adapterID, rec.descriptor.id, force: true)
        rec = slot.devices[rec.descriptor.id]!   // publishState recorded what it published
        if let a = rec.available {
            transport.publish(scheme.availability(adapter: adapterID, name: name), a ? "online" : "offline", qos: 1, retain: true)
        }
        publishEvent("device_renamed", ["adapter": .string(adapterID), "id": .string(rec.descriptor.id), "from": .string(old), "to": .string(name)])
    }

    func removeDevice(_ adapterID: String, _ id: String, reason: String) {
        guard let slot = slots[adapterID], let rec = slot.devices[id] else { return }
        for t in [scheme.device(adapter: adapterID, name: rec.name), scheme.availability(adapter: adapterID, name: rec.name),
                  scheme.deviceDetails(adapter: adapterID, name: rec.name)] + rec.discoveryTopics {
            transport.publish(t, [], qos: 1, retain: true)
        }
        slot.devices[id] = nil
        slot.byName[rec.name] = nil
        publishEvent("device_removed", ["adapter": .string(adapterID), "id": .string(id), "name": .string(rec.name), "reason": .string(reason)])
    }

    func update(_ adapterID: String, _ deviceID: String, _ fields: [String: JSONValue]) {
        guard let slot = slots[adapterID], var rec = slot.devices[deviceID], !stopped else { return }
        for (k, v) in fields {
            rec.state[k] = rec.descriptor.capability(k)?.normalise(v) ?? v
        }
        slot.devices[deviceID] = rec
        publishState(adapterID, deviceID, force: false)
    }

    func publishState(_ adapterID: String, _ deviceID: String, force: Bool) {
        guard let slot = slots[adapterID], var rec = slot.devices[deviceID] else { return }
        let text = JSONValue.object(rec.state).serialized
        guard force || text != rec.publishedState else { return }
        rec.publishedState = text
        slot.devices[deviceID] = rec
        transport.publish(scheme.device(adapter: adapterID, name: rec.name), Array(text.utf8), qos: 1, retain: true)
    }

    func setAvailable(_ adapterID: String, _ deviceID: String, _ available: Bool) {
        guard let slot = slots[adapterID], var rec = slot.devices[deviceID], !stopped else { return }
        guard rec.available != available else { return }
        rec.available = available
        slot.devices[deviceID] = rec
        transport.publish(scheme.availability(adapter: adapterID, name: rec.name), available ? "online" : "offline", qos: 1, retain: true)
    }

    func setStatus(_ adapterID: String, _ status: AdapterStatus) {
        guard let slot = slots[adapterID], slot.status != status else { return }
        let was = slot.status
        slot.status = status
        if case .error(let r) = status {
            log(.error, "\(adapterID): \(r)")
            publishEvent("adapter_error", ["adapter": .string(adapterID), "error": .string(r)])
        } else if case .error = was, status == .running {
            publishEvent("upstream_recovered", ["adapter": .string(adapterID)])
        }
        publishInfo()
    }

    func recordRequest(_ adapterID: String, error: String?) {
        guard let slot = slots[adapterID] else { return }
        slot.requests += 1
        if let error { slot.errors += 1; slot.lastError = error } else { slot.lastOK = Date() }
    }

    func mirrorPublish(_ adapterID: String, _ relative: String, _ payload: [UInt8], retain: Bool) {
        guard slots[adapterID] != nil, !stopped else { return }
        transport.publish("\(scheme.base)/\(adapterID)/\(relative)", payload, qos: 1, retain: retain)
    }

    func setMirrorAvailable(_ adapterID: String, _ available: Bool) {
        guard let slot = slots[adapterID], !stopped, slot.mirrorAvailable != available else { return }
        slot.mirrorAvailable = available
        transport.publish("\(scheme.base)/\(adapterID)/availability", available ? "online" : "offline", qos: 1, retain: true)
    }

    func setMetrics(_ adapterID: String, _ metrics: [String: JSONValue]) {
        slots[adapterID]?.metrics = metrics
    }

    func adapterLog(_ adapterID: String, _ level: BridgeLogLevel, _ message: String, deviceID: String?) {
        var topic: String?
        if let deviceID, let rec = slots[adapterID]?.devices[deviceID] { topic = scheme.device(adapter: adapterID, name: rec.name) }
        log(level, message, topic: topic)
    }

    func currentState(_ adapterID: String, _ deviceID: String) -> [String: JSONValue]? {
        slots[adapterID]?.devices[deviceID]?.state
    }

    // MARK: publishing

    /// One error, the same words on bridge/log, in the process log and on `<device>/result`.
    func reportError(_ message: String, topic: String, transaction: JSONValue?, resultTopic: String?) {
        log(.error, message, topic: topic)
        if let transaction, let resultTopic {
            transport.publish(resultTopic, json: ["transaction": transaction, "status": "error", "error": .string(message)], qos: 1, retain: false)
        }
    }

    public func log(_ level: BridgeLogLevel, _ message: String, topic: String? = nil) {
        var o: [String: JSONValue] = ["level": .string(level.rawValue), "message": .string(message)]
        var meta: Logger.Metadata = [:]
        if let topic { o["topic"] = .string(topic); meta["mqtt.topic"] = "\(topic)" }
        switch level {
        case .info: logger.info("\(message)", metadata: meta)
        case .warning: logger.warning("\(message)", metadata: meta)
        case .error: logger.error("\(message)", metadata: meta)
        }
        transport.publish(scheme.bridge("log"), json: .object(o), qos: 0, retain: false)
    }

    func publishEvent(_ type: String, _ data: [String: JSONValue]) {
        transport.publish(scheme.bridge("event"), json: ["type": .string(type), "data": .object(data)], qos: 1, retain: false)
    }

    func publishInfo() {
        var o = info.objectValue ?? [:]
        var adapters: [String: JSONValue] = [:]
        for id in slotOrder { adapters[id] = .string(slots[id]!.status.description) }
        o["adapters"] = .object(adapters)
        o["version"] = .string(settings.version)
        o["started_at"] = .string(Timestamp.rfc3339(startedAt))
        transport.publish(scheme.bridge("info"), json: .object(o), qos: 1, retain: true)
    }

    func publishDeviceList() {
        var list: [JSONValue] = []
        for id in slotOrder {
            guard let slot = slots[id] else { continue }
            for rec in slot.devices.values.sorted(by: { $0.name < $1.name }) {
                var o: [String: JSONValue] = [
                    "adapter": .string(id), "id": .string(rec.descriptor.id), "name": .string(rec.name),
                    "topic": .string(scheme.device(adapter: id, name: rec.name)),
                    "capabilities": .array(rec.descriptor.capabilities.map { .string($0.name) }),
                ]
                o["model"] = rec.descriptor.model.map(JSONValue.string) ?? .null
                list.append(.object(o))
            }
        }
        transport.publish(scheme.bridge("devices"), json: .array(list), qos: 1, retain: true)
    }

    func publishDetails(_ adapterID: String, _ rec: DeviceRecord) {
        let d = rec.descriptor
        var o: [String: JSONValue] = [
            "adapter": .string(adapterID), "id": .string(d.id), "name": .string(rec.name), "label": .string(d.label),
            "topic": .string(scheme.device(adapter: adapterID, name: rec.name)), "category": .string(d.category.rawValue),
            "capabilities": .array(d.capabilities.map(\.descriptor)),
        ]
        o["model"] = d.model.map(JSONValue.string) ?? .null
        o["manufacturer"] = d.manufacturer.map(JSONValue.string) ?? .null
        transport.publish(scheme.deviceDetails(adapter: adapterID, name: rec.name), json: .object(o), qos: 1, retain: true)
    }

    func announce(_ adapterID: String, _ rec: inout DeviceRecord) {
        guard settings.discovery else { return }
        let entries = discovery.entries(adapter: adapterID, name: rec.name, device: rec.descriptor)
        let topics = entries.map(\.topic)
        for stale in rec.discoveryTopics where !topics.contains(stale) { transport.publish(stale, [], qos: 1, retain: true) }
        for e in entries { transport.publish(e.topic, json: e.payload, qos: 1, retain: true) }
        rec.discoveryTopics = topics
    }

    func scheduleReannounce() {
        reannounceTask?.cancel()
        let delay = Double.random(in: settings.reannounceDelay)
        reannounceTask = Task { [weak self] in
            try? await Task.sleep(for: .seconds(delay))
            if Task.isCancelled { return }
            await self?.republishAll()
        }
    }

    /// Re-announces discovery, state and availability of every device (HA birth, `republish` request).
    func republishAll() {
        for id in slotOrder {
            guard let slot = slots[id] else { continue }
            for deviceID in slot.devices.keys.sorted() {
                var rec = slot.devices[deviceID]!
                announce(id, &rec)
                slot.devices[deviceID] = rec
                publishState(id, deviceID, force: true)
                if let a = rec.available {
                    transport.publish(scheme.availability(adapter: id, name: rec.name), a ? "online" : "offline", qos: 1, retain: true)
                }
            }
        }
    }

    public func publishHealth() {
        let s = transport.stats()
        var adapters: [String: JSONValue] = [:]
        for id in slotOrder {
            let slot = slots[id]!
            var entry: [String: JSONValue] = slot.metrics
            entry["status"] = .string(slot.status.description)
            entry["devices"] = JSONValue(slot.devices.count)
            entry["requests"] = JSONValue(slot.requests)
            entry["errors"] = JSONValue(slot.errors)
            entry["last_error"] = slot.lastError.map(JSONValue.string) ?? .null
            entry["last_ok"] = slot.lastOK.map { .string(Timestamp.rfc3339($0)) } ?? .null
            adapters[id] = .object(entry)
        }
        let health: JSONValue = [
            "uptime": .number(Date().timeIntervalSince(startedAt).rounded()),
            "rss_bytes": ProcessStats.residentBytes().map { JSONValue($0) } ?? .null,
            "mqtt": [
                "connected": .bool(s.connected), "outbox": JSONValue(s.outbox), "dropped": JSONValue(s.dropped),
                "published": JSONValue(s.published), "received": JSONValue(s.received), "connects": JSONValue(s.connects),
            ],
            "adapters": .object(adapters),
        ]
        transport.publish(scheme.bridge("health"), json: health, qos: 1, retain: true)
    }

    func updateSubscriptions(force: Bool = false) {
        var depths: Set<Int> = []
        for slot in slots.values { for rec in slot.devices.values { depths.insert(rec.name.split(separator: "/").count) } }
        depths.formUnion([1, 2])
        guard force || depths != subscribedDepths else { return }
        subscribedDepths = depths
        var filters = scheme.commandFilters(depths: depths)
        if settings.discovery { filters.append(scheme.haStatusTopic) }
        transport.setSubscriptions(filters)
    }

    // MARK: introspection for tests and the CLI

    public func deviceNames(_ adapterID: String) -> [String: String] {
        (slots[adapterID]?.devices ?? [:]).mapValues(\.name)
    }
}

extension BridgeEngine {
    /// SIGHUP: the same as `bridge/request/config/reload`, answered on `bridge/response/config/reload`.
    public func reloadFromSignal() {
        handleRequest(path: "config/reload", payload: [])
    }

    /// Answers while the actor is not wedged (for the systemd watchdog).
    public func isAlive() -> Bool { !stopped }
}
