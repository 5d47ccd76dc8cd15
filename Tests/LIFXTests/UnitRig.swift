import Foundation
@testable import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardHTTP
import SwitchyardTestSupport
import Testing

/// The LIFX cloud as the unit tier plays it, through `HTTPTwin`: a token, the lights as the API lists them
/// (docs/upstreams/lifx-cloud.md §1.4), the scenes (§1.10), each light's answer to an action (`reach`: "ok",
/// "offline", "timed_out"), and answers to give next before anything else (a 500, a 429 with its headers).
/// Actions change the lights' power and brightness, so that a listing after shows them.
final class CloudPlay: Sendable {
    static let token = "unit-token"
    static let apiURL = "https://api.lifx.test/v1"

    struct Light: Sendable {
        var id: String
        var label: String
        var group: (id: String, name: String)?
        var location: (id: String, name: String)?
        var power = "off"
        var brightness = 1.0
        var kelvin = 3500
        var connected = true
        var reach = "ok"

        init(_ id: String, _ label: String, group: (String, String)? = nil, location: (String, String)? = nil,
             power: String = "off", brightness: Double = 1) {
            self.id = id
            self.label = label
            self.group = group.map { (id: $0.0, name: $0.1) }
            self.location = location.map { (id: $0.0, name: $0.1) }
            self.power = power
            self.brightness = brightness
        }

        var json: JSONValue {
            var o: [String: JSONValue] = [
                "id": .string(id), "label": .string(label), "connected": .bool(connected), "power": .string(power),
                "brightness": .number(brightness), "color": ["hue": 0, "saturation": 0, "kelvin": JSONValue(kelvin)], "effect": "OFF",
                "last_seen": "2026-05-01T10:00:00Z",
                "product": ["name": "LIFX Color", "capabilities": ["has_color": true, "has_variable_color_temp": true,
                                                                  "min_kelvin": 2500, "max_kelvin": 9000]],
            ]
            if let group { o["group"] = ["id": .string(group.id), "name": .string(group.name)] }
            if let location { o["location"] = ["id": .string(location.id), "name": .string(location.name)] }
            return .object(o)
        }
    }

    struct Answer: Sendable {
        var status: Int
        var headers: [String: String] = [:]
        var body = ""
    }

    struct State: Sendable {
        var lights: [Light]
        var scenes: [JSONValue]
        var next: [Answer] = []
        /// Headers every answer carries (the rate budget's).
        var headers: [String: String] = [:]
        /// `X-RateLimit-Reset` this many seconds after the first answer (fixed from then on, as a real reset
        /// is): relative to when the adapter hears it, however late a loaded machine runs the test.
        var resetIn: Double?
        var resetAt: Int?
        /// While set, every answer to an action (and to a GET with `gateListings`) waits for it: a request on the
        /// wire for as long as the test wants.
        var gate: Latch?
        var gateListings = false
    }

    let state: Locked<State>
    let token: String
    let twin: HTTPTwin

    init(lights: [Light], scenes: [JSONValue] = [], token: String = CloudPlay.token) {
        let state = Locked(State(lights: lights, scenes: scenes))
        self.state = state
        self.token = token
        twin = HTTPTwin { r in
            let gate = state.withLock { $0.gateListings || r.method != "GET" ? $0.gate : nil }
            await gate?.wait()
            return CloudPlay.answer(r, state, token: token)
        }
    }

    /// The demo's kind of home: a kitchen light and two lounge lights in their groups, a hall lamp; one location.
    static let home = ("f2c1aa82395411e9a0757200055bf1c0", "Home")
    static let kitchenGroup = ("06e3ec50395511e9a0757200055bf1c0", "Kitchen")
    static let loungeGroup = ("06e3ec50395511e9a0757200055bf1c1", "Lounge")
    static func demo() -> CloudPlay {
        CloudPlay(lights: [
            Light("d073d5000001", "Kitchen", group: kitchenGroup, location: home, power: "on", brightness: 0.5),
            Light("d073d5000002", "Lounge Left", group: loungeGroup, location: home, power: "on", brightness: 0.3),
            Light("d073d5000004", "Lounge Right", group: loungeGroup, location: home),
            Light("d073d5000003", "Hall Lamp", location: home),
        ], scenes: [[
            "uuid": "1d52671c-99ba-4631-a563-2c31809b700d", "name": "Night time",
            "states": [["selector": "id:d073d5000001", "brightness": 0.1], ["selector": "id:d073d5000003", "power": "on"]],
        ]])
    }

    /// Answers to give before anything else, in order.
    func answerNext(_ answers: [Answer]) { state.withLock { $0.next += answers } }
    func setHeaders(_ h: [String: String]) { state.withLock { $0.headers = h } }
    /// The rate budget's headers, its reset `resetIn` seconds after the first answer.
    func setBudget(limit: Int, remaining: Int, resetIn: Double) {
        state.withLock {
            $0.headers = ["X-RateLimit-Limit": "\(limit)", "X-RateLimit-Remaining": "\(remaining)"]
            $0.resetIn = resetIn
        }
    }
    func edit(_ id: String, _ change: (inout Light) -> Void) {
        state.withLock { s in if let i = s.lights.firstIndex(where: { $0.id == id }) { change(&s.lights[i]) } }
    }
    func remove(_ id: String) { state.withLock { $0.lights.removeAll { $0.id == id } } }
    func light(_ id: String) -> Light? { state.withLock { $0.lights.first { $0.id == id } } }
    /// Holds every answer to an action (and to a listing too, with `listings`) until `release`.
    @discardableResult
    func hold(listings: Bool = false) -> Latch {
        let l = Latch()
        state.withLock {
            $0.gate = l
            $0.gateListings = listings
        }
        return l
    }
    func release() {
        let l = state.withLock { s -> Latch? in
            defer { s.gate = nil }
            return s.gate
        }
        l?.signal()
    }

    /// The requests that change something (everything but GET), as "METHOD /path" with their bodies.
    var actions: [(String, JSONValue?)] {
        twin.requests.filter { $0.method != "GET" }
            .map { ("\($0.method) \(HTTPTwin.path(of: $0.url))", $0.body.flatMap { try? JSONValue.parse($0) }) }
    }
    var listings: Int { twin.lines.filter { $0 == "GET /v1/lights/all" }.count }

    static func answer(_ r: HTTPRequest, _ state: Locked<State>, token: String) -> HTTPResponse {
        state.withLock { s -> HTTPResponse in
            if let resetIn = s.resetIn {
                let at = s.resetAt ?? Int(Date().timeIntervalSince1970 + resetIn)
                s.resetAt = at
                s.headers["X-RateLimit-Reset"] = "\(at)"
            }
            func out(_ status: Int, _ body: JSONValue?, headers: [String: String] = [:]) -> HTTPResponse {
                HTTPResponse(status: status, headers: s.headers.merging(headers) { $1 }.merging(["content-type": "application/json"]) { $1 },
                             body: body.map { Array($0.serialized.utf8) } ?? [])
            }
            if !s.next.isEmpty {
                let a = s.next.removeFirst()
                return HTTPResponse(status: a.status, headers: s.headers.merging(a.headers) { $1 }, body: Array(a.body.utf8))
            }
            guard r.headers.contains(where: { $0.0 == "Authorization" && $0.1 == "Bearer \(token)" }) else {
                return out(401, ["error": "Invalid credentials"])
            }
            let segments = HTTPTwin.path(of: r.url).split(separator: "/").map { String($0).removingPercentEncoding ?? String($0) }
            guard segments.first == "v1" else { return out(404, ["error": "not found"]) }
            let rest = Array(segments.dropFirst())
            let body = r.body.flatMap { try? JSONValue.parse($0) }
            func matching(_ selector: String) -> [Int] {
                var out: [Int] = []
                for item in selector.split(separator: ",") {
                    let kv = item.split(separator: ":", maxSplits: 1).map(String.init)
                    let value = kv.count > 1 ? kv[1] : ""
                    for (i, l) in s.lights.enumerated() where !out.contains(i) {
                        switch kv[0] {
                        case "all": out.append(i)
                        case "id" where l.id == value: out.append(i)
                        case "group_id" where l.group?.id == value: out.append(i)
                        case "location_id" where l.location?.id == value: out.append(i)
                        default: break
                        }
                    }
                }
                return out
            }
            func act(_ selector: String, _ change: JSONValue?) -> [JSONValue] {
                matching(selector).map { i in
                    if s.lights[i].reach == "ok" {
                        if case .string(let p)? = change?["power"] { s.lights[i].power = p }
                        if let b = change?["brightness"]?.doubleValue { s.lights[i].brightness = b }
                    }
                    return ["id": .string(s.lights[i].id), "label": .string(s.lights[i].label), "status": .string(s.lights[i].reach)]
                }
            }
            switch (r.method, rest.count, rest.first ?? "") {
            case ("GET", 1, "scenes"):
                return out(200, .array(s.scenes))
            case ("GET", 2, "lights"):
                let found = matching(rest[1])
                if found.isEmpty { return out(404, ["error": .string("Could not find light with selector '\(rest[1])'.")]) }
                return out(200, .array(found.map { s.lights[$0].json }))
            case ("PUT", 2, "lights") where rest[1] == "states":
                let results = (body?["states"]?.arrayValue ?? []).map { st -> JSONValue in
                    ["operation": st, "results": .array(act(st["selector"]?.stringValue ?? "", st))]
                }
                return out(207, ["results": .array(results)])
            case ("PUT", 3, "lights") where rest[2] == "state", ("POST", 4, "lights") where rest[2] == "state",
                 ("POST", 4, "lights") where rest[2] == "effects":
                let results = act(rest[1], r.method == "PUT" ? body : nil)
                if results.isEmpty { return out(404, ["error": .string("Could not find light with selector '\(rest[1])'.")]) }
                return out(207, ["results": .array(results)])
            case ("PUT", 3, "scenes") where rest[2] == "activate":
                return out(207, ["results": []])
            default:
                return out(404, ["error": "not found"])
            }
        }
    }
}

/// The LIFX adapter in the unit tier: run against a recording host (`RecordingAdapterHost`) on a manual clock,
/// its cloud an `HTTPTwin` (played by `CloudPlay`), its LAN a `LIFXLANTwin` whose peer is the LAN simulator's
/// own byte handling, in memory (`LIFXLANSimulator.inMemory`), answering from one address.
final class LIFXRig: Sendable {
    static let lanAt = LIFXLANEndpoint("10.0.0.20:56700")!
    static let movedTo = LIFXLANEndpoint("10.0.0.21:56700")!

    let host = RecordingAdapterHost(adapterID: "lifx")
    let clock = ManualClock()
    let cloud: CloudPlay?
    let sim: LIFXLANSimulator?
    let lan: LIFXLANTwin
    let adapter: LIFXAdapter
    let settings: LIFXSettings
    let running = Locked<Task<Void, any Error>?>(nil)

    /// A cloud (`lights` listed with `CloudPlay.token`) and a LAN at `lanAt` (`hosts`, no broadcast), each when given;
    /// polls hourly, commands sent as soon as they come.
    static func settings(cloud: Bool, lan: Bool) -> LIFXSettings {
        var s = LIFXSettings()
        if cloud {
            s.token = CloudPlay.token
            s.apiURL = CloudPlay.apiURL
            s.pollInterval = 3600
            s.minInterval = 0
            s.retryDelay = 1
        }
        if lan {
            s.lan.enabled = true
            s.lan.hosts = ["\(lanAt)"]
            s.lan.broadcast = []
            s.lan.pollInterval = 3600
            s.lan.offlineAfter = 90
            s.lan.discoveryGaps = [60]
        }
        return s
    }

    private init(cloud: CloudPlay?, http: HTTPTwin?, sim: LIFXLANSimulator?, settings: LIFXSettings) {
        self.cloud = cloud
        self.sim = sim
        self.settings = settings
        let clock = self.clock
        lan = LIFXLANTwin(clock: clock) { bytes, to in
            guard let sim, to == LIFXRig.lanAt else { return [] }
            return sim.answer(bytes).map { LIFXLANDatagram(bytes: $0, from: LIFXRig.lanAt) }
        }
        adapter = LIFXAdapter(settings: settings, clock: clock, http: cloud?.twin ?? http ?? HTTPTwin(routes: [:]), network: lan)
    }

    /// Runs the adapter for `body` (and stops it after): the cloud when `cloud` is given (or `http`, a twin that
    /// plays it otherwise, with `CloudPlay.token`), the LAN when `lan` is.
    static func with<R>(cloud: CloudPlay? = nil, http: HTTPTwin? = nil, lan devices: [LIFXLANSimulator.Device]? = nil,
                        configure: (inout LIFXSettings) -> Void = { _ in }, inherit previous: LIFXAdapter? = nil,
                        _ body: (LIFXRig) async throws -> R) async throws -> R {
        var s = settings(cloud: cloud != nil || http != nil, lan: devices != nil)
        configure(&s)
        let rig = LIFXRig(cloud: cloud, http: http, sim: devices.map { LIFXLANSimulator.inMemory(devices: $0) }, settings: s)
        if let previous { await rig.adapter.inherit(from: previous) }
        let adapter = rig.adapter, context = rig.host.context
        rig.running.withLock { $0 = Task { try await adapter.run(context: context) } }
        return try await withTeardown { try await body(rig) } teardown: {
            await rig.stop()
            rig.sim?.stop()
        }
    }

    /// Stops the adapter's run (as the engine does: cancelled) and waits until it has returned.
    func stop() async {
        guard let run = running.withLock({ $0 }) else { return }
        run.cancel()
        _ = await run.result
    }

    // MARK: time

    /// Lets the adapter do what it has to at this instant: until the LAN's reader has taken every datagram
    /// the twin delivered (so no reply is unread when the clock passes its request's time-out), and a moment.
    func settle() async {
        for _ in 0..<2 {
            var waited = 0
            while !lan.quiet && waited < 400 {
                await TestEnvironment.sleep(0.001)
                waited += 1
            }
            await TestEnvironment.sleep(0.002)
        }
    }

    /// The clock's step: 20 ms with a LAN (its datagrams are paced 50 ms apart, its requests time out after
    /// 200 ms), a quarter of a second for the cloud alone (its times are in seconds).
    var step: Duration { sim == nil ? .milliseconds(250) : .milliseconds(20) }

    /// Moves the clock on `d`, `step` at a time, settling before each step.
    func advance(_ d: Duration, step: Duration? = nil) async {
        let step = step ?? self.step
        let end = clock.now() + d
        while clock.now() < end {
            await settle()
            clock.advance(to: min(end, clock.now() + step))
        }
        await settle()
    }

    /// Moves the clock on until `condition` holds, `step` at a time, settling before each step: fails after
    /// `limit` of clock time.
    func pump(_ what: String, step: Duration? = nil, limit: Duration = .seconds(120),
              until condition: (LIFXRig) -> Bool) async throws {
        let step = step ?? self.step
        let end = clock.now() + limit
        while !condition(self) {
            await settle()
            if condition(self) { return }
            guard clock.now() < end else { throw TestError("\(what): not so after \(limit) on the adapter's clock") }
            clock.advance(by: step)
        }
    }

    // MARK: commands

    func accept(_ deviceID: String, _ fields: [String: JSONValue]) async throws -> PendingCommand {
        try await adapter.accept(DeviceCommand(deviceID: deviceID, fields: fields), context: host.context)
    }

    /// Waits for a command's outcome, moving the clock on meanwhile.
    func outcome(_ p: PendingCommand) async throws -> Result<Void, AdapterError> {
        let done = Locked<Result<Void, AdapterError>?>(nil)
        let t = Task {
            do {
                try await p.wait()
                done.withLock { $0 = .success(()) }
            } catch {
                done.withLock { $0 = .failure(error as? AdapterError ?? AdapterError("\(error)")) }
            }
        }
        try await pump("the command's outcome") { _ in done.withLock { $0 } != nil }
        _ = await t.value
        return done.withLock { $0 }!
    }

    /// Sends a command and waits for its outcome; the command must be accepted.
    @discardableResult
    func command(_ deviceID: String, _ fields: [String: JSONValue]) async throws -> Result<Void, AdapterError> {
        try await outcome(try await accept(deviceID, fields))
    }

    /// Carries out commands planned as one (several lights in one hand-over) and waits for them all.
    func carryOut(_ commands: [LIFXCommand]) async throws -> Result<Void, AdapterError> {
        let waits = try await adapter.carryOut(commands)
        return try await outcome(PendingCommand { try await LIFXAdapter.all(waits) })
    }

    // MARK: what the host saw

    func state(_ id: String) -> [String: JSONValue] { host.stateNow(id) ?? [:] }
    func declared(_ id: String) -> Bool { host.devices[id] != nil }

    /// The LAN messages (their types) the bridge sent to `to`, in order.
    func lanTypes(to: LIFXLANEndpoint = LIFXRig.lanAt) -> [UInt16] {
        lan.sent.filter { $0.to == to }.compactMap { LIFXLANPacket.decode($0.bytes)?.header.type }
    }

    /// The LAN's figures in the latest health metrics.
    var lanMetrics: [String: JSONValue] {
        for call in host.calls.reversed() {
            if case .metrics(let m) = call, case .object(let lan)? = m["lan"] { return lan }
        }
        return [:]
    }
}

extension Result where Failure == AdapterError {
    var error: String? { if case .failure(let e) = self { return e.message }; return nil }
    var ok: Bool { if case .success = self { return true }; return false }
}
