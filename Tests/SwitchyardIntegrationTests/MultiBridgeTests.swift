import Foundation
import Glibc
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// Two bridges on one broker (docs/operations.md "Several bridges, one broker"), the real processes, each with its
/// own `base_topic` (and so its own `client_id`), the same device names and the same discovery prefix.
@Suite struct MultiBridgeTests {
    func start(port: Int, base: String) throws -> BridgeProcess {
        let path = TestEnvironment.makeTempDir("multi").appendingPathComponent("config.yaml").path
        try """
        log: {level: warning}
        mqtt: {url: "mqtt://127.0.0.1:\(port)", base_topic: \(base), reconnect: {min_delay: 0.1, max_delay: 1}}
        virtual:
          devices:
            - {name: kitchen, type: light}
        """.writeForTest(toFile: path, replacing: true)
        return try BridgeProcess(arguments: ["run", "-c", path])
    }

    /// The retained discovery configs whose payload names this base's topics, by topic.
    func discovery(_ probe: MQTTProbe, base: String) -> [String: String] {
        var out: [String: String] = [:]
        for m in probe.messages where m.topic.hasPrefix("homeassistant/") {
            if m.payload.isEmpty { out[m.topic] = nil } else if m.payload.contains("\"\(base)/") { out[m.topic] = m.payload }
        }
        return out
    }

    @Test func discoveryLastWillsAndCommandsNeverCross() async throws {
        let broker = try await Broker.start()
        let (a, b) = (uniqueBase(), uniqueBase())
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(a)/#", "\(b)/#", "homeassistant/#")
        let bridgeA = try start(port: broker.port, base: a)
        defer { bridgeA.signal(SIGKILL) }
        try await probe.waitFor(topic: "\(a)/virtual/kitchen/availability", payload: "online")
        try await waitUntil("A's discovery") { !discovery(probe, base: a).isEmpty }
        let bridgeB = try start(port: broker.port, base: b)
        defer { bridgeB.signal(SIGTERM) }
        try await probe.waitFor(topic: "\(b)/virtual/kitchen/availability", payload: "online")
        try await waitUntil("B's discovery") { discovery(probe, base: b).count == discovery(probe, base: a).count }

        // Discovery: distinct topics and unique ids, each pointing at its own bridge only; B's sweep of
        // orphans at start cleared nothing of A's.
        let (da, db) = (discovery(probe, base: a), discovery(probe, base: b))
        #expect(Set(da.keys).isDisjoint(with: db.keys))
        // Every unique_id of a config: its own, or (one config per device) those of its components.
        func ids(_ d: [String: String]) -> [String] {
            d.values.compactMap { try? JSONValue.parse($0) }.flatMap { c -> [String] in
                if let components = c["components"]?.objectValue { return components.values.compactMap { $0["unique_id"]?.stringValue } }
                return c["unique_id"]?.stringValue.map { [$0] } ?? []
            }
        }
        #expect(!ids(da).isEmpty && Set(ids(da)).count == ids(da).count && Set(ids(db)).count == ids(db).count
            && Set(ids(da)).isDisjoint(with: ids(db)))
        #expect(!da.values.contains { $0.contains("\"\(b)/") } && !db.values.contains { $0.contains("\"\(a)/") })

        // Commands: one to A changes A's light only.
        probe.publish("\(a)/virtual/kitchen/set", #"{"state":"ON","brightness":33}"#)
        try await probe.waitFor("A's light at 33") { ms in ms.contains { $0.topic == "\(a)/virtual/kitchen" && $0.payload.contains(#""brightness":33"#) } }
        probe.publish("\(b)/virtual/kitchen/get", "")
        try await probe.waitFor("B's state re-read") { ms in ms.filter { $0.topic == "\(b)/virtual/kitchen" }.count >= 2 }
        #expect(!probe.messages.contains { $0.topic == "\(b)/virtual/kitchen" && $0.payload.contains(#""brightness":33"#) })
        #expect(!probe.messages.contains { $0.topic.hasPrefix("\(b)/") && $0.topic.hasSuffix("/result") })

        // Last Will: A killed, A's state goes offline, B stays online and keeps serving.
        probe.clear()
        bridgeA.signal(SIGKILL)
        _ = try await bridgeA.waitForExit()
        try await probe.waitFor(topic: "\(a)/bridge/state", payload: "offline")
        probe.publish("\(b)/virtual/kitchen/set", #"{"state":"ON","brightness":44,"transaction":"b"}"#)
        try await probe.waitFor("B's result") { ms in ms.contains { $0.topic == "\(b)/virtual/kitchen/result" && $0.payload.contains(#""status":"ok""#) } }
        #expect(!probe.messages.contains { $0.topic == "\(b)/bridge/state" && $0.payload == "offline" })
        // And nothing of A's discovery was cleared by anyone.
        #expect(!probe.messages.contains { da[$0.topic] != nil && $0.payload.isEmpty })
    }
}
