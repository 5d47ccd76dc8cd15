import Foundation
import Logging
import Testing
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardTestSupport

@Suite struct TransportTests {
    static func logger() -> Logger {
        var l = Logger(label: "t")
        l.logLevel = .critical
        return l
    }

    @Test func aBrokerThatNeverAnswersMakesTheClientRecreateItselfAndKeepTrying() async throws {
        let silent = try SilentListener()
        let t = MosquittoTransport(settings: MQTTSettings(port: silent.port, clientID: "stuck-test", stateTopic: "x/bridge/state",
                                                         reconnectMinDelay: 0.05, reconnectMaxDelay: 0.2, connectTimeout: 0.3,
                                                         stuckAfter: 1), logger: Self.logger())
        t.start()
        try await waitUntil("client recreated") { t.stats().clientRecreations >= 1 }
        #expect(silent.connections >= 2)
        #expect(!t.stats().connected)
        silent.close()
        await t.stop(timeout: 1)
    }

    @Test func mqtt5CommandsOlderThanTheMaxAgeAreDropped() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: adapter, protocolVersion: 5)
        let probe = try await MQTTProbe.connect(port: broker.port, protocolVersion: 5)
        try await probe.subscribe("\(base)/#")
        try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
        let old = Timestamp.rfc3339(Date().addingTimeInterval(-120))
        probe.publish("\(base)/test/lamp/set", #"{"brightness": 1}"#, userProperties: ["timestamp": old])
        probe.publish("\(base)/test/lamp/set", #"{"brightness": 2}"#, userProperties: ["timestamp": Timestamp.rfc3339(Date())])
        try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":2,"state":"OFF"}"#)
        let errors = probe.logErrors(base)
        #expect(errors.count == 1)
        #expect(errors.first?["message"]?.stringValue?.contains("over mqtt.command_max_age") == true)
        #expect(await adapter.commands.map(\.fields) == [["brightness": 2]])
        await bridge.stop()
    }

    @Test func healthReportsTheConnectionAndTheAdapters() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let bridge = await TestBridge.start(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()]))
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/bridge/health")
        try await waitUntil("connected") { bridge.transport.stats().connected }
        await bridge.engine.publishHealth()
        let h = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/health").payload)
        #expect(h["mqtt"]?["connected"] == true)
        #expect(h["mqtt"]?["dropped"] == 0)
        #expect((h["mqtt"]?["published"]?.intValue ?? 0) > 5)
        #expect((h["rss_bytes"]?.intValue ?? 0) > 1_000_000)
        #expect(h["adapters"]?["test"]?["status"] == "running")
        #expect(h["adapters"]?["test"]?["devices"] == 1)
        await bridge.stop()
    }
}
