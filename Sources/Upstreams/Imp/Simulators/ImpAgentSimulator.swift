import Foundation
import SimulatorSupport
import SwitchyardCore

/// Electric Imp agents on loopback (docs/upstreams/imp-livecoding.md §1.3–1.4), one URL per agent id like
/// `agent.electricimp.com/<agentID>/...`: a MatrixClock, a BigClock and a Weather agent with their real
/// endpoints, bodies (pre-encoded JSON sent as text, as smittytone's agents do; BigClock's dotted
/// string; "OK"), status codes (the cloud's 404 for an unknown agent, Rocky's 404 for an unknown route,
/// 400 for bad data, 429) and quirks (BigClock stores brightness − 1, Weather's power toggle).
/// Knobs: a device going offline, an agent disappearing (re-enrolment), rate limiting.
public final class ImpAgentSimulator: Sendable {
    public enum App: String, Sendable { case matrixClock, bigClock, weather }

    public struct Agent: Sendable, Equatable {
        public var id: String
        public var app: App
        public var appcode: String
        /// Sent as `version` by `/controller/info` when set (as ThermalForecastWorld's agent does).
        public var version: String?
        public var connected = true
        public var on = true
        public var mode24 = true
        public var bright = 7          // raw 0–15, as the app stores it
        public var utc = false
        public var utcOffset = 0
        public var debug = false
        public var resets = 0
        public var reboots = 0
        public var updates = 0
        public init(id: String, app: App, appcode: String) {
            self.id = id
            self.app = app
            self.appcode = appcode
        }
    }

    struct State: Sendable {
        var agents: [String: Agent]
        var gone: Set<String> = []
        var throttle: [String: Int] = [:]
    }

    let state: Locked<State>
    public let server: LoopbackHTTPServer
    public var baseURL: String { server.baseURL }

    private init(agents: [Agent], server: LoopbackHTTPServer) {
        state = Locked(State(agents: Dictionary(uniqueKeysWithValues: agents.map { ($0.id, $0) })))
        self.server = server
    }

    public static func start(agents: [Agent], port: UInt16 = 0) async throws -> ImpAgentSimulator {
        let holder = LateRef<ImpAgentSimulator>()
        let handler: LoopbackHTTPServer.Handler = { req in
            guard let sim = holder.value else { return .init(status: 503) }
            return sim.handle(req)
        }
        let server = try await LoopbackHTTPServer.start(routes: [("GET *", handler), ("POST *", handler)], port: port)
        let sim = ImpAgentSimulator(agents: agents, server: server)
        holder.set(sim)
        return sim
    }


    public func stop() async { await server.stop() }

    /// A new server on this one's port with its agents as they are now: the end of an outage that `stop`
    /// began (the soak run's schedule).
    public func restarted() async throws -> ImpAgentSimulator {
        try await Self.start(agents: state.withLock { Array($0.agents.values) }, port: UInt16(server.port))
    }

    public func agent(_ id: String) -> Agent? { state.withLock { $0.agents[id] } }
    public var requests: [LoopbackHTTPServer.Received] { server.received }
    /// The device stops answering its agent (the agent keeps serving, with `isconnected: false`).
    public func setConnected(_ id: String, _ connected: Bool) { state.withLock { $0.agents[id]?.connected = connected } }
    /// The agent URL stops working (re-enrolment gives a new agent id) or comes back.
    public func setGone(_ id: String, _ gone: Bool) {
        state.withLock { s in if gone { s.gone.insert(id) } else { s.gone.remove(id) } }
    }
    /// The next `count` requests to this agent get 429 before reaching it.
    public func throttle(_ id: String, count: Int) { state.withLock { $0.throttle[id] = count } }
    /// Someone used the web UI.
    public func change(_ id: String, _ edit: @Sendable (inout Agent) -> Void) { state.withLock { s in if s.agents[id] != nil { edit(&s.agents[id]!) } } }

    /// A JSON `true`/`false` (Foundation on Linux also casts 1 and 0 to Bool; a real agent checks the type).
    static func jsonBool(_ v: Any) -> Bool? {
        String(describing: type(of: v)) == "__NSCFBoolean" || type(of: v) == Bool.self ? v as? Bool : nil
    }

    static func jsonInt(_ v: Any) -> Int? { jsonBool(v) == nil ? v as? Int : nil }

    static func text(_ s: String, _ status: Int = 200) -> LoopbackHTTPServer.Reply {
        .init(status: status, headers: ["Content-Type": "text/plain; charset=utf-8", "Access-Control-Allow-Origin": "*"], body: Array(s.utf8))
    }

    static func encode(_ o: Any) -> String {
        String(decoding: (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data(), as: UTF8.self)
    }

    func handle(_ req: LoopbackHTTPServer.Received) -> LoopbackHTTPServer.Reply {
        let parts = req.path.split(separator: "/", maxSplits: 1).map(String.init)
        guard let id = parts.first else { return Self.text("Not Found\n", 404) }
        let path = parts.count > 1 ? "/" + parts[1] : "/"
        return state.withLock { s -> LoopbackHTTPServer.Reply in
            guard var a = s.agents[id], !s.gone.contains(id) else { return Self.text("Not Found\n", 404) }
            if let n = s.throttle[id], n > 0 {
                s.throttle[id] = n - 1
                return .init(status: 429, headers: ["Retry-After": "1"], body: Array("Too Many Requests".utf8))
            }
            var body: [String: Any] = [:]
            if req.method == "POST" {
                guard let o = try? JSONSerialization.jsonObject(with: Data(req.body)) as? [String: Any] else {
                    return Self.text("Bad data posted: \(req.text)", 400)
                }
                body = o
            }
            let reply = Self.route(&a, req.method, path.lowercased().hasSuffix("/") && path.count > 1 ? String(path.dropLast()) : path, body)
            s.agents[id] = a
            return reply
        }
    }

    static func route(_ a: inout Agent, _ method: String, _ path: String, _ body: [String: Any]) -> LoopbackHTTPServer.Reply {
        switch (method, path) {
        case ("GET", "/controller/info"):
            var info = ["appcode": a.appcode, "watchsupported": "true"]
            if let v = a.version { info["version"] = v }
            return text(encode(info))
        default: break
        }
        switch a.app {
        case .matrixClock: return matrixClock(&a, method, path, body)
        case .bigClock: return bigClock(&a, method, path, body)
        case .weather: return weather(&a, method, path, body)
        }
    }

    static func matrixClock(_ a: inout Agent, _ method: String, _ path: String, _ body: [String: Any]) -> LoopbackHTTPServer.Reply {
        func prefs() -> [String: Any] {
            ["mode": a.mode24, "bst": true, "flash": true, "colon": true, "bright": a.bright, "world": ["utc": a.utc, "offset": a.utcOffset],
             "on": a.on, "debug": a.debug, "isconnected": a.connected,
             "timer": ["on": ["hour": 7, "min": 0], "off": ["hour": 22, "min": 30], "isset": false], "video": false, "alarms": [Any]()]
        }
        switch (method, path) {
        case ("GET", "/controller/state"):
            return text(encode(["mode": a.mode24, "bright": a.bright, "world": ["utc": a.utc], "on": a.on, "isconnected": a.connected]))
        case ("GET", "/settings"):
            return text(encode(prefs()))
        case ("GET", "/status"):
            return text(encode(["isconnected": a.connected]))
        case ("POST", "/settings"):
            for (k, v) in body.sorted(by: { $0.key < $1.key }) {
                switch k {
                case "setmode", "setlight", "setcolon", "setflash", "setbst", "setnight", "setvideo":
                    guard let b = jsonBool(v) else {
                        return text("Mis-formed parameter sent (\(k))", 400)
                    }
                    if k == "setmode" { a.mode24 = b }
                    if k == "setlight" { a.on = b }
                case "setbright":
                    let n = (v as? String).flatMap(Int.init) ?? jsonInt(v)
                    guard let n, (0...15).contains(n) else { return text("Mis-formed parameter sent (setbright)", 400) }
                    a.bright = n
                case "setutc":
                    guard let o = v as? [String: Any], let st = o["state"] as? Bool else { return text("Mis-formed parameter sent (setutc)", 400) }
                    a.utc = st
                    a.utcOffset = o["offset"] as? Int ?? a.utcOffset
                default: break
                }
            }
            return text(encode(prefs()))
        case ("POST", "/action"):
            switch body["action"] as? String {
            case "reset": a.resets += 1; a.on = true; a.mode24 = true; a.bright = 15; a.utc = false
            case "reboot": a.reboots += 1
            case "debug": a.debug = body["state"] as? Bool ?? a.debug
            default: break
            }
            return text("OK")
        default:
            return text("No handler for \(method) \(path)", 404)
        }
    }

    static func bigClock(_ a: inout Agent, _ method: String, _ path: String, _ body: [String: Any]) -> LoopbackHTTPServer.Reply {
        switch (method, path) {
        case ("GET", "/controller/state"):
            return text(a.connected ? "1" : "0")
        case ("GET", "/settings"):
            // mode.bst.flash.colon.bright+1.utc.offset+12.on.c|d.debug
            let f = [a.mode24 ? "1" : "0", "1", "1", "1", "\(a.bright + 1)", a.utc ? "1" : "0", "\(a.utcOffset + 12)", a.on ? "1" : "0",
                     a.connected ? "c" : "d", a.debug ? "1" : "0"]
            return text(f.joined(separator: "."))
        case ("POST", "/settings"):
            for (k, v) in body {
                switch k {
                case "setmode": guard let b = jsonBool(v) else { return text("Mis-formed parameter sent (setmode)", 400) }; a.mode24 = b
                case "setlight": guard let b = jsonBool(v) else { return text("Mis-formed parameter sent (setlight)", 400) }; a.on = b
                case "setbright":
                    let n = (v as? String).flatMap(Int.init) ?? jsonInt(v)
                    guard let n, (1...16).contains(n) else { return text("Mis-formed parameter sent (setbright)", 400) }
                    a.bright = n - 1   // stored as value − 1
                default: break
                }
            }
            return text("OK")
        case ("POST", "/action"):
            if body["action"] as? String == "reset" { a.resets += 1; a.bright = 15; a.on = true }
            return text("OK")
        default:
            return text("No handler for \(method) \(path)", 404)
        }
    }

    static func weather(_ a: inout Agent, _ method: String, _ path: String, _ body: [String: Any]) -> LoopbackHTTPServer.Reply {
        switch (method, path) {
        case ("GET", "/controller/state"):
            return text(encode(["isconnected": a.connected, "ispowered": a.on]))
        case ("POST", "/settings"):
            if let p = body["power"] {
                guard let b = jsonBool(p) else { return text("Mis-formed parameter sent (power)", 400) }
                a.on = b
            }
            if let b = body["bright"] as? Int { a.bright = b }
            return text("OK")
        case ("POST", "/update"):
            switch body["action"] as? String {
            case "update": a.updates += 1
            case "reboot": a.reboots += 1
            case "power": a.on.toggle()   // a toggle: not idempotent
            case "reset": a.resets += 1
            default: return text("Bad data posted", 400)
            }
            return text("OK")
        default:
            return text("No handler for \(method) \(path)", 404)
        }
    }
}
