import Foundation
import LivecodingAdapter
import SwitchyardCore
import SwitchyardDemo
import SwitchyardTestSupport
import Testing

/// Management over a real Mosquitto (the integration tier): the issue's "Done when" on a copy of
/// config.example.yaml with the demo's sections and the bridge as its own process, and the options as a
/// subscriber sees them (debounce and throttle counted; retain and Home Assistant exclusion on the broker).
@Suite struct ManagementBrokerTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// config.example.yaml pointed at the broker and a state directory of the test's own (the console off), with
    /// the demo's upstream sections after it: every comment of the example stays.
    static func exampleWithDemo(_ home: SimulatedHome, port: Int, base: String, stateDir: String) throws -> String {
        var example = try String(contentsOf: root.appendingPathComponent("config.example.yaml"), encoding: .utf8)
        func swap(_ old: String, _ new: String) throws {
            guard example.contains(old) else { throw TestError("config.example.yaml has no line '\(old)'") }
            example = example.replacingOccurrences(of: old, with: new)
        }
        try swap("state_dir: /var/lib/switchyard", "state_dir: \(stateDir)")
        try swap("url: mqtt://127.0.0.1:1883   #", "url: mqtt://127.0.0.1:\(port)   #")
        try swap("base_topic: switchyard       #", "base_topic: \(base)       #")
        try swap("  enabled: true                # on by default, on loopback only", "  enabled: false               # on by default, on loopback only")
        let demo = home.yaml(host: "127.0.0.1", port: port, base: base, stateDir: stateDir)
        guard let start = demo.range(of: "\nvirtual:") else { throw TestError("the demo's config has no virtual section") }
        return example + "\n# The demo's upstreams.\n" + demo[demo.index(after: start.lowerBound)...] + "\n"
    }

    /// A request as a client publishes it, and its response.
    static func request(_ probe: MQTTProbe, base: String, _ path: String, _ body: String, _ transaction: String) async throws -> JSONValue {
        var b = body
        b.removeLast()
        b += (body == "{}" ? "" : ", ") + #""transaction": "\#(transaction)"}"#
        probe.publish("\(base)/bridge/request/\(path)", b)
        let m = try await probe.waitFor("the response to \(path)") { ms in
            ms.contains { $0.topic == "\(base)/bridge/response/\(path)" && $0.payload.contains(#""transaction":"\#(transaction)""#) }
        }.last { $0.topic == "\(base)/bridge/response/\(path)" && $0.payload.contains(transaction) }!
        return try JSONValue.parse(m.payload)
    }

    /// Retained messages on `filters` as a new subscriber gets them: what came before a marker the test
    /// publishes after subscribing (the broker sends the retained ones first).
    static func retained(port: Int, _ filters: [String]) async throws -> [MQTTProbe.Message] {
        let p = try await MQTTProbe.connect(port: port)
        defer { p.close() }
        let marker = "marker/\(UUID().uuidString.prefix(8))"
        try await p.subscribe(filters + [marker])
        p.publish(marker, "end")
        _ = try await p.waitFor(topic: marker)
        return p.messages.prefix { $0.topic != marker }.filter(\.retain)
    }

    /// On a copy of config.example.yaml with the demo's sections: a rename, three options of another device,
    /// `health.interval` and `log.level`. `diff` shows only those lines and the added `devices:` section, every
    /// comment line stays; after a restart the bridge comes back with all of it.
    @Test func theDoneWhenOnTheExampleConfig() async throws {
        guard let sim = TestEnvironment.simulatorBinary() else { throw TestError("switchyard-sim is not built next to the tests") }
        let broker = try await Broker.start()
        defer { broker.stop() }
        let home = try await SimulatedHome.start()
        let dir = TestEnvironment.makeTempDir("manage-example")
        defer { try? FileManager.default.removeItem(at: dir) }
        let stateDir = dir.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
        let base = uniqueBase()
        let path = dir.appendingPathComponent("config.yaml").path
        let original = try Self.exampleWithDemo(home, port: broker.port, base: base, stateDir: stateDir)
        try original.writeForTest(toFile: path)
        try original.writeForTest(toFile: path + ".orig")
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#")
        var bridge = try ChildProcess(path: sim, arguments: ["bridge", "-c", path], outputFile: dir.appendingPathComponent("bridge.log").path)
        defer { bridge.terminate() }
        _ = try await probe.waitFor("desk's state", timeout: 60) { $0.contains { $0.topic == "\(base)/lifx/desk" && !$0.payload.isEmpty } }
        _ = try await probe.waitFor("kitchen's state") { $0.contains { $0.topic == "\(base)/virtual/kitchen" && !$0.payload.isEmpty } }

        let rename = try await Self.request(probe, base: base, "device/rename", #"{"adapter": "lifx", "device": "desk", "to": "study_lamp"}"#, "r1")
        #expect(rename["status"] == "ok", "\(rename)")
        let options = try await Self.request(probe, base: base, "device/options",
                                             #"{"adapter": "virtual", "device": "kitchen", "options": {"retain": false, "qos": 0, "debounce": 0.2}}"#, "o1")
        #expect(options["status"] == "ok", "\(options)")
        let settings = try await Self.request(probe, base: base, "options", #"{"options": {"health.interval": 30, "log.level": "debug"}}"#, "s1")
        #expect(settings["status"] == "ok", "\(settings)")
        #expect(settings["data"]?["restart_required"] == [])

        // diff: only those lines, and the devices section added (at the end, after the demo's).
        let out = dir.appendingPathComponent("diff.txt").path
        let diff = try ChildProcess(path: "/usr/bin/diff", arguments: [path + ".orig", path], outputFile: out)
        _ = await diff.wait(timeout: 30)
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init)
        let removed = lines.filter { $0.hasPrefix("< ") }.map { String($0.dropFirst(2)) }
        let added = lines.filter { $0.hasPrefix("> ") }.map { String($0.dropFirst(2)) }
        #expect(removed == ["  level: info          # trace, debug, info, notice, warning, error, critical (SIGHUP/config/reload applies it)",
                            "  interval: 60                 # seconds between bridge/health publishes"], "\(lines)")
        #expect(added.prefix(2) == ["  level: debug          # trace, debug, info, notice, warning, error, critical (SIGHUP/config/reload applies it)",
                                    "  interval: 30                 # seconds between bridge/health publishes"], "\(lines)")
        #expect(Array(added.dropFirst(2).filter { !$0.isEmpty }) == ["devices:", "  lifx:", "    d073d5100001:", "      name: study_lamp",
                                                                     "  virtual:", "    kitchen:", "      retain: false", "      qos: 0",
                                                                     "      debounce: 0.2"], "\(lines)")
        let now = try String(contentsOfFile: path, encoding: .utf8)
        for comment in original.split(separator: "\n").filter({ $0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }) {
            #expect(now.contains(comment), "comment line lost: \(comment)")
        }

        // On the broker: the old topics empty, the new one there; kitchen's state not retained any more. The
        // old topics are emptied after the new discovery config, which waits for the bridge's discovery sweep
        // in its first seconds (design.md §16): a moment after the answer, not before it.
        let port = broker.port
        try await waitUntil("lifx/desk cleared") {
            (try? await Self.retained(port: port, ["\(base)/lifx/desk"]))?.isEmpty == true
        }
        let kept = try await Self.retained(port: broker.port, ["\(base)/lifx/desk", "\(base)/lifx/study_lamp", "\(base)/virtual/kitchen"])
        #expect(!kept.contains { $0.topic == "\(base)/lifx/desk" }, "\(kept)")
        #expect(kept.contains { $0.topic == "\(base)/lifx/study_lamp" }, "\(kept)")
        #expect(!kept.contains { $0.topic == "\(base)/virtual/kitchen" }, "\(kept)")

        // After a restart the bridge comes back with all of it.
        bridge.signal(SIGTERM)
        #expect(await bridge.wait(timeout: 30) == 0)
        probe.clear()
        bridge = try ChildProcess(path: sim, arguments: ["bridge", "-c", path], outputFile: dir.appendingPathComponent("bridge2.log").path)
        _ = try await probe.waitFor("study_lamp's state", timeout: 60) { $0.contains { $0.topic == "\(base)/lifx/study_lamp" && !$0.payload.isEmpty } }
        let info = try await probe.waitFor("bridge/info") { $0.contains { $0.topic == "\(base)/bridge/info" && $0.payload.contains("log_level") } }
            .last { $0.topic == "\(base)/bridge/info" }!
        let j = try JSONValue.parse(info.payload)
        #expect(j["log_level"] == "debug" && j["config"]?["health"]?["interval"] == 30)
        #expect(j["config"]?["devices"]?["lifx"]?["d073d5100001"]?["name"] == "study_lamp")
        probe.publish("\(base)/virtual/kitchen/set", #"{"state": "ON"}"#)
        _ = try await probe.waitFor("kitchen on") { $0.contains { $0.topic == "\(base)/virtual/kitchen" && $0.payload.contains("ON") } }
        #expect(try await Self.retained(port: broker.port, ["\(base)/virtual/kitchen", "\(base)/lifx/desk"]).isEmpty)
        bridge.signal(SIGTERM)
        _ = await bridge.wait(timeout: 30)
        await home.stop()
    }

    /// The requests that change groups and scenes, planned and bounded as the management requests are, with the
    /// daemon over a real broker: a plan answers with its diff and writes and publishes nothing; its commit
    /// makes exactly it (the group on the broker); a plan another change made stale is a conflict with nothing
    /// written; a payload over 64 KiB is refused unread, said on bridge/log and counted in bridge/health.
    @Test func groupRequestsArePlannedAndBoundedOnTheBroker() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let dir = TestEnvironment.makeTempDir("manage-groups")
        defer { try? FileManager.default.removeItem(at: dir) }
        let base = uniqueBase()
        let path = dir.appendingPathComponent("config.yaml").path
        let original = """
        # groups made by request, each planned first
        state_dir: \(dir.path)
        mqtt:
          url: mqtt://127.0.0.1:\(broker.port)
          base_topic: \(base)
        health:
          interval: 1                # seconds: the bound's counter is read here
        web:
          enabled: false
        virtual:
          sensor_interval: 3600
          devices:
            - {name: kitchen, type: light}   # the kitchen light
            - {name: fan, type: switch}
        groups:
          porch:                     # the porch
            members: [virtual/fan]

        """
        try original.writeForTest(toFile: path)
        func text() throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#")
        let bridge = try BridgeProcess(arguments: ["run", "-c", path])
        defer { bridge.signal(SIGTERM) }
        _ = try await probe.waitFor("porch listed", timeout: 60) { $0.contains { $0.topic == "\(base)/group/porch" && !$0.payload.isEmpty } }

        let add = #"{"name": "both", "members": ["virtual/kitchen", "virtual/fan"]"#
        let plan = try await Self.request(probe, base: base, "group/add", add + #", "plan": true}"#, "p1")
        #expect(plan["status"] == "ok" && plan["data"]?["planned"] == true, "\(plan)")
        #expect(plan["data"]?["diff"]?.stringValue?.contains("+  both:\n") == true, "\(plan)")
        #expect(try text() == original)
        #expect(!probe.messages.contains { $0.topic == "\(base)/group/both" })
        let id = try #require(plan["data"]?["plan_id"]?.stringValue)
        let done = try await Self.request(probe, base: base, "group/add", add + #", "plan_id": "\#(id)"}"#, "c1")
        #expect(done["status"] == "ok" && done["data"]?["planned"] == nil && done["data"]?["diff"] == plan["data"]?["diff"], "\(done)")
        _ = try await probe.waitFor("both on the broker") { $0.contains { $0.topic == "\(base)/group/both" && $0.payload.contains("virtual/kitchen") } }
        let added = try text()
        let lines = Set(added.split(separator: "\n", omittingEmptySubsequences: false))
        #expect(original.split(separator: "\n", omittingEmptySubsequences: false).allSatisfy(lines.contains), "\(added)")

        // A plan, then another change of the file: its plan_id no longer names the change.
        let stale = try await Self.request(probe, base: base, "group/members/remove", #"{"group": "porch", "member": "virtual/fan", "plan": true}"#, "p2")
        let staleID = try #require(stale["data"]?["plan_id"]?.stringValue)
        #expect(try await Self.request(probe, base: base, "group/members/add", #"{"group": "porch", "member": "virtual/kitchen"}"#, "c2")["status"] == "ok")
        let before = try text()
        let refused = try await Self.request(probe, base: base, "group/members/remove",
                                             #"{"group": "porch", "member": "virtual/fan", "plan_id": "\#(staleID)"}"#, "c3")
        #expect(refused["status"] == "error" && refused["details"]?["kind"] == "conflict", "\(refused)")
        #expect(try text() == before)

        // Over 64 KiB: refused unread (no transaction read), on bridge/log, counted.
        let big = #"{"name": "x", "members": ["virtual/"# + String(repeating: "a", count: 70_000) + #""]}"#
        probe.publish("\(base)/bridge/request/group/add", big)
        let over = try await probe.waitFor("the refusal") { $0.contains { $0.topic == "\(base)/bridge/response/group/add" && $0.payload.contains("over the 65536 bytes") } }
            .last { $0.topic == "\(base)/bridge/response/group/add" }!
        #expect(try JSONValue.parse(over.payload)["error"]?.stringValue?.hasPrefix("request group/add: payload of 70038 bytes is over the 65536 bytes") == true, "\(over)")
        _ = try await probe.waitFor("bridge/log") { $0.contains { $0.topic == "\(base)/bridge/log" && $0.payload.contains("payload of 70038 bytes") } }
        let health = try await probe.waitFor("the bound counted") { $0.contains { $0.topic == "\(base)/bridge/health" && $0.payload.contains(#""request_payload":1"#) } }
        #expect(!health.isEmpty)
        #expect(try text() == before)
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
    }

    /// Debounce and throttle as a subscriber counts them: a burst of 20 changes reaches the broker as one
    /// publish (debounce) or two (throttle: the first and the last), and the last value always arrives.
    @Test func debounceAndThrottleCoalesceABurstOnTheBroker() async throws {
        let lamp = ScriptedAdapter.lamp()
        let adapter = ScriptedAdapter(devices: [lamp])
        try await BridgeUnderTest.with(subscribe: { ["\($0)/test/lamp"] }, adapter: adapter) { t in
            _ = try await t.probe.waitFor(topic: "\(t.base)/test/lamp")
            for (policy, most) in [(DevicePolicy(debounce: 1), 1), (DevicePolicy(throttle: 1), 2)] {
                await t.bridge.engine.setDevicePolicies(["test": ["lamp-1": policy]])
                t.probe.clear()
                for b in 1...20 { await adapter.push("lamp-1", ["brightness": .number(Double(b + (most == 1 ? 0 : 50)))]) }
                let last = most == 1 ? 20 : 70
                let got = try await t.probe.waitFor("the last value") { $0.contains { $0.payload.contains(#""brightness":\#(last),"#) } }
                let count = got.filter { $0.topic == "\(t.base)/test/lamp" }.count
                // `most` publishes, one more only if the burst itself took longer than the time (a stalled run).
                #expect(count >= 1 && count <= most + 1 && count < 20, "\(policy): \(count) publishes for 20 changes")
            }
        }
    }

    /// homeassistant.exclude clears the device's discovery config on the broker; without it the config is back.
    @Test func homeAssistantExcludeClearsTheConfigOnTheBroker() async throws {
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await BridgeUnderTest.with(subscribe: { ["\($0)/test/lamp"] }, adapter: adapter) { t in
            _ = try await t.probe.waitFor(topic: "\(t.base)/test/lamp")
            let config = "homeassistant/light/switchyard_\(t.base)_test_lamp-1/light/config"
            try await waitUntil("the config on the broker") { (try? await Self.retained(port: t.broker.port, [config]))?.count == 1 }
            await t.bridge.engine.setDevicePolicies(["test": ["lamp-1": DevicePolicy(homeassistant: .init(exclude: true))]])
            try await waitUntil("the config cleared") { (try? await Self.retained(port: t.broker.port, [config]))?.isEmpty == true }
            await t.bridge.engine.setDevicePolicies([:])
            try await waitUntil("the config back") { (try? await Self.retained(port: t.broker.port, [config]))?.count == 1 }
        }
    }
}
