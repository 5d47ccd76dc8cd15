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
/// mqtt_statestream/mqtt_eventstream (TOPICS.md), and allowed MQTT commands sent back as service calls
/// (homeassistant-websocket.md §1). Every topic is compared with what was last published, so a
/// reconnect's fresh snapshot re-publishes only what changed and clears what disappeared.
public actor HAMirror: MirrorAdapter {
    public nonisolated let id = "ha"

    /// One entity as mirrored: topic suffix (`state`, an attribute, `last_changed`) → retained payload.
    /// This is all the mirror keeps per entity: HA's attributes are not held beyond what is published.
    typealias Topics = [String: String]

    enum Role {
        case entities, stateEvents, getStates, registry, event(String), features
    }

    let settings: HAMirrorSettings
    var context: AdapterContext?
    var nextID = 0                      // strictly increasing for the life of the process
    var writer: WebSocketOutboundWriter?
    var authenticated = false
    var authInvalid = false
    var roles: [Int: Role] = [:]
    var waiting: [Int: CheckedContinuation<JSONValue, any Error>] = [:]
    var published: [String: Topics] = [:]   // entity id → what its topics hold on the broker
    var suffixes: Set<String> = []           // attribute names, stored once (thousands of entities share a few)
    var own: Set<String> = []
    var awaitingSnapshot = false
    var lastError: String?

    public init(settings: HAMirrorSettings) { self.settings = settings }

    // MARK: connection

    public func run(context: AdapterContext) async throws {
        self.context = context
        await context.setMirrorAvailable(false)
        guard let token = settings.token, !token.isEmpty else {
            await context.setStatus(.disabled("no ha.token configured (set ha.token, ha.token_file or ${ENV})"))
            while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
            return
        }
        var attempt = 0
        var logger = Logger(label: "switchyard.ha.ws")
        logger.logLevel = .critical
        while !Task.isCancelled {
            let started = Date()
            authInvalid = false
            do {
                let tls: TLSConfiguration? = settings.url.lowercased().hasPrefix("wss:") ? .makeClientConfiguration() : nil
                try await WebSocketClient.connect(url: settings.url, configuration: .init(maxFrameSize: settings.maxMessageSize),
                                                  tlsConfiguration: tls, logger: logger) { inbound, outbound, _ in
                    try await self.session(inbound: inbound, outbound: outbound, token: token)
                }
                if lastError == nil && !authInvalid { lastError = "Home Assistant closed the connection" }
            } catch is CancellationError {
                break
            } catch {
                // After auth_invalid the server closes the socket; that is not the news.
                if !authInvalid { lastError = "cannot connect to \(Self.redactedURL(settings.url)): \(error)" }
            }
            await disconnected()
            if Task.isCancelled { break }
            if Date().timeIntervalSince(started) > 60 { attempt = 0 }
            attempt += 1
            let wait: Double
            if authInvalid {
                wait = settings.authRetryDelay
            } else {
                let cap = min(settings.reconnectMaxDelay, settings.reconnectMinDelay * pow(2, Double(min(attempt - 1, 20))))
                wait = Double.random(in: cap / 2...cap)
            }
            await context.setStatus(.error("\(lastError ?? "disconnected"); retrying in \(Int(wait.rounded(.up))) s"))
            try? await Task.sleep(for: .seconds(wait))
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
        let pinger = Task { await self.pingLoop(outbound) }
        defer { pinger.cancel() }
        let authDeadline = Task {
            try? await Task.sleep(for: .seconds(10))
            if !self.authenticated, !Task.isCancelled {
                self.setError("no auth answer from Home Assistant within 10 s")
                try? await outbound.close(.goingAway, reason: nil)
            }
        }
        defer { authDeadline.cancel() }
        for try await message in inbound.messages(maxSize: settings.maxMessageSize) {
            guard case .text(let text) = message else { continue }
            // The entities snapshot (`event.a`, thousands of entities in one message) is turned into topics
            // entity by entity while it is parsed: the whole tree would briefly cost several times the mirror.
            var adds: [Int: [String: Topics]] = [:]
            guard let v = try? JSONValue.parse(Array(text.utf8), streaming: [["event", "a"]], visit: { m in
                if let eid = m.key { adds[m.document, default: [:]][eid] = topics(compressed: m.value) }
            }) else { continue }
            let items = v.arrayValue ?? [v]   // coalesced: several messages in one frame
            for (n, item) in items.enumerated() {
                if try await !receive(item, adds: adds.removeValue(forKey: n) ?? [:], outbound: outbound, token: token) {
                    try? await outbound.close(.normalClosure, reason: nil)
                    return
                }
            }
        }
    }

    func setError(_ message: String) { lastError = message }

    /// Handles one message; false ends the session.
    func receive(_ m: JSONValue, adds: [String: Topics], outbound: WebSocketOutboundWriter, token: String) async throws -> Bool {
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
            if let w = waiting.removeValue(forKey: id) {
                w.resume(returning: m)
                break
            }
            if m["success"] == .bool(false), let role = roles[id] {
                await context?.log(.warning, "ha: \(role) failed: \(m["error"]?["message"]?.stringValue ?? m.serialized)")
            }
            switch roles[id] {
            case .registry?:
                for e in m["result"]?.arrayValue ?? [] {
                    if e["platform"] == "mqtt", let uid = e["unique_id"]?.stringValue, uid.hasPrefix(settings.ownUniqueIDPrefix),
                       let eid = e["entity_id"]?.stringValue {
                        own.insert(eid)
                        await sync(eid, nil)
                    }
                }
                roles[id] = nil
            case .getStates?:
                var snapshot: [String: Topics] = [:]
                for s in m["result"]?.arrayValue ?? [] {
                    if let eid = s["entity_id"]?.stringValue, let t = topics(full: s) { snapshot[eid] = t }
                }
                await resync(snapshot)
                roles[id] = nil
            default:
                break
            }
        case "event":
            guard let id = m["id"]?.intValue, let role = roles[id], let event = m["event"] else { break }
            switch role {
            case .entities: await entityEvent(event, adds: adds)
            case .stateEvents: await stateChanged(event)
            case .event(let type):
                var o: [String: JSONValue] = ["event_type": event["event_type"] ?? .string(type), "event_data": event["data"] ?? .object([:])]
                for k in ["origin", "time_fired", "context"] { o[k] = event[k] ?? .null }
                await context?.publish("_event/\(event["event_type"]?.stringValue ?? type)", Array(JSONValue.object(o).serialized.utf8), retain: false)
            default: break
            }
        case "pong":
            if let id = m["id"]?.intValue, let w = waiting.removeValue(forKey: id) { w.resume(returning: m) }
        default:
            break
        }
        return true
    }

    func send(_ body: [String: JSONValue], role: Role? = nil) async throws -> Int {
        guard let writer else { throw AdapterError("not connected to Home Assistant") }
        nextID += 1
        let id = nextID
        var o = body
        o["id"] = JSONValue(id)
        if let role { roles[id] = role }
        try await writer.writeTextMessage(JSONValue.object(o).serialized)
        return id
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
            try? await Task.sleep(for: .seconds(settings.pingInterval))
            if Task.isCancelled { return }
            guard authenticated else { continue }
            do {
                _ = try await request(["type": "ping"], timeout: settings.pingTimeout, what: "ping")
            } catch {
                lastError = "no pong from Home Assistant within \(Int(settings.pingTimeout)) s (dead link); reconnecting"
                try? await outbound.close(.goingAway, reason: nil)
                return
            }
        }
    }

    /// Sends a command and waits for its answer, at most `timeout` seconds.
    func request(_ body: [String: JSONValue], timeout: Double, what: String) async throws -> JSONValue {
        let id = try await send(body)
        let timer = Task {
            try? await Task.sleep(for: .seconds(timeout))
            if !Task.isCancelled { self.expire(id, "Home Assistant did not confirm the \(what) within \(Int(timeout)) s") }
        }
        defer { timer.cancel() }
        return try await withCheckedThrowingContinuation { (c: CheckedContinuation<JSONValue, any Error>) in waiting[id] = c }
    }

    func expire(_ id: Int, _ message: String) {
        waiting.removeValue(forKey: id)?.resume(throwing: AdapterError(message))
    }

    func disconnected() async {
        writer = nil
        let wasUp = authenticated
        authenticated = false
        for (_, w) in waiting {
            w.resume(throwing: AdapterError("the connection to Home Assistant dropped before it confirmed the call; "
                + "not sent again (it may or may not have run)"))
        }
        waiting.removeAll()
        roles.removeAll()
        await context?.setMirrorAvailable(false)
        if wasUp { await context?.log(.warning, "ha: disconnected: \(lastError ?? "connection closed"); reconnecting") }
    }

    // MARK: the mirror

    /// The topics of an entity given whole (`get_states`, `state_changed`).
    func topics(full s: JSONValue) -> Topics? {
        guard let state = s["state"]?.stringValue else { return nil }
        var t: Topics = [:]
        apply(to: &t, state: state, attributes: s["attributes"]?.objectValue, removed: [],
              lastChanged: s["last_changed"], lastUpdated: s["last_updated"])
        return t
    }

    /// Merges a state, attributes and timestamps into an entity's topics; only what is published is kept.
    func apply(to t: inout Topics, state: String?, attributes: [String: JSONValue]?, removed: [String],
               lastChanged: JSONValue?, lastUpdated: JSONValue?) {
        if let state { t["state"] = state }
        if settings.publishAttributes {
            for (k, v) in attributes ?? [:] where Self.publishable(k) { t[intern(k)] = v.serialized }
            for k in removed where Self.publishable(k) { t[k] = nil }
        }
        if settings.publishTimestamps {
            if let lc = Self.iso(lastChanged) { t["last_changed"] = lc; t["last_updated"] = lc }
            if let lu = Self.iso(lastUpdated) { t["last_updated"] = lu }
        }
    }

    func intern(_ s: String) -> String { suffixes.insert(s).memberAfterInsert }

    static func iso(_ v: JSONValue?) -> String? {
        switch v {
        case .string(let s)?: return Timestamp.parse(s).map { Timestamp.rfc3339($0) } ?? s
        case .number(let n)?: return Timestamp.rfc3339(Date(timeIntervalSince1970: n))
        default: return nil
        }
    }

    /// Attribute names that would collide with the command topics or the entity's own topics, or nest,
    /// are not published.
    static let reservedSuffixes: Set<String> = ["set", "get", "result", "availability", "state", "last_changed", "last_updated"]
    static func publishable(_ k: String) -> Bool { !k.isEmpty && !reservedSuffixes.contains(k) && !k.contains("/") }

    func mirrored(_ eid: String) -> Bool { settings.entityAllowed(eid) && !own.contains(eid) }

    /// A full snapshot (first connect or after a reconnect): publish what differs, clear what is gone.
    func resync(_ snapshot: [String: Topics]) async {
        for eid in published.keys.sorted() where snapshot[eid] == nil || !mirrored(eid) { await sync(eid, nil) }
        for (eid, t) in snapshot.sorted(by: { $0.key < $1.key }) where mirrored(eid) { await sync(eid, t) }
    }

    /// One entity of a `subscribe_entities` add (compressed: `s`, `a`, `lc`, `lu` left out when equal to `lc`).
    func topics(compressed v: JSONValue) -> Topics {
        var t: Topics = [:]
        apply(to: &t, state: v["s"]?.stringValue ?? "", attributes: v["a"]?.objectValue, removed: [],
              lastChanged: v["lc"], lastUpdated: v["lu"] ?? v["lc"])
        return t
    }

    /// `subscribe_entities`: `a` (adds; the first one is the snapshot), `c` (diffs), `r` (removals).
    /// The adds arrive already turned into topics (streamed out of the message while it was parsed).
    func entityEvent(_ e: JSONValue, adds parsed: [String: Topics]) async {
        if e["a"] != nil {
            if awaitingSnapshot {
                awaitingSnapshot = false
                await resync(parsed)
            } else {
                for (eid, t) in parsed.sorted(by: { $0.key < $1.key }) where mirrored(eid) { await sync(eid, t) }
            }
        }
        if let changes = e["c"]?.objectValue {
            for (eid, diff) in changes.sorted(by: { $0.key < $1.key }) where mirrored(eid) {
                guard var t = published[eid] else { continue }
                let plus = diff["+"]
                // Attributes are merged, not replaced; `-` lists the ones that went away.
                apply(to: &t, state: plus?["s"]?.stringValue, attributes: plus?["a"]?.objectValue,
                      removed: diff["-"]?["a"]?.arrayValue?.compactMap(\.stringValue) ?? [],
                      lastChanged: plus?["lc"], lastUpdated: plus?["lu"])
                await sync(eid, t)
            }
        }
        for eid in e["r"]?.arrayValue?.compactMap(\.stringValue) ?? [] where published[eid] != nil {
            await sync(eid, nil)
        }
    }

    /// `state_changed`: `new_state` null = removed.
    func stateChanged(_ e: JSONValue) async {
        guard let eid = e["data"]?["entity_id"]?.stringValue, mirrored(eid) else { return }
        await sync(eid, e["data"]?["new_state"].flatMap { topics(full: $0) })
    }

    /// Publishes the entity's topics that differ from what was last published and clears those that
    /// no longer exist (an empty retained payload). `want` nil: the entity is gone.
    func sync(_ eid: String, _ want: Topics?) async {
        guard let dot = eid.firstIndex(of: ".") else { return }
        let want = want ?? [:]
        let had = published[eid] ?? [:]
        guard want != had else { return }
        let base = "\(eid[..<dot])/\(eid[eid.index(after: dot)...])"
        for (suffix, payload) in want.sorted(by: { $0.key < $1.key }) where had[suffix] != payload {
            await context?.publish("\(base)/\(suffix)", Array(payload.utf8), retain: true)
        }
        for suffix in had.keys.sorted() where want[suffix] == nil {
            await context?.publish("\(base)/\(suffix)", [], retain: true)
        }
        published[eid] = want.isEmpty ? nil : want
    }

    // MARK: commands

    /// Decision 10: `domain.service` must match `ha.services.allow`, and every target entity must pass
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
                throw AdapterError("ha: expected ON, OFF, TOGGLE or {\"service\": \"set_value\", \"data\": {…}}, got '\(text.prefix(60))'")
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
