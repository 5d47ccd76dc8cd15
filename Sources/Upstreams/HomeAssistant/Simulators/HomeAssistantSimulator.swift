import Foundation
import HTTPTypes
import HummingbirdCore
import HummingbirdWebSocket
import SimulatorSupport
import SwitchyardCore

/// Home Assistant's WebSocket API on loopback (docs/upstreams/home-assistant.md §1), with the shapes observed
/// on a real HA Core: the auth phase (`auth_required` / `auth_ok` / `auth_invalid` then close),
/// results and errors (`id_reuse`, `unknown_command`, `not_found`…), `get_states`, `subscribe_events`,
/// `subscribe_entities` with the compressed `a`/`c`/`r` format (attributes merged, `lu` left out when it
/// equals `lc`, `c` a plain context id), `call_service` on input_boolean, input_number and light
/// entities (events first, then the result, as HA's blocking call does), `config/entity_registry/list`,
/// coalesced arrays after `supported_features`, pings, and every message in one frame (a big
/// `get_states` is one large frame). Knobs: reject the token, drop every connection, stop answering
/// pings (a dead link), change or remove entities from "inside HA", fire events.
public final class HomeAssistantSimulator: Sendable {
    public struct Entity: Sendable, Equatable {
        public var entityID: String
        public var state: String
        public var attributes: [String: SwitchyardCore.JSONValue]
        public var lastChanged: Double
        public var lastUpdated: Double
        public var context: String
        /// Registry entry: platform and unique id (for the "don't mirror our own discovery" rule).
        public var platform: String?
        public var uniqueID: String?
        public init(_ entityID: String, _ state: String, _ attributes: [String: SwitchyardCore.JSONValue] = [:], platform: String? = nil, uniqueID: String? = nil) {
            self.entityID = entityID
            self.state = state
            self.attributes = attributes
            self.lastChanged = 1_795_344_395.9640336
            self.lastUpdated = 1_795_344_395.9640336
            self.context = "01M81DTVNW2HDNKJ3BKCPM1JEA"
            self.platform = platform
            self.uniqueID = uniqueID
        }
    }

    public struct Call: Sendable, Equatable {
        public var domain: String
        public var service: String
        public var data: SwitchyardCore.JSONValue
        public var target: SwitchyardCore.JSONValue
    }

    enum Sub: Sendable, Equatable {
        case events(String?)
        case entities
    }

    /// What a connection's writer sends next: a text frame, or the close frame that ends it.
    enum Frame: Sendable {
        case text(String)
        case close
    }

    struct Conn: Sendable {
        var out: AsyncStream<Frame>.Continuation
        var authed = false
        var coalesce = false
        var lastID = 0
        var subs: [Int: Sub] = [:]
    }

    struct State: Sendable {
        var token: String
        var entities: [String: Entity]
        var conns: [Int: Conn] = [:]
        var nextConn = 0
        var rejectToken = false
        var ignorePings = false
        var holdCalls = false
        var calls: [Call] = []
        var connections = 0
        var authAttempts = 0
        var pings = 0
        var clock = 1_795_344_400.0
        var ctx = 0
    }

    let state: Locked<State>
    let listener: LoopbackListener
    public let port: Int
    public var url: String { "ws://127.0.0.1:\(port)/api/websocket" }

    private init(state: State, listener: LoopbackListener) {
        self.state = Locked(state)
        self.listener = listener
        self.port = listener.port
    }

    public static func start(token: String, entities: [Entity], port: UInt16 = 0) async throws -> HomeAssistantSimulator {
        let holder = LateRef<HomeAssistantSimulator>()
        // Frames of any size each way (every message is one frame, a big `get_states` too), and no WebSocket
        // pings of the simulator's own: what the tests count are the bridge's application-level pings.
        let ws = WebSocketServerConfiguration(maxFrameSize: 1 << 30, autoPing: .disabled, closeTimeout: .seconds(5))
        let channel = HTTP1WebSocketUpgradeChannel(responder: { _, writer, _ in
            try await writer.writeResponse(HTTPResponse(status: .notFound, headerFields: [.contentLength: "0"]))
        }, configuration: .init(ws: ws)) { head, _, _ in
            guard head.method == .get, head.path?.split(separator: "?").first == "/api/websocket" else { return .dontUpgrade }
            return .upgrade([:]) { inbound, outbound, _ in try await holder.value?.serve(inbound, outbound) }
        }
        let listener = try await LoopbackListener.start(port: port, name: "home-assistant", channel: channel)
        let sim = HomeAssistantSimulator(state: State(token: token, entities: Dictionary(uniqueKeysWithValues: entities.map { ($0.entityID, $0) })),
                                         listener: listener)
        holder.set(sim)
        return sim
    }

    /// One connection: what it reads goes to `receive`, in order; what the simulator has for it (`Conn.out`) is
    /// written in order, each message one frame, until a close. Ends when the peer has gone or closed.
    func serve(_ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter) async throws {
        let (frames, out) = AsyncStream.makeStream(of: Frame.self)
        let id = open(out)
        defer { closed(id) }
        try await withThrowingTaskGroup(of: Void.self) { g in
            g.addTask {
                for await frame in frames {
                    switch frame {
                    case .text(let text): try await outbound.write(.text(text))
                    case .close:
                        try await outbound.close(.normalClosure, reason: nil)
                        return
                    }
                }
            }
            for try await message in inbound.messages(maxSize: 1 << 30) {
                guard case .text(let text) = message else { continue }
                receive(id, text)
            }
            closed(id)   // ends `frames`, and with it the writer
            try await g.waitForAll()
        }
    }

    /// A new server on this one's port with its entities as they are now: Home Assistant back after a
    /// restart (the soak run's schedule).
    public func restarted() async throws -> HomeAssistantSimulator {
        let (token, entities) = state.withLock { ($0.token, Array($0.entities.values)) }
        return try await Self.start(token: token, entities: entities, port: UInt16(port))
    }

    public func stop() async {
        dropConnections()
        await listener.stop()
    }

    // MARK: knobs and inspection

    public func setRejectToken(_ reject: Bool) { state.withLock { $0.rejectToken = reject } }
    public func setIgnorePings(_ ignore: Bool) { state.withLock { $0.ignorePings = ignore } }
    /// Service calls are recorded but neither carried out nor answered (HA busy, then gone).
    public func setHoldCalls(_ hold: Bool) { state.withLock { $0.holdCalls = hold } }
    public var calls: [Call] { state.withLock { $0.calls } }
    public var connections: Int { state.withLock { $0.connections } }
    public var authAttempts: Int { state.withLock { $0.authAttempts } }
    /// Application-level pings received (answered or not), over every connection.
    public var pings: Int { state.withLock { $0.pings } }
    public var connected: Int { state.withLock { $0.conns.values.filter(\.authed).count } }
    /// The event types subscribed to by authenticated connections (`nil` for "all events").
    public var eventSubscriptions: [String?] {
        state.withLock { s in
            s.conns.values.filter(\.authed).flatMap { $0.subs.values }.compactMap { sub -> String?? in
                if case .events(let type) = sub { return .some(type) }
                return nil
            }
        }
    }
    public func entity(_ id: String) -> Entity? { state.withLock { $0.entities[id] } }

    /// Closes every connection (code 1000, as HA does when it stops).
    public func dropConnections() {
        let conns = state.withLock { s -> [Conn] in
            defer { s.conns.removeAll() }
            return Array(s.conns.values)
        }
        for c in conns {
            c.out.yield(.close)
            c.out.finish()
        }
    }

    /// A change made inside HA (an automation, the UI): `attributes` merged, `remove` deleted.
    public func set(_ id: String, state newState: String? = nil, attributes: [String: SwitchyardCore.JSONValue] = [:], remove: [String] = []) {
        change { s in
            guard var e = s.entities[id] else { return [:] }
            let old = e
            if let newState { e.state = newState }
            for (k, v) in attributes { e.attributes[k] = v }
            for k in remove { e.attributes[k] = nil }
            return Self.commit(&s, old: old, new: e)
        }
    }

    public func add(_ e: Entity) { change { s in Self.commit(&s, old: nil, new: e) } }

    public func remove(_ id: String) {
        change { s in
            guard let old = s.entities[id] else { return [:] }
            return Self.commit(&s, old: old, new: nil)
        }
    }

    public func fire(_ type: String, _ data: [String: SwitchyardCore.JSONValue]) {
        change { s in
            s.ctx += 1
            let event: SwitchyardCore.JSONValue = ["event_type": .string(type), "data": .object(data), "origin": "LOCAL",
                                    "time_fired": .string(Self.iso(s.clock)), "context": ["id": .string("CTX\(s.ctx)"), "parent_id": .null, "user_id": .null]]
            return Self.deliver(s, event: event, for: type)
        }
    }

    // MARK: the protocol

    func open(_ out: AsyncStream<Frame>.Continuation) -> Int {
        state.withLock { s in
            s.nextConn += 1
            s.connections += 1
            s.conns[s.nextConn] = Conn(out: out)
            out.yield(.text(SwitchyardCore.JSONValue.object(["type": "auth_required", "ha_version": "2025.4.4"]).serialized))
            return s.nextConn
        }
    }

    func closed(_ id: Int) {
        let c = state.withLock { $0.conns.removeValue(forKey: id) }
        c?.out.finish()
    }

    /// Messages to send, per connection, produced by one step.
    typealias Outbox = [Int: [SwitchyardCore.JSONValue]]

    func change(_ body: (inout State) -> Outbox) {
        let (outbox, conns) = state.withLock { s in (body(&s), s.conns) }
        flush(outbox, conns)
    }

    func flush(_ outbox: Outbox, _ conns: [Int: Conn]) {
        for (id, msgs) in outbox where !msgs.isEmpty {
            guard let c = conns[id] else { continue }
            if c.coalesce && msgs.count > 1 {
                c.out.yield(.text(SwitchyardCore.JSONValue.array(msgs).serialized))
            } else {
                for m in msgs { c.out.yield(.text(m.serialized)) }
            }
        }
    }

    func receive(_ connID: Int, _ text: String) {
        var closeAfter = false
        let (outbox, conns) = state.withLock { s -> (Outbox, [Int: Conn]) in
            guard var c = s.conns[connID] else { return ([:], s.conns) }
            var out: Outbox = [:]
            let parsed = try? SwitchyardCore.JSONValue.parse(text)
            if !c.authed {
                s.authAttempts += 1
                if let p = parsed, p["type"] == "auth", p["access_token"] == .string(s.token), !s.rejectToken, p.objectValue?.count == 2 {
                    c.authed = true
                    s.conns[connID] = c
                    out[connID] = [["type": "auth_ok", "ha_version": "2025.4.4"]]
                } else {
                    out[connID] = [["type": "auth_invalid", "message": "Invalid access token or password"]]
                    closeAfter = true
                }
                return (out, s.conns)
            }
            for cmd in parsed?.arrayValue ?? (parsed.map { [$0] } ?? []) {
                let more = Self.command(&s, connID, cmd)
                for (k, v) in more { out[k, default: []] += v }
            }
            return (out, s.conns)
        }
        flush(outbox, conns)
        if closeAfter {
            conns[connID]?.out.yield(.close)
            conns[connID]?.out.finish()
            _ = state.withLock { $0.conns.removeValue(forKey: connID) }
        }
    }

    static func result(_ id: Int, _ result: SwitchyardCore.JSONValue) -> SwitchyardCore.JSONValue { ["id": SwitchyardCore.JSONValue(id), "type": "result", "success": true, "result": result] }
    static func error(_ id: Int, _ code: String, _ message: String) -> SwitchyardCore.JSONValue {
        ["id": SwitchyardCore.JSONValue(id), "type": "result", "success": false, "error": ["code": .string(code), "message": .string(message)]]
    }

    static func command(_ s: inout State, _ connID: Int, _ cmd: SwitchyardCore.JSONValue) -> Outbox {
        guard let id = cmd["id"]?.intValue, id > 0 else { return [connID: [error(0, "invalid_format", "Message incorrectly formatted.")]] }
        guard id > s.conns[connID]!.lastID else { return [connID: [error(id, "id_reuse", "Identifier values have to increase.")]] }
        s.conns[connID]!.lastID = id
        switch cmd["type"]?.stringValue ?? "" {
        case "ping":
            s.pings += 1
            return s.ignorePings ? [:] : [connID: [["id": SwitchyardCore.JSONValue(id), "type": "pong"]]]
        case "supported_features":
            s.conns[connID]!.coalesce = cmd["features"]?["coalesce_messages"] == 1
            return [connID: [result(id, .null)]]
        case "get_states":
            return [connID: [result(id, .array(s.entities.keys.sorted().map { full(s.entities[$0]!) }))]]
        case "config/entity_registry/list":
            let list = s.entities.values.sorted { $0.entityID < $1.entityID }.map { e -> SwitchyardCore.JSONValue in
                ["entity_id": .string(e.entityID), "platform": .string(e.platform ?? String(e.entityID.prefix { $0 != "." })),
                 "unique_id": e.uniqueID.map(SwitchyardCore.JSONValue.string) ?? .null]
            }
            return [connID: [result(id, .array(list))]]
        case "subscribe_events":
            s.conns[connID]!.subs[id] = .events(cmd["event_type"]?.stringValue)
            return [connID: [result(id, .null)]]
        case "subscribe_entities":
            s.conns[connID]!.subs[id] = .entities
            var adds: [String: SwitchyardCore.JSONValue] = [:]
            for (eid, e) in s.entities { adds[eid] = compressed(e) }
            return [connID: [result(id, .null), ["id": SwitchyardCore.JSONValue(id), "type": "event", "event": ["a": .object(adds)]]]]
        case "unsubscribe_events":
            guard let sub = cmd["subscription"]?.intValue, s.conns[connID]!.subs.removeValue(forKey: sub) != nil else {
                return [connID: [error(id, "not_found", "Subscription not found.")]]
            }
            return [connID: [result(id, .null)]]
        case "call_service":
            return callService(&s, connID, id, cmd)
        default:
            return [connID: [error(id, "unknown_command", "Unknown command.")]]
        }
    }

    static func callService(_ s: inout State, _ connID: Int, _ id: Int, _ cmd: SwitchyardCore.JSONValue) -> Outbox {
        let domain = cmd["domain"]?.stringValue ?? "", service = cmd["service"]?.stringValue ?? ""
        let data = cmd["service_data"] ?? .object([:])
        let target = cmd["target"] ?? .null
        s.calls.append(Call(domain: domain, service: service, data: data, target: target))
        if s.holdCalls { return [:] }
        var ids: [String] = []
        switch target["entity_id"] ?? data["entity_id"] {
        case .string(let x)?: ids = [x]
        case .array(let a)?: ids = a.compactMap(\.stringValue)
        default: break
        }
        let known: [String: Set<String>] = ["input_boolean": ["turn_on", "turn_off", "toggle"], "light": ["turn_on", "turn_off", "toggle"],
                                            "input_number": ["set_value"]]
        guard known[domain]?.contains(service) == true else {
            return [connID: [["id": SwitchyardCore.JSONValue(id), "type": "result", "success": false,
                              "error": ["code": "not_found", "message": .string("Service \(domain).\(service) not found."),
                                        "translation_key": "service_not_found"]]]]
        }
        var out: Outbox = [:]
        for eid in ids where eid.hasPrefix("\(domain).") {
            guard var e = s.entities[eid] else { continue }
            let old = e
            switch service {
            case "turn_on": e.state = "on"; if let b = data["brightness"] { e.attributes["brightness"] = b }
            case "turn_off": e.state = "off"
            case "toggle": e.state = e.state == "on" ? "off" : "on"
            case "set_value":
                guard let v = data["value"]?.doubleValue else {
                    return [connID: [error(id, "invalid_format", "required key not provided @ data['value']")]]
                }
                e.state = SwitchyardCore.JSONValue.format(v)
            default: break
            }
            for (k, v) in commit(&s, old: old, new: e) { out[k, default: []] += v }
        }
        s.ctx += 1
        out[connID, default: []].append(result(id, ["context": ["id": .string("CTX\(s.ctx)"), "parent_id": .null, "user_id": "7f04"]]))
        return out
    }

    /// Applies a change and produces the events every subscriber gets.
    static func commit(_ s: inout State, old: Entity?, new: Entity?) -> Outbox {
        s.clock += 1
        s.ctx += 1
        var n = new
        if var e = n {
            if old == nil || old!.state != e.state { e.lastChanged = s.clock }
            e.lastUpdated = s.clock
            e.context = "CTX\(s.ctx)"
            n = e
        }
        let eid = (n ?? old)!.entityID
        s.entities[eid] = n
        var out: Outbox = [:]
        let clock = s.clock, ctx = s.ctx
        // Built only when someone subscribed to state_changed (full states are the expensive part).
        lazy var stateChanged: SwitchyardCore.JSONValue = [
            "event_type": "state_changed",
            "data": ["entity_id": .string(eid), "old_state": old.map(full) ?? .null, "new_state": n.map(full) ?? .null],
            "origin": "LOCAL", "time_fired": .string(iso(clock)), "context": ["id": .string("CTX\(ctx)"), "parent_id": .null, "user_id": .null],
        ]
        for (cid, c) in s.conns where c.authed {
            for (sid, sub) in c.subs.sorted(by: { $0.key < $1.key }) {
                switch sub {
                case .events(let type) where type == nil || type == "state_changed":
                    out[cid, default: []].append(["id": SwitchyardCore.JSONValue(sid), "type": "event", "event": stateChanged])
                case .entities:
                    let ev: SwitchyardCore.JSONValue
                    if let n, let old {
                        var plus: [String: SwitchyardCore.JSONValue] = [:]
                        if n.state != old.state { plus["s"] = .string(n.state) }
                        var changedAttrs: [String: SwitchyardCore.JSONValue] = [:]
                        for (k, v) in n.attributes where old.attributes[k] != v { changedAttrs[k] = v }
                        if !changedAttrs.isEmpty { plus["a"] = .object(changedAttrs) }
                        if n.lastChanged != old.lastChanged { plus["lc"] = .number(n.lastChanged) } else { plus["lu"] = .number(n.lastUpdated) }
                        plus["c"] = .string(n.context)
                        var diff: [String: SwitchyardCore.JSONValue] = ["+": .object(plus)]
                        let removed = old.attributes.keys.filter { n.attributes[$0] == nil }.sorted()
                        if !removed.isEmpty { diff["-"] = ["a": .array(removed.map(SwitchyardCore.JSONValue.string))] }
                        ev = ["c": .object([eid: .object(diff)])]
                    } else if let n {
                        ev = ["a": .object([eid: compressed(n)])]
                    } else {
                        ev = ["r": [.string(eid)]]
                    }
                    out[cid, default: []].append(["id": SwitchyardCore.JSONValue(sid), "type": "event", "event": ev])
                default:
                    break
                }
            }
        }
        return out
    }

    static func deliver(_ s: State, event: SwitchyardCore.JSONValue, for type: String) -> Outbox {
        var out: Outbox = [:]
        for (cid, c) in s.conns where c.authed {
            for (sid, sub) in c.subs where sub == .events(type) || sub == .events(nil) {
                out[cid, default: []].append(["id": SwitchyardCore.JSONValue(sid), "type": "event", "event": event])
            }
        }
        return out
    }

    /// HA's isoformat: `2026-11-22T10:46:35.964034+00:00`.
    static func iso(_ t: Double) -> String {
        var secs = time_t(t.rounded(.down))
        var tm = tm()
        gmtime_r(&secs, &tm)
        let micros = Int(((t - t.rounded(.down)) * 1_000_000).rounded())
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%06d+00:00", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                      tm.tm_sec, min(micros, 999_999))
    }

    static func full(_ e: Entity) -> SwitchyardCore.JSONValue {
        ["entity_id": .string(e.entityID), "state": .string(e.state), "attributes": .object(e.attributes),
         "last_changed": .string(iso(e.lastChanged)), "last_reported": .string(iso(e.lastUpdated)), "last_updated": .string(iso(e.lastUpdated)),
         "context": ["id": .string(e.context), "parent_id": .null, "user_id": .null]]
    }

    /// `{"s","a","c","lc"[,"lu"]}`: `lu` left out when it equals `lc`; `c` a plain id.
    static func compressed(_ e: Entity) -> SwitchyardCore.JSONValue {
        var o: [String: SwitchyardCore.JSONValue] = ["s": .string(e.state), "a": .object(e.attributes), "c": .string(e.context), "lc": .number(e.lastChanged)]
        if e.lastUpdated != e.lastChanged { o["lu"] = .number(e.lastUpdated) }
        return .object(o)
    }
}
