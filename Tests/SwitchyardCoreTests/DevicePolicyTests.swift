import Foundation
import Logging
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The per-device options as the engine applies them (`DevicePolicy`, docs/topics.md "Per-device options"),
/// through the engine over the in-memory transport; debounce and throttle on a manual clock, counted.
@Suite struct DevicePolicyTests {
    static let lamp = ScriptedAdapter.lamp()
    static let other = ScriptedAdapter.lamp("lamp-2", name: "other")

    func withEngine<R: Sendable>(clock: any BridgeClock = SystemClock(), discovery: Bool = false, mode: DiscoveryMode = .entity,
                                 _ body: (BridgeEngine, InMemoryTransport, ScriptedAdapter) async throws -> R) async throws -> R {
        let t = InMemoryTransport()
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        let e = BridgeEngine(settings: EngineSettings(scheme: TopicScheme(base: "b"), discovery: discovery, version: "t", discoveryMode: mode,
                                                      migrationGrace: 0.05),
                             transport: t, logger: logger, clock: clock)
        let a = ScriptedAdapter(devices: [Self.lamp, Self.other])
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test").count == 2 }
            try await waitUntil("first states") { t.published.contains { $0.topic == "b/test/lamp" } && t.published.contains { $0.topic == "b/test/other" } }
            return try await body(e, t, a)
        }
    }

    func states(_ t: InMemoryTransport, _ topic: String = "b/test/lamp") -> [InMemoryTransport.Published] {
        t.published.filter { $0.topic == topic }
    }

    /// Ten changes within the debounce time go out as one publish, with the last value, once the time has
    /// passed with no further change; the other device is not held.
    @Test func debounceCoalescesABurstIntoOnePublish() async throws {
        let clock = ManualClock()
        try await withEngine(clock: clock) { e, t, a in
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(debounce: 2)]])
            let before = states(t).count
            let idle = clock.sleeping
            for b in 1...10 { await a.push("lamp-1", ["brightness": .number(Double(b))]) }
            await a.push("lamp-2", ["brightness": 77])
            try await waitUntil("the other lamp's state") { self.states(t, "b/test/other").last?.payload.contains("77") == true }
            try await waitUntil("the debounce timer") { clock.sleeping > idle }
            #expect(states(t).count == before, "a debounced state went out before its time")
            clock.advance(by: .seconds(1))
            await a.push("lamp-1", ["brightness": 11])   // within the time: moves the publish later
            clock.advance(by: .seconds(1.5))
            try await Task.sleep(for: .milliseconds(50))
            #expect(states(t).count == before)
            clock.advance(by: .seconds(1))
            try await waitUntil("the coalesced state") { self.states(t).count == before + 1 }
            #expect(states(t).last?.payload.contains(#""brightness":11"#) == true)
            #expect(states(t).count == before + 1)
        }
    }

    /// Throttle: the first change goes at once, the rest within the time wait, and the last value goes when
    /// the time is up: two publishes for a burst of ten.
    @Test func throttleSendsTheFirstAndTheLastOfABurst() async throws {
        let clock = ManualClock()
        try await withEngine(clock: clock) { e, t, a in
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(throttle: 5)]])
            let before = states(t).count
            let idle = clock.sleeping
            for b in 1...10 { await a.push("lamp-1", ["brightness": .number(Double(b))]) }
            #expect(states(t).count == before + 1)
            #expect(states(t).last?.payload.contains(#""brightness":1,"#) == true)
            try await waitUntil("the throttle timer") { clock.sleeping > idle }
            clock.advance(by: .seconds(5))
            try await waitUntil("the last value") { self.states(t).count == before + 2 }
            #expect(states(t).last?.payload.contains(#""brightness":10,"#) == true)
            // Quiet for longer than the time: the next change goes at once again.
            clock.advance(by: .seconds(10))
            await a.push("lamp-1", ["brightness": 42])
            #expect(states(t).count == before + 3)
        }
    }

    /// retain false: the broker's retained copy is cleared, and states go out non-retained with their QoS and
    /// expiry; filtered fields are never published.
    @Test func retainQosExpiryAndFilteredFieldsShapeTheStatePublish() async throws {
        try await withEngine { e, t, a in
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(retain: false, qos: 0, messageExpiry: 60, filteredFields: ["brightness"])]])
            try await waitUntil("the retained copy cleared") { self.states(t).contains { $0.retain && $0.payload.isEmpty } }
            await a.push("lamp-1", ["state": "ON", "brightness": 12])
            try await waitUntil("the new state") { self.states(t).last?.payload.contains("ON") == true }
            let last = try #require(states(t).last)
            #expect(!last.retain && last.qos == 0 && last.properties.expiry == 60)
            #expect(!last.payload.contains("brightness"))
            // Back to the defaults: retained again.
            await e.setDevicePolicies([:])
            await a.push("lamp-1", ["state": "OFF"])
            try await waitUntil("a retained state") { self.states(t).last.map { $0.retain && $0.payload.contains("OFF") } == true }
        }
    }

    /// A `name` option renames the device (new topics, old ones cleared, `device_renamed`), keeps its discovery
    /// ids, and a command on the old topic is answered with an error that names the new one.
    @Test func aNameOptionRenamesAndTheOldTopicsSayWhere() async throws {
        try await withEngine(discovery: true) { e, t, _ in
            let node = "switchyard_b_test_lamp-1"
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(name: "desk")]])
            #expect(await e.deviceNames("test")["lamp-1"] == "desk")
            try await waitUntil("device_renamed") { t.published.contains { $0.topic == "b/bridge/event" && $0.payload.contains("device_renamed") } }
            #expect(t.published.contains { $0.topic == "b/test/lamp" && $0.payload.isEmpty && $0.retain })
            #expect(t.published.contains { $0.topic == "b/test/desk" && !$0.payload.isEmpty })
            let config = try #require(t.published.last { $0.topic == "homeassistant/light/\(node)/light/config" })
            #expect(config.payload.contains(#""state_topic":"b/test/desk""#) && config.payload.contains("\(node)_light"))
            t.inject(.message(InboundMessage(topic: "b/test/lamp/set", payload: Array(#"{"state":"ON","transaction":"t1"}"#.utf8))))
            try await waitUntil("the refusal") { t.published.contains { $0.topic == "b/test/lamp/result" } }
            let result = try #require(t.published.last { $0.topic == "b/test/lamp/result" })
            #expect(result.payload.contains("renamed to 'desk'") && result.payload.contains("b/test/desk/set"))
            // A name another device has: the option is not used (a warning says so), no two devices share topics.
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(name: "other")]])
            #expect(await e.deviceNames("test") == ["lamp-1": "lamp", "lamp-2": "other"])
            #expect(t.published.contains { $0.topic == "b/bridge/log" && $0.payload.contains("is another device's name") })
        }
    }

    /// disabled: the device goes (topics cleared), its commands are refused as disabled, its adapter is told;
    /// enabled again, it is back under its name.
    @Test func aDisabledDeviceGoesAndComesBack() async throws {
        try await withEngine { e, t, _ in
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(disabled: true)]])
            #expect(await e.deviceNames("test")["lamp-1"] == nil)
            #expect(t.published.contains { $0.topic == "b/bridge/event" && $0.payload.contains("device_removed") && $0.payload.contains("disabled") })
            t.inject(.message(InboundMessage(topic: "b/test/lamp/set", payload: Array(#"{"state":"ON","transaction":"t2"}"#.utf8))))
            try await waitUntil("the refusal") { t.published.contains { $0.topic == "b/test/lamp/result" && $0.payload.contains("is disabled") } }
            await e.setDevicePolicies([:])
            #expect(await e.deviceNames("test")["lamp-1"] == "lamp")
            try await waitUntil("device_added") { t.published.filter { $0.topic == "b/bridge/event" && $0.payload.contains("device_added") }.count >= 3 }
        }
    }

    /// homeassistant.exclude clears the device's configs; the overrides reach them (name, icon, category).
    @Test func homeAssistantExcludeAndOverridesShapeDiscovery() async throws {
        try await withEngine(discovery: true) { e, t, _ in
            let light = "homeassistant/light/switchyard_b_test_lamp-1/light/config"
            try await waitUntil("the light's config") { t.published.contains { $0.topic == light && !$0.payload.isEmpty } }
            var ha = DevicePolicy.HomeAssistant(name: "Desk lamp", icon: "mdi:desk-lamp")
            ha.entities["light"] = .init(name: "Lamp", entityCategory: "config")
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(homeassistant: ha)]])
            let c = try #require(t.published.last { $0.topic == light }).payload
            let json = try JSONValue.parse(c)
            #expect(json["icon"] == "mdi:desk-lamp" && json["name"] == "Lamp" && json["entity_category"] == "config")
            #expect(json["device"]?["name"] == "Desk lamp")
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(homeassistant: .init(exclude: true))]])
            #expect(t.published.last { $0.topic == light }?.payload == "")
            #expect(await e.deviceNames("test")["lamp-1"] == "lamp")
        }
    }
}

/// The soak's management invariant (docs/testing.md, invariant 12) catches what it is for.
@Suite struct ManagementWatchTests {
    static func event(_ type: String, _ data: String) -> [UInt8] { Array(#"{"type":"\#(type)","data":\#(data)}"#.utf8) }

    @Test func aRenameOrAChangeNobodyAskedForIsABreach() {
        var w = ManagementWatch()
        #expect(w.event(Self.event("device_renamed", #"{"adapter":"virtual","from":"fan","id":"fan","to":"x"}"#)) != nil)
        w.expectRename(adapter: "virtual", from: "outside", to: "outside_m")
        w.expectChange()
        #expect(w.event(Self.event("config_changed", #"{"by":"mqtt","request":"device/rename"}"#)) == nil)
        #expect(w.event(Self.event("config_changed", #"{"by":"mqtt","request":"options"}"#)) != nil)
        #expect(!w.unmet.isEmpty)
        #expect(w.event(Self.event("device_renamed", #"{"adapter":"virtual","from":"outside","id":"outside","to":"outside_m"}"#)) == nil)
        #expect(w.unmet.isEmpty)
        w.watched = ["virtual/kitchen"]
        #expect(w.event(Self.event("device_removed", #"{"adapter":"virtual","id":"kitchen","name":"kitchen","reason":"x"}"#)) != nil)
        #expect(w.event(Self.event("device_added", #"{"adapter":"lifx","id":"d1","name":"desk"}"#)) == nil)
        // A new active instance's first listing adds the device: not the change's doing; a removal still is.
        let added = Self.event("device_added", #"{"adapter":"virtual","id":"kitchen","name":"kitchen"}"#)
        #expect(w.event(added) != nil)
        #expect(w.event(added, firstListing: true) == nil)
        #expect(w.event(Self.event("device_removed", #"{"adapter":"virtual","id":"kitchen","name":"kitchen","reason":"x"}"#), firstListing: true) != nil)
    }
}
