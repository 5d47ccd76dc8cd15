import Foundation
@testable import HomeAssistantMirror
import HomeAssistantSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The mirror in the unit tier: the Home Assistant simulator on loopback, and instead of the engine and a
/// broker the recording twin of the engine (`RecordingAdapterHost`), which keeps the mirror's retained tree
/// as published. What a client sees on the broker stays `HAMirrorTests`' to show.
@Suite struct HAMirrorUnitTests {
    static let token = "unit-\(UUID().uuidString)"

    struct Run: Sendable {
        let sim: HomeAssistantSimulator
        let mirror: HAMirror
        let host: RecordingAdapterHost
        /// The retained tree as a sorted list of `topic payload` lines (the twin drops cleared topics).
        var tree: [String] { host.mirrorTree.map { "\($0.key) \(String(decoding: $0.value, as: UTF8.self))" }.sorted() }
        /// Every message published under the mirror, in order, as `topic payload`.
        var published: [String] {
            host.calls.flatMap { c -> [String] in
                guard case .publish(let ms) = c else { return [] }
                return ms.map { "\($0.relative) \(String(decoding: $0.payload, as: UTF8.self))" }
            }
        }
        func online() -> Bool {
            host.calls.last { if case .mirrorAvailable = $0 { return true } else { return false } } == .mirrorAvailable(true)
        }
    }

    /// The mirror runs (as the engine would run it, a child task) for the length of `body`.
    func with(entities: [HomeAssistantSimulator.Entity], simToken: String = token, clock: any BridgeClock = SystemClock(),
              tune: (inout HAMirrorSettings) -> Void = { _ in }, _ body: (Run) async throws -> Void) async throws {
        let sim = try await HomeAssistantSimulator.start(token: simToken, entities: entities)
        var settings = HAMirrorSettings()
        settings.url = sim.url
        settings.token = Self.token
        settings.exclude = ["sensor.hidden_*"]
        settings.ownUniqueIDPrefix = "switchyard_unit_"
        settings.reconnectMinDelay = 0.1
        settings.reconnectMaxDelay = 0.3
        tune(&settings)
        let mirror = HAMirror(settings: settings, clock: clock)
        let host = RecordingAdapterHost(adapterID: "ha")
        try await withTeardown {
            try await withThrowingTaskGroup(of: Void.self) { g in
                g.addTask { try await mirror.run(context: host.context) }
                defer { g.cancelAll() }
                try await body(Run(sim: sim, mirror: mirror, host: host))
            }
        } teardown: {
            await sim.stop()
        }
    }

    static let house: [HomeAssistantSimulator.Entity] = [
        .init("light.kitchen", "on", ["brightness": 128, "friendly_name": "Kitchen"]),
        .init("sensor.outside", "21.5", ["unit_of_measurement": "°C"]),
        .init("sensor.hidden_thing", "1", ["friendly_name": "Hidden"]),
        .init("input_boolean.test_switch", "off", ["editable": false]),
        .init("light.hall_lamp", "off", ["friendly_name": "Hall Lamp"], platform: "mqtt", uniqueID: "switchyard_unit_lifx_d073d5000003_light"),
    ]

    /// What statestream would publish for `entities`, worked out here from the entities themselves: the
    /// state as is, each attribute JSON-encoded, nothing of excluded or own entities.
    static func statestream(_ entities: [HomeAssistantSimulator.Entity]) -> [String] {
        entities.filter { !$0.entityID.hasPrefix("sensor.hidden_") && $0.platform == nil }.flatMap { e -> [String] in
            let path = e.entityID.replacingOccurrences(of: ".", with: "/")
            return ["\(path)/state \(e.state)"] + e.attributes.map { "\(path)/\($0.key) \(String(decoding: $0.value.bytes, as: UTF8.self))" }
        }.sorted()
    }

    @Test func theSnapshotBecomesTheRetainedTreeAndTheMirrorGoesOnline() async throws {
        try await with(entities: Self.house) { r in
            try await r.host.wait("the snapshot") { _ in r.tree.count == Self.statestream(Self.house).count }
            #expect(r.tree == Self.statestream(Self.house))
            try await r.host.wait("online") { _ in r.online() }
            #expect(r.host.status == .running)
            // The token never reaches anything the mirror hands the core.
            #expect(!r.published.contains { $0.contains(Self.token) } && !r.host.logs.contains { $0.1.contains(Self.token) })
        }
    }

    @Test func aChangeIsPublishedAsExactlyWhatChanged() async throws {
        try await with(entities: Self.house) { r in
            try await r.host.wait("the snapshot") { _ in r.tree.count == Self.statestream(Self.house).count }
            let before = r.published.count
            r.sim.set("light.kitchen", attributes: ["brightness": 200])
            r.sim.set("sensor.outside", remove: ["unit_of_measurement"])
            r.sim.remove("input_boolean.test_switch")
            try await r.host.wait("the changes") { _ in r.host.mirrorTree["input_boolean/test_switch/state"] == nil }
            #expect(Array(r.published.dropFirst(before)).sorted() == [
                "input_boolean/test_switch/editable ", "input_boolean/test_switch/state ",
                "light/kitchen/brightness 200", "sensor/outside/unit_of_measurement ",
            ])
        }
    }

    @Test func aDroppedConnectionResyncsWithOnlyWhatChangedMeanwhile() async throws {
        try await with(entities: Self.house) { r in
            try await r.host.wait("the snapshot") { _ in r.tree.count == Self.statestream(Self.house).count }
            let before = r.published.count
            r.sim.dropConnections()
            r.sim.set("input_boolean.test_switch", state: "on")
            r.sim.remove("sensor.outside")
            try await r.host.wait("the second connection, resynced") { _ in
                r.sim.connections >= 2 && r.host.mirrorTree["sensor/outside/state"] == nil && r.online()
            }
            #expect(Array(r.published.dropFirst(before)).sorted() == [
                "input_boolean/test_switch/state on", "sensor/outside/state ", "sensor/outside/unit_of_measurement ",
            ])
            var now = Self.house.filter { $0.entityID != "sensor.outside" }
            now[now.firstIndex { $0.entityID == "input_boolean.test_switch" }!].state = "on"
            #expect(r.tree == Self.statestream(now))
        }
    }

    @Test func onlyAllowListedServiceCallsReachHomeAssistant() async throws {
        try await with(entities: Self.house, tune: { $0.allow = ["input_boolean.*"] }) { r in
            try await r.host.wait("online") { _ in r.online() }
            try await r.mirror.command(path: "input_boolean/test_switch/set", payload: Array("ON".utf8), context: r.host.context)
            #expect(r.sim.calls.map { "\($0.domain).\($0.service)" } == ["input_boolean.turn_on"])
            await #expect(throws: AdapterError.self) {
                try await r.mirror.command(path: "light/kitchen/set", payload: Array("OFF".utf8), context: r.host.context)
            }
            let area: JSONValue = ["domain": "input_boolean", "service": "toggle", "target": ["area_id": "kitchen"]]
            do {
                _ = try await r.mirror.request(path: "call", payload: area, context: r.host.context)
                Issue.record("a call targeting an area was sent")
            } catch let e as AdapterError {
                #expect(e.message.contains("target area_id is not allowed"))
            }
            let hidden: JSONValue = ["domain": "input_boolean", "service": "toggle", "target": ["entity_id": "sensor.hidden_thing"]]
            await #expect(throws: AdapterError.self) { _ = try await r.mirror.request(path: "call", payload: hidden, context: r.host.context) }
            #expect(r.sim.calls.count == 1)
        }
    }

    @Test func aBadTokenIsAnErrorStatusAndIsRetriedOnlyAfterTheAuthDelay() async throws {
        let clock = ManualClock()
        try await with(entities: Self.house, simToken: "another", clock: clock) { r in
            try await r.host.wait("the error status") { h in if case .error = h.status { return true } else { return false } }
            guard case .error(let message) = r.host.status else { return }
            #expect(message.contains("auth_invalid"))
            #expect(r.tree.isEmpty)
            try await waitUntil("the retry is scheduled") { clock.sleeping == 1 }
            clock.advance(by: .seconds(299))
            #expect(r.sim.authAttempts == 1)
            clock.advance(by: .seconds(1))
            try await waitUntil("the second attempt") { r.sim.authAttempts == 2 }
        }
    }

    /// The application ping on a manual clock: a pong that does not come within `pingTimeout` ends the
    /// connection, and the mirror connects again.
    @Test func aMissedPongOnTheMirrorsClockEndsTheConnection() async throws {
        let clock = ManualClock()
        try await with(entities: Self.house, clock: clock, tune: { $0.pingInterval = 30; $0.pingTimeout = 10 }) { r in
            try await r.host.wait("online") { _ in r.online() }
            r.sim.setIgnorePings(true)
            try await waitUntil("the ping timer") { clock.sleeping >= 1 }
            clock.advance(by: .seconds(30))
            try await waitUntil("a ping at Home Assistant") { r.sim.pings == 1 }
            // The ping is written before its time-out is set: the clock moves on only once the time-out
            // sleeps (set after the move, it would never come).
            try await waitUntil("the ping's time-out") { clock.nextDeadline == clock.now() + .seconds(10) }
            #expect(r.sim.connections == 1)
            clock.advance(by: .seconds(10))
            try await r.host.wait("offline after the missed pong") { _ in !r.online() }
            r.sim.setIgnorePings(false)
            // The reconnect backoff runs on the same clock.
            for _ in 0..<50 where r.sim.connections < 2 {
                clock.advance(by: .seconds(1))
                try? await Task.sleep(for: .milliseconds(20))
            }
            try await r.host.wait("online again") { _ in r.sim.connections == 2 && r.online() }
        }
    }

    /// The mirror lists no device, so it settles only when the engine's settle time passes: connected and
    /// running, it must not keep the groups (whose members are another adapter's) from being listed,
    /// following their members and carrying out their commands (design.md §20). With a settle time longer
    /// than the test, a group listing that waited for every adapter never comes.
    @Test func theMirrorDoesNotHoldTheGroupsBack() async throws {
        let sim = try await HomeAssistantSimulator.start(token: Self.token, entities: Self.house)
        var settings = HAMirrorSettings()
        settings.url = sim.url
        settings.token = Self.token
        let lamps = ScriptedAdapter(id: "alpha", devices: [ScriptedAdapter.lamp("a1", name: "one"), ScriptedAdapter.lamp("a2", name: "two")],
                                    initial: ["a1": ["state": "ON", "brightness": 20], "a2": ["state": "ON", "brightness": 40]])
        let groups = GroupsConfig(groups: [GroupDefinition(name: "both", members: [MemberRef("alpha/one")!, MemberRef("alpha/two")!])])
        try await withTeardown {
            try await InMemoryBridge.with(adapters: [lamps, HAMirror(settings: settings)], settleTimeout: 3600) { b in
                await b.engine.setGroups(groups)
                try await b.waitFor("b/ha/availability", "online")
                try await b.waitForState("group", "both") { $0["state"] == "ON" && $0["brightness"] == 30 }
                await lamps.push("a1", ["brightness": 60])
                try await b.waitForState("group", "both") { $0["brightness"] == 50 }
                b.command("group", "both", #"{"state": "OFF", "transaction": "m1"}"#)
                #expect(try await b.result("group", "both", transaction: "m1") == ["status": "ok", "transaction": "m1"])
                #expect(await lamps.commands.map(\.fields) == [["state": "OFF"], ["state": "OFF"]])
            }
        } teardown: {
            await sim.stop()
        }
    }
}
