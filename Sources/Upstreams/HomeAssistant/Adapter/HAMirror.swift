#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOSSL
import SwitchyardCore
import WSClient

/// Home Assistant mirrored into `<base>/ha/...` over HA's WebSocket API, laid out like HA's own
/// mqtt_statestream/mqtt_eventstream (docs/topics.md "Home Assistant mirror"), and allowed MQTT commands sent back as service calls
/// (docs/upstreams/home-assistant.md). Every topic is compared with what was last published
/// (`HAMirrorModel`), so a reconnect's fresh snapshot re-publishes only what changed and clears what
/// disappeared; an entity's topics go to the engine in one call.
public actor HAMirror: MirrorAdapter {
    public static let id = "ha"
    public nonisolated var id: String { Self.id }

    typealias Topics = HAMirrorModel.Topics
    typealias Packed = HAMirrorModel.Packed
    typealias Entity = HAMirrorModel.Entity
    typealias Streamed = HAMirrorModel.Streamed

    enum Role {
        case entities, stateEvents, getStates, registry, event(String), features
    }

    let settings: HAMirrorSettings
    let clock: any BridgeClock
    var context: AdapterContext?
    var nextID = 0                      // strictly increasing for the life of the process
    var writer: WebSocketOutboundWriter?
    var authenticated = false
    var authInvalid = false
    var roles: [Int: Role] = [:]
    var waiting: [Int: CheckedContinuation<JSONValue, any Error>] = [:]
    /// Requests written and not yet waiting (their write is being awaited), and answers that came for them
    /// meanwhile: at most one each per request in flight.
    var expected: Set<Int> = []
    var early: [Int: JSONValue] = [:]
    /// Counts the ends of connections: a request whose connection ended while it was written is not waited for.
    var drops = 0
    var model: HAMirrorModel
    var own: Set<String> = []
    var awaitingSnapshot = false
    var lastError: String?

    public init(settings: HAMirrorSettings, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.clock = clock
        self.model = HAMirrorModel(publishAttributes: settings.publishAttributes, publishTimestamps: settings.publishTimestamps)
    }

    // MARK: connection

    public func run(context: AdapterContext) async throws {
        self.context = context
        await context.setMirrorAvailable(false)
        guard let token = settings.token, !token.isEmpty else {
            await context.setStatus(.disabled("no ha.token configured (set ha.token, ha.token_file or ${ENV})"))
            while !Task.isCancelled { try await clock.sleep(seconds: 3600) }
            return
        }
        var attempt = 0
        // The WebSocket library's own log (debug and trace only), under the process's level.
        var logger = Logger(label: "switchyard.ha.websocket")
        logger[metadataKey: "adapter"] = "\(id)"
        while !Task.isCancelled {
            let started = clock.now()
            authInvalid = false
            do {
                let tls: TLSConfiguration? = settings.url.lowercased().hasPrefix("wss:") ? .makeClientConfiguration() : nil
                try await WebSocketClient.connect(url: settings.url, configuration: .init(maxFrameSize: settings.maxMessageSize),
                                                  tlsConfiguration: tls, logger: logger) { inbound, outbound, _ in
                    try await self.session(inbound: inbound, outbound: outbound, token: token)
                }
                // The WebSocket library refuses a frame past the bound from its header (nothing is buffered) but
                // ends the stream as if HA had closed it: the two cannot be told apart here.
                if lastError == nil && !authInvalid {
                    lastError = "Home Assistant closed the connection (or sent a frame larger than ha.max_message_bytes)"
                }
            } catch is CancellationError {
                break
            } catch let e as WebSocketClientError where e == .serverSentMessageTooLarge {
                Bounds.hit("ha_message")
                lastError = "Home Assistant sent a message larger than \(settings.maxMessageSize) bytes (ha.max_message_bytes)"
            } catch {
                // After auth_invalid the server closes the socket; that is not the news.
                if !authInvalid { lastError = "cannot connect to \(Self.redactedURL(settings.url)): \(error)" }
            }
            await disconnected()
            if Task.isCancelled { break }
            if (clock.now() - started).seconds > 60 { attempt = 0 }
            attempt += 1
            let wait: Double
            if authInvalid {
                wait = settings.authRetryDelay
            } else {
                let cap = min(settings.reconnectMaxDelay, settings.reconnectMinDelay * pow(2, Double(min(attempt - 1, 20))))
                wait = Double.random(in: cap / 2...cap)
            }
            await context.setStatus(.error("\(lastError ?? "disconnected"); retrying in \(Int(wait.rounded(.up))) s"))
            try? await clock.sleep(seconds: wait)
        }
        await disconnected()
    }

    static func redactedURL(_ url: String) -> String {
        guard var c = URLComponents(string: url) else { return "the configured URL" }
        c.user = nil
        c.password = nil
        c.query = nil
        return c.string ?? "the configured URL"
    }

    /// One connection: auth, subscriptions, the message loop and the application-level ping.
    func session(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, token: String) async throws {
        writer = outbound
        authenticated = false
        lastError = nil
        // The ping and the auth deadline live exactly as long as this connection.
        try await withThrowingTaskGroup(of: Void.self) { helpers in
            helpers.addTask { await self.pingLoop(outbound) }
            // The WebSocket's inbound stream does not end when the task is cancelled (the adapter being
            // stopped): closing the socket ends it, at once rather than at the next ping.
            helpers.addTask {
                await Latch().wait()   // returns when cancelled
                try? await outbound.close(.goingAway, reason: nil)
            }
            helpers.addTask {
                do { try await self.clock.sleep(seconds: 10) } catch { return }
                await self.authDeadlinePassed(outbound)
            }
            defer { helpers.cancelAll() }
            var messages = inbound.messages(maxSize: settings.maxMessageSize).makeAsyncIterator()
            while true {
                let frame: (value: JSONValue, streamed: [Int: Streamed])?
                do {
                    // The message is let go at the end of this block, before any of it is published: a large
                    // snapshot's text (megabytes) is not held while the mirror publishes it.
                    guard let message = try await messages.next() else { break }
                    guard case .text(let text) = message else { continue }
                    frame = HAMirrorModel.read(text, into: &model, ownPrefix: settings.ownUniqueIDPrefix)
                }
                guard let frame else { continue }
                let items = frame.value.arrayValue ?? [frame.value]   // coalesced: several messages in one frame
                var streamed = frame.streamed
                for (n, item) in items.enumerated() {
                    if try await !receive(item, streamed: streamed.removeValue(forKey: n) ?? Streamed(), outbound: outbound, token: token) {
                        try? await outbound.close(.normalClosure, reason: nil)
                        return
                    }
                }
            }
        }
    }

    func authDeadlinePassed(_ outbound: WebSocketOutboundWriter) async {
        guard !authenticated else { return }
        lastError = "no auth answer from Home Assistant within 10 s"
        try? await outbound.close(.goingAway, reason: nil)
    }

    /// Handles one message; false ends the session.
    func receive(_ m: JSONValue, streamed: Streamed, outbound: WebSocketOutboundWriter, token: String) async throws -> Bool {
        switch m["type"]?.stringValue {
        case "auth_required":
            try await outbound.writeTextMessage(JSONValue.object(["type": "auth", "access_token": .string(token)]).serialized)
        case "auth_ok":
            authenticated = true
            try await subscribeAll()
            await context?.setMirrorAvailable(true)
            await context?.setStatus(.running)
        case "auth_invalid":
            authInvalid = true
            lastError = "Home Assistant refused the token (auth_invalid: \(m["message"]?.stringValue ?? "")); check ha.token. "
                + "Retrying only every \(Int(settings.authRetryDelay)) s"
            await context?.log(.error, "ha: \(lastError!)")
            return false
        case "result":
            guard let id = m["id"]?.intValue else { break }
            if answer(id, m) { break }
            if m["success"] == .bool(false), let role = roles[id] {
                await context?.log(.warning, "ha: \(role) failed: \(m["error"]?["message"]?.stringValue ?? m.serialized)")
            }
            switch roles[id] {
            case .registry?:
                // Read while the frame was parsed: only this bridge's own entities were kept.
                for eid in streamed.own {
                    own.insert(eid)
                    await sync(eid, nil)
                }
                roles[id] = nil
            case .getStates?:
                await resync(streamed.states)
                roles[id] = nil
            default:
                break
            }
        case "event":
            guard let id = m["id"]?.intValue, let role = roles[id], let event = m["event"] else { break }
            switch role {
            case .entities: await entityEvent(event, adds: streamed.adds)
            case .stateEvents: await stateChanged(event)
            case .event(let type):
                var o: [String: JSONValue] = ["event_type": event["event_type"] ?? .string(type), "event_data": event["data"] ?? .object([:])]
                for k in ["origin", "time_fired", "context"] { o[k] = event[k] ?? .null }
                await context?.publish([MirrorMessage("_event/\(event["event_type"]?.stringValue ?? type)", JSONValue.object(o).bytes, retain: false)])
            default: break
            }
        case "pong":
            if let id = m["id"]?.intValue { _ = answer(id, m) }
        default:
            break
        }
        return true
    }

    func send(_ body: [String: JSONValue], role: Role? = nil) async throws -> Int {
        let id = try reserveID()
        if let role { roles[id] = role }
        try await write(id, body)
        return id
    }

    /// The id of the next command; throws when there is no connection to send it on.
    func reserveID() throws -> Int {
        guard writer != nil else { throw AdapterError("not connected to Home Assistant") }
        nextID += 1
        return nextID
    }

    func write(_ id: Int, _ body: [String: JSONValue]) async throws {
        guard let writer else { throw AdapterError("not connected to Home Assistant") }
        var o = body
        o["id"] = JSONValue(id)
        try await writer.writeTextMessage(JSONValue.object(o).serialized)
    }

    func subscribeAll() async throws {
        roles.removeAll()
        _ = try await send(["type": "supported_features", "features": ["coalesce_messages": 1]], role: .features)
        _ = try await send(["type": "config/entity_registry/list"], role: .registry)
        switch settings.feed {
        case .entities:
            awaitingSnapshot = true
            _ = try await send(["type": "subscribe_entities"], role: .entities)
        case .stateChanged:
            _ = try await send(["type": "subscribe_events", "event_type": "state_changed"], role: .stateEvents)
            _ = try await send(["type": "get_states"], role: .getStates)
        }
        for type in settings.events {
            _ = try await send(["type": "subscribe_events", "event_type": .string(type)], role: .event(type))
        }
    }

    func pingLoop(_ outbound: WebSocketOutboundWriter) async {
        while !Task.isCancelled {
            do { try await clock.sleep(seconds: settings.pingInterval) } catch { return }
            guard authenticated else { continue }
            do {
                _ = try await request(["type": "ping"], timeout: settings.pingTimeout, what: "ping")
            } catch is CancellationError {
                return   // the connection is ending anyway
            } catch {
                lastError = "no pong from Home Assistant within \(Int(settings.pingTimeout)) s (dead link); reconnecting"
                try? await outbound.close(.goingAway, reason: nil)
                return
            }
        }
    }

    /// Sends a command and waits for its answer, at most `timeout` seconds, and no longer than the calling
    /// task lives. The command is written at once, so that ids leave in the order they were taken (Home
    /// Assistant refuses an id lower than the last as `id_reuse`); an answer that comes while the write is
    /// still being awaited is kept for it (`early`), not lost (a pong lost that way was a false "dead link").
    /// The timer ends the wait when it is cancelled too: the ping loop is cancelled when its connection ends,
    /// and a wait that only a cancelled timer could end held the connection's task group, and so the
    /// adapter, for ever (a Home Assistant restart while a ping was out).
    func request(_ body: [String: JSONValue], timeout: Double, what: String) async throws -> JSONValue {
        let id = try reserveID()
        let drop = drops
        expected.insert(id)
        defer {
            expected.remove(id)
            early[id] = nil
        }
        try await write(id, body)
        if let m = early.removeValue(forKey: id) { return m }
        guard drops == drop else { throw Self.dropped }
        let clock = self.clock
        return try await withThrowingTaskGroup(of: Void.self, returning: JSONValue.self) { timer in
            timer.addTask {
                let timedOut: Bool
                do {
                    try await clock.sleep(seconds: timeout)
                    timedOut = true
                } catch {
                    timedOut = false
                }
                await self.expire(id, timedOut ? AdapterError("Home Assistant did not confirm the \(what) within \(Int(timeout)) s") : CancellationError())
            }
            defer { timer.cancelAll() }
            // Answered by `receive`, expired by the timer (or its cancellation), or failed by `disconnected`
            // when the link drops. The timer calls in only after this wait is in place (same actor job).
            return try await withCheckedThrowingContinuation { (c: CheckedContinuation<JSONValue, any Error>) in waiting[id] = c }
        }
    }

    /// Hands an answer to its request: the one waiting, or the one still writing (kept for it). False when no
    /// request is expecting it.
    func answer(_ id: Int, _ m: JSONValue) -> Bool {
        if let w = waiting.removeValue(forKey: id) {
            w.resume(returning: m)
            return true
        }
        guard expected.contains(id) else { return false }
        early[id] = m
        return true
    }

    static let dropped = AdapterError("the connection to Home Assistant dropped before it confirmed the call; "
        + "not sent again (it may or may not have run)")

    func expire(_ id: Int, _ error: any Error) {
        waiting.removeValue(forKey: id)?.resume(throwing: error)
    }

    func disconnected() async {
        writer = nil
        let wasUp = authenticated
        authenticated = false
        drops += 1
        for (_, w) in waiting { w.resume(throwing: Self.dropped) }
        waiting.removeAll()
        roles.removeAll()
        await context?.setMirrorAvailable(false)
        if wasUp { await context?.log(.warning, "ha: disconnected: \(lastError ?? "connection closed"); reconnecting") }
    }

    // MARK: the mirror

    func mirrored(_ eid: String) -> Bool { settings.entityAllowed(eid) && !own.contains(eid) }

    /// A full snapshot (first connect or after a reconnect), sorted by id: publish what differs, clear what
    /// is gone. Kept as a sorted array, not a dictionary: a dictionary's table doubles as it fills, and the
    /// snapshot's doubling on top of the model's would set the peak of a start.
    func resync(_ snapshot: [Entity]) async {
        var out = Batch()
        let present = { (eid: String) in Self.find(eid, in: snapshot) != nil }
        for eid in model.gone(keeping: present, mirrored: mirrored) { await out.add(model.sync(eid, packed: nil), self) }
        model.reserve(snapshot.count)
        for e in snapshot where mirrored(e.id) { await out.add(model.sync(e.id, packed: e.topics), self) }
        await out.flush(self)
    }

    static func find(_ id: String, in sorted: [Entity]) -> Int? {
        var lo = 0, hi = sorted.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if sorted[mid].id < id { lo = mid + 1 } else { hi = mid }
        }
        return lo < sorted.count && sorted[lo].id == id ? lo : nil
    }

    /// `subscribe_entities`: `a` (adds; the first one is the snapshot), `c` (diffs), `r` (removals).
    /// The adds arrive already turned into topics (streamed out of the message while it was parsed).
    func entityEvent(_ e: JSONValue, adds parsed: [Entity]) async {
        if e["a"] != nil {
            if awaitingSnapshot {
                awaitingSnapshot = false
                await resync(parsed)
            } else {
                var out = Batch()
                for a in parsed where mirrored(a.id) { await out.add(model.sync(a.id, packed: a.topics), self) }
                await out.flush(self)
            }
        }
        var out = Batch()
        if let changes = e["c"]?.objectValue {
            for (eid, diff) in changes.sorted(by: { $0.key < $1.key }) where mirrored(eid) {
                guard let t = model.topics(changing: eid, by: diff) else { continue }
                await out.add(model.sync(eid, t), self)
            }
        }
        for eid in e["r"]?.arrayValue?.compactMap(\.stringValue) ?? [] where model.published[eid] != nil {
            await out.add(model.sync(eid, nil), self)
        }
        await out.flush(self)
    }

    /// `state_changed`: `new_state` null = removed.
    func stateChanged(_ e: JSONValue) async {
        guard let eid = e["data"]?["entity_id"]?.stringValue, mirrored(eid) else { return }
        await sync(eid, e["data"]?["new_state"].flatMap { model.topics(full: $0) })
    }

    /// Publishes, in one call, the entity's topics that differ from what was last published and the
    /// clearing of those that no longer exist. `want` nil: the entity is gone.
    func sync(_ eid: String, _ want: Topics?) async {
        let messages = model.sync(eid, want)
        if !messages.isEmpty { await context?.publish(messages) }
    }

    /// Several entities' messages handed to the engine together, a thousand at a time (entity by entity, a
    /// snapshot would take a hop to the engine per entity), in order.
    struct Batch {
        var messages: [MirrorMessage] = []
        static let size = 1_000

        mutating func add(_ more: [MirrorMessage], _ mirror: HAMirror) async {
            messages += more
            if messages.count >= Self.size { await flush(mirror) }
        }

        mutating func flush(_ mirror: HAMirror) async {
            guard !messages.isEmpty else { return }
            await mirror.context?.publish(messages)
            messages.removeAll(keepingCapacity: true)
        }
    }

    // MARK: commands

    /// design.md §10: `domain.service` must match `ha.services.allow`, and every target entity must pass
    /// the include/exclude filter; area, device, floor and label targets and `entity_id: all` are refused.
    func call(domain: String, service: String, data: JSONValue?, target: JSONValue?) async throws -> JSONValue {
        let name = "\(domain).\(service)"
        guard settings.serviceAllowed(name) else {
            throw AdapterError("service \(name) is not allowed (ha.services.allow: \(settings.allow.isEmpty ? "empty, nothing is allowed" : settings.allow.joined(separator: ", ")))")
        }
        var targetOut: [String: JSONValue] = [:]
        if let target, target != .null {
            guard let t = target.objectValue else { throw AdapterError("target must be an object like {\"entity_id\": \"light.kitchen\"}") }
            for k in t.keys where k != "entity_id" {
                throw AdapterError("target \(k) is not allowed: only entity_id targets can be checked against ha.entities")
            }
            let ids: [String]
            switch t["entity_id"] {
            case .string(let s)?: ids = [s]
            case .array(let a)?: ids = a.compactMap(\.stringValue)
            default: ids = []
            }
            for eid in ids {
                if eid == "all" { throw AdapterError("entity_id all is not allowed") }
                if !settings.entityAllowed(eid) || own.contains(eid) { throw AdapterError("entity \(eid) is not allowed by ha.entities include/exclude") }
            }
            targetOut["entity_id"] = .array(ids.map(JSONValue.string))
        }
        guard authenticated else { throw AdapterError("not connected to Home Assistant; \(name) was not sent") }
        // Under hot standby, nothing leaves an instance that may have been replaced (design.md §18).
        try UpstreamLease.check()
        var body: [String: JSONValue] = ["type": "call_service", "domain": .string(domain), "service": .string(service)]
        if let data, data != .null { body["service_data"] = data }
        if !targetOut.isEmpty { body["target"] = .object(targetOut) }
        let r = try await request(body, timeout: settings.callTimeout, what: "call to \(name)")
        guard r["success"] == .bool(true) else {
            let e = r["error"]
            throw AdapterError("Home Assistant refused \(name): \(e?["code"]?.stringValue ?? "error"): \(e?["message"]?.stringValue ?? "")")
        }
        return r["result"] ?? .null
    }

    public func command(path: String, payload: [UInt8], context: AdapterContext) async throws {
        let parts = path.split(separator: "/").map(String.init)
        guard parts.count == 3, parts[2] == "set" else {
            throw AdapterError("ha: the mirror takes commands on <base>/ha/<domain>/<object_id>/set only")
        }
        let (domain, object) = (parts[0], parts[1])
        let eid = "\(domain).\(object)"
        let text = String(decoding: payload, as: UTF8.self).trimmingWhitespace()
        switch text.uppercased() {
        case "ON": _ = try await call(domain: domain, service: "turn_on", data: nil, target: ["entity_id": .string(eid)])
        case "OFF": _ = try await call(domain: domain, service: "turn_off", data: nil, target: ["entity_id": .string(eid)])
        case "TOGGLE": _ = try await call(domain: domain, service: "toggle", data: nil, target: ["entity_id": .string(eid)])
        default:
            guard let v = try? JSONValue.parse(text), case .string(let service)? = v["service"] else {
                throw AdapterError("ha: expected ON, OFF, TOGGLE or {\"service\": \"set_value\", \"data\": {…}}, got '\(text.excerpt(60))'")
            }
            _ = try await call(domain: domain, service: service, data: v["data"], target: ["entity_id": .string(eid)])
        }
    }

    public func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? {
        guard path == "call" else { return nil }
        guard case .string(let domain)? = payload["domain"], case .string(let service)? = payload["service"] else {
            throw AdapterError("ha/call needs domain and service")
        }
        return try await call(domain: domain, service: service, data: payload["data"], target: payload["target"])
    }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        throw AdapterError("ha: the mirror has no devices")
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {}
}
