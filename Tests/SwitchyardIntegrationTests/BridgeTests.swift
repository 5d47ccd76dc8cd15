import Foundation
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// The bridge in-process against a real Mosquitto, observed by a real subscriber.
@Suite struct BridgeTests {
    @Test func announcesItselfAndItsDevicesAndServesCommands() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#", "homeassistant/+/switchyard_\(base)_test_lamp-1/#")
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: adapter)

        try await probe.waitFor(topic: "\(base)/bridge/state", payload: "online")
        let state = try await probe.waitFor(topic: "\(base)/test/lamp")
        #expect(try JSONValue.parse(state.payload) == ["state": "OFF", "brightness": 50])
        try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
        let devices = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/devices").payload)
        #expect(devices == [["adapter": "test", "id": "lamp-1", "name": "lamp", "topic": .string("\(base)/test/lamp"), "model": "test lamp",
                             "capabilities": ["state", "brightness", "color_temp", "color", "color_mode", "transition"]]])
        // bridge/info is first published before the adapters have started; it must come to say running.
        try await probe.waitFor("bridge/info with the adapter running") { ms in
            ms.contains { $0.topic == "\(base)/bridge/info" && (try? JSONValue.parse($0.payload))?["adapters"] == ["test": "running"] }
        }
        let disc = try await probe.waitFor(topic: "homeassistant/light/switchyard_\(base)_test_lamp-1/light/config")
        #expect(try JSONValue.parse(disc.payload)["command_topic"] == .string("\(base)/test/lamp/set"))

        probe.publish("\(base)/test/lamp/set", #"{"state": "ON", "brightness": 40, "transaction": "tx-1"}"#)
        let result = try await probe.waitFor(topic: "\(base)/test/lamp/result")
        #expect(try JSONValue.parse(result.payload) == ["transaction": "tx-1", "status": "ok"])
        try await probe.waitFor("state ON 40") { ms in
            ms.contains { $0.topic == "\(base)/test/lamp" && (try? JSONValue.parse($0.payload)) == ["state": "ON", "brightness": 40] }
        }
        probe.publish("\(base)/test/lamp/set/brightness", "75")
        probe.publish("\(base)/test/lamp/set", "toggle")
        try await probe.waitFor("state OFF 75") { ms in
            ms.contains { $0.topic == "\(base)/test/lamp" && (try? JSONValue.parse($0.payload)) == ["state": "OFF", "brightness": 75] }
        }
        let commands = await adapter.commands
        #expect(commands.map(\.fields) == [["state": "ON", "brightness": 40], ["brightness": 75], ["state": "TOGGLE"]])

        // /get re-publishes the state even though nothing changed (Decision 6).
        let before = probe.messages(on: "\(base)/test/lamp").count
        probe.publish("\(base)/test/lamp/get", "")
        try await probe.waitFor("state republished") { $0.filter { $0.topic == "\(base)/test/lamp" }.count > before }
        #expect(await adapter.refreshes == ["lamp-1"])
        #expect(probe.logErrors(base).isEmpty)
        await bridge.stop()
    }

    @Test func badCommandsEachGiveOneClearErrorAndTheBridgeKeepsServing() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: adapter, maxPayload: 1024)
        try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")

        probe.publish("\(base)/test/lamp/set", #"{"brightness": 40"#)
        probe.publish("\(base)/test/nosuch/set", "ON")
        probe.publish("\(base)/test/lamp/set", #"{"speed": 3}"#)
        probe.publish("\(base)/test/lamp/set", #"{"brightness": 150, "transaction": 9}"#)
        probe.publish("\(base)/test/lamp/set", String(repeating: "x", count: 2000))
        probe.publish("\(base)/nosuch/lamp/set", "ON")
        try await probe.waitFor("6 errors") { _ in probe.logErrors(base).count >= 6 }
        let errors = probe.logErrors(base)
        #expect(errors.count == 6)
        let messages = errors.compactMap { $0["message"]?.stringValue }
        #expect(messages[0].hasPrefix("malformed JSON"))
        #expect(messages[1] == "unknown device 'nosuch' for adapter 'test'")
        #expect(messages[2].hasPrefix("unknown field 'speed' (writable: state, brightness, color_temp, color, transition)"))
        #expect(messages[3] == "brightness: 150 is out of range 0–100")
        #expect(messages[4].contains("over mqtt.max_payload"))
        #expect(messages[5].hasPrefix("unknown adapter 'nosuch'"))
        #expect(errors[1]["topic"] == .string("\(base)/test/nosuch/set"))
        let result = try await probe.waitFor(topic: "\(base)/test/lamp/result")
        #expect(try JSONValue.parse(result.payload) == ["transaction": 9, "status": "error", "error": "brightness: 150 is out of range 0–100"])
        #expect(await adapter.commands.isEmpty)

        // An upstream failure is reported the same way.
        await adapter.setFailure("upstream said no")
        probe.publish("\(base)/test/lamp/set", #"{"state": "ON", "transaction": 10}"#)
        try await probe.waitFor(topic: "\(base)/test/lamp/result", payload: #"{"error":"upstream said no","status":"error","transaction":10}"#)
        await adapter.setFailure(nil)

        probe.publish("\(base)/test/lamp/set", #"{"brightness": 10}"#)
        try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":10,"state":"OFF"}"#)
        await bridge.stop()
    }

    @Test func aRetainedCommandStoredBeforeTheBridgeConnectsIsIgnored() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        probe.publish("\(base)/test/lamp/set", "ON", retain: true)
        try await probe.subscribe("\(base)/#")
        try await probe.waitFor(topic: "\(base)/test/lamp/set", payload: "ON")   // it is stored on the broker
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: adapter)
        let log = try await probe.waitFor(topic: "\(base)/bridge/log")
        #expect(log.payload.contains("ignored a retained command"))
        #expect(try JSONValue.parse(log.payload)["level"] == "warning")
        // A live command after it is obeyed, and the retained one never was.
        probe.publish("\(base)/test/lamp/set", #"{"brightness": 20}"#)
        try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":20,"state":"OFF"}"#)
        #expect(await adapter.commands.map(\.fields) == [["brightness": 20]])
        await bridge.stop()
    }

    @Test func commandsSentWhileTheBridgeIsDownAreDeliveredWhenItReturns() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let first = await TestBridge.start(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()]))
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
        await first.stop()
        try await probe.waitFor(topic: "\(base)/bridge/state", payload: "offline")

        probe.publish("\(base)/test/lamp/set", #"{"brightness": 33}"#)   // QoS 1, queued in the bridge's session
        await TestEnvironment.sleep(0.2)
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let second = await TestBridge.start(port: broker.port, base: base, adapter: adapter)
        try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":33,"state":"OFF"}"#)
        #expect(await adapter.commands.map(\.fields) == [["brightness": 33]])
        await second.stop()
    }

    @Test func brokerRestartWithoutPersistenceGetsTheWholeRetainedTreeBack() async throws {
        let broker = try await Broker.start(extraConfig: "log_type debug")
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: adapter, minDelay: 1, maxDelay: 2)
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#", "homeassistant/#")
        let discoveryTopic = "homeassistant/light/switchyard_\(base)_test_lamp-1/light/config"
        try await probe.waitFor(topic: discoveryTopic)
        try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
        probe.close()

        broker.stop()
        try await waitUntil("bridge notices") { !bridge.transport.stats().connected }
        // While the broker is down: a state change and an event (non-retained) happen.
        await adapter.push("lamp-1", ["brightness": 77])
        await adapter.emit("while_down")
        await TestEnvironment.sleep(0.3)

        try await broker.start()
        let restartedAt = Date()
        let after = try await MQTTProbe.connect(port: broker.port)
        try await after.subscribe("\(base)/#", "homeassistant/#")
        try await after.waitFor("the whole retained tree") { ms in
            let topics = Set(ms.map(\.topic))
            return ["\(base)/bridge/state", "\(base)/bridge/info", "\(base)/bridge/devices", "\(base)/bridge/devices/test/lamp",
                    "\(base)/test/lamp", "\(base)/test/lamp/availability", discoveryTopic].allSatisfy(topics.contains)
        }
        let elapsed = Date().timeIntervalSince(restartedAt)
        // When the probe saw the live burst (not the broker's retained copies), the birth message came first.
        let live = after.messages.filter { !$0.retain && $0.topic.hasPrefix(base) && !$0.topic.hasSuffix("/event") }
        if !live.isEmpty { #expect(live.first?.topic == "\(base)/bridge/state") }
        print("reconnect: whole retained tree back \(String(format: "%.2f", elapsed)) s after the broker restarted")
        #expect(after.last("\(base)/test/lamp") == #"{"brightness":77,"state":"OFF"}"#)
        #expect(after.last("\(base)/bridge/state") == "online")
        // The event (non-retained) was kept while the broker was down and sent after the reconnect. The
        // probe may subscribe only after that burst, so the broker's own log is the witness.
        try await waitUntil("the broker received the event") {
            broker.log.contains("Received PUBLISH from switchyard-\(base) (d0, q1, r0") && broker.log.contains("'\(base)/bridge/event'")
        }
        if let e = after.messages(on: "\(base)/bridge/event").last { #expect(try JSONValue.parse(e.payload)["type"] == "while_down") }

        // A fresh subscriber sees it all as retained messages, from the broker's store.
        let fresh = try await MQTTProbe.connect(port: broker.port)
        try await fresh.subscribe("\(base)/#", "homeassistant/#")
        try await fresh.waitFor("retained copies") { ms in
            ms.contains { $0.topic == discoveryTopic && $0.retain } && ms.contains { $0.topic == "\(base)/test/lamp" && $0.retain }
        }
        #expect(bridge.transport.stats().connects == 2)
        await bridge.stop()
    }

    @Test func homeAssistantBirthReannouncesDiscovery() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()]))
        let probe = try await MQTTProbe.connect(port: broker.port)
        let topic = "homeassistant/light/switchyard_\(base)_test_lamp-1/light/config"
        try await probe.subscribe(topic)
        try await probe.waitFor(topic: topic)
        probe.clear()
        probe.publish("homeassistant/status", "online")
        let again = try await probe.waitFor(topic: topic)
        #expect(!again.retain)   // a live publish, not the broker's stored copy
        await bridge.stop()
    }

    @Test func requestsAreAnsweredWithTheTransaction() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()]))
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/bridge/response/#")
        probe.publish("\(base)/bridge/request/health_check", #"{"transaction": 23}"#)
        let r = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/response/health_check").payload)
        #expect(r["status"] == "ok")
        #expect(r["transaction"] == 23)
        #expect(r["data"]?["healthy"] == true)
        probe.publish("\(base)/bridge/request/nope", "")
        let e = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/response/nope").payload)
        #expect(e["status"] == "error")
        #expect(e["error"]?.stringValue?.hasPrefix("unknown request 'nope'") == true)
        probe.publish("\(base)/bridge/request/config/reload", "")
        let c = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/response/config/reload").payload)
        #expect(c["status"] == "error")
        await bridge.stop()
    }
}

