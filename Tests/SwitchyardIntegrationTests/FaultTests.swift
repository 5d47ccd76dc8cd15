import Foundation
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// The broker comes and goes under load; the bridge (the real process, default settings) loses nothing.
@Suite struct FaultTests {
    /// A real Mosquitto with persistence and its default per-client queue (`max_queued_messages 1000`)
    /// restarted 20 times, up 1–3 s at a time, under a steady stream of QoS 1 commands with
    /// transactions (about 100/s): every command gets its result and the final state is the last
    /// command's. The broker must never have had to drop messages queued for the bridge: that happens
    /// only when the bridge stays away too long while the broker is up.
    @Test func twentyBrokerRestartsUnderASteadyStreamOfCommandsLoseNone() async throws {
        let broker = try await Broker.start(extraConfig: """
        persistence true
        persistence_location $DIR/
        max_queued_messages 1000
        """)
        defer { broker.stop() }
        let base = uniqueBase()
        let path = TestEnvironment.makeTempDir("flap").appendingPathComponent("config.yaml").path
        try """
        mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(base)}
        homeassistant: {discovery: false}
        virtual:
          devices:
            - {name: lamp, type: light}
        """.writeForTest(toFile: path, replacing: true)
        let bridge = try BridgeProcess(arguments: ["run", "-c", path])
        defer { bridge.signal(SIGKILL) }
        // The results' reader keeps its session at the broker: what arrives while it is away waits for it.
        let results = try await MQTTProbe.connect(port: broker.port, clientID: "results-\(base)", cleanSession: false)
        defer { results.close() }
        try await results.subscribe("\(base)/virtual/lamp/result", "\(base)/virtual/lamp")
        try await results.waitFor(topic: "\(base)/virtual/lamp")

        let commander = Task { () throws -> [Int] in
            var values: [Int] = []
            var probe = try await MQTTProbe.connect(port: broker.port)
            for i in 0..<100_000 where !Task.isCancelled {
                let value = 1 + i % 100
                var sent = false
                for _ in 0..<300 where !sent && !Task.isCancelled {
                    do {
                        try await probe.publishAcknowledged("\(base)/virtual/lamp/set", #"{"brightness":\#(value),"transaction":"c\#(i)"}"#,
                                                            timeout: 2)
                        sent = true
                    } catch {
                        // A fresh client: the old one's queue must not send a stale copy later.
                        probe.close()
                        await TestEnvironment.sleep(0.05)
                        if let p = try? await MQTTProbe.connect(port: broker.port) { probe = p }
                    }
                }
                guard sent else { break }
                values.append(value)
                await TestEnvironment.sleep(0.01)
            }
            probe.close()
            return values
        }
        for _ in 0..<20 {
            await TestEnvironment.sleep(Double.random(in: 1...3))
            await broker.stop()
            try await broker.start()
        }
        await TestEnvironment.sleep(1)
        commander.cancel()
        let values = try await commander.value
        // Enough to span every restart (a thousand or more on a quiet machine; under AddressSanitizer beside
        // other builds about 500): what is checked is that none of them is lost.
        #expect(values.count > 300, "only \(values.count) commands were sent")
        let expected = Set(values.indices.map { "c\($0)" })
        let resultTopic = "\(base)/virtual/lamp/result"
        func answered(_ ms: [MQTTProbe.Message]) -> Set<String> {
            Set(ms.filter { $0.topic == resultTopic }.compactMap { try? JSONValue.parse($0.payload)["transaction"]?.stringValue })
        }
        do {
            try await results.waitFor("a result for each of \(values.count) commands", timeout: 90) { expected.isSubset(of: answered($0)) }
        } catch {
            let missing = expected.subtracting(answered(results.messages))
            Issue.record("\(missing.count) of \(expected.count) commands got no result, e.g. \(missing.sorted().prefix(5))")
        }
        #expect(!results.messages(on: resultTopic).contains { $0.payload.contains(#""status":"error""#) })
        // The final state is the last command's.
        let last = try #require(values.last)
        try await results.waitFor("the last command's state") { ms in
            ms.last { $0.topic == "\(base)/virtual/lamp" }.flatMap { try? JSONValue.parse($0.payload)["brightness"] } == JSONValue(last)
        }
        #expect(!broker.log.contains("Outgoing messages are being dropped"), "the broker dropped messages queued for a client")
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
    }
}
