#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore
import SwitchyardHTTP

public struct ImpSettings: Sendable, Equatable {
    public struct Device: Sendable, Equatable {
        public var name: String
        /// A secret (design.md §9): it is the device's URL. Never logged or published.
        public var agentID: String
        /// A profile name; nil = detect from `/controller/info`.
        public var app: String?
        public init(name: String, agentID: String, app: String? = nil) {
            self.name = name
            self.agentID = agentID
            self.app = app
        }
    }
    public var baseURL = "https://agent.electricimp.com"
    public var pollInterval = 60.0
    public var timeout = 60.0
    public var devices: [Device] = []
    /// App code (from `/controller/info`) → profile name, like Controller's apps.json.
    public var apps: [String: String] = [:]
    /// Profiles declared in YAML; they win over built-in ones of the same name.
    public var profiles: [ImpProfile] = []
    public init() {}

    public func profile(named name: String) -> ImpProfile? {
        let n = name.lowercased()
        return profiles.first { $0.name.lowercased() == n } ?? ImpProfile.builtIn.first { $0.name == n }
    }
}

/// Electric Imp devices through their agents' HTTPS endpoints (docs/upstreams/imp-livecoding.md §1). Each device
/// is polled on its own schedule, spread over the interval; the app is detected from
/// `/controller/info` unless configured; state is normalised by the app's profile. `agent` (the agent
/// answered) and `device_connected` (what the agent reports) are kept apart; availability is online
/// only when both are.
public actor ImpAdapter: Adapter {
    public static let id = "imp"
    public nonisolated var id: String { Self.id }

    struct DeviceState {
        var profile: ImpProfile?
        /// `profile` came from the group's previous active instance (`restore`): used until the agent is
        /// asked which app it runs, at this run's first read.
        var restored = false
        var appcode: String?
        /// The agent's own version, when `/controller/info` gives one (ThermalForecastWorld does).
        var version: String?
        var agent: Bool?
        var agentError: String?
        var connected: Bool?
        var fields: [String: JSONValue] = [:]
        var backoff = 0.0
        /// Network failures in a row (no HTTP answer at all), for the quick retry.
        var networkFailures = 0
    }

    let settings: ImpSettings
    let clock: any BridgeClock
    /// The client of the current run (opened and closed by `run`).
    var http: (any HTTPTransport)?
    var context: AdapterContext?
    var states: [String: DeviceState] = [:]
    /// Devices the user disabled: not polled (`setDisabled`).
    var disabled: Set<String> = []
    /// Devices to read again a little after a reset or reboot; the run's task group does it.
    let followUps: AsyncStream<ImpSettings.Device>
    let followUpQueue: AsyncStream<ImpSettings.Device>.Continuation

    public init(settings: ImpSettings, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.clock = clock
        (followUps, followUpQueue) = AsyncStream.makeStream(of: ImpSettings.Device.self, bufferingPolicy: .bufferingNewest(64))
        for d in settings.devices { states[d.name] = DeviceState(profile: d.app.flatMap(settings.profile(named:))) }
    }

    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        try await HTTPClient.withClient(options: .init(userAgent: "switchyard", connectTimeout: min(10, settings.timeout))) { http in
            self.http = http
            defer { self.http = nil }
            await serve(context)
        }
    }

    func serve(_ context: AdapterContext) async {
        await declare()
        await context.setStatus(settings.devices.isEmpty ? .disabled("no imp.devices configured") : .running)
        let n = settings.devices.count
        await withTaskGroup(of: Void.self) { group in
            for (i, d) in settings.devices.enumerated() {
                // First reads staggered by 0.1 s (every device is known quickly), then each device keeps
                // its own phase, spread over the interval: never all agents at once.
                let phase = settings.pollInterval * Double(i) / Double(max(n, 1))
                group.addTask { await self.pollLoop(d, first: 0.1 * Double(i), phase: phase) }
            }
            group.addTask {
                await withDiscardingTaskGroup { later in
                    for await d in self.followUps {
                        later.addTask {
                            try? await self.clock.sleep(seconds: 5)
                            if !Task.isCancelled { await self.poll(d) }
                        }
                    }
                }
            }
        }
    }

    /// A reload's new instance keeps what the old one learnt of each device it still has under the same
    /// agent and app settings: the detected app (without it the device would be listed with no
    /// capabilities until its agent answers again, and the core would refuse a command's fields as
    /// unknown meanwhile), the last reading and whether the agent and the device answered.
    public func inherit(from previous: any Adapter) async {
        guard let old = previous as? ImpAdapter, old.settings.apps == settings.apps, old.settings.profiles == settings.profiles else { return }
        let known = await old.states
        for d in settings.devices where old.settings.devices.contains(d) {
            guard var s = known[d.name] else { continue }
            s.backoff = 0
            s.networkFailures = 0
            states[d.name] = s
        }
    }

    /// A standby takeover's new instance (design.md §18) starts from the app the group's previous active
    /// instance detected for each device, as its last state says (`appcode` mapped by this config's `apps`,
    /// else `app`), so that the device is listed with its fields at once and a command waiting in the session
    /// is judged against them; the agent is asked again at the first read, which corrects it.
    public func restore(states last: [String: [String: JSONValue]]) async {
        for d in settings.devices where d.app == nil {
            guard var s = states[d.name], s.profile == nil, let state = last[d.name] else { continue }
            let code = state["appcode"]?.stringValue
            guard let name = code.flatMap({ settings.apps[$0] ?? ImpProfile.knownCodes[$0] }) ?? state["app"]?.stringValue,
                  let profile = settings.profile(named: name) else { continue }
            s.profile = profile
            s.appcode = code
            s.restored = true
            states[d.name] = s
        }
    }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        guard let d = settings.devices.first(where: { $0.name == command.deviceID }), var s = states[d.name] else {
            throw AdapterError("imp device '\(command.deviceID)' is not configured")
        }
        // Not asked yet by this run (it has just started): asked now, rather than refusing the command for
        // what the agent has not had the time to say.
        if s.agent == nil || s.profile == nil {
            await poll(d)
            s = states[d.name] ?? s
        }
        guard let profile = s.profile else { throw AdapterError("\(d.name): the app is not known yet (the agent has not answered)") }
        if s.agent != true { throw AdapterError("\(d.name): agent unreachable\(s.agentError.map { " (\($0))" } ?? ""); command not sent") }
        if s.connected == false { throw AdapterError("\(d.name): the device is offline (its agent reports it disconnected); command not sent") }

        // Fields that go to the same endpoint travel in one request, in the profile's order.
        var requests: [(path: String, body: JSONValue)] = []
        var repoll = false
        for f in profile.fields {
            guard let v = command.fields[f.name], let set = f.set else { continue }
            let body = set.body(with: profile.wireValue(f, v, current: s.fields[f.name]))
            if let i = requests.firstIndex(where: { $0.path == set.path }), case .object(var merged) = requests[i].body,
               case .object(let more) = body {
                for (k, x) in more { merged[k] = x }
                requests[i].body = .object(merged)
            } else {
                requests.append((set.path, body))
            }
        }
        if case .string(let name)? = command.fields["action"] {
            guard let a = profile.actions.first(where: { $0.name == name }) else {
                throw AdapterError("\(d.name): app \(profile.name) has no action '\(name)'")
            }
            requests.append((a.request.path, a.request.body))
            repoll = repoll || a.repoll
        }
        if requests.isEmpty { throw AdapterError("\(d.name): nothing to send") }
        for r in requests {
            let resp = try await call(d, "POST", r.path, body: r.body)
            guard (200..<300).contains(resp.status) else {
                throw AdapterError("\(d.name): the agent answered HTTP \(resp.status) to POST \(r.path): \(scrub(resp.text, d).excerpt(120))")
            }
        }
        // Confirmed state, read back at once; after a reset or reboot once more a little later, as
        // Controller does (the device restarts and the agent re-syncs it).
        await poll(d)
        if repoll { followUpQueue.yield(d) }
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        guard let d = settings.devices.first(where: { $0.name == deviceID }) else { throw AdapterError("imp device '\(deviceID)' is not configured") }
        await poll(d)
        if states[d.name]?.agent != true { throw AdapterError("\(d.name): agent unreachable\(states[d.name]?.agentError.map { " (\($0))" } ?? "")") }
    }

    public func refreshAll(context: AdapterContext) async throws {
        for d in settings.devices { await poll(d) }
    }

    /// A disabled device's agent is not asked anything until it is enabled again.
    public func setDisabled(_ deviceIDs: Set<String>) async { disabled = deviceIDs }

    // MARK: polling

    func pollLoop(_ d: ImpSettings.Device, first: Double, phase: Double) async {
        if first > 0 { try? await clock.sleep(seconds: first) }
        var extra = phase
        while !Task.isCancelled {
            let wait = await poll(d)
            // The phase offsets the first full interval only: a quick retry after a network failure
            // must not wait for the device's slot in the schedule.
            if wait < settings.pollInterval {
                try? await clock.sleep(seconds: wait)
                continue
            }
            try? await clock.sleep(seconds: wait + extra)
            extra = 0
        }
    }

    /// Detects the app if needed, reads the state, publishes. Returns the seconds until the next poll.
    @discardableResult
    func poll(_ d: ImpSettings.Device) async -> Double {
        guard var s = states[d.name], !disabled.contains(d.name) else { return settings.pollInterval }
        do {
            if s.profile == nil || s.restored {
                let (profile, code, version) = try await detect(d)
                let changed = profile != s.profile || version != s.version
                s = states[d.name] ?? s
                s.profile = profile
                s.restored = false
                s.appcode = code
                s.version = version
                states[d.name] = s
                if changed { await declare() }
            }
            let profile = s.profile!
            let r = try await call(d, "GET", profile.statePath, body: nil)
            switch r.status {
            case 200..<300:
                let reading = try profile.read(r.body)
                s = states[d.name] ?? s
                s.agent = true
                s.agentError = nil
                s.backoff = 0
                s.networkFailures = 0
                if let c = reading.connected { s.connected = c } else if profile.connected == nil && profile.format != .flag { s.connected = true }
                s.fields = reading.fields
                states[d.name] = s
                await publish(d.name)
                return settings.pollInterval
            default:
                throw Status(code: r.status, text: scrub(r.text, d), retryAfter: r.headers["retry-after"].flatMap(Double.init))
            }
        } catch let e as Status {
            return await agentFailed(d, e)
        } catch {
            let message = scrub((error as? AdapterError)?.message ?? "\(error)", d)
            return await agentFailed(d, Status(code: 0, text: message, retryAfter: nil))
        }
    }

    struct Status: Error {
        var code: Int
        var text: String
        var retryAfter: Double?
    }

    /// 404: the agent is gone or moved (a new agent id after re-enrolment): offline, polled slowly,
    /// never given up. 429: back off (Retry-After, else doubling). Anything else: offline until it answers.
    func agentFailed(_ d: ImpSettings.Device, _ e: Status) async -> Double {
        var s = states[d.name] ?? DeviceState()
        let reason: String
        let wait: Double
        switch e.code {
        case 404:
            reason = "HTTP 404: the agent is gone or has moved (a re-enrolled device gets a new agent id)"
            wait = min(settings.pollInterval * 5, 900)
        case 429:
            s.backoff = max(e.retryAfter ?? 0, s.backoff == 0 ? settings.pollInterval : min(s.backoff * 2, 900))
            reason = "HTTP 429: rate limited by the imp cloud"
            wait = s.backoff
        case 0:
            // No HTTP answer at all (refused, reset, nothing returned, timeout): often a blip, so it is
            // retried soon, 2 s doubling up to the poll interval, instead of waiting a whole interval.
            reason = e.text
            s.networkFailures += 1
            wait = min(settings.pollInterval, 2 * pow(2, Double(min(s.networkFailures - 1, 10))))
        default:
            reason = "HTTP \(e.code)\(e.text.isEmpty ? "" : ": \(e.text.excerpt())")"
            wait = settings.pollInterval
        }
        let was = s.agent
        s.agent = false
        s.agentError = reason
        states[d.name] = s
        if was != false { await context?.log(.warning, "\(d.name): agent unreachable: \(reason)", deviceID: d.name) }
        await context?.recordRequest(error: "\(d.name): \(reason)")
        await publish(d.name)
        return wait
    }

    /// `GET /controller/info` (`/controller/appinfo` for the sample agent) → `appcode` → profile, and
    /// the agent's `version` when it gives one.
    func detect(_ d: ImpSettings.Device) async throws -> (ImpProfile, String?, String?) {
        var code: String?
        var version: String?
        for path in ["/controller/info", "/controller/appinfo"] {
            let r = try await call(d, "GET", path, body: nil)
            if r.status == 404 && r.text.hasPrefix("No handler") { continue }   // Rocky: the route does not exist
            guard (200..<300).contains(r.status) else {
                throw Status(code: r.status, text: scrub(r.text, d), retryAfter: r.headers["retry-after"].flatMap(Double.init))
            }
            if let v = try? JSONValue.parse(r.body) {
                code = v["appcode"]?.stringValue ?? v["app"]?.stringValue
                version = v["version"]?.stringValue.map { String($0.prefix(64)) }
            }
            break
        }
        guard let code else { return (ImpProfile.generic, nil, version) }
        let name = settings.apps[code] ?? ImpProfile.knownCodes[code] ?? code
        return (settings.profile(named: name) ?? ImpProfile.generic, code, version)
    }

    func publish(_ name: String) async {
        guard let s = states[name] else { return }
        var o = s.fields
        o["app"] = s.profile.map { .string($0.name) } ?? .null
        o["appcode"] = s.appcode.map(JSONValue.string) ?? .null
        o["agent"] = s.agent == true ? "online" : "offline"
        o["device_connected"] = s.connected.map(JSONValue.bool) ?? .null
        await context?.report([DeviceReport(name, fields: o, available: s.agent == true && s.connected == true)])
    }

    // MARK: devices

    func declare() async {
        let devices = settings.devices.map { d in descriptor(d.name, states[d.name]?.profile, version: states[d.name]?.version) }
        var available: [String: Bool] = [:]
        for d in settings.devices { available[d.name] = states[d.name]?.agent == true && states[d.name]?.connected == true }
        await context?.setDevices(devices, authoritative: true, available: available)
    }

    func descriptor(_ name: String, _ profile: ImpProfile?, version: String? = nil) -> DeviceDescriptor {
        var caps: [Capability] = []
        var bare: [String: [String: JSONValue]] = [:]
        for f in profile?.fields ?? [] {
            let writable = f.set != nil
            switch f.kind {
            case .power:
                caps.append(Capability(f.name, .binary(toggle: true), writable: writable))
                if writable { bare = ["ON": [f.name: "ON"], "OFF": [f.name: "OFF"], "TOGGLE": [f.name: "TOGGLE"]] }
            case .bool: caps.append(Capability(f.name, .bool, writable: writable, role: writable ? .config : .main))   // a clock's settings
            case .brightness(let rawMax):
                caps.append(Capability(f.name, .integer(min: 0, max: 100), unit: "%", writable: writable))
                caps.append(Capability("\(f.name)_raw", .integer(min: 0, max: rawMax), role: .hidden))
            case .integer(let lo, let hi): caps.append(Capability(f.name, .integer(min: lo, max: hi), writable: writable))
            case .text: caps.append(Capability(f.name, .text(maxLength: 256), role: .sensor))
            }
        }
        if let actions = profile?.actions, !actions.isEmpty {
            caps.append(Capability("action", .action(actions.map(\.name)), writable: true, readable: false))
        }
        caps += [
            Capability("agent", .enumeration(["online", "offline"]), role: .diagnostic),
            Capability("device_connected", .bool, role: .diagnostic, deviceClass: "connectivity"),
            Capability("app", .text(maxLength: 64), role: .hidden),
            Capability("appcode", .text(maxLength: 64), role: .hidden),
        ]
        var d = DeviceDescriptor(id: name, label: name, configuredName: name, model: profile.map { "imp \($0.name)" } ?? "imp (detecting)",
                                 manufacturer: "Electric Imp", category: .generic, capabilities: caps, bareCommands: bare,
                                 swVersion: version)
        // Its commands wait for the app's fields (at most the start window) instead of meeting none.
        d.detecting = profile == nil
        return d
    }

    // MARK: HTTP

    struct Response {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self).trimmingWhitespace() }
    }

    func call(_ d: ImpSettings.Device, _ method: String, _ path: String, body: JSONValue?) async throws(AdapterError) -> Response {
        var headers = [("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let url = "\(settings.baseURL)/\(d.agentID)\(path)"
        do {
            guard let http else { throw AdapterError("the adapter is not running") }
            let r = try await http.send(HTTPRequest(method: method, url: url, headers: headers, body: body.map { Array($0.serialized.utf8) },
                                                    timeout: settings.timeout))
            if (200..<300).contains(r.status) { await context?.recordRequest(error: nil) }
            return Response(status: r.status, headers: r.headers, body: r.body)
        } catch {
            throw AdapterError("agent unreachable: \(scrub("\(error)", d))")
        }
    }

    /// Agent ids are secrets: never in a message, whatever the library said.
    nonisolated func scrub(_ text: String, _ d: ImpSettings.Device) -> String {
        text.replacing(d.agentID, with: "***")
    }
}
