import Foundation
import SimulatorSupport
import SwitchyardCore

/// The LIFX cloud HTTP API v1 on loopback (docs/upstreams/lifx-cloud.md §1): lights, groups, locations, scenes, effects,
/// `/lights/states` batches, `state/delta`, `toggle`, `/color`, with the real JSON shapes and status
/// codes (207 with per-light results, 202 for fast mode, 404 for a selector matching nothing, 422 with
/// an error body, 401 for a bad token, 429 and X-RateLimit-* headers). Values are stored quantised to
/// 16 bits as devices do, so 30 % reads back 0.29999237… Knobs: lights going offline or timing out,
/// changes made "from the app", a spent budget, and the server's latency and injected failures.
public final class LIFXCloudSimulator: Sendable {
    public struct Light: Sendable, Equatable {
        public var id: String
        public var label: String
        public var connected = true
        /// What an action reports for this light: "ok", "offline" or "timed_out".
        public var reach = "ok"
        public var power = "off"
        public var hue = 0.0
        public var saturation = 0.0
        public var kelvin = 3500
        public var brightness = 1.0
        public var groupID: String
        public var groupName: String
        public var locationID: String
        public var locationName: String
        public var product = "LIFX Color"
        public var hasColor = true
        public var hasVariableColorTemp = true
        public var minKelvin = 2500
        public var maxKelvin = 9000
        public var effect = "OFF"
        public var lastSeen = Date(timeIntervalSince1970: 1_790_000_000)

        public init(id: String, label: String, group: (String, String), location: (String, String), power: String = "off",
                    brightness: Double = 1, hue: Double = 0, saturation: Double = 0, kelvin: Int = 3500, connected: Bool = true) {
            self.id = id
            self.label = label
            self.groupID = group.0
            self.groupName = group.1
            self.locationID = location.0
            self.locationName = location.1
            self.connected = connected
            self.reach = connected ? "ok" : "offline"
            self.power = power
            self.brightness = Self.q(brightness)
            self.hue = Self.q(hue / 360) * 360
            self.saturation = Self.q(saturation)
            self.kelvin = kelvin
        }

        /// 16-bit storage, truncated like the devices (0.3 → 0.29999237…, 60° → 59.99725…).
        public static func q(_ v: Double) -> Double { (min(max(v, 0), 1) * 65535).rounded(.down) / 65535 }
    }

    public struct SceneState: Sendable, Equatable {
        public var selector: String
        public var power: String?
        public var brightness: Double?
        public var hue: Double?
        public var saturation: Double?
        public var kelvin: Int?
        public init(selector: String, power: String? = nil, brightness: Double? = nil, hue: Double? = nil, saturation: Double? = nil,
                    kelvin: Int? = nil) {
            self.selector = selector
            self.power = power
            self.brightness = brightness
            self.hue = hue
            self.saturation = saturation
            self.kelvin = kelvin
        }
    }

    public struct Scene: Sendable, Equatable {
        public var uuid: String
        public var name: String
        public var states: [SceneState]
        public init(uuid: String, name: String, states: [SceneState]) {
            self.uuid = uuid
            self.name = name
            self.states = states
        }
    }

    /// An effect the simulator was asked to run.
    public struct EffectRun: Sendable, Equatable {
        public var lightID: String
        public var name: String
        public var body: String
    }

    struct State: Sendable {
        var lights: [Light]
        var scenes: [Scene]
        var token: String
        var limit = 120
        var window = 60.0
        var windowStart: Date?
        var used = 0
        var exhaustedUntil: Date?
        /// Armed by `exhaustBudget(fromNextAction:)`: the next request that is not a GET starts the window.
        var exhaustOnAction: Double?
        var effects: [EffectRun] = []
    }

    let state: Locked<State>
    public let server: LoopbackHTTPServer
    public var apiURL: String { server.baseURL + "/v1" }

    private init(state: State, server: LoopbackHTTPServer) {
        self.state = Locked(state)
        self.server = server
    }

    public static func start(token: String, lights: [Light], scenes: [Scene] = []) async throws -> LIFXCloudSimulator {
        try await start(state: State(lights: lights, scenes: scenes, token: token), port: 0)
    }

    /// A new server on this one's port with its lights, scenes and token: the end of an outage that
    /// `stop` began (the soak run's schedule).
    public func restarted() async throws -> LIFXCloudSimulator {
        try await Self.start(state: state.withLock { $0 }, port: UInt16(server.port))
    }

    /// The same cloud with no socket, for the unit tier: `respond(to:)`, or `server.twinResponder` as the peer
    /// of an `HTTPTwin`, answers through the handler, record and knobs it answers with on the wire.
    public static func inMemory(token: String, lights: [Light], scenes: [Scene] = [],
                                baseURL: String = "https://api.lifx.invalid") -> LIFXCloudSimulator {
        let box = LateRef<LIFXCloudSimulator>()
        let sim = LIFXCloudSimulator(state: State(lights: lights, scenes: scenes, token: token),
                                     server: LoopbackHTTPServer.inMemory(routes: routes(box), baseURL: baseURL))
        box.set(sim)
        return sim
    }

    static func start(state: State, port: UInt16) async throws -> LIFXCloudSimulator {
        let box = LateRef<LIFXCloudSimulator>()
        let server = try await LoopbackHTTPServer.start(routes: routes(box), port: port)
        let sim = LIFXCloudSimulator(state: state, server: server)
        box.set(sim)
        return sim
    }

    static func routes(_ box: LateRef<LIFXCloudSimulator>) -> [(String, LoopbackHTTPServer.Handler)] {
        let handler: LoopbackHTTPServer.Handler = { req in
            guard let sim = box.value else { return .init(status: 503) }
            return sim.handle(req)
        }
        return [("GET /v1/*", handler), ("PUT /v1/*", handler), ("POST /v1/*", handler), ("*", { _ in .json(#"{"error":"not found"}"#, status: 404) })]
    }

    /// Answers one request as the server does (recorded, delayed, failed as the knobs say).
    public func respond(to request: LoopbackHTTPServer.Received) async -> LoopbackHTTPServer.Reply { await server.respond(to: request) }

    public func stop() async { await server.stop() }

    // MARK: knobs and inspection

    public var lights: [Light] { state.withLock { $0.lights } }
    public func light(_ id: String) -> Light? { state.withLock { s in s.lights.first { $0.id == id } } }
    public var effects: [EffectRun] { state.withLock { $0.effects } }
    /// Requests received, as "METHOD /path" plus body, in order.
    public var requests: [LoopbackHTTPServer.Received] { server.received }
    public func clearRequests() { server.clearReceived() }

    /// A light drops off the network (or comes back): listed with `connected`, actions report `reach`.
    public func setReachability(_ id: String, connected: Bool, reach: String? = nil) {
        state.withLock { s in
            guard let i = s.lights.firstIndex(where: { $0.id == id }) else { return }
            s.lights[i].connected = connected
            s.lights[i].reach = reach ?? (connected ? "ok" : "offline")
        }
    }

    /// Someone used the LIFX app or a wall switch.
    public func changeExternally(_ id: String, power: String? = nil, brightness: Double? = nil) {
        state.withLock { s in
            guard let i = s.lights.firstIndex(where: { $0.id == id }) else { return }
            if let power { s.lights[i].power = power }
            if let brightness { s.lights[i].brightness = Light.q(brightness) }
            s.lights[i].lastSeen = Date()
        }
    }

    public func setRateLimit(_ limit: Int, window: Double) {
        state.withLock { s in
            s.limit = limit
            s.window = window
            s.windowStart = nil
            s.used = 0
        }
    }

    /// Another client spends the whole budget: every request gets 429 for `seconds`.
    public func exhaustBudget(for seconds: Double) {
        state.withLock { $0.exhaustedUntil = Date().addingTimeInterval(seconds) }
    }

    /// The budget runs out when the next action (a request that is not a GET) comes, for `seconds` from
    /// then: that action is answered 429, whenever it comes (a test on a loaded machine does not race it).
    public func exhaustBudget(fromNextAction seconds: Double) {
        state.withLock { $0.exhaustOnAction = seconds }
    }

    public func setDelay(_ seconds: Double) { server.setDelay(seconds) }
    /// Answers wait from `hold()` until `release()` (`LoopbackHTTPServer.hold`).
    public func hold() { server.hold() }
    public func release() { server.release() }
    public func injectFailures(_ statuses: [Int]) { server.injectFailures(statuses) }

    // MARK: the API

    func handle(_ req: LoopbackHTTPServer.Received) -> LoopbackHTTPServer.Reply {
        state.withLock { s in
            let now = Date()
            if s.windowStart == nil || now.timeIntervalSince(s.windowStart!) >= s.window {
                s.windowStart = now
                s.used = 0
            }
            let reset = Int((s.windowStart!.addingTimeInterval(s.window)).timeIntervalSince1970.rounded(.up))
            if let seconds = s.exhaustOnAction, req.method != "GET" {
                s.exhaustOnAction = nil
                s.exhaustedUntil = now.addingTimeInterval(seconds)
            }
            if let until = s.exhaustedUntil, until > now {
                return Self.reply(429, ["error": "Rate limit exceeded"], limit: s.limit, remaining: 0,
                                  reset: Int(until.timeIntervalSince1970.rounded(.up)))
            }
            if s.used >= s.limit {
                return Self.reply(429, ["error": "Rate limit exceeded"], limit: s.limit, remaining: 0, reset: reset)
            }
            s.used += 1
            let remaining = s.limit - s.used
            func out(_ status: Int, _ body: Any?) -> LoopbackHTTPServer.Reply {
                Self.reply(status, body, limit: s.limit, remaining: remaining, reset: reset)
            }
            let auth = req.headers["authorization"] ?? ""
            let basic = "Basic " + Data("\(s.token):".utf8).base64EncodedString()
            guard auth == "Bearer \(s.token)" || auth == basic else {
                return out(401, ["error": "Invalid credentials"])
            }
            let segments = req.path.split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
            guard segments.count >= 2, segments[0] == "v1" else { return out(404, ["error": "not found"]) }
            let body: [String: Any]
            if req.body.isEmpty {
                body = [:]
            } else if let o = try? JSONSerialization.jsonObject(with: Data(req.body)) as? [String: Any] {
                body = o
            } else {
                return out(400, ["error": "body is not a JSON object"])
            }
            let rest = Array(segments.dropFirst())
            switch (req.method, rest.count, rest.first ?? "") {
            case ("GET", 1, "scenes"):
                return out(200, s.scenes.map(Self.json))
            case ("GET", 1, "color"):
                switch Self.parseColor(req.query["string"] ?? "") {
                case .success(let c):
                    return out(200, ["hue": c.hue as Any? ?? NSNull(), "saturation": c.saturation as Any? ?? NSNull(),
                                     "brightness": c.brightness as Any? ?? NSNull(), "kelvin": c.kelvin as Any? ?? NSNull()])
                case .failure(let e): return out(422, Self.invalid("string", e.message))
                }
            case ("PUT", 3, "scenes") where rest[2] == "activate":
                guard rest[1].hasPrefix("scene_id:"), let scene = s.scenes.first(where: { "scene_id:\($0.uuid)" == rest[1] }) else {
                    return out(404, ["error": "Could not find scene '\(rest[1])'"])
                }
                var results: [[String: Any]] = []
                for st in scene.states {
                    var op: [String: Any] = [:]
                    if let p = st.power { op["power"] = p }
                    if let b = st.brightness { op["brightness"] = b }
                    var color: [String] = []
                    if let k = st.kelvin { color.append("kelvin:\(k)") }
                    if let h = st.hue { color.append("hue:\(h)") }
                    if let sat = st.saturation { color.append("saturation:\(sat)") }
                    if !color.isEmpty { op["color"] = color.joined(separator: " ") }
                    if case .success(let r) = Self.apply(&s, selector: st.selector, op) { results += r }
                }
                return out(207, ["results": results])
            case ("GET", 2, "lights"):
                let idx = Self.match(s.lights, rest[1])
                if idx.isEmpty { return out(404, ["error": "Could not find light with selector '\(rest[1])'."]) }
                return out(200, idx.map { Self.json(s.lights[$0]) })
            case ("PUT", 2, "lights") where rest[1] == "states":
                guard let states = body["states"] as? [[String: Any]] else { return out(422, Self.invalid("states", "is missing")) }
                if states.count > 50 { return out(422, Self.invalid("states", "has more than 50 entries")) }
                let defaults = body["defaults"] as? [String: Any] ?? [:]
                var results: [[String: Any]] = []
                for var st in states {
                    for (k, v) in defaults where st[k] == nil { st[k] = v }
                    let selector = st.removeValue(forKey: "selector") as? String ?? ""
                    var operation = st
                    operation["selector"] = selector
                    switch Self.apply(&s, selector: selector, st) {
                    case .success(let r): results.append(["operation": operation, "results": r])
                    case .failure(let e): results.append(["operation": operation, "error": e.message])
                    }
                }
                return out(207, ["results": results])
            case ("PUT", 3, "lights") where rest[2] == "state":
                switch Self.apply(&s, selector: rest[1], body) {
                case .success(let r):
                    if body["fast"] as? Bool == true { return Self.reply(202, nil, limit: s.limit, remaining: remaining, reset: reset) }
                    return out(207, ["results": r])
                case .failure(let e): return out(e.status, e.body)
                }
            case ("POST", 4, "lights") where rest[2] == "state" && rest[3] == "delta":
                switch Self.delta(&s, selector: rest[1], body) {
                case .success(let r): return out(207, ["results": r])
                case .failure(let e): return out(e.status, e.body)
                }
            case ("POST", 3, "lights") where rest[2] == "toggle":
                let idx = Self.match(s.lights, rest[1])
                if idx.isEmpty { return out(404, ["error": "Could not find light with selector '\(rest[1])'."]) }
                let anyOn = idx.contains { s.lights[$0].connected && s.lights[$0].power == "on" }
                return out(207, ["results": Self.apply(&s, idx, ["power": anyOn ? "off" : "on"], withPower: true)])
            case ("POST", 4, "lights") where rest[2] == "effects":
                let idx = Self.match(s.lights, rest[1])
                if idx.isEmpty { return out(404, ["error": "Could not find light with selector '\(rest[1])'."]) }
                let name = rest[3]
                guard ["breathe", "pulse", "off", "move", "morph", "flame"].contains(name) else { return out(404, ["error": "not found"]) }
                if name == "breathe" || name == "pulse" {
                    guard let c = body["color"] as? String else { return out(422, Self.invalid("color", "is missing")) }
                    if case .failure(let e) = Self.parseColor(c) { return out(422, Self.invalid("color", e.message)) }
                    if let f = body["from_color"] as? String, case .failure(let e) = Self.parseColor(f) {
                        return out(422, Self.invalid("from_color", e.message))
                    }
                }
                var results: [[String: Any]] = []
                for i in idx {
                    let l = s.lights[i]
                    results.append(["id": l.id, "label": l.label, "status": l.reach])
                    if l.reach == "ok" {
                        s.effects.append(EffectRun(lightID: l.id, name: name, body: req.text))
                        if name == "off", body["power_off"] as? Bool == true { s.lights[i].power = "off" }
                    }
                }
                return out(207, ["results": results])
            default:
                return out(404, ["error": "not found"])
            }
        }
    }

    struct Failure: Error {
        var status: Int
        var message: String
        var body: [String: Any] { status == 404 ? ["error": message] : LIFXCloudSimulator.invalid(field, message) }
        var field = "selector"
    }

    static func invalid(_ field: String, _ message: String) -> [String: Any] {
        ["error": "\(field) \(message)", "errors": [["field": field, "message": [message]]]]
    }

    /// A set-state on the lights a selector matches; per-light results.
    static func apply(_ s: inout State, selector: String, _ body: [String: Any]) -> Result<[[String: Any]], Failure> {
        var fields = body
        fields["fast"] = nil
        fields["duration"] = nil
        if let p = fields["power"], !(p is String && ["on", "off"].contains(p as! String)) {
            return .failure(Failure(status: 422, message: "must be 'on' or 'off'", field: "power"))
        }
        if let b = fields["brightness"] {
            guard let v = b as? Double, (0...1).contains(v) else { return .failure(Failure(status: 422, message: "must be 0.0–1.0", field: "brightness")) }
        }
        if let c = fields["color"] {
            guard let text = c as? String else { return .failure(Failure(status: 422, message: "must be a string", field: "color")) }
            if case .failure(let e) = parseColor(text) { return .failure(Failure(status: 422, message: e.message, field: "color")) }
        }
        let idx = match(s.lights, selector)
        if idx.isEmpty { return .failure(Failure(status: 404, message: "not found")) }
        return .success(apply(&s, idx, fields, withPower: false))
    }

    static func apply(_ s: inout State, _ idx: [Int], _ fields: [String: Any], withPower: Bool) -> [[String: Any]] {
        var results: [[String: Any]] = []
        for i in idx {
            var l = s.lights[i]
            var r: [String: Any] = ["id": l.id, "label": l.label, "status": l.reach]
            if l.reach == "ok" {
                if let text = fields["color"] as? String, case .success(let c) = parseColor(text) {
                    if c.random { l.hue = Light.q(Double.random(in: 0..<1)) * 360; l.saturation = 1 }
                    if let k = c.kelvin { l.kelvin = min(max(k, l.minKelvin), l.maxKelvin); l.saturation = 0 }
                    if let h = c.hue { l.hue = Light.q(h / 360) * 360 }
                    if let sat = c.saturation { l.saturation = Light.q(sat) }
                    if let b = c.brightness { l.brightness = Light.q(b) }
                }
                if let b = fields["brightness"] as? Double { l.brightness = Light.q(b) }
                if let p = fields["power"] as? String { l.power = p }
                if l != s.lights[i] { l.lastSeen = Date() }
                s.lights[i] = l
            }
            if withPower { r["power"] = l.power }
            results.append(r)
        }
        return results
    }

    static func delta(_ s: inout State, selector: String, _ body: [String: Any]) -> Result<[[String: Any]], Failure> {
        let idx = match(s.lights, selector)
        if idx.isEmpty { return .failure(Failure(status: 404, message: "not found")) }
        for key in ["brightness", "saturation", "hue", "kelvin", "infrared"] where body[key] != nil && !(body[key] is Double) {
            return .failure(Failure(status: 422, message: "must be a number", field: key))
        }
        var results: [[String: Any]] = []
        for i in idx {
            var l = s.lights[i]
            results.append(["id": l.id, "label": l.label, "status": l.reach])
            guard l.reach == "ok" else { continue }
            if let p = body["power"] as? String { l.power = p }
            if let b = body["brightness"] as? Double { l.brightness = Light.q(l.brightness + b) }
            if let sat = body["saturation"] as? Double { l.saturation = Light.q(l.saturation + sat) }
            if let h = body["hue"] as? Double { l.hue = Light.q((l.hue + h).truncatingRemainder(dividingBy: 360) / 360) * 360 }
            if let k = body["kelvin"] as? Double { l.kelvin = min(max(l.kelvin + Int(k), l.minKelvin), l.maxKelvin) }
            l.lastSeen = Date()
            s.lights[i] = l
        }
        return .success(results)
    }

    /// Selector grammar (docs/upstreams/lifx-cloud.md §1.6): comma-separated items, `:random` suffix, zones ignored.
    static func match(_ lights: [Light], _ selector: String) -> [Int] {
        var out: [Int] = []
        for rawItem in selector.split(separator: ",").map(String.init) {
            var item = String(rawItem.split(separator: "|").first ?? "")
            var random = false
            if item.hasSuffix(":random") { item = String(item.dropLast(7)); random = true }
            let kv = item.split(separator: ":", maxSplits: 1).map(String.init)
            let key = kv[0], value = kv.count > 1 ? kv[1] : ""
            var found: [Int] = []
            for (i, l) in lights.enumerated() {
                let hit: Bool
                switch key {
                case "all": hit = true
                case "id": hit = l.id == value
                case "label": hit = l.label == value
                case "group_id": hit = l.groupID == value
                case "group": hit = l.groupName == value
                case "location_id": hit = l.locationID == value
                case "location": hit = l.locationName == value
                default: hit = false
                }
                if hit { found.append(i) }
            }
            if random, let one = found.randomElement() { found = [one] }
            for i in found where !out.contains(i) { out.append(i) }
        }
        return out
    }

    static func json(_ l: Light) -> [String: Any] {
        let iso = ISO8601DateFormatter()
        return [
            "id": l.id, "uuid": "02a5b510-2d3d-46ea-92ac-\(l.id)", "label": l.label, "connected": l.connected, "power": l.power,
            "color": ["hue": l.hue, "saturation": l.saturation, "kelvin": l.kelvin], "brightness": l.brightness, "effect": l.effect,
            "group": ["id": l.groupID, "name": l.groupName], "location": ["id": l.locationID, "name": l.locationName],
            "product": ["name": l.product, "identifier": "lifx_color_a19", "company": "LIFX",
                        "capabilities": ["has_color": l.hasColor, "has_variable_color_temp": l.hasVariableColorTemp, "has_ir": false,
                                         "has_chain": false, "has_multizone": false, "min_kelvin": l.minKelvin, "max_kelvin": l.maxKelvin],
                        "product_id": 22, "vendor_id": 1],
            "last_seen": iso.string(from: l.lastSeen), "seconds_since_seen": max(0, Int(Date().timeIntervalSince(l.lastSeen))),
        ]
    }

    static func json(_ s: Scene) -> [String: Any] {
        let states: [[String: Any]] = s.states.map { st in
            var o: [String: Any] = ["selector": st.selector]
            if let p = st.power { o["power"] = p }
            if let b = st.brightness { o["brightness"] = b }
            if st.hue != nil || st.saturation != nil || st.kelvin != nil {
                o["color"] = ["hue": st.hue ?? 0, "saturation": st.saturation ?? 0, "kelvin": st.kelvin ?? 3500]
            }
            return o
        }
        return ["uuid": s.uuid, "name": s.name, "account": ["uuid": "cc7e0336-43c8-4f00-b874-830690884adc"], "states": states,
                "created_at": 1_430_118_664, "updated_at": 1_430_118_664]
    }

    static func reply(_ status: Int, _ body: Any?, limit: Int, remaining: Int, reset: Int) -> LoopbackHTTPServer.Reply {
        let headers = ["X-RateLimit-Limit": "\(limit)", "X-RateLimit-Remaining": "\(max(0, remaining))", "X-RateLimit-Reset": "\(reset)"]
        guard let body, let data = try? JSONSerialization.data(withJSONObject: body) else {
            return LoopbackHTTPServer.Reply(status: status, headers: headers)
        }
        return .json(String(decoding: data, as: UTF8.self), status: status, headers: headers)
    }

    // MARK: colour strings, as the API reads them (docs/upstreams/lifx-cloud.md §1.7)

    struct Colour {
        var hue: Double?
        var saturation: Double?
        var brightness: Double?
        var kelvin: Int?
        var random = false
    }

    struct ColourError: Error { var message: String }

    static func parseColor(_ text: String) -> Result<Colour, ColourError> {
        let names: [String: (Double?, Double)] = ["white": (nil, 0), "red": (0, 1), "orange": (36, 1), "yellow": (60, 1), "cyan": (180, 1),
                                                  "green": (120, 1), "blue": (250, 1), "purple": (280, 1), "pink": (325, 1)]
        var c = Colour()
        let words = text.lowercased().split(separator: " ")
        if words.isEmpty { return .failure(ColourError(message: "Unable to parse color: ''")) }
        for w in words.map(String.init) {
            let parts = w.split(separator: ":", maxSplits: 1).map(String.init)
            let unit: (String) -> Double? = { v in
                if v.hasSuffix("%") { return Double(v.dropLast()).map { $0 / 100 } }
                return Double(v)
            }
            if let n = names[w] {
                if let h = n.0 { c.hue = h }
                c.saturation = n.1
            } else if w == "random" {
                c.random = true
                c.saturation = 1
            } else if parts.count == 2, parts[0] == "hue", let v = Double(parts[1]), v >= 0, v <= 360 {
                c.hue = v
            } else if parts.count == 2, parts[0] == "saturation", let v = unit(parts[1]), v >= 0, v <= 1 {
                c.saturation = v
            } else if parts.count == 2, parts[0] == "brightness", let v = unit(parts[1]), v >= 0, v <= 1 {
                c.brightness = v
            } else if parts.count == 2, parts[0] == "kelvin", let v = Int(parts[1]), v >= 1500, v <= 9000 {
                c.kelvin = v
                c.saturation = 0
            } else if let rgb = rgb(w) {
                let mx = max(rgb.0, rgb.1, rgb.2), mn = min(rgb.0, rgb.1, rgb.2)
                var h = 0.0
                if mx > mn {
                    let d = mx - mn
                    switch mx {
                    case rgb.0: h = (rgb.1 - rgb.2) / d
                    case rgb.1: h = 2 + (rgb.2 - rgb.0) / d
                    default: h = 4 + (rgb.0 - rgb.1) / d
                    }
                    h *= 60
                    if h < 0 { h += 360 }
                }
                c.hue = h
                c.saturation = mx == 0 ? 0 : (mx - mn) / mx
                c.brightness = mx
            } else {
                return .failure(ColourError(message: "Unable to parse color: '\(text)'"))
            }
        }
        return .success(c)
    }

    static func rgb(_ w: String) -> (Double, Double, Double)? {
        if w.hasPrefix("rgb:") {
            let v = w.dropFirst(4).split(separator: ",").compactMap { Int($0) }
            guard v.count == 3, v.allSatisfy({ (0...255).contains($0) }) else { return nil }
            return (Double(v[0]) / 255, Double(v[1]) / 255, Double(v[2]) / 255)
        }
        var hex = Substring(w)
        if hex.hasPrefix("hex:") { hex = hex.dropFirst(4) }
        if hex.hasPrefix("#") { hex = hex.dropFirst() }
        guard hex.count == 6, let n = UInt32(hex, radix: 16) else { return nil }
        return (Double((n >> 16) & 0xFF) / 255, Double((n >> 8) & 0xFF) / 255, Double(n & 0xFF) / 255)
    }

    // MARK: a small home, for the demo

    /// The demo home's location (the LAN simulator's demo lights are in it too).
    public static let demoHome = (id: "f2c1aa82395411e9a0757200055bf1c0", name: "Home")

    public static func demoLights() -> [Light] {
        let home = (demoHome.id, demoHome.name)
        var hall = Light(id: "d073d5000003", label: "Hall Lamp", group: ("1c8de82b81f445e7cfaafae49b259c71", "Hall"), location: home,
                         power: "off", brightness: 0.6, kelvin: 2700)
        hall.product = "LIFX White to Warm"
        hall.hasColor = false
        hall.minKelvin = 2700
        hall.maxKelvin = 6500
        return [
            Light(id: "d073d5000001", label: "Kitchen", group: ("06e3ec50395511e9a0757200055bf1c0", "Kitchen"), location: home,
                  power: "on", brightness: 0.8, kelvin: 3500),
            Light(id: "d073d5000002", label: "Lounge Left", group: ("06e3ec50395511e9a0757200055bf1c1", "Lounge"), location: home,
                  power: "on", brightness: 0.3, hue: 60, saturation: 1),
            Light(id: "d073d5000004", label: "Lounge Right", group: ("06e3ec50395511e9a0757200055bf1c1", "Lounge"), location: home,
                  power: "off", brightness: 0.5, hue: 250, saturation: 0.5),
            hall,
            Light(id: "d073d5000005", label: "Garage", group: ("06e3ec50395511e9a0757200055bf1c2", "Garage"), location: home,
                  power: "off", brightness: 1, kelvin: 4000, connected: false),
        ]
    }

    public static func demoScenes() -> [Scene] {
        [
            Scene(uuid: "1d52671c-99ba-4631-a563-2c31809b700d", name: "Night time", states: [
                SceneState(selector: "id:d073d5000001", brightness: 0.1),
                SceneState(selector: "id:d073d5000002", power: "on", hue: 0, saturation: 0, kelvin: 2700),
            ]),
            Scene(uuid: "2f0a9b12-5c1d-4e2b-9c33-7a1e0b9d4c10", name: "Movie", states: [
                SceneState(selector: "group_id:06e3ec50395511e9a0757200055bf1c1", power: "on", brightness: 0.2, hue: 250, saturation: 0.8,
                           kelvin: 3500),
                SceneState(selector: "id:d073d5000001", power: "off"),
            ]),
        ]
    }
}
