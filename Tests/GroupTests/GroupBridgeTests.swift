import Foundation
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// A group across upstreams, in-process over a real broker, each upstream played on its own wire: the LIFX
/// cloud simulator (HTTP), lifx-emulator (UDP), the Imp agent simulator (HTTP), virtual devices. What each
/// member received is read where it arrived.
@Suite(.serialized, .enabled(if: LIFXEmulator.unavailableReason == nil, Comment(rawValue: LIFXEmulator.unavailableReason ?? "")))
struct GroupBridgeTests {
    /// The bridge with the home's adapters and groups, built from YAML as the daemon builds them.
    static func with<R: Sendable>(_ home: GroupHome, _ body: (BridgeUnderTestGroups) async throws -> R) async throws -> R {
        let config = try SwitchyardConfig.parse(yaml: home.upstreams() + GroupHome.groups, file: "groups.yaml", upstreams: upstreams)
        let broker = try await Broker.start()
        defer { broker.stop() }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        let base = uniqueBase()
        try await probe.subscribe("\(base)/#")
        return try await InProcessBridge.with(port: broker.port, base: base, adapters: config.upstreams.map { $0.makeAdapter() }) { bridge in
            await bridge.engine.setGroups(config.groups)
            let b = BridgeUnderTestGroups(probe: probe, base: base, home: home)
            // Every member listed and online (the LAN lights once the LAN has found them). A group member is
            // online while any of its own is, so porch's members are waited for too (lan_two is only there).
            for (group, count) in [("house", 8), ("porch", 2)] {
                try await probe.waitState("\(base)/group/\(group)", "every member of \(group) online", timeout: 90) { s in
                    (s["members"]?.objectValue ?? [:]).count == count && s["members"]?.objectValue?.values.allSatisfy { $0 == "online" } == true
                }
            }
            return try await body(b)
        }
    }

    struct BridgeUnderTestGroups: Sendable {
        let probe: MQTTProbe
        let base: String
        let home: GroupHome
        func topic(_ rel: String) -> String { "\(base)/\(rel)" }
        func state(_ rel: String) -> JSONValue? { probe.state(topic(rel)) }
        func set(_ rel: String, _ payload: String) { probe.publish(topic(rel) + "/set", payload) }
        func result(_ rel: String, _ transaction: String) async throws -> JSONValue { try await probe.result(topic(rel) + "/result", transaction) }
    }

    /// One command to the group: every member, on every upstream, gets the fields it has in its own units; the
    /// three cloud lights cost one request; one result.
    @Test func aCommandReachesEveryUpstreamInItsOwnFieldsAndUnits() async throws {
        try await GroupHome.with { home in
            try await Self.with(home) { b in
                let before = home.cloud.requests.count
                b.set("group/house", #"{"state": "ON", "brightness": 40, "color_temp": 2000, "transition": 0, "transaction": "t1"}"#)
                #expect(try await b.result("group/house", "t1") == ["status": "ok", "transaction": "t1"])
                // The cloud: one request for its three lights, kelvin clamped to their 2500.
                let actions = home.cloudActions(from: before)
                #expect(actions.map(\.path) == ["/v1/lights/id:d073d5c00001,id:d073d5c00002,id:d073d5c00003/state"], "\(actions)")
                #expect(try JSONValue.parse(Array((actions.first?.body ?? "").utf8))
                        == ["power": "on", "brightness": 0.4, "color": "kelvin:2500", "duration": 0])
                #expect(home.cloud.lights.allSatisfy { $0.power == "on" && $0.kelvin == 2500 })
                // The LAN (lifx-emulator): its lights take 1500 K and up, so 2000 K as asked.
                for serial in GroupHome.lanIDs {
                    let l = try await home.emulator.light(serial)
                    #expect(l == (65535, wireLevel(40), 2000), "\(serial): \(l)")
                }
                // The Imp clock: its power (it has no state), 40 % of its 15 steps.
                try await waitUntil("the clock on at 6 of 15") { home.imp.agent(GroupHome.clock).map { $0.on && $0.bright == 6 } ?? false }
                // Virtual devices: the light's range starts at 2500 K; the plug is a switch, state alone.
                let hall = try #require(b.state("virtual/hall"))
                #expect(hall["state"] == "ON" && hall["brightness"] == 40 && hall["color_temp"] == 2500)
                #expect(b.state("virtual/plug") == ["state": "ON"])
                #expect(b.state("virtual/porch_lamp")?["brightness"] == 40)
                // Derived: every member on, brightness the mean of those that have one (all 40 %).
                try await b.probe.waitState(b.topic("group/house"), "on at 40") { $0["state"] == "ON" && $0["brightness"] == 40 }
                try await b.probe.waitState(b.topic("group/porch"), "on") { $0["state"] == "ON" }
                await TestEnvironment.sleep(0.5)
                #expect(b.probe.results(b.topic("group/house/result"), "t1") == 1)
            }
        }
    }

    /// A cloud light the cloud does not reach fails alone: `partial`, naming it; the others changed. The
    /// group's state follows its members' (porch: all), and a member changed on its own moves it.
    @Test func aMemberThatFailsIsNamedAndTheStateFollowsTheMembers() async throws {
        try await GroupHome.with { home in
            try await Self.with(home) { b in
                home.cloud.setReachability(GroupHome.cloudIDs[1], connected: true, reach: "offline")
                let before = home.cloud.requests.count
                b.set("group/house", #"{"state": "ON", "brightness": 70, "transaction": "p1"}"#)
                let r = try await b.result("group/house", "p1")
                #expect(r["status"] == "partial")
                #expect(r["failed"] == [["member": "lifx/cloud_two", "error": "Cloud Two offline (LIFX did not reach the light)"]])
                #expect(home.cloudActions(from: before).count == 1)
                #expect(home.cloud.light(GroupHome.cloudIDs[0])?.power == "on" && home.cloud.light(GroupHome.cloudIDs[1])?.power == "off")
                #expect(b.probe.messages(on: b.topic("bridge/log")).contains { $0.payload.contains("group/house: 1 of 9 members failed: lifx/cloud_two") })
                home.cloud.setReachability(GroupHome.cloudIDs[1], connected: true, reach: "ok")

                // porch is ON only while both its members are.
                b.set("group/porch", "OFF")
                try await b.probe.waitState(b.topic("group/porch"), "off") { $0["state"] == "OFF" }
                b.set("virtual/porch_lamp", #"{"state": "ON", "brightness": 20}"#)
                await TestEnvironment.sleep(0.3)
                #expect(b.state("group/porch")?["state"] == "OFF")
                b.set("lifx/lan_two", #"{"state": "ON", "brightness": 60, "transition": 0}"#)
                try await b.probe.waitState(b.topic("group/porch"), "on, 40 %") { $0["state"] == "ON" && $0["brightness"] == 40 }
                // A member's availability: the group's state says it, the group stays online while any is.
                #expect(b.state("group/porch")?["members"] == ["lifx/lan_two": "online", "virtual/porch_lamp": "online"])
                #expect(b.probe.last(b.topic("group/porch/availability")) == "online")
            }
        }
    }

    /// `TOGGLE` ends every member the same way, decided on the group's state; the nested group's devices are
    /// reached once.
    @Test func toggleIsDecidedOnTheGroupAndNestedDevicesAreReachedOnce() async throws {
        try await GroupHome.with { home in
            try await Self.with(home) { b in
                b.set("group/porch", #"{"state": "ON", "transaction": "on"}"#)
                #expect(try await b.result("group/porch", "on")["status"] == "ok")
                try await b.probe.waitState(b.topic("group/house"), "on") { $0["state"] == "ON" }
                let setPower = 117
                let before = try await home.emulator.receivedTypes(GroupHome.lanIDs[1]).filter { $0 == setPower }.count
                b.set("group/house", #"{"state": "TOGGLE", "transaction": "tg"}"#)
                #expect(try await b.result("group/house", "tg")["status"] == "ok")
                try await b.probe.waitState(b.topic("group/house"), "off") { $0["state"] == "OFF" }
                for rel in ["virtual/hall", "virtual/plug", "virtual/porch_lamp"] { #expect(b.state(rel)?["state"] == "OFF", "\(rel)") }
                // lan_two is in porch, porch in house, and it was on: one SetPower reached it, however nested.
                let after = try await home.emulator.receivedTypes(GroupHome.lanIDs[1]).filter { $0 == setPower }.count
                #expect(after - before == 1)
                // Off once its transition (lifx.default_transition) is over.
                try await waitUntil("lan_two off", timeout: 10) { (try? await home.emulator.light(GroupHome.lanIDs[1]).power) == 0 }
            }
        }
    }
}
