import Foundation
import ImpAdapter
import Logging
import SwitchyardConfig
import SwitchyardCore
import SwitchyardMQTT
import ImpSimulators
import SwitchyardTestSupport
import Testing

/// The bridge in-process with the Imp adapter, the agent simulator over real HTTP and a real Mosquitto.
final class ImpHarness: Sendable {
    let sim: ImpAgentSimulator
    let under: BridgeUnderTest
    var broker: Broker { under.broker }
    var probe: MQTTProbe { under.probe }
    var base: String { under.base }

    static let matrix = "mAtr1x-Clk_1"
    static let big = "bigClock0002"
    static let weather = "weatherAg003"
    static let matrixCode = "E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA"
    static let bigCode = "DCD2B79C-4467-433C-B0D3-7448EDA17575"

    private init(sim: ImpAgentSimulator, under: BridgeUnderTest) {
        self.sim = sim
        self.under = under
    }

    /// `yaml` is the `imp:` section's body; `BASE_URL` in it is replaced by the simulator's URL.
    static func with<R: Sendable>(yaml: String? = nil, _ body: (ImpHarness) async throws -> R) async throws -> R {
        let sim = try await ImpAgentSimulator.start(agents: [
            .init(id: matrix, app: .matrixClock, appcode: matrixCode),
            .init(id: big, app: .bigClock, appcode: bigCode),
            { var w = ImpAgentSimulator.Agent(id: weather, app: .weather, appcode: "Weather"); w.version = "3.1.4"; return w }(),
        ])
        return try await withTeardown {
            let text = (yaml ?? """
              poll_interval: 3600
              apps:
                \(matrixCode): matrixclock
                \(bigCode): bigclock
              devices:
                - {name: hall_clock, agent_id: "${IMP_MATRIX}"}
                - {name: big_clock, agent_id: \(big)}
                - {name: weather, agent_id: \(weather)}
            """).replacingOccurrences(of: "BASE_URL", with: sim.baseURL)
            let config = try SwitchyardConfig.parse(yaml: "imp:\n  base_url: \(sim.baseURL)\n" + text, file: "t.yaml",
                                                    upstreams: [ImpUpstream()], environment: ["IMP_MATRIX": matrix])
            var options = InProcessBridge.Options()
            options.info = ["config": config.redactedJSON]
            return try await BridgeUnderTest.with(subscribe: { ["\($0)/#", "homeassistant/#"] },
                                                  adapter: ImpAdapter(settings: try #require(config.settings(ImpUpstream()))),
                                                  options: options) { under in
                try await body(ImpHarness(sim: sim, under: under))
            }
        } teardown: {
            await sim.stop()
        }
    }

    func topic(_ name: String) -> String { "\(base)/imp/\(name)" }

    @discardableResult
    func waitState(_ name: String, _ what: String = "", _ predicate: @escaping (JSONValue) -> Bool) async throws -> JSONValue {
        let t = topic(name)
        let ms = try await probe.waitFor("\(t) \(what)") { ms in ms.contains { $0.topic == t && (try? JSONValue.parse($0.payload)).map(predicate) == true } }
        return try JSONValue.parse(ms.last { $0.topic == t && (try? JSONValue.parse($0.payload)).map(predicate) == true }!.payload)
    }

    var posts: [(String, JSONValue?)] {
        sim.requests.filter { $0.method == "POST" }.map { ($0.path, try? JSONValue.parse($0.body)) }
    }

    func waitPosts(_ n: Int) async throws {
        try await waitUntil("\(n) POSTs reach the agents") { self.posts.count >= n }
    }
}

@Suite struct ImpTests {
    @Test func appsAreDetectedByAppcodeAndStateIsNormalisedPerProfile() async throws {
        try await ImpHarness.with { h in
            let clock = try await h.waitState("hall_clock") { $0["agent"] == "online" }
            #expect(clock["app"] == "matrixclock" && clock["appcode"] == .string(ImpHarness.matrixCode))
            #expect(clock["power"] == "ON" && clock["brightness"] == 47 && clock["brightness_raw"] == 7)   // 7 of 15
            #expect(clock["mode_24h"] == true && clock["utc"] == false && clock["device_connected"] == true)
            // BigClock: a dotted string, brightness reported + 1.
            let big = try await h.waitState("big_clock") { $0["agent"] == "online" }
            #expect(big["app"] == "bigclock" && big["brightness_raw"] == 7 && big["brightness"] == 47 && big["power"] == "ON")
            let weather = try await h.waitState("weather") { $0["agent"] == "online" }
            #expect(weather["app"] == "weather" && weather["power"] == "ON")   // "Weather" is a published app code
            for name in ["hall_clock", "big_clock", "weather"] {
                try await h.probe.waitFor(topic: "\(h.topic(name))/availability", payload: "online")
            }
            // Discovery: power a switch, brightness a number, actions buttons.
            let node = "switchyard_\(h.base)_imp_hall_clock"
            try await h.probe.waitFor(topic: "homeassistant/switch/\(node)/power/config")
            try await h.probe.waitFor(topic: "homeassistant/number/\(node)/brightness/config")
            try await h.probe.waitFor(topic: "homeassistant/button/\(node)/action_reset/config")
            // The agent's version (when /controller/info gives one) is the HA device's sw_version.
            let weatherPower = try await h.probe.waitFor(topic: "homeassistant/switch/switchyard_\(h.base)_imp_weather/power/config")
            #expect(try JSONValue.parse(weatherPower.payload)["device"]?["sw_version"] == "3.1.4")
            let clockPower = try JSONValue.parse(try await h.probe.waitFor(topic: "homeassistant/switch/\(node)/power/config").payload)
            #expect(clockPower["device"]?["sw_version"] == nil && clockPower["device"]?["name"] == "Hall clock")
            // The agent ids are secrets: never published, bridge/info shows ***.
            #expect(!h.probe.messages.contains { m in [ImpHarness.matrix, ImpHarness.big, ImpHarness.weather].contains { m.payload.contains($0) } })
            // The MatrixClock's force flag is never stolen: /status is not polled.
            #expect(!h.sim.requests.contains { $0.path.hasSuffix("/status") })
        }
    }

    @Test func commandsReachTheRightEndpointWithTheRightJSON() async throws {
        try await ImpHarness.with { h in
            for name in ["hall_clock", "big_clock", "weather"] { try await h.waitState(name) { $0["agent"] == "online" } }
            let m = "/\(ImpHarness.matrix)", b = "/\(ImpHarness.big)", w = "/\(ImpHarness.weather)"
            let cases: [(String, String, String, String, JSONValue)] = [
                ("hall_clock", "", #"{"power": "OFF", "mode_24h": false}"#, "\(m)/settings", ["setlight": false, "setmode": false]),
                ("hall_clock", "/brightness", "100", "\(m)/settings", ["setbright": 15]),
                ("big_clock", "/brightness", "100", "\(b)/settings", ["setbright": 16]),   // BigClock stores value − 1
                ("big_clock", "", "TOGGLE", "\(b)/settings", ["setlight": false]),
                ("weather", "", "OFF", "\(w)/settings", ["power": false]),               // idempotent, not the /update toggle
                ("weather", "/action", "update", "\(w)/update", ["action": "update"]),
                ("hall_clock", "/action", "reset", "\(m)/action", ["action": "reset"]),
            ]
            for (i, (name, field, payload, path, body)) in cases.enumerated() {
                h.probe.publish("\(h.topic(name))/set\(field)", payload)
                try await h.waitPosts(i + 1)
                #expect(h.posts[i].0 == path, "\(name) \(payload)")
                #expect(h.posts[i].1 == body, "\(name) \(payload)")
            }
            // The agents applied them, and the state read back says so.
            #expect(h.sim.agent(ImpHarness.big)?.bright == 15 && h.sim.agent(ImpHarness.big)?.on == false)
            #expect(h.sim.agent(ImpHarness.weather)?.on == false && h.sim.agent(ImpHarness.weather)?.updates == 1)
            try await h.waitState("big_clock", "read back") { $0["brightness"] == 100 && $0["power"] == "OFF" }
            try await h.waitState("hall_clock", "reset read back") { $0["brightness_raw"] == 15 && $0["power"] == "ON" }
            #expect(h.sim.agent(ImpHarness.matrix)?.resets == 1)
        }
    }

    @Test func aYAMLProfileWorksEndToEnd() async throws {
        try await ImpHarness.with(yaml: """
          poll_interval: 3600
          profiles:
            lamp:
              state: /settings
              connected: /isconnected
              fields:
                - {name: level, from: /bright, type: integer, min: 0, max: 15, set: {path: /settings, body: '{"setbright": "{{value}}"}'}}
                - {name: lit, from: /on, type: bool, set: {path: /settings, body: '{"setlight": "{{value}}"}'}}
                - {name: offset, from: /world/offset, type: integer, min: -12, max: 12}
              actions:
                - {name: restart, path: /action, body: '{"action": "reboot"}', repoll: false}
          devices:
            - {name: desk, agent_id: \(ImpHarness.matrix), app: lamp}
        """) { h in
            let s = try await h.waitState("desk") { $0["agent"] == "online" }
            #expect(s["app"] == "lamp" && s["level"] == 7 && s["lit"] == true && s["offset"] == 0)
            h.probe.publish("\(h.topic("desk"))/set", #"{"level": 3, "lit": false}"#)
            try await h.waitPosts(1)
            #expect(h.posts[0].1 == ["setbright": 3, "setlight": false])
            try await h.waitState("desk", "read back") { $0["level"] == 3 && $0["lit"] == false }
            h.probe.publish("\(h.topic("desk"))/set/action", "restart")
            try await waitUntil("rebooted") { h.sim.agent(ImpHarness.matrix)?.reboots == 1 }
            // Unknown to the profile: refused by the core before any request.
            h.probe.publish("\(h.topic("desk"))/set", #"{"power": "ON"}"#)
            try await h.probe.waitFor("unknown field error") { ms in ms.contains { $0.topic == "\(h.base)/bridge/log" && $0.payload.contains("unknown field 'power'") } }
            #expect(h.posts.count == 2)
        }
    }

    @Test func agentGoneAndDeviceOfflineGiveTheRightAvailabilityAndRecover() async throws {
        try await ImpHarness.with { h in
            try await h.waitState("hall_clock") { $0["agent"] == "online" }
            let avail = "\(h.topic("hall_clock"))/availability"
            // The device drops off: the agent still answers, with isconnected false.
            h.sim.setConnected(ImpHarness.matrix, false)
            h.probe.publish("\(h.topic("hall_clock"))/get", "")
            try await h.waitState("hall_clock", "device offline") { $0["agent"] == "online" && $0["device_connected"] == false }
            try await h.probe.waitFor("offline") { ms in ms.last { $0.topic == avail }?.payload == "offline" }
            h.probe.publish("\(h.topic("hall_clock"))/set", #"{"power": "OFF", "transaction": 5}"#)
            let r = try await h.probe.waitFor(topic: "\(h.topic("hall_clock"))/result")
            #expect(r.payload.contains("the device is offline") && r.payload.contains(#""status":"error""#))
            #expect(h.posts.isEmpty)
            // The agent disappears (re-enrolment): 404, agent offline, a warning; it comes back.
            h.sim.setConnected(ImpHarness.matrix, true)
            h.sim.setGone(ImpHarness.matrix, true)
            h.probe.publish("\(h.topic("hall_clock"))/get", "")
            try await h.waitState("hall_clock", "agent gone") { $0["agent"] == "offline" }
            try await h.probe.waitFor("404 warning") { ms in
                ms.contains { $0.topic == "\(h.base)/bridge/log" && $0.payload.contains("HTTP 404: the agent is gone or has moved") }
            }
            h.sim.setGone(ImpHarness.matrix, false)
            h.probe.publish("\(h.topic("hall_clock"))/get", "")
            try await h.waitState("hall_clock", "back") { $0["agent"] == "online" && $0["device_connected"] == true }
            try await h.probe.waitFor("online again") { ms in ms.last { $0.topic == avail }?.payload == "online" }
            // Rate limited: the agent is reported unreachable with the reason, then recovers.
            h.sim.throttle(ImpHarness.big, count: 1)
            h.probe.publish("\(h.topic("big_clock"))/get", "")
            try await h.waitState("big_clock", "429") { $0["agent"] == "offline" }
            h.probe.publish("\(h.topic("big_clock"))/get", "")
            try await h.waitState("big_clock", "after 429") { $0["agent"] == "online" }
            #expect(!h.probe.messages.contains { $0.payload.contains(ImpHarness.matrix) })
        }
    }

    /// A reload's new instance keeps each device's detected app, so its capabilities never vanish while
    /// the agent is asked again (found by the soak run: a command's brightness refused as an unknown field).
    @Test func aReloadKeepsTheAppTheOldInstanceDetected() async throws {
        try await ImpHarness.with { h in
            try await h.waitState("hall_clock") { $0["agent"] == "online" }
            let details = "\(h.base)/bridge/devices/imp/hall_clock"
            #expect(try JSONValue.parse(try await h.probe.waitFor(topic: details).payload).serialized.contains(#""brightness""#))
            // The agent stops answering: the new instance cannot detect the app itself.
            h.sim.setGone(ImpHarness.matrix, true)
            var settings = ImpSettings()
            settings.baseURL = h.sim.baseURL
            settings.pollInterval = 1800
            settings.apps = [ImpHarness.matrixCode: "matrixclock", ImpHarness.bigCode: "bigclock"]
            settings.devices = [.init(name: "hall_clock", agentID: ImpHarness.matrix), .init(name: "big_clock", agentID: ImpHarness.big),
                                .init(name: "weather", agentID: ImpHarness.weather)]
            await h.under.bridge.engine.replaceAdapters(start: [ImpAdapter(settings: settings)], remove: [])
            try await h.waitState("hall_clock", "polled by the new instance") { $0["agent"] == "offline" }
            let last = try #require(h.probe.messages.last { $0.topic == details })
            #expect(last.payload.contains(#""brightness""#), "the reload listed hall_clock without its app's fields")
            // A command's fields are still known: it reaches the adapter, which says why it cannot send it.
            h.probe.publish("\(h.topic("hall_clock"))/set", #"{"brightness": 20, "transaction": 9}"#)
            let r = try await h.probe.waitFor(topic: "\(h.topic("hall_clock"))/result")
            #expect(r.payload.contains("agent unreachable") && !r.payload.contains("unknown field"))
        }
    }

    @Test func anAgentThatDoesNotAnswerIsRetriedSoonNotAfterAWholePollInterval() async throws {
        // Nothing listens at the agents' address yet: connection refused. poll_interval is an hour, so
        // only the quick retry for "no HTTP answer" (2 s, doubling) can bring the device online soon; the
        // second device's phase in the schedule (half an hour) must not delay that retry either. The
        // adapter's timers run on a manual clock: how long the retries take is the clock's time, which a
        // loaded machine cannot stretch.
        let port = TestEnvironment.freePort()
        let config = try SwitchyardConfig.parse(yaml: """
            imp:
              base_url: http://127.0.0.1:\(port)
              poll_interval: 3600
              devices:
                - {name: big_clock, agent_id: \(ImpHarness.big)}
                - {name: weather, agent_id: \(ImpHarness.weather)}
            """, file: "t.yaml", upstreams: [ImpUpstream()])
        let clock = ManualClock()
        let adapter = ImpAdapter(settings: try #require(config.settings(ImpUpstream())), clock: clock)
        try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: adapter) { under in
            let base = under.base
            let t = "\(base)/imp/weather"
            func online(_ ms: [MQTTProbe.Message]) -> Bool {
                ms.contains { $0.topic == t && $0.payload.contains(#""agent":"online""#) && $0.payload.contains(#""app":"weather""#) }
            }
            var wakes: [Int] = []
            /// Once both devices' loops are asleep (each after a poll), moves the clock to the earliest wake.
            func wakeNext() async throws {
                try await waitUntil("both devices' polls asleep") { clock.sleeping >= 2 }
                let next = try #require(clock.nextDeadline)
                wakes.append(Int(((next - .origin).seconds * 1000).rounded()))
                clock.advance(to: next)
            }
            // Each device's first read (big_clock at 0, weather at 0.1 s) and two quick retries, 2 s and then
            // 4 s after the failure before, all refused.
            for _ in 0..<12 where clock.now() < .origin + .milliseconds(6_050) { try await wakeNext() }
            #expect(wakes == [100, 2_000, 2_100, 6_000, 6_100], "the polls' wake times (ms of clock time)")
            try await under.probe.waitFor("agent offline") { ms in ms.contains { $0.topic == t && $0.payload.contains(#""agent":"offline""#) } }
            try await under.probe.waitFor("the warning") { ms in
                ms.contains { $0.topic == "\(base)/bridge/log" && $0.payload.contains("weather: agent unreachable") }
            }
            // One warning for the outage, not one per retry.
            #expect(under.probe.messages.filter { $0.topic == "\(base)/bridge/log" && $0.payload.contains("weather: agent unreachable") }.count == 1)
            // weather's third refusal is over (its loop asleep again) before the agents can answer.
            try await waitUntil("both devices' polls asleep") { clock.sleeping >= 2 }
            let failedAt = clock.now()
            let sim = try await ImpAgentSimulator.start(agents: [.init(id: ImpHarness.big, app: .bigClock, appcode: ImpHarness.bigCode),
                                                                .init(id: ImpHarness.weather, app: .weather, appcode: "Weather")],
                                                       port: UInt16(port))
            try await withTeardown {
                // The clock moves only to wakes within 8.5 s of the third refusal: the next doubling (8 s) must
                // bring weather online; a later retry never comes, and the wait below fails.
                let limit = failedAt + .milliseconds(8_500)
                for _ in 0..<12 {
                    try await waitUntil("both devices' polls asleep") { clock.sleeping >= 2 }
                    guard let next = clock.nextDeadline, next <= limit else { break }
                    clock.advance(to: next)
                }
                try await under.probe.waitFor("online once the agent answers", online)
                try await under.probe.waitFor(topic: "\(t)/availability", payload: "online")
            } teardown: {
                await sim.stop()
            }
        }
    }
}

/// Profiles read the payloads quoted in docs/upstreams/imp-livecoding.md §1.4 (verbatim where the spec quotes one).
@Suite struct ImpProfileTests {
    @Test func bigClockReadsItsDottedSettingsString() throws {
        let r = try ImpProfile.bigClock.read(Array("1.1.1.1.8.0.12.1.c.0".utf8))
        #expect(r.connected == true)
        #expect(r.fields["power"] == "ON" && r.fields["mode_24h"] == true && r.fields["utc"] == false)
        #expect(r.fields["brightness_raw"] == 7 && r.fields["brightness"] == 47)   // 8 is brightness + 1
        #expect(try ImpProfile.bigClock.read(Array("0.1.1.1.1.0.12.0.d.0".utf8)).connected == false)
    }

    @Test func matrixClockReadsItsWatchState() throws {
        let r = try ImpProfile.matrixClock.read(Array(#"{"mode":true,"bright":0,"world":{"utc":true},"on":false,"isconnected":true}"#.utf8))
        #expect(r.fields == ["mode_24h": true, "brightness": 0, "brightness_raw": 0, "utc": true, "power": "OFF"] && r.connected == true)
    }

    @Test func thermalForecastHomeWeatherAndGeneric() throws {
        let t = try ImpProfile.thermalForecast.read(Array(#"{"ispowered":true,"isconnected":false,"brightness":10,"ledorient":"left"}"#.utf8))
        #expect(t.fields["power"] == "ON" && t.fields["brightness"] == 67 && t.fields["orientation"] == "left" && t.connected == false)
        #expect(try ImpProfile.homeWeather.read(Array("1".utf8)).connected == true)
        #expect(throws: AdapterError.self) { try ImpProfile.homeWeather.read(Array("<html>".utf8)) }
        let g = try ImpProfile.generic.read(Array(#"{"level":3,"isconnected":false}"#.utf8))
        #expect(g.fields == ["level": 3] && g.connected == false)
        #expect(try ImpProfile.generic.read(Array("0".utf8)).connected == false)
    }

    @Test func writesUseEachAppsUnit() {
        let clockBright = ImpProfile.clock.fields.first { $0.name == "brightness" }!
        let matrixBright = ImpProfile.matrixClock.fields.first { $0.name == "brightness" }!
        #expect(ImpProfile.clock.wireValue(clockBright, 100, current: nil) == 16)    // Clock stores value − 1
        #expect(ImpProfile.matrixClock.wireValue(matrixBright, 100, current: nil) == 15)
        let power = ImpProfile.thermalForecast.fields.first { $0.name == "power" }!
        #expect(power.set!.body(with: ImpProfile.thermalForecast.wireValue(power, "TOGGLE", current: "ON"))
                == ["action": "power", "power": false])   // a JSON bool, not the watch's "0"
    }
}
