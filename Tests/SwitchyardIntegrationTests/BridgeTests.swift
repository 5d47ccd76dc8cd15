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
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter) { _ in
            try await probe.waitFor(topic: "\(base)/bridge/state", payload: "online")
            let state = try await probe.waitFor(topic: "\(base)/test/lamp")
            #expect(try JSONValue.parse(state.payload) == ["state": "OFF", "brightness": 50])
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            // The list goes in the late lane, after the states and availability waiting (design: `publishDeviceList`),
            // and the bridge's first one, before the adapter listed, is empty: the latest one is read.
            let expected: JSONValue = [["adapter": "test", "id": "lamp-1", "name": "lamp", "topic": .string("\(base)/test/lamp"), "model": "test lamp",
                                        "capabilities": ["state", "brightness", "color_temp", "color", "color_mode", "transition"]]]
            do {
                _ = try await probe.waitFor("bridge/devices listing the lamp") { ms in
                    ms.last { $0.topic == "\(base)/bridge/devices" }.flatMap { try? JSONValue.parse($0.payload) } == expected
                }
            } catch {
                Issue.record("\(error); bridge/devices: \(probe.messages(on: "\(base)/bridge/devices").map(\.payload))")
            }
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

            // /get re-publishes the state even though nothing changed (design.md §6).
            let before = probe.messages(on: "\(base)/test/lamp").count
            probe.publish("\(base)/test/lamp/get", "")
            try await probe.waitFor("state republished") { $0.filter { $0.topic == "\(base)/test/lamp" }.count > before }
            #expect(await adapter.refreshes == ["lamp-1"])
            #expect(probe.logErrors(base).isEmpty)
        }
    }

    @Test func badCommandsEachGiveOneClearErrorAndTheBridgeKeepsServing() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        var options = InProcessBridge.Options()
        options.maxPayload = 1024
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: options) { _ in
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
        }
    }

    /// A flood of bad payloads is not a flood of log lines: at most `errorLogsPerSecond` errors a second
    /// are logged and the rest are summed up in a warning, so that every bad payload is accounted for;
    /// a publisher that gave a `transaction` gets its result whatever the rate.
    @Test func aFloodOfBadCommandsIsLoggedAtABoundedRateAndCountedWhole() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter) { _ in
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            let n = 3 * BridgeEngine.errorLogsPerSecond
            for i in 0..<n { probe.publish("\(base)/test/lamp/set", #"{"speed": \#(i), "transaction": \#(i)}"#, qos: 1) }
            try await probe.waitFor("every result") { ms in ms.filter { $0.topic == "\(base)/test/lamp/result" }.count >= n }
            @Sendable func accounted() -> (errors: Int, summed: Int) {
                let lines = probe.messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }
                let errors = lines.filter { $0["level"] == "error" }.count
                let summed = lines.filter { $0["level"] == "warning" }.compactMap { $0["message"]?.stringValue }
                    .compactMap { $0.hasSuffix("a second)") ? Int($0.prefix { $0.isNumber }) : nil }.reduce(0, +)
                return (errors, summed)
            }
            try await waitUntil("every bad command logged or counted") { let a = accounted(); return a.errors + a.summed >= n }
            let a = accounted()
            #expect(a.errors + a.summed == n)
            #expect(a.summed > 0, "\(n) errors at once were all logged")
        }
    }

    @Test func aRetainedCommandStoredBeforeTheBridgeConnectsIsIgnored() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        probe.publish("\(base)/test/lamp/set", "ON", retain: true)
        try await probe.subscribe("\(base)/#")
        try await probe.waitFor(topic: "\(base)/test/lamp/set", payload: "ON")   // it is stored on the broker
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter) { _ in
            let log = try await probe.waitFor(topic: "\(base)/bridge/log")
            #expect(log.payload.contains("ignored a retained command"))
            #expect(try JSONValue.parse(log.payload)["level"] == "warning")
            // A live command after it is obeyed, and the retained one never was.
            probe.publish("\(base)/test/lamp/set", #"{"brightness": 20}"#)
            try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":20,"state":"OFF"}"#)
            #expect(await adapter.commands.map(\.fields) == [["brightness": 20]])
        }
    }

    @Test func commandsSentWhileTheBridgeIsDownAreDeliveredWhenItReturns() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        try await InProcessBridge.with(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()])) { _ in
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
        }
        try await probe.waitFor(topic: "\(base)/bridge/state", payload: "offline")

        // QoS 1: once the broker has acknowledged it, it waits in the bridge's persistent session.
        try await probe.publishAcknowledged("\(base)/test/lamp/set", #"{"brightness": 33}"#)
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter) { _ in
            try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":33,"state":"OFF"}"#)
            #expect(await adapter.commands.map(\.fields) == [["brightness": 33]])
        }
    }

    @Test func brokerRestartWithoutPersistenceGetsTheWholeRetainedTreeBack() async throws {
        let broker = try await Broker.start(extraConfig: "log_type debug")
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        var options = InProcessBridge.Options()
        options.minDelay = 1
        options.maxDelay = 2
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: options) { bridge in
            let probe = try await MQTTProbe.connect(port: broker.port)
            try await probe.subscribe("\(base)/#", "homeassistant/#")
            let discoveryTopic = "homeassistant/light/switchyard_\(base)_test_lamp-1/light/config"
            try await probe.waitFor(topic: discoveryTopic)
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            probe.close()

            await broker.stop()
            try await waitUntil("bridge notices") { !bridge.transport.stats().connected }
            // While the broker is down: a state change and an event (non-retained) happen. Each call has
            // put its message in the outbox when it returns.
            await adapter.push("lamp-1", ["brightness": 77])
            await adapter.emit("while_down")

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
            print("reconnect: whole retained tree back \(String(format: "%.2f", elapsed)) s after the broker restarted")
            #expect(after.last("\(base)/test/lamp") == #"{"brightness":77,"state":"OFF"}"#)
            #expect(after.last("\(base)/bridge/state") == "online")
            // What the restarted broker received from the bridge, in order (its debug log): the birth message
            // first, and the event that was kept while the broker was down.
            let client = "switchyard-\(base)"
            let received = { @Sendable in Self.publishes(from: client, in: broker.log.components(separatedBy: "mosquitto version").last ?? "") }
            try await waitUntil("the broker received the event") { received().contains("\(base)/bridge/event") }
            #expect(received().first == "\(base)/bridge/state")

            // A fresh subscriber sees it all as retained messages, from the broker's store.
            let fresh = try await MQTTProbe.connect(port: broker.port)
            try await fresh.subscribe("\(base)/#", "homeassistant/#")
            try await fresh.waitFor("retained copies") { ms in
                ms.contains { $0.topic == discoveryTopic && $0.retain } && ms.contains { $0.topic == "\(base)/test/lamp" && $0.retain }
            }
            #expect(bridge.transport.stats().connects == 2)
        }
    }

    /// The topics of the PUBLISH packets a broker's debug log shows it received from `client`, in order.
    static func publishes(from client: String, in log: String) -> [String] {
        log.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("Received PUBLISH from \(client) "), let open = line.firstIndex(of: "'"),
                  let close = line[line.index(after: open)...].firstIndex(of: "'") else { return nil }
            return String(line[line.index(after: open)..<close])
        }
    }

    @Test func homeAssistantBirthReannouncesDiscovery() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        try await InProcessBridge.with(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()])) { _ in
            let probe = try await MQTTProbe.connect(port: broker.port)
            let topic = "homeassistant/light/switchyard_\(base)_test_lamp-1/light/config"
            try await probe.subscribe(topic)
            try await probe.waitFor(topic: topic)
            probe.clear()
            probe.publish("homeassistant/status", "online")
            let again = try await probe.waitFor(topic: topic)
            #expect(!again.retain)   // a live publish, not the broker's stored copy
        }
    }

    @Test func requestsAreAnsweredWithTheTransaction() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        try await InProcessBridge.with(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()])) { _ in
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
        }
    }
}

