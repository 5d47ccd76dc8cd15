import Foundation
@testable import HomeAssistantMirror
import SwitchyardConfig
import SwitchyardCore
import HomeAssistantSimulators
import SwitchyardTestSupport
import Testing

let haToken = "eyJhbGciOiJIUzI1NiJ9.test.\(UUID().uuidString)"

/// The mirror in-process with the HA WebSocket simulator and a real Mosquitto.
final class HAHarness: Sendable {
    let sim: HomeAssistantSimulator
    let under: BridgeUnderTest
    let mirror: HAMirror
    var broker: Broker { under.broker }
    var probe: MQTTProbe { under.probe }
    var base: String { under.base }

    private init(sim: HomeAssistantSimulator, under: BridgeUnderTest, mirror: HAMirror) {
        self.sim = sim
        self.under = under
        self.mirror = mirror
    }

    static func entities(base: String) -> [HomeAssistantSimulator.Entity] {
        [
            .init("input_boolean.test_switch", "off", ["editable": false, "friendly_name": "Test switch"]),
            .init("light.kitchen", "on", ["brightness": 128, "friendly_name": "Kitchen", "supported_color_modes": ["brightness"]]),
            .init("input_number.level", "3.0", ["min": 0, "max": 10, "step": 1, "friendly_name": "Level"]),
            .init("sensor.outside", "21.5", ["unit_of_measurement": "°C", "friendly_name": "Outside"]),
            .init("sensor.hidden_thing", "1", ["friendly_name": "Hidden"]),
            // Made by this bridge's own discovery: never mirrored back.
            .init("light.hall_lamp", "off", ["friendly_name": "Hall Lamp"], platform: "mqtt", uniqueID: "switchyard_\(base)_lifx_d073d5000003_light"),
        ]
    }

    static func with<R: Sendable>(yaml: String = "", extra: [HomeAssistantSimulator.Entity] = [], simToken: String = haToken,
                                  clock: any BridgeClock = SystemClock(), tune: (inout HAMirrorSettings) -> Void = { _ in }, _ body: (HAHarness) async throws -> R) async throws -> R {
        let base = uniqueBase()
        let sim = try await HomeAssistantSimulator.start(token: simToken, entities: entities(base: base) + extra)
        return try await withTeardown {
            let c = try SwitchyardConfig.parse(yaml: """
            mqtt:
              base_topic: \(base)
            ha:
              url: \(sim.url)
              token: ${HA_TOKEN}
              entities: {exclude: ["sensor.hidden_*"]}
            \(yaml)
            """, file: "t.yaml", upstreams: [HomeAssistantUpstream()], environment: ["HA_TOKEN": haToken])
            var settings = try #require(c.settings(HomeAssistantUpstream()))
            settings.reconnectMinDelay = 0.1
            settings.reconnectMaxDelay = 0.3
            tune(&settings)
            var options = InProcessBridge.Options()
            options.info = ["config": c.redactedJSON]
            let mirror = HAMirror(settings: settings, clock: clock)
            return try await BridgeUnderTest.with(base: base, subscribe: { ["\($0)/#"] }, adapter: mirror, options: options) { under in
                try await body(HAHarness(sim: sim, under: under, mirror: mirror))
            }
        } teardown: {
            await sim.stop()
        }
    }

    func t(_ suffix: String) -> String { "\(base)/ha/\(suffix)" }

    /// A change made in HA after everything the test did, waited for on MQTT: HA's messages and the
    /// bridge's publishes keep their order, so once it is here, everything before it is too.
    func sentinel(_ n: Int) async throws {
        sim.set("input_number.level", state: "sentinel-\(n)")
        try await waitTopic("input_number/level/state", "sentinel-\(n)")
    }

    /// What was mirrored, `<domain>/<object>/<suffix> <payload>`, without the sentinels.
    var seen: [String] {
        mirrored.map { "\($0.topic.dropFirst(base.count + 4)) \($0.payload)" }.filter { !$0.hasPrefix("input_number/level/state sentinel") }.sorted()
    }

    func waitTopic(_ suffix: String, _ payload: String? = nil) async throws {
        try await probe.waitFor(topic: t(suffix), payload: payload)
    }

    /// Messages under <base>/ha/ (not availability).
    var mirrored: [MQTTProbe.Message] { probe.messages.filter { $0.topic.hasPrefix("\(base)/ha/") && !$0.topic.hasSuffix("/ha/availability") } }

    func errors() -> [String] {
        probe.messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }
            .filter { $0["level"] == "error" }.compactMap { $0["message"]?.stringValue }
    }
}

@Suite struct HAMirrorTests {
    @Test func theSnapshotIsMirroredLikeStatestream() async throws {
        try await HAHarness.with { h in
            try await h.waitTopic("availability", "online")
            try await h.waitTopic("input_boolean/test_switch/state", "off")
            try await h.waitTopic("input_boolean/test_switch/friendly_name", "\"Test switch\"")   // each attribute JSON-encoded
            try await h.waitTopic("input_boolean/test_switch/editable", "false")
            try await h.waitTopic("light/kitchen/supported_color_modes", #"["brightness"]"#)
            try await h.waitTopic("sensor/outside/unit_of_measurement", "\"°C\"")
            try await h.waitTopic("input_number/level/state", "3.0")
            // Retained: a subscriber arriving later reads the mirror from the broker.
            let late = try await MQTTProbe.connect(port: h.broker.port)
            defer { late.close() }
            try await late.subscribe("\(h.base)/ha/#")
            try await late.waitFor(topic: h.t("light/kitchen/state"), payload: "on")
            try await late.waitFor(topic: h.t("input_boolean/test_switch/friendly_name"))
            #expect(late.messages.allSatisfy { $0.retain })
            // Excluded by glob, and our own discovered entity: not mirrored.
            #expect(!h.mirrored.contains { $0.topic.contains("hidden_thing") || $0.topic.contains("hall_lamp") })
            // Timestamps only when asked for.
            #expect(!h.mirrored.contains { $0.topic.hasSuffix("/last_changed") })
            // The token is a secret.
            #expect(!h.probe.messages.contains { $0.payload.contains(haToken) })
            let info = try JSONValue.parse(try #require(h.probe.last("\(h.base)/bridge/info")))
            #expect(info["config"]?["ha"]?["token"] == "***")
        }
    }

    @Test func changesRepublishExactlyWhatChangedAndRemovalsClear() async throws {
        try await HAHarness.with { h in
            try await h.waitTopic("sensor/outside/friendly_name")
            try await h.waitTopic("light/kitchen/brightness", "128")
            h.probe.clear()
            h.sim.set("light.kitchen", attributes: ["brightness": 200])
            try await h.waitTopic("light/kitchen/brightness", "200")
            // An attribute removed in HA: its topic is cleared.
            h.sim.set("light.kitchen", remove: ["supported_color_modes"])
            try await h.waitTopic("light/kitchen/supported_color_modes", "")
            // A removed entity: every one of its topics is cleared.
            h.sim.remove("sensor.outside")
            for suffix in ["state", "friendly_name", "unit_of_measurement"] { try await h.waitTopic("sensor/outside/\(suffix)", "") }
            try await h.sentinel(1)
            #expect(h.seen == ["light/kitchen/brightness 200", "light/kitchen/supported_color_modes ", "sensor/outside/friendly_name ",
                             "sensor/outside/state ", "sensor/outside/unit_of_measurement "])
        }
    }

    @Test func attributesNamedLikeTheEntitysOwnTopicsNeverOverwriteThem() async throws {
        try await HAHarness.with(extra: [.init("sensor.odd", "12", ["state": "attr", "last_changed": "attr", "result": 1, "note": "n"])],
                                          tune: { $0.publishTimestamps = true }) { h in
            try await h.waitTopic("sensor/odd/note", "\"n\"")
            try await h.waitTopic("sensor/odd/state", "12")
            h.probe.clear()
            h.sim.set("sensor.odd", attributes: ["state": "attr2", "note": "m"])
            try await h.waitTopic("sensor/odd/note", "\"m\"")
            h.sim.set("sensor.odd", remove: ["state"])
            h.sim.set("sensor.odd", state: "13")
            try await h.waitTopic("sensor/odd/state", "13")
            try await h.sentinel(1)
            let all = h.probe.messages.filter { $0.topic.hasPrefix(h.t("sensor/odd/")) }
            #expect(!all.contains { $0.payload.contains("attr") }, "\(all)")
            #expect(!all.contains { $0.topic == h.t("sensor/odd/state") && $0.payload != "13" }, "\(all)")
            #expect(!all.contains { $0.topic == h.t("sensor/odd/result") })
            let lc = try #require(h.probe.last(h.t("sensor/odd/last_changed")))
            #expect(Timestamp.parse(lc) != nil, "\(lc)")
        }
    }

    @Test func subscribedEventsAreMirrored() async throws {
        try await HAHarness.with(yaml: "  events: [custom_event]") { h in
            try await h.waitTopic("availability", "online")
            try await waitUntil("the event subscription is in place") { h.sim.eventSubscriptions.contains("custom_event") }
            h.sim.fire("custom_event", ["x": 1])
            let m = try await h.probe.waitFor(topic: h.t("_event/custom_event"))
            let e = try JSONValue.parse(m.payload)
            #expect(e["event_type"] == "custom_event" && e["event_data"] == ["x": 1] && e["origin"] == "LOCAL" && m.retain == false)
            #expect(e["time_fired"] != nil && e["context"]?["id"] != nil)
            // state_changed was not subscribed: no event topic for it (a second custom event after the change
            // shows that everything HA sent before it has been handled).
            h.sim.set("light.kitchen", state: "off")
            try await h.waitTopic("light/kitchen/state", "off")
            h.sim.fire("custom_event", ["x": 2])
            try await h.probe.waitFor("the second event") { $0.contains { $0.topic == h.t("_event/custom_event") && $0.payload.contains(#""x":2"#) } }
            #expect(h.probe.messages(on: h.t("_event/state_changed")).isEmpty)
        }
    }

    @Test func allowedCallsChangeStateAndDeniedOnesAreRefused() async throws {
        try await HAHarness.with(yaml: "  services: {allow: [\"input_boolean.*\", \"input_number.set_value\"]}") { h in
            try await h.waitTopic("input_boolean/test_switch/state", "off")
            h.probe.publish(h.t("input_boolean/test_switch/set"), "ON")
            try await h.waitTopic("input_boolean/test_switch/state", "on")
            let call = try #require(h.sim.calls.first)
            #expect(call.domain == "input_boolean" && call.service == "turn_on" && call.target == ["entity_id": ["input_boolean.test_switch"]])
            h.probe.publish("\(h.base)/bridge/request/ha/call",
                            #"{"domain":"input_number","service":"set_value","data":{"value":7},"target":{"entity_id":"input_number.level"},"transaction":"c1"}"#)
            let r = try JSONValue.parse(try await h.probe.waitFor(topic: "\(h.base)/bridge/response/ha/call").payload)
            #expect(r["status"] == "ok" && r["transaction"] == "c1" && r["data"]?["context"]?["id"] != nil)
            try await h.waitTopic("input_number/level/state", "7")
            let callsBefore = h.sim.calls.count
            // Not allow-listed; a target by area; an excluded entity: refused, nothing sent.
            h.probe.publish(h.t("light/kitchen/set"), "OFF")
            h.probe.publish("\(h.base)/bridge/request/ha/call", #"{"domain":"input_boolean","service":"toggle","target":{"area_id":"kitchen"}}"#)
            h.probe.publish("\(h.base)/bridge/request/ha/call",
                            #"{"domain":"input_boolean","service":"toggle","target":{"entity_id":"sensor.hidden_thing"}}"#)
            try await waitUntil("three refusals") { h.errors().count >= 3 }
            let errors = h.errors()
            #expect(errors.contains { $0.contains("service light.turn_off is not allowed (ha.services.allow: input_boolean.*, input_number.set_value)") })
            #expect(errors.contains { $0.contains("target area_id is not allowed") })
            #expect(errors.contains { $0.contains("entity sensor.hidden_thing is not allowed") })
            #expect(h.sim.calls.count == callsBefore)
        }
    }

    @Test func aBadTokenIsSaidClearlyAndRetriedOnlySlowly() async throws {
        // The mirror's timers on a manual clock: its retry is scheduled, not slept through.
        let clock = ManualClock()
        try await HAHarness.with(simToken: "another-token", clock: clock) { h in
            try await h.probe.waitFor("auth_invalid in bridge/info") { ms in
                ms.last { $0.topic == "\(h.base)/bridge/info" }?.payload.contains("Home Assistant refused the token (auth_invalid") == true
            }
            #expect(h.errors().contains { $0.contains("check ha.token") })
            #expect(h.probe.last(h.t("availability")) == "offline")
            // The next attempt waits ha's auth retry delay (300 s), not the reconnect backoff (0.1–0.3 s).
            let retryAt = MonotonicInstant.origin + .seconds(300)
            try await waitUntil("the retry is scheduled") { clock.sleeping == 1 && clock.nextDeadline == retryAt }
            clock.advance(by: .seconds(299))
            #expect(h.sim.authAttempts == 1 && clock.nextDeadline == retryAt)
            clock.advance(by: .seconds(1))
            try await waitUntil("the second attempt") { h.sim.authAttempts == 2 }
        }
    }

    @Test func aDroppedConnectionResyncsWithoutDuplicatesOrLostChanges() async throws {
        try await HAHarness.with(tune: { $0.reconnectMinDelay = 1; $0.reconnectMaxDelay = 1 }) { h in
            try await h.waitTopic("sensor/outside/unit_of_measurement")
            try await h.waitTopic("light/kitchen/brightness", "128")
            h.probe.clear()
            h.sim.dropConnections()
            // While the bridge is away: a change and a removal it never sees as events.
            h.sim.set("input_boolean.test_switch", state: "on")
            h.sim.remove("sensor.outside")
            try await h.waitTopic("availability", "offline")
            try await h.waitTopic("input_boolean/test_switch/state", "on")
            for suffix in ["state", "friendly_name", "unit_of_measurement"] { try await h.waitTopic("sensor/outside/\(suffix)", "") }
            try await h.waitTopic("availability", "online")
            try await h.sentinel(1)
            #expect(h.seen == ["input_boolean/test_switch/state on", "sensor/outside/friendly_name ", "sensor/outside/state ",
                             "sensor/outside/unit_of_measurement "])
            #expect(h.sim.connections == 2)
        }
    }

    @Test func aDeadLinkIsNoticedByTheApplicationPing() async throws {
        try await HAHarness.with(tune: { $0.pingInterval = 0.3; $0.pingTimeout = 0.3 }) { h in
            try await h.waitTopic("availability", "online")
            h.sim.setIgnorePings(true)
            try await waitUntil("a reconnect after a missed pong") { h.sim.connections >= 2 }
            h.sim.setIgnorePings(false)
            try await h.probe.waitFor("online again") { ms in ms.last { $0.topic == h.t("availability") }?.payload == "online" }
        }
    }

    /// Home Assistant closes the connection (as it does when it restarts) while a ping waits for its pong:
    /// the mirror connects again. The ping's wait used to end only by its timer, which the connection's end
    /// cancelled: the wait held the connection's tasks, and the adapter never reconnected.
    @Test func aConnectionThatEndsWhileAPingIsOutIsMadeAgain() async throws {
        try await HAHarness.with(tune: { $0.pingInterval = 0.2; $0.pingTimeout = 3600 }) { h in
            try await h.waitTopic("availability", "online")
            h.sim.setIgnorePings(true)
            let before = h.sim.pings
            try await waitUntil("a ping out, unanswered") { h.sim.pings > before }
            h.sim.dropConnections()
            h.sim.setIgnorePings(false)
            // Recorded at once: without the fix the adapter's end hangs too, and a thrown error is only
            // reported when the test returns.
            let again = (try? await waitUntil("connected again", timeout: 20) { h.sim.connections >= 2 && h.sim.connected == 1 }) != nil
            #expect(again, "the mirror did not connect again after the connection ended with a ping out")
        }
    }

    /// A command's wait for its answer ends when its task is cancelled, answered or not.
    @Test func aRequestEndsWhenItsTaskIsCancelled() async throws {
        try await HAHarness.with(tune: { $0.pingInterval = 3600 }) { h in
            try await h.waitTopic("availability", "online")
            h.sim.setIgnorePings(true)
            let mirror = h.mirror
            let ended = Latch()
            let task = Task {
                _ = try? await mirror.request(["type": "ping"], timeout: 3600, what: "ping")
                ended.signal()
            }
            try await waitUntil("the ping at Home Assistant") { h.sim.pings >= 1 }
            task.cancel()
            let done = await firstResult(of: { await ended.wait(); return true }, within: 10, otherwise: false)
            #expect(done, "the request still waits after its task was cancelled")
        }
    }

    /// HA cannot make us hold a message past `ha.max_message_bytes`: the connection is closed (the
    /// library refuses the frame from its header) and retried, nothing of it is mirrored, and the mirror
    /// carries on once the messages are smaller.
    @Test func aMessagePastTheBoundClosesTheConnection() async throws {
        try await HAHarness.with(yaml: "  max_message_bytes: 65536",
                                 extra: [.init("sensor.big", "1", ["blob": .string(String(repeating: "x", count: 70_000))])]) { h in
            try await h.probe.waitFor("the closed connection in bridge/info") { ms in
                ms.last { $0.topic == "\(h.base)/bridge/info" }?.payload.contains("larger than ha.max_message_bytes") == true
            }
            try await waitUntil("a retry") { h.sim.connections >= 2 }
            #expect(h.probe.last(h.t("sensor/big/blob")) == nil && h.probe.last(h.t("light/kitchen/state")) == nil)
            h.sim.remove("sensor.big")
            try await h.waitTopic("light/kitchen/brightness", "128")
            try await h.waitTopic("availability", "online")
        }
    }

    @Test func aLargeGetStatesWithTheStateChangedFeed() async throws {
        let blob = String(repeating: "x", count: 200 * 1024)
        try await HAHarness.with(yaml: "  feed: state_changed\n  publish_timestamps: true",
                                          extra: [.init("sensor.big", "1", ["blob": .string(blob)])]) { h in
            let m = try await h.probe.waitFor(topic: h.t("sensor/big/blob"))
            #expect(m.payload.count == blob.utf8.count + 2)
            try await h.waitTopic("sensor/big/last_changed")
            let changed = try #require(h.probe.last(h.t("sensor/big/last_changed")))
            #expect(Timestamp.parse(changed) != nil && changed.hasSuffix("Z"))
            // The state_changed feed follows changes too.
            h.sim.set("light.kitchen", state: "off")
            try await h.waitTopic("light/kitchen/state", "off")
        }
    }

    @Test func aCallLeftUnconfirmedByADropIsReportedAndNeverSentAgain() async throws {
        try await HAHarness.with(yaml: "  services: {allow: [\"input_boolean.toggle\", \"input_number.set_value\"]}") { h in
            try await h.waitTopic("input_boolean/test_switch/state", "off")
            h.sim.setHoldCalls(true)
            h.probe.publish("\(h.base)/bridge/request/ha/call",
                            #"{"domain":"input_boolean","service":"toggle","target":{"entity_id":"input_boolean.test_switch"},"transaction":9}"#)
            try await waitUntil("HA received the call") { h.sim.calls.count == 1 }
            h.sim.setHoldCalls(false)
            h.sim.dropConnections()
            let r = try JSONValue.parse(try await h.probe.waitFor(topic: "\(h.base)/bridge/response/ha/call").payload)
            #expect(r["status"] == "error" && r["transaction"] == 9)
            #expect(r["error"]?.stringValue?.contains("dropped before it confirmed the call; not sent again") == true)
            try await waitUntil("reconnected") { h.sim.connections == 2 && h.sim.connected == 1 }
            try await h.probe.waitFor("authenticated again") { ms in ms.filter { $0.topic == h.t("availability") && $0.payload == "online" }.count == 2 }
            // A call made after the reconnect reaches HA second: the toggle was not sent again before it.
            h.probe.publish("\(h.base)/bridge/request/ha/call",
                            #"{"domain":"input_number","service":"set_value","data":{"value":5},"target":{"entity_id":"input_number.level"}}"#)
            try await waitUntil("the second call") { h.sim.calls.count >= 2 }
            #expect(h.sim.calls.map(\.service) == ["toggle", "set_value"])   // a toggle must not run twice
        }
    }
}

/// The mirror's topic model without a socket: statestream's layout and the per-topic diff.
@Suite struct HAMirrorModelTests {
    func texts(_ ms: [MirrorMessage]) -> [String] { ms.map { "\($0.relative) \(String(decoding: $0.payload, as: UTF8.self))" } }

    @Test func anEntityBecomesOneTopicPerAttributeAndOnlyChangesArePublished() throws {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        let full = m.topics(full: ["state": "on", "attributes": ["brightness": 128, "friendly_name": "Kitchen", "state": "x"],
                                   "last_changed": "2026-11-24T10:00:00+00:00"])
        let first = m.sync("light.kitchen", full)
        #expect(texts(first) == ["light/kitchen/brightness 128", "light/kitchen/friendly_name \"Kitchen\"", "light/kitchen/state on"])
        let again = m.sync("light.kitchen", full)
        #expect(again.isEmpty)   // nothing changed
        // A compressed change: one attribute changes, one goes; the state stays.
        let changed = m.topics(changing: "light.kitchen", by: ["+": ["a": ["brightness": 200]], "-": ["a": ["friendly_name"]]])
        #expect(changed != nil)
        let diff = m.sync("light.kitchen", changed)
        #expect(texts(diff) == ["light/kitchen/brightness 200", "light/kitchen/friendly_name "])
        // Gone: every topic cleared, and the entity forgotten.
        let gone = m.sync("light.kitchen", nil)
        #expect(texts(gone) == ["light/kitchen/brightness ", "light/kitchen/state "])
        #expect(m.published.isEmpty)
        let unknown = m.topics(changing: "light.kitchen", by: ["+": ["s": "off"]])
        #expect(unknown == nil)
    }

    @Test func timestampsAndReservedNamesFollowTheSettings() {
        var m = HAMirrorModel(publishAttributes: false, publishTimestamps: true)
        let t = m.topics(compressed: ["s": "21.5", "a": ["unit": "°C"], "lc": 1_795_000_000.0])
        #expect(t == ["state": "21.5", "last_changed": "2026-11-18T11:06:40Z", "last_updated": "2026-11-18T11:06:40Z"])
        for k in ["set", "get", "result", "availability", "state", "last_changed", "last_updated", "a/b", ""] {
            #expect(!HAMirrorModel.publishable(k), "\(k)")
        }
        #expect(HAMirrorModel.publishable("unit_of_measurement"))
    }

    /// Packed topics come back as they went in, whatever their number, names and payload sizes.
    /// (Computed off the cooperative pool: seconds of work, see `offThePool`.)
    @Test func packedTopicsComeBackAsTheyWentIn() async throws {
        let differ = try await offThePool { () -> [HAMirrorModel.Topics] in
            var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
            var rng = SystemRandomNumberGenerator()
            var differ: [HAMirrorModel.Topics] = []
            for round in 0..<500 {
                var t: HAMirrorModel.Topics = [:]
                for _ in 0..<Int.random(in: 0...12, using: &rng) {
                    // Suffixes old and new (past 127 of them, their numbers take two bytes), payloads empty to long.
                    let suffix = "attr_\(Int.random(in: 0..<(round + 2) * 3, using: &rng))"
                    let n = [0, 1, 15, 16, 17, 200, 5_000].randomElement(using: &rng)!
                    t[suffix] = String((0..<n).map { _ in "aé\"{}0".randomElement(using: &rng)! })
                }
                let packed = m.pack(t)
                if m.topics(packed) != t { differ.append(t) }
            }
            return differ
        }
        #expect(differ.isEmpty, "\(differ.count) of 500 came back changed; the first: \(differ.first.map { "\($0.keys.sorted())" } ?? "")")
    }

    /// Attribute names are numbered for the bridge's whole run: past `maxSuffixes` distinct names a new one
    /// is not mirrored (and counted), while the names already numbered still are.
    @Test func newAttributeNamesPastTheBoundAreNotMirrored() async throws {
        let counter = BoundsCounter()
        // Numbering every name up to the bound is the long part: off the cooperative pool (`offThePool`).
        let (filled, differ) = try await offThePool { () -> (HAMirrorModel, [Int]) in
            var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
            var differ: [Int] = []
            Bounds.$counter.withValue(counter) {
                let limit = HAMirrorModel.maxSuffixes
                for batch in stride(from: 0, to: limit, by: 4_096) {
                    var t: HAMirrorModel.Topics = [:]
                    for i in batch..<min(batch + 4_096, limit) { t["a\(i)"] = "1" }
                    let packed = m.pack(t)
                    if m.topics(packed) != t { differ.append(batch) }
                }
            }
            return (m, differ)
        }
        #expect(differ.isEmpty, "batches starting at \(differ) came back changed")
        var m = filled
        Bounds.$counter.withValue(counter) {
            #expect(counter.snapshot["ha_attributes"] == nil)
            let past: HAMirrorModel.Topics = ["a0": "2", "fresh_1": "3", "fresh_2": "4"]
            let packed = m.pack(past)
            #expect(m.topics(packed) == ["a0": "2"])
            #expect(counter.snapshot["ha_attributes"] == 2)
            // A change that names a new attribute publishes only what the model can clear again.
            let published = m.sync("sensor.s", ["a2": "1", "a1": "x", "fresh_3": "y"]).map(\.relative)
            #expect(published.sorted() == ["sensor/s/a1", "sensor/s/a2"])
            #expect(m.sync("sensor.s", nil).map(\.relative).sorted() == ["sensor/s/a1", "sensor/s/a2"])
        }
    }

    /// A long payload is kept as the array the transport was given (one copy for the mirror and the
    /// retained ledger), and an unchanged one stays that array.
    @Test func aLongPayloadIsKeptOnceAndNotCopiedAgain() {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        let history = String(repeating: "[1.5, 2.5]", count: 100)
        let first = m.sync("sensor.a", ["state": "1", "history": history])
        let sent = first.first { $0.relative == "sensor/a/history" }!.payload
        let second = m.sync("sensor.a", ["state": "2", "history": history])
        #expect(second.map(\.relative) == ["sensor/a/state"])
        let packed = m.published["sensor.a"]!
        #expect(packed.long.count == 1)
        #expect(packed.long[0].withUnsafeBufferPointer { $0.baseAddress } == sent.withUnsafeBufferPointer { $0.baseAddress })
        // A snapshot entry packed on arrival goes out as its own arrays.
        let snap = m.pack(["state": "2", "history": history + "!"])
        let third = m.sync("sensor.a", packed: snap)
        #expect(third.map(\.relative) == ["sensor/a/history"])
        #expect(third[0].payload.withUnsafeBufferPointer { $0.baseAddress } == snap.long[0].withUnsafeBufferPointer { $0.baseAddress })
    }

    /// The model's entity table against a dictionary: sets, changes and removals in random order, slots reused.
    @Test func theEntityTableHoldsWhatADictionaryWould() {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        var table = HAMirrorModel.EntityTable()
        var model: [String: HAMirrorModel.Packed] = [:]
        var rng = SystemRandomNumberGenerator()
        table.reserveCapacity(100)
        for step in 0..<20_000 {
            let id = "sensor.s\(Int.random(in: 0..<3_000, using: &rng))"
            if Int.random(in: 0..<3, using: &rng) == 0 {
                table[id] = nil
                model[id] = nil
            } else {
                let p = m.pack(["state": "\(step)"])
                table[id] = p
                model[id] = p
            }
        }
        #expect(table.count == model.count)
        #expect(Set(table.keys) == Set(model.keys) && table.keys.count == model.count)
        for (id, p) in model { #expect(table[id] == p, "\(id)") }
        #expect(table["sensor.none"] == nil)
    }

    /// A frame's large lists are read while it is parsed: registry entries kept only as our own ids, states
    /// and adds packed; a service's response is put back as it was.
    @Test func aFramesListsAreTakenWhileItIsParsedAndTheRestStays() throws {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        let frame = """
        [{"id":2,"type":"result","success":true,"result":[{"entity_id":"light.a","platform":"mqtt","unique_id":"switchyard_x"},
           {"entity_id":"light.b","platform":"mqtt","unique_id":"other"},{"entity_id":"light.c","platform":"hue","unique_id":"switchyard_y"}]},
         {"id":3,"type":"result","success":true,"result":[{"entity_id":"sensor.t","state":"21","attributes":{"unit_of_measurement":"°C"}},{"n":1}]},
         {"id":4,"type":"event","event":{"a":{"sensor.z":{"s":"1"},"sensor.y":{"s":"2"}}}},
         {"id":5,"type":"result","success":true,"result":{"context":{"id":"c"},"response":[1,2]}}]
        """
        let (v, streamed) = try #require(HAMirrorModel.read(frame, into: &m, ownPrefix: "switchyard_"))
        #expect(streamed[0]?.own == ["light.a"])
        #expect(streamed[1]?.states.map(\.id) == ["sensor.t"])
        #expect(streamed[1].map { m.topics($0.states[0].topics) } == ["state": "21", "unit_of_measurement": "\"°C\""])
        #expect(streamed[2]?.adds.map(\.id) == ["sensor.y", "sensor.z"])
        #expect(v.arrayValue?[1]["result"] == [["n": 1]])
        #expect(v.arrayValue?[3]["result"] == ["context": ["id": "c"], "response": [1, 2]])
        #expect(v.arrayValue?[0]["result"] == [])
    }

    /// A snapshot's entities in id order; one listed twice counts as its later listing (as a JSON object's
    /// duplicate key does).
    @Test func aSnapshotIsReadInIdOrderAndTheLaterOfTwoWins() {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        let entities: [HAMirrorModel.Entity] = [("sensor.b", m.pack(["state": "1"])), ("sensor.a", m.pack(["state": "2"])),
                                           ("sensor.b", m.pack(["state": "3"])), ("sensor.c", m.pack(["state": "4"]))]
        var sorted = entities
        HAMirrorModel.sortLastWins(&sorted)
        #expect(sorted.map(\.id) == ["sensor.a", "sensor.b", "sensor.c"])
        #expect(m.topics(sorted[1].topics) == ["state": "3"])
        #expect(HAMirror.find("sensor.c", in: sorted) == 2 && HAMirror.find("sensor.bb", in: sorted) == nil)
    }

    @Test func aSnapshotClearsWhatIsNoLongerThereOrNoLongerMirrored() {
        var m = HAMirrorModel(publishAttributes: true, publishTimestamps: false)
        _ = m.sync("sensor.a", ["state": "1"])
        _ = m.sync("sensor.b", ["state": "2"])
        _ = m.sync("sensor.c", ["state": "3"])
        #expect(m.gone(from: ["sensor.a": ["state": "1"], "sensor.c": ["state": "3"]], mirrored: { $0 != "sensor.c" }) == ["sensor.b", "sensor.c"])
    }
}
