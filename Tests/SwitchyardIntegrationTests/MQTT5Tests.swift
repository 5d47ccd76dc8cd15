import Foundation
import Logging
import Testing
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardTestSupport

/// MQTT 5 as its clients expect it, over a real Mosquitto (docs/topics.md "MQTT 5"): answers on a client's
/// Response Topic with its Correlation Data, what a 3.1.1 client sees (nothing new), the broker's Receive
/// Maximum, Maximum Packet Size and Topic Alias Maximum. paho-mqtt's view of the same: PahoV5Tests.
@Suite struct MQTT5Tests {
    static func logger() -> Logger {
        var l = Logger(label: "t")
        l.logLevel = .critical
        return l
    }

    static var v5: InProcessBridge.Options {
        var o = InProcessBridge.Options()
        o.protocolVersion = 5
        o.discovery = false
        return o
    }

    @Test func aV5ClientGetsItsAnswersOnItsResponseTopicWithItsCorrelationData() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        var options = Self.v5
        options.expiry = MessageExpiry(events: 3600, logs: 600, results: 60)
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: options) { _ in
            let client = try await MQTTProbe.connect(port: broker.port, protocolVersion: 5)
            defer { client.close() }
            let reply = "clients/\(base)/reply"
            try await client.subscribe(reply, "\(base)/#")
            try await client.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            func answer(_ correlation: String) async throws -> MQTTProbe.Message {
                try await client.waitFor("the answer \(correlation)") { ms in ms.contains { $0.topic == reply && $0.correlationData == Array(correlation.utf8) } }
                return client.messages(on: reply).first { $0.correlationData == Array(correlation.utf8) }!
            }

            client.publish("\(base)/test/lamp/set", #"{"state":"ON","transaction":"t1"}"#, responseTopic: reply, correlationData: Array("c1".utf8))
            let set = try await answer("c1")
            #expect(try JSONValue.parse(set.payload) == ["transaction": "t1", "status": "ok"])
            #expect(set.messageExpiry.map { $0 > 0 && $0 <= 60 } == true)
            // Today's result too, without correlation data.
            let result = try await client.waitFor(topic: "\(base)/test/lamp/result")
            #expect(result.payload == set.payload && result.correlationData == nil)

            client.publish("\(base)/test/lamp/set/brightness", "30", responseTopic: reply, correlationData: Array("c2".utf8))
            #expect(try JSONValue.parse(try await answer("c2").payload) == ["status": "ok"])

            client.publish("\(base)/test/lamp/get", "", responseTopic: reply, correlationData: Array("c3".utf8))
            let got = try JSONValue.parse(try await answer("c3").payload)
            #expect(got["status"] == "ok" && got["state"]?["brightness"] == 30 && got["state"]?["state"] == "ON")

            client.publish("\(base)/bridge/request/health_check", #"{"transaction":5}"#, responseTopic: reply, correlationData: Array("c4".utf8))
            let health = try JSONValue.parse(try await answer("c4").payload)
            #expect(health["status"] == "ok" && health["data"]?["healthy"] == true && health["transaction"] == 5)
            try await client.waitFor(topic: "\(base)/bridge/response/health_check")

            client.publish("\(base)/test/lamp/set", #"{"brightness":300}"#, responseTopic: reply, correlationData: Array("c5".utf8))
            let refused = try JSONValue.parse(try await answer("c5").payload)
            #expect(refused["status"] == "error" && refused["error"]?.stringValue?.contains("out of range") == true)
            let log = try await client.waitFor(topic: "\(base)/bridge/log")
            #expect(log.messageExpiry.map { $0 > 0 && $0 <= 600 } == true)

            // A Response Topic that is the bridge's own command topic: the command is refused, nothing is published there.
            client.publish("\(base)/test/lamp/set", #"{"state":"OFF","transaction":"t6"}"#, responseTopic: "\(base)/test/lamp/set",
                           correlationData: Array("c6".utf8))
            let t6 = try await client.waitFor("t6's result") { ms in ms.contains { $0.topic == "\(base)/test/lamp/result" && $0.payload.contains("t6") } }
            let r6 = try JSONValue.parse(t6.last { $0.topic == "\(base)/test/lamp/result" && $0.payload.contains("t6") }!.payload)
            #expect(r6["status"] == "error" && r6["error"]?.stringValue?.contains("Response Topic") == true)
            #expect(!client.messages(on: "\(base)/test/lamp/set").contains { $0.payload.contains("status") })
            #expect(await adapter.commands.map(\.fields) == [["state": "ON"], ["brightness": 30]])
            #expect(client.messages(on: reply).count == 5)
        }
    }

    /// The same commands, requests and mistakes from a 3.1.1 client, to a bridge speaking 3.1.1 and to one
    /// speaking 5: the client sees the same answers on the same topics, and nothing more.
    @Test func a311ClientSeesNoChangeWhenTheBridgeSpeaksMQTT5() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        var seen: [[String]] = []
        for version in [4, 5] {
            let base = "sy311v\(version)\(UUID().uuidString.prefix(4).lowercased())"
            var options = InProcessBridge.Options()
            options.protocolVersion = version
            options.discovery = false
            let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
            try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: options) { _ in
                let client = try await MQTTProbe.connect(port: broker.port, protocolVersion: 4)
                defer { client.close() }
                try await client.subscribe("\(base)/#", "clients/#")
                try await client.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
                client.clear()
                client.publish("\(base)/test/lamp/set", #"{"state":"ON","transaction":"a"}"#)
                try await client.waitFor(topic: "\(base)/test/lamp/result")
                client.publish("\(base)/test/lamp/set", #"{"brightness":999,"transaction":"b"}"#)
                try await client.waitFor("b") { $0.contains { $0.payload.contains(#""transaction":"b""#) } }
                client.publish("\(base)/bridge/request/health_check", #"{"transaction":"c"}"#)
                try await client.waitFor(topic: "\(base)/bridge/response/health_check")
                client.publish("\(base)/test/lamp/get", "")
                try await client.waitFor("the state again") { ms in ms.filter { $0.topic == "\(base)/test/lamp" }.count == 2 }
                try await Task.sleep(for: .milliseconds(300))
                // What answers a client: results, responses, log lines and the state, with the base cut off (and a
                // response's uptime, which moves).
                let answers = client.messages.filter { m in
                    ["/result", "/bridge/response/health_check", "/bridge/log", "/test/lamp"].contains { m.topic.hasSuffix($0) }
                }
                seen.append(answers.map { m in
                    var payload = m.payload.replacingOccurrences(of: base, with: "<base>")
                    if m.topic.hasSuffix("response/health_check"), let v = try? JSONValue.parse(m.payload) {
                        payload = "\(v["status"] ?? .null) \(v["transaction"] ?? .null) \(v["data"]?["healthy"] ?? .null)"
                    }
                    return "\(m.topic.replacingOccurrences(of: base, with: "<base>")) \(payload) \(m.correlationData == nil && m.messageExpiry == nil)"
                })
            }
        }
        #expect(seen.count == 2 && seen[0] == seen[1], "3.1.1 bridge:\n\(seen.first ?? [])\nMQTT 5 bridge:\n\(seen.last ?? [])")
        #expect(seen.first?.contains { $0.hasPrefix("<base>/test/lamp/result") && $0.contains("out of range") } == true)
    }

    /// A state larger than the broker's Maximum Packet Size is refused with a bridge/log error; the connection
    /// stays, and the next state that fits goes out.
    @Test func aStateTooLargeForTheBrokerIsRefusedOnBridgeLogAndTheConnectionStays() async throws {
        let broker = try await Broker.start(extraConfig: "max_packet_size 4096")
        defer { broker.stop() }
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: Self.v5) { bridge in
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            try await probe.subscribe("\(base)/#")
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            #expect(bridge.transport.stats().maximumPacketSize == 4096)
            await adapter.push("lamp-1", ["label": .string(String(repeating: "x", count: 6000))])
            let error = try await probe.waitFor("the refusal") { ms in ms.contains { $0.topic == "\(base)/bridge/log" && $0.payload.contains("Maximum Packet Size") } }
            let line = try JSONValue.parse(error.last { $0.topic == "\(base)/bridge/log" }!.payload)
            #expect(line["level"] == "error" && line["topic"] == .string("\(base)/test/lamp"))
            await adapter.push("lamp-1", ["label": "short"])
            try await probe.waitFor("the next state") { ms in ms.contains { $0.topic == "\(base)/test/lamp" && $0.payload.contains("short") } }
            #expect(!probe.messages(on: "\(base)/test/lamp").contains { $0.payload.contains("xxxx") })
            #expect(bridge.transport.stats().connects == 1)
            await bridge.engine.publishHealth()
            let health = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/health").payload)
            #expect(health["limits"]?["packet_size"] == 1)
            #expect(health["mqtt"]?["broker"]?["maximum_packet_size"] == 4096)
        }
    }

    /// With the broker's Receive Maximum below `mqtt.max_inflight`, no more than it await their PUBACK at once,
    /// and everything arrives.
    @Test func theBrokersReceiveMaximumBoundsWhatIsInFlight() async throws {
        let broker = try await Broker.start(extraConfig: "max_inflight_messages 3")
        defer { broker.stop() }
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/e")
        let t = MosquittoTransport(settings: MQTTSettings(port: broker.port, protocolVersion: 5, clientID: "rm-\(base)", stateTopic: "\(base)/bridge/state",
                                                         maxInflight: 100), logger: Self.logger())
        t.start()
        try await waitUntil("connected") { t.stats().connected }
        t.publish((0..<300).map { Publication("\(base)/e", Array("\($0)".utf8), qos: 1, retain: false) })
        try await probe.waitFor("300 events") { $0.count == 300 }
        #expect(probe.messages.map(\.payload) == (0..<300).map { "\($0)" })
        #expect(t.stats().receiveMaximum == 3)
        #expect(t.stats().peakInflight == 3)
        await t.stop(timeout: 2)
    }

    /// Bytes on the wire per state update, measured between the bridge and the broker, with topic aliases and
    /// without (docs/performance.md "MQTT 5 topic aliases"). A subscriber sees the full topic either way.
    @Test func stateUpdatesUseTopicAliasesAndTakeFewerBytes() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let updates = 200
        var perUpdate: [Int: Double] = [:]
        for aliases in [0, 1_000] {
            let relay = try CountingRelay(to: broker.port)
            defer { relay.close() }
            let base = uniqueBase()
            let topic = "\(base)/virtual/living_room/floor_lamp"
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            try await probe.subscribe(topic)
            let t = MosquittoTransport(settings: MQTTSettings(port: relay.port, protocolVersion: 5, clientID: "alias-\(base)",
                                                             stateTopic: "\(base)/bridge/state", maxTopicAliases: aliases), logger: Self.logger())
            t.start()
            try await waitUntil("connected") { t.stats().connected }
            // A first update, then each one after the previous has arrived (nothing coalesces in the outbox); every
            // payload differs, so that each wait is for its own.
            func update(_ i: Int) async throws {
                let payload = #"{"brightness":\#(i % 100),"color_temp":\#(2700 + i),"state":"ON"}"#
                t.publish(topic, Array(payload.utf8), qos: 1, retain: true)
                try await probe.waitFor(topic: topic, payload: payload)
            }
            try await update(1_000)
            try await update(1_001)
            try await Task.sleep(for: .milliseconds(200))
            let before = relay.bytesUp
            for i in 0..<updates { try await update(i) }
            try await Task.sleep(for: .milliseconds(200))
            perUpdate[aliases] = Double(relay.bytesUp - before) / Double(updates)
            #expect(probe.messages.allSatisfy { $0.topic == topic })
            #expect(t.stats().topicAliasMaximum == 10)   // Mosquitto's default max_topic_alias
            #expect(t.stats().connects == 1)
            await t.stop(timeout: 2)
        }
        let without = perUpdate[0]!, with = perUpdate[1_000]!
        print("bytes from the bridge to the broker per state update (one QoS 1 PUBLISH): without aliases \(without), with \(with)")
        // The topic is 39 bytes; an alias costs 3 (the property) and saves the topic and its 2-byte length.
        #expect(without - with >= 30, "without aliases \(without) bytes an update, with \(with)")
    }

    /// A connection that used aliases and was lost with QoS 1 messages unacknowledged: libmosquitto would send
    /// them again, with aliases the new connection never learnt. The client is recreated instead: the bridge
    /// connects once more (not again and again) and the latest state arrives.
    @Test func aConnectionLostWithAliasedMessagesInFlightComesBackOnce() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let relay = try CountingRelay(to: broker.port)
        defer { relay.close() }
        let base = uniqueBase()
        let topic = "\(base)/virtual/lamp"
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe(topic)
        let t = MosquittoTransport(settings: MQTTSettings(port: relay.port, protocolVersion: 5, clientID: "lost-\(base)", stateTopic: "\(base)/bridge/state",
                                                         reconnectMinDelay: 0.05, reconnectMaxDelay: 0.2), logger: Self.logger())
        t.start()
        try await waitUntil("connected") { t.stats().connected }
        for i in 0..<3 {
            t.publish(topic, Array("v\(i)".utf8), qos: 1, retain: true)
            try await probe.waitFor(topic: topic, payload: "v\(i)")
        }
        // Nothing acknowledged from here: the next updates (aliased) stay in flight, then the connection is cut.
        relay.hold(true)
        for i in 3..<6 {
            t.publish(topic, Array("v\(i)".utf8), qos: 1, retain: true)
            try await Task.sleep(for: .milliseconds(50))
        }
        relay.cutAll()
        relay.hold(false)
        try await waitUntil("reconnected") { t.stats().connects >= 2 && t.stats().connected }
        try await probe.waitFor(topic: topic, payload: "v5")
        try await Task.sleep(for: .seconds(1))
        #expect(t.stats().connects == 2)
        #expect(t.stats().connected)
        await t.stop(timeout: 2)
    }
}
