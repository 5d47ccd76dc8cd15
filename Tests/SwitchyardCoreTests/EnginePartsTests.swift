import Foundation
import Testing
@testable import SwitchyardCore
import SwitchyardTestSupport

/// The engine's pure parts: what a message asks for, what a registry change publishes, the bridge
/// API's payloads, the clocks. No broker, no sockets.
let scheme = TopicScheme(base: "b")

func lamp(_ id: String = "lamp-1", name: String? = "lamp", label: String = "Lamp") -> DeviceDescriptor {
    DeviceDescriptor(id: id, label: label, configuredName: name, model: "m", manufacturer: "t", category: .light,
                     capabilities: [.state(), .brightness(), .transition()])
}

struct Directory: InboundDirectory {
    var adapters: [String: (mirror: Bool, devices: [DeviceDescriptor])]
    func isMirror(_ adapter: String) -> Bool? { adapters[adapter]?.mirror }
    func device(_ adapter: String, named name: String) -> (id: String, descriptor: DeviceDescriptor, name: String)? {
        adapters[adapter]?.devices.first { ($0.configuredName ?? $0.label) == name }.map { ($0.id, $0, name) }
    }
    var adapterIDs: [String] { adapters.keys.sorted() }
}

@Suite struct InboundRouterTests {
    let router = InboundRouter(scheme: scheme, maxPayload: 64, commandMaxAge: 30, discovery: true)
    let dir = Directory(adapters: ["test": (false, [lamp()]), "ha": (true, [])])

    func route(_ topic: String, _ payload: String, retain: Bool = false, props: [String: String] = [:]) -> InboundRoute {
        router.route(InboundMessage(topic: topic, payload: Array(payload.utf8), retain: retain, userProperties: props), in: dir)
    }

    @Test func aValidCommandIsRoutedWithItsTransactionAndResultTopic() {
        #expect(route("b/test/lamp/set", #"{"state":"on","brightness":40,"transaction":"t1"}"#)
                == .command(adapter: "test", DeviceCommand(deviceID: "lamp-1", fields: ["state": "ON", "brightness": 40]),
                            topic: "b/test/lamp/set", transaction: "t1", resultTopic: "b/test/lamp/result", replyTo: nil))
        #expect(route("b/test/lamp/set/brightness", "75")
                == .command(adapter: "test", DeviceCommand(deviceID: "lamp-1", fields: ["brightness": 75]),
                            topic: "b/test/lamp/set/brightness", transaction: nil, resultTopic: "b/test/lamp/result", replyTo: nil))
        #expect(route("b/test/lamp/get", "") == .refresh(adapter: "test", deviceID: "lamp-1", topic: "b/test/lamp/get", replyTo: nil))
    }

    @Test func refusalsSayWhyAndAnswerTheTransactionWhereTheyCan() {
        #expect(route("b/test/lamp/set", #"{"brightness":150,"transaction":9}"#)
                == .reject("brightness: 150 is out of range 0–100", topic: "b/test/lamp/set", transaction: 9, resultTopic: "b/test/lamp/result",
                           replyTo: nil))
        guard case .reject(let m, _, nil, nil, nil) = route("b/test/lamp/set", "{oops") else { Issue.record("not refused"); return }
        #expect(m.hasPrefix("malformed JSON"))
        guard case .reject(let big, _, _, _, _) = route("b/test/lamp/set", String(repeating: "x", count: 65)) else { Issue.record("not refused"); return }
        #expect(big.contains("over mqtt.max_payload (64)"))
        guard case .reject(let a, _, _, _, _) = route("b/nosuch/lamp/set", "ON") else { Issue.record("not refused"); return }
        #expect(a == "unknown adapter 'nosuch' (running: ha, test)")
    }

    @Test func anUnknownDeviceIsNamedSoTheEngineCanHoldItUntilTheListing() {
        #expect(route("b/test/desk/set", #"{"state":"ON","transaction":2}"#)
                == .unknownDevice(adapter: "test", "unknown device 'desk' for adapter 'test'", expected: false, topic: "b/test/desk/set", transaction: 2, resultTopic: "b/test/desk/result", replyTo: nil))
    }

    @Test func retainedCommandsOldCommandsMirrorsAndBirth() {
        #expect(route("b/test/lamp/set", "ON", retain: true) == .retainedCommand(topic: "b/test/lamp/set"))
        #expect(route("b/bridge/request/health_check", "", retain: true) == .retainedCommand(topic: "b/bridge/request/health_check"))
        let old = Timestamp.rfc3339(Date().addingTimeInterval(-120))
        guard case .reject(let m, _, _, _, _) = route("b/test/lamp/set", "ON", props: ["timestamp": old]) else { Issue.record("not dropped"); return }
        #expect(m.contains("over mqtt.command_max_age (30 s)"))
        #expect(route("b/test/lamp/set", "ON", props: ["timestamp": Timestamp.rfc3339(Date())]) != .none)
        #expect(route("b/ha/light/porch/set", "ON") == .mirror(adapter: "ha", path: "light/porch/set", topic: "b/ha/light/porch/set", replyTo: nil))
        #expect(route("homeassistant/status", "online") == .homeAssistantOnline)
        #expect(route("homeassistant/status", "offline") == InboundRoute.none)
        #expect(route("b/test/lamp", "{}") == InboundRoute.none)
    }
}

/// MQTT 5 request/response as the router reads it: a Response Topic within its bounds, a topic name, none of the
/// bridge's own topics; a refused one refuses the command (answered the 3.1.1 way only).
@Suite struct ReplyToRoutingTests {
    let router = InboundRouter(scheme: scheme, maxPayload: 1 << 16, commandMaxAge: 30, discovery: true)
    let dir = Directory(adapters: ["test": (false, [lamp()]), "ha": (true, [])])

    func route(_ topic: String, _ payload: String, replyTo: ReplyTo?) -> InboundRoute {
        router.route(InboundMessage(topic: topic, payload: Array(payload.utf8), replyTo: replyTo), in: dir)
    }

    @Test func aCommandARequestAndAGetCarryTheirResponseTopicAndCorrelationData() {
        let r = ReplyTo(topic: "clients/app/reply", correlationData: [1, 2, 3])
        #expect(route("b/test/lamp/set", "ON", replyTo: r)
                == .command(adapter: "test", DeviceCommand(deviceID: "lamp-1", fields: ["state": "ON"]), topic: "b/test/lamp/set",
                            transaction: nil, resultTopic: "b/test/lamp/result", replyTo: r))
        #expect(route("b/bridge/request/health_check", "", replyTo: r) == .request(path: "health_check", payload: [], replyTo: r))
        #expect(route("b/test/lamp/get", "", replyTo: r) == .refresh(adapter: "test", deviceID: "lamp-1", topic: "b/test/lamp/get", replyTo: r))
        #expect(route("b/ha/light/porch/set", "ON", replyTo: r) == .mirror(adapter: "ha", path: "light/porch/set", topic: "b/ha/light/porch/set", replyTo: r))
        // A refused command is answered on the Response Topic too.
        guard case .reject(_, _, _, _, let answered) = route("b/test/lamp/set", #"{"brightness":150}"#, replyTo: r) else {
            Issue.record("not refused"); return
        }
        #expect(answered == r)
        // The result topic itself is accepted: the bridge answers there once.
        let own = ReplyTo(topic: "b/test/lamp/result", correlationData: [9])
        if case .command(_, _, _, _, _, let kept) = route("b/test/lamp/set", "ON", replyTo: own) { #expect(kept == own) } else { Issue.record("refused") }
    }

    @Test func aResponseTopicThatIsNoTopicNameOrOneOfTheBridgesOwnIsRefusedWithTheCommand() {
        for bad in ["clients/+/reply", "clients/#", "", "$SYS/x", "b/test/lamp/set", "b/bridge/request/republish", "b/test/lamp",
                    "b/bridge/state", "homeassistant/light/x/config", "homeassistant/status", "b/test/other/result"] {
            guard case .reject(let message, _, let transaction, let resultTopic, nil) =
                    route("b/test/lamp/set", #"{"state":"ON","transaction":"t"}"#, replyTo: ReplyTo(topic: bad, correlationData: [1])) else {
                Issue.record("\(bad) was not refused"); continue
            }
            #expect(message.contains("Response Topic"), "\(bad): \(message)")
            // Still answered the 3.1.1 way, where the transaction asked for it.
            #expect(transaction == "t" && resultTopic == "b/test/lamp/result")
        }
        guard case .refusedRequest(let path, let message) = route("b/bridge/request/health_check", "", replyTo: ReplyTo(topic: "b/test/lamp/set")) else {
            Issue.record("request not refused"); return
        }
        #expect(path == "health_check" && message.contains("one of the bridge's own topics"))
        guard case .reject = route("b/test/lamp/get", "", replyTo: ReplyTo(topic: "x/+")) else { Issue.record("get not refused"); return }
    }

    @Test func anOversizedResponseTopicOrCorrelationDataIsNotCopiedAndIsCounted() async {
        let counter = BoundsCounter()
        let long = [UInt8](repeating: UInt8(ascii: "a"), count: ReplyTo.maxTopicBytes + 1)
        let data = [UInt8](repeating: 7, count: ReplyTo.maxCorrelationBytes + 1)
        let overTopic = long.withUnsafeBytes { ReplyTo(topic: $0, correlation: nil) }
        let overData = Array("ok/reply".utf8).withUnsafeBytes { t in data.withUnsafeBytes { ReplyTo(topic: t, correlation: $0) } }
        #expect(overTopic.topic.isEmpty && overTopic.topicBytes == ReplyTo.maxTopicBytes + 1)
        #expect(overData.correlationData == nil && overData.correlationBytes == ReplyTo.maxCorrelationBytes + 1 && overData.topic == "ok/reply")
        Bounds.$counter.withValue(counter) {
            for r in [overTopic, overData] {
                guard case .reject(let m, _, _, _, nil) = route("b/test/lamp/set", "ON", replyTo: r) else { Issue.record("not refused"); continue }
                #expect(m.contains("bytes is over"))
            }
        }
        #expect(counter.snapshot == ["response_topic": 1, "correlation_data": 1])
        // Within the bounds: copied whole.
        let fits = Array("r".utf8).withUnsafeBytes { t in [UInt8](repeating: 1, count: 256).withUnsafeBytes { ReplyTo(topic: t, correlation: $0) } }
        #expect(fits.correlationData?.count == 256)
    }
}

@Suite struct DeviceRegistryTests {
    func registry(discovery: Bool = true) -> DeviceRegistry {
        DeviceRegistry(adapterID: "test", scheme: scheme, discovery: discovery ? DiscoveryBuilder(scheme: scheme, version: "t") : nil,
                       reservedPrefixes: [])
    }
    func topics(_ out: [RegistryOutput]) -> [String] {
        out.compactMap { if case .publish(let p) = $0 { return p.topic }; return nil }
    }

    @Test func aNewDeviceGetsDetailsDiscoveryAvailabilityAndAnEvent() {
        var r = registry()
        var out: [RegistryOutput] = []
        #expect(r.setDevices([lamp()], authoritative: false, available: [:], into: &out))
        // Recorded at once, announced when the engine asks (after the adapter's next states).
        #expect(out.isEmpty && r.devices["lamp-1"]?.available == true)
        r.flushAnnouncements(into: &out)
        #expect(topics(out) == ["b/bridge/devices/test/lamp", "homeassistant/light/switchyard_b_test_lamp-1/light/config",
                                "b/test/lamp/availability", "b/bridge/event"])
        out = []
        r.flushAnnouncements(into: &out)
        #expect(out.isEmpty)   // once
        // Listed again unchanged: nothing.
        out = []
        #expect(!r.setDevices([lamp()], authoritative: false, available: [:], into: &out))
        #expect(out.isEmpty)
        // Listed as unreachable from the start: it never says online.
        var r2 = registry(discovery: false)
        out = []
        _ = r2.setDevices([lamp()], authoritative: false, available: ["lamp-1": false], into: &out)
        r2.flushAnnouncements(into: &out)
        #expect(out.contains(.publish(Publication("b/test/lamp/availability", text: "offline", retain: true))))
        #expect(!out.contains(.publish(Publication("b/test/lamp/availability", text: "online", retain: true))))
    }

    /// A new device's announcement waits behind the states (availability and event `soon`, details and
    /// discovery `late`); a rename and a removal go `now`, in their order. The payloads written when sent
    /// are the canonical JSON of what they say.
    @Test func aNewDeviceIsAnnouncedBehindTheStatesAndItsPayloadsAreWrittenWhenSent() throws {
        var r = registry()
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)
        r.flushAnnouncements(into: &out)
        let lanes = out.compactMap { if case .publish(let p) = $0 { return "\(p.topic) \(p.lane)" }; return nil }
        #expect(lanes == ["b/bridge/devices/test/lamp late", "homeassistant/light/switchyard_b_test_lamp-1/light/config late",
                          "b/test/lamp/availability soon", "b/bridge/event soon"])
        let pubs = out.compactMap { if case .publish(let p) = $0 { return p }; return nil }
        for p in pubs where !p.topic.hasSuffix("/availability") {
            let json = try JSONValue.parse(p.payload)
            #expect(json.bytes == p.payload, "\(p.topic) is not canonical")
        }
        let details = try JSONValue.parse(pubs[0].payload)
        #expect(details["name"] == "lamp" && details["topic"] == "b/test/lamp" && details["capabilities"]?.arrayValue?.count == 3)
        #expect(try JSONValue.parse(pubs[1].payload)["state_topic"] == "b/test/lamp")
        #expect(try JSONValue.parse(pubs[3].payload) == ["type": "device_added", "data": ["adapter": "test", "id": "lamp-1", "name": "lamp"]])
        #expect(r.update("lamp-1", ["state": "ON"])?.lane == .now)
        // The sweep's lookup: a device's config topics by its node's id.
        #expect(r.discoveryTopicsByNode("lamp-1") == ["homeassistant/light/switchyard_b_test_lamp-1/light/config"])
        #expect(r.discoveryTopicsByNode("lamp") == nil)
        out = []
        _ = r.setDevices([lamp(name: "desk")], authoritative: false, available: [:], into: &out)
        _ = r.setDevices([], authoritative: true, available: [:], into: &out)
        for case .publish(let p) in out { #expect(p.lane == .now, "\(p.topic)") }
        let events = out.compactMap { o -> JSONValue? in
            if case .publish(let p) = o, p.topic == "b/bridge/event" { return try? JSONValue.parse(p.payload) }
            return nil
        }
        #expect(events == [["type": "device_renamed", "data": ["adapter": "test", "from": "lamp", "id": "lamp-1", "to": "desk"]],
                           ["type": "device_removed", "data": ["adapter": "test", "id": "lamp-1", "name": "desk", "reason": "removed from config"]]])
        // bridge/devices from the listings, as the entries say.
        var two = registry()
        let plain = DeviceDescriptor(id: "c", label: "C", configuredName: "say \"hi\"", category: .switch, capabilities: [.state()])
        _ = two.setDevices([lamp("b", name: "zed"), lamp("a", name: "alpha"), plain], authoritative: true, available: [:], into: &out)
        #expect(DeviceRegistry.DeviceList([two.listings]).payload() == JSONValue.array(two.listEntries).bytes)
        #expect(two.listEntries.map { $0["name"] } == ["alpha", "say \"hi\"", "zed"])
        #expect(two.listEntries[1]["model"] == .null)
    }

    @Test func stateIsPublishedWholeOnlyWhenARoundedValueChanges() {
        var r = registry()
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)
        #expect(r.update("lamp-1", ["state": "OFF", "brightness": 29.999237])?.text == #"{"brightness":30,"state":"OFF"}"#)
        #expect(r.update("lamp-1", ["brightness": 30.2]) == nil)
        #expect(r.update("lamp-1", ["brightness": 31])?.text == #"{"brightness":31,"state":"OFF"}"#)
        #expect(r.state("lamp-1", force: true)?.text == #"{"brightness":31,"state":"OFF"}"#)
        #expect(r.update("nosuch", ["state": "ON"]) == nil)
        #expect(r.setAvailable("lamp-1", true) == nil)   // already online
        #expect(r.setAvailable("lamp-1", false)?.text == "offline")
    }

    @Test func aDeviceMissingFromUpstreamListingsGoesOnlyAfterThree() {
        var r = registry()
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)
        for _ in 0..<2 { _ = r.setDevices([], authoritative: false, available: [:], into: &out) }
        #expect(r.devices.count == 1)
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)   // back: counting starts again
        for _ in 0..<2 { _ = r.setDevices([], authoritative: false, available: [:], into: &out) }
        #expect(r.devices.count == 1)
        out = []
        #expect(r.setDevices([], authoritative: false, available: [:], into: &out))
        #expect(r.devices.isEmpty)
        #expect(Set(topics(out)).isSuperset(of: ["b/test/lamp", "b/test/lamp/availability", "b/bridge/devices/test/lamp",
                                                  "homeassistant/light/switchyard_b_test_lamp-1/light/config", "b/bridge/event"]))
        // From config (authoritative): at once.
        var c = registry()
        _ = c.setDevices([lamp()], authoritative: true, available: [:], into: &out)
        _ = c.setDevices([], authoritative: true, available: [:], into: &out)
        #expect(c.devices.isEmpty)
    }

    /// What a subscriber to a discovery config sees through a device's whole life (added, renamed, gone):
    /// no topic a standing config reads is ever emptied (Home Assistant reads an empty state as a value).
    @Test func noStandingDiscoveryConfigSeesItsTopicsEmptied() throws {
        var r = registry()
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)
        _ = r.update("lamp-1", ["state": "ON"]).map { out.append(.publish($0)) }
        _ = r.setDevices([lamp(name: "desk")], authoritative: false, available: [:], into: &out)
        for _ in 0..<3 { _ = r.setDevices([], authoritative: false, available: [:], into: &out) }
        #expect(r.devices.isEmpty)
        var watch = DiscoveryReadWatch()
        var breaches: [String] = []
        for case .publish(let p) in out {
            if let b = watch.see(topic: p.topic, payload: p.payload, retain: p.retain) { breaches.append(b) }
        }
        #expect(breaches.isEmpty, "\(breaches)")
        #expect(watch.configs.isEmpty)   // the removal cleared the config too
        // The watch itself: a state emptied under a standing config is a breach.
        var w = DiscoveryReadWatch()
        _ = w.see(topic: "homeassistant/light/x/light/config", payload: Array(#"{"state_topic":"b/x","availability":[{"topic":"b/x/availability"}]}"#.utf8), retain: true)
        #expect(w.see(topic: "b/x/availability", payload: [], retain: true) != nil)
        #expect(w.see(topic: "b/y", payload: [], retain: true) == nil)
    }

    /// The soak's ledger: one result per transaction; the same result again only while a broker restart can
    /// have sent it again (QoS 1), never a different one, never outside a restart.
    @Test func theLedgerTakesARedeliveryOnlyAroundABrokerRestart() {
        var l = TransactionLedger()
        let ok = Array(#"{"status":"ok","transaction":"a"}"#.utf8)
        let error = Array(#"{"status":"error","error":"x","transaction":"a"}"#.utf8)
        l.sent("a", topic: "b/x/set", at: 0)
        #expect(l.result(ok) == nil)
        #expect(l.result(ok) != nil)                                // again, no restart: a breach
        #expect(l.result(ok, redeliveryPossible: true) == nil)      // again, around a restart: counted
        #expect(l.result(error, redeliveryPossible: true) != nil)   // a different answer: a breach
        #expect(l.answered == 1 && l.redelivered == 1)
    }

    @Test func aRenameClearsTheOldTopicsAndKeepsTheDiscoveryID() throws {
        var r = registry()
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp()], authoritative: false, available: [:], into: &out)
        _ = r.update("lamp-1", ["state": "ON"])
        r.flushAnnouncements(into: &out)
        out = []
        _ = r.setDevices([lamp(name: "desk")], authoritative: false, available: [:], into: &out)
        let pubs = out.compactMap { if case .publish(let p) = $0 { return p }; return nil }
        for t in ["b/test/lamp", "b/test/lamp/availability", "b/bridge/devices/test/lamp"] {
            #expect(pubs.contains(Publication(t, [], retain: true)), "\(t) not cleared")
        }
        #expect(pubs.contains(Publication("b/test/desk", text: #"{"state":"ON"}"#, retain: true)))
        #expect(pubs.contains(Publication("b/test/desk/availability", text: "online", retain: true)))
        let disc = try #require(pubs.first { $0.topic == "homeassistant/light/switchyard_b_test_lamp-1/light/config" })
        #expect(disc.text.contains(#""state_topic":"b/test/desk""#))
        #expect(r.record(named: "desk")?.descriptor.id == "lamp-1" && r.record(named: "lamp") == nil)
    }

    @Test func clashingLabelsGetTheirIdsWithAWarning() {
        var r = registry(discovery: false)
        var out: [RegistryOutput] = []
        _ = r.setDevices([lamp("a", name: nil, label: "Hall"), lamp("b", name: nil, label: "Hall")], authoritative: false, available: [:],
                         into: &out)
        #expect(Set(r.devices.values.map(\.name)) == ["hall_a", "hall_b"])
        #expect(out.filter { if case .log(.warning, _) = $0 { return true }; return false }.count == 2)
        #expect(r.nameDepths == [1])
        #expect(r.offlineAll().map(\.topic) == ["b/test/hall_a/availability", "b/test/hall_b/availability"])
    }
}

@Suite struct BridgeAPITests {
    @Test func requestsAndResponses() throws {
        let (body, transaction) = try BridgeAPI.parse(Array(#"{"transaction": 7, "x": 1}"#.utf8)).get()
        #expect(body["x"] == 1 && transaction == 7)
        let empty = try BridgeAPI.parse(Array(" \n".utf8)).get()
        #expect(empty.body == .object([:]) && empty.transaction == nil)
        #expect(throws: AdapterError.self) { try BridgeAPI.parse(Array("{".utf8)).get() }
        #expect(BridgeAPI.response(.success(["a": 1]), transaction: "t") == ["status": "ok", "data": ["a": 1], "transaction": "t"])
        #expect(BridgeAPI.response(.failure(AdapterError("no")), transaction: nil) == ["status": "error", "error": "no"])
        var stats = TransportStats()
        stats.connected = true
        stats.dropped = 3
        let h = BridgeAPI.health(uptime: 12, rss: nil, transport: stats, adapters: ["x": ["status": "running"]])
        #expect(h["uptime"] == 12 && h["rss_bytes"] == .null && h["mqtt"]?["connected"] == true && h["mqtt"]?["dropped"] == 3)
        #expect(h["adapters"]?["x"]?["status"] == "running")
    }
}

@Suite struct ClockTests {
    @Test func aManualClockWakesSleepersInDeadlineOrderOnlyWhenMoved() async throws {
        let clock = ManualClock()
        let woke = LockedList()
        try await withThrowingTaskGroup(of: Void.self) { g in
            for s in [3, 1, 2] {
                g.addTask {
                    try await clock.sleep(seconds: Double(s))
                    woke.append(s)
                }
            }
            while clock.sleeping < 3 { await Task.yield() }
            clock.advance(by: .milliseconds(999))
            #expect(clock.sleeping == 3 && woke.values.isEmpty)
            clock.advance(by: .seconds(2))
            // Woken is not yet appended: the two must have run before the third is woken.
            while clock.sleeping > 1 || woke.values.count < 2 { await Task.yield() }
            clock.advance(by: .seconds(5))
            try await g.waitForAll()
        }
        #expect(Set(woke.values) == [1, 2, 3] && woke.values.last == 3)
        // A cancelled sleeper throws and leaves.
        let t = Task { try await clock.sleep(seconds: 10) }
        while clock.sleeping < 1 { await Task.yield() }
        t.cancel()
        await #expect(throws: CancellationError.self) { try await t.value }
        #expect(clock.sleeping == 0)
    }

    /// The one race against a deadline: the work's result when it comes first, the fallback once the
    /// clock has passed the deadline (the work cancelled: a latch that never opens does not hold it up).
    @Test func firstResultIsTheWorksOrTheFallbackAtTheDeadline() async {
        let clock = ManualClock()
        let never = Latch()
        async let late = firstResult(of: { await never.wait(); return "work" }, within: 5, clock: clock, otherwise: "deadline")
        while clock.sleeping < 1 { await Task.yield() }
        clock.advance(by: .seconds(4))
        #expect(clock.sleeping == 1)
        clock.advance(by: .seconds(1))
        #expect(await late == "deadline")
        #expect(!never.isSignalled)
        let soon = Latch()
        async let early = firstResult(of: { await soon.wait(); return "work" }, within: 5, clock: clock, otherwise: "deadline")
        while clock.sleeping < 1 { await Task.yield() }
        soon.signal()
        #expect(await early == "work")
        // The deadline's sleeper was cancelled, not left behind.
        #expect(clock.sleeping == 0)
    }

    @Test func aLatchReleasesEveryWaiterAndLaterOnesAtOnce() async {
        let latch = Latch()
        await withTaskGroup(of: Void.self) { g in
            for _ in 0..<3 { g.addTask { await latch.wait() } }
            latch.signal()
        }
        await latch.wait()
        #expect(latch.isSignalled)
    }

    @Test func childTasksEndWithTheirOwnerAndTheGateKeepsOrder() async throws {
        let ran = LockedList()
        try await withChildTasks { tasks in
            let spawned = tasks.spawn { ran.append(1) }
            #expect(spawned)
            tasks.spawn {
                ran.append(2)
                do { try await Task.sleep(for: .seconds(3600)); ran.append(99) } catch { ran.append(-1) }   // cancelled when the body returns
            }
            while ran.values.count < 2 { await Task.yield() }
        }
        // Both ran, and the sleeper was cancelled and had ended when withChildTasks returned.
        #expect(Set(ran.values) == [1, 2, -1])
        let gate = SerialGate()
        let order = LockedList()
        try await withThrowingTaskGroup(of: Void.self) { g in
            for i in 0..<5 {
                g.addTask {
                    _ = try await gate.run {
                        order.append(i)
                        try await Task.sleep(for: .milliseconds(1))
                        order.append(i)
                    }
                }
            }
            try await g.waitForAll()
        }
        // One operation at a time: every start is followed by its own end.
        let v = order.values
        #expect(v.count == 10 && stride(from: 0, to: 10, by: 2).allSatisfy { v[$0] == v[$0 + 1] })
    }
}

final class LockedList: Sendable {
    let list = Locked<[Int]>([])
    func append(_ v: Int) { list.withLock { $0.append(v) } }
    var values: [Int] { list.withLock { $0 } }
}


@Suite struct DiscoverySweepTests {
    let sweep = DiscoverySweep(discoveryPrefix: "homeassistant", nodePrefix: "switchyard_home_", baseTopic: "home")
    func t(_ component: String, _ node: String, _ object: String) -> String { "homeassistant/\(component)/\(node)/\(object)/config" }

    var current: DiscoverySweep.Current {
        DiscoverySweep.Current(
            bridgeNode: "switchyard_home_bridge", bridgeTopics: [t("button", "switchyard_home_bridge", "republish")],
            adapters: [
                "virtual": (devices: ["kitchen": [t("light", "switchyard_home_virtual_kitchen", "light")]], complete: true),
                "lifx": (devices: ["d073d5000001": [t("light", "switchyard_home_lifx_d073d5000001", "light")]], complete: false),
                "lifx_lan": (devices: [:], complete: true),
            ])
    }

    @Test func onlyThisBridgesConfigsForWhatIsGoneAreOrphans() {
        let c = current
        // Still announced: kept.
        #expect(!sweep.isOrphan(t("light", "switchyard_home_virtual_kitchen", "light"), current: c))
        #expect(!sweep.isOrphan(t("button", "switchyard_home_bridge", "republish"), current: c))
        // An entity the device no longer has, a bridge entity no longer announced.
        #expect(sweep.isOrphan(t("number", "switchyard_home_virtual_kitchen", "brightness_step"), current: c))
        #expect(sweep.isOrphan(t("sensor", "switchyard_home_bridge", "ha_status"), current: c))
        // A device gone from a complete (configured) listing; an adapter no longer configured.
        #expect(sweep.isOrphan(t("light", "switchyard_home_virtual_porch", "light"), current: c))
        #expect(sweep.isOrphan(t("light", "switchyard_home_nova_d03972000001", "light"), current: c))
        // A discovered device not listed (yet): left alone.
        #expect(!sweep.isOrphan(t("light", "switchyard_home_lifx_d073d5000002", "light"), current: c))
        // The longest adapter id wins when one prefixes another.
        #expect(sweep.isOrphan(t("light", "switchyard_home_lifx_lan_d073d5000002", "light"), current: c))
        // Another bridge's, a different base sharing a prefix, and malformed topics: never ours.
        #expect(!sweep.isOrphan(t("light", "switchyard_other_virtual_porch", "light"), current: c))
        #expect(!sweep.isOrphan(t("light", "switchyard_homes_virtual_porch", "light"), current: c) || sweep.node(of: t("light", "switchyard_homes_virtual_porch", "light")) == nil)
        #expect(sweep.node(of: "homeassistant/light/switchyard_home_virtual_porch/config") == nil)
        #expect(sweep.node(of: "other/light/switchyard_home_virtual_porch/light/config") == nil)
    }

    /// A bridge with base `home_x` has nodes `switchyard_home_x_…`, under our prefix: its payloads tell.
    @Test func aPayloadIsOursOnlyWhenItPointsAtOurBridgeTopics() {
        #expect(sweep.isOurs(payload: Array(#"{"availability":[{"topic":"home/bridge/state"},{"topic":"home/virtual/a/availability"}]}"#.utf8)))
        #expect(sweep.isOurs(payload: Array(#"{"state_topic":"home/bridge/info","name":"Version"}"#.utf8)))
        #expect(!sweep.isOurs(payload: Array(#"{"availability":[{"topic":"home_x/bridge/state"}]}"#.utf8)))
        #expect(!sweep.isOurs(payload: Array(#"{"availability":[{"topic":"my/home/bridge/state"}]}"#.utf8)))
        #expect(!sweep.isOurs(payload: Array(#"{"name":null}"#.utf8)))
        #expect(!sweep.isOurs(payload: Array(#""home/bridge"#.utf8)))
        #expect(!sweep.isOurs(payload: []))
    }
}
