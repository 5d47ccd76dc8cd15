import Foundation
import Logging
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// `homeassistant.discovery_mode: device`: one config per device, the migration of a per-entity install, and
/// the re-announcement a few devices at a time (docs/topics.md "Home Assistant discovery").
@Suite struct DiscoveryModeTests {
    let scheme = TopicScheme(base: "b")
    var entityBuilder: DiscoveryBuilder { DiscoveryBuilder(scheme: scheme, version: "t") }
    var deviceBuilder: DiscoveryBuilder { DiscoveryBuilder(scheme: scheme, version: "t", mode: .device) }

    static func sensorLamp() -> DeviceDescriptor {
        var d = ScriptedAdapter.lamp()
        d.capabilities.append(Capability("rssi", .integer(min: -100, max: 0), unit: "dBm", role: .diagnostic))
        return d
    }

    /// Home Assistant makes an entity's discovery id of the node and object of a per-entity topic
    /// (`<node> <object>`), and of the node of a device topic and the entity's key in `components`: the same
    /// id, `unique_id` and fields either way, so that migrating keeps every entity.
    @Test func aDeviceConfigCarriesEveryEntityUnderTheIDsOfItsPerEntityConfigs() throws {
        let d = Self.sensorLamp()
        let entries = entityBuilder.entries(adapter: "test", name: "lamp", device: d)
        #expect(entries.count == 2)
        let config = deviceBuilder.deviceConfig(entries)
        let node = entityBuilder.nodeID(adapter: "test", deviceID: d.id)
        #expect(deviceBuilder.deviceConfigTopic(node: node) == "homeassistant/device/\(node)/config")
        let components = try #require(config["components"]?.objectValue)
        #expect(components.count == entries.count)
        for e in entries {
            // homeassistant/<component>/<node>/<object>/config ⇒ key <object> in the device config of <node>
            let parts = e.topic.split(separator: "/").map(String.init)
            #expect(parts[2] == node)
            let c = try #require(components[parts[3]]?.objectValue, "no component \(parts[3])")
            #expect(c["platform"] == .string(parts[1]))
            var perEntity = try #require(e.payload.objectValue)
            for k in ["device", "origin", "availability", "availability_mode"] { perEntity[k] = nil }
            var fromDevice = c
            fromDevice["platform"] = nil
            #expect(fromDevice == perEntity)
        }
        // What every entity shares is said once.
        #expect(config["device"] == entries[0].payload["device"])
        #expect(config["availability"] == entries[0].payload["availability"])
        #expect(config["availability_mode"] == "all")
        #expect(config["origin"]?["name"] == "Switchyard")
    }

    @Test func entitiesADeviceNoLongerHasAreRemovedByItsNextConfig() throws {
        let d = Self.sensorLamp()
        var without = d
        without.capabilities.removeAll { $0.name == "rssi" }
        let config = deviceBuilder.deviceConfig(entityBuilder.entries(adapter: "test", name: "lamp", device: without),
                                                dropped: entityBuilder.shapes(d))
        let components = try #require(config["components"]?.objectValue)
        #expect(components["rssi"] == ["platform": "sensor"])
        #expect(components["light"]?["platform"] == "light")
        #expect(components["light"]?["schema"] == "json")
    }

    @Test func theRegistryAnnouncesOneConfigPerDeviceAndClearsItFirstOnRemoval() throws {
        var r = DeviceRegistry(adapterID: "test", scheme: scheme, discovery: deviceBuilder, reservedPrefixes: [])
        var out: [RegistryOutput] = []
        _ = r.setDevices([Self.sensorLamp(), ScriptedAdapter.lamp("lamp-2", name: "lamp2")], authoritative: true, available: [:], into: &out)
        r.flushAnnouncements(into: &out)
        let configs = published(out).filter { $0.topic.hasPrefix("homeassistant/") }
        #expect(configs.map(\.topic).sorted() == ["homeassistant/device/switchyard_b_test_lamp-1/config",
                                                   "homeassistant/device/switchyard_b_test_lamp-2/config"])
        let one = try JSONValue.parse(configs.first { $0.topic.contains("lamp-1") }!.payload)
        #expect(one["components"]?.objectValue?.keys.sorted() == ["light", "rssi"])

        out = []
        _ = r.setDevices([ScriptedAdapter.lamp("lamp-2", name: "lamp2")], authoritative: true, available: [:], into: &out)
        let topics = published(out).map(\.topic)
        let cleared = try #require(topics.firstIndex(of: "homeassistant/device/switchyard_b_test_lamp-1/config"))
        let state = try #require(topics.firstIndex(of: "b/test/lamp"))
        #expect(cleared < state)
        #expect(published(out)[cleared].payload.isEmpty)
    }

    @Test func theSweepMigratesTheOtherModesConfigsOfWhatExistsAndClearsTheRest() {
        let sweep = DiscoverySweep(discoveryPrefix: "homeassistant", nodePrefix: "switchyard_b_", baseTopic: "b")
        let node = "switchyard_b_test_lamp-1"
        var current = DiscoverySweep.Current(
            bridgeNode: "switchyard_b_bridge", bridgeTopics: ["homeassistant/device/switchyard_b_bridge/config"],
            adapters: ["test": (devices: ["lamp-1": ["homeassistant/device/\(node)/config"]], complete: true)])
        current.otherTopics["test"] = { $0 == "lamp-1" ? ["homeassistant/light/\(node)/light/config"] : nil }
        current.bridgeOtherTopics = ["homeassistant/button/switchyard_b_bridge/republish/config"]
        #expect(sweep.filters == ["homeassistant/+/+/+/config", "homeassistant/device/+/config"])
        #expect(sweep.verdict("homeassistant/device/\(node)/config", current: current) == .keep)
        #expect(sweep.verdict("homeassistant/light/\(node)/light/config", current: current) == .migrate)
        #expect(sweep.verdict("homeassistant/sensor/\(node)/gone/config", current: current) == .orphan)
        #expect(sweep.verdict("homeassistant/device/switchyard_b_test_lamp-9/config", current: current) == .orphan)
        #expect(sweep.verdict("homeassistant/device/switchyard_b_old_x/config", current: current) == .orphan)
        #expect(sweep.verdict("homeassistant/button/switchyard_b_bridge/republish/config", current: current) == .migrate)
        #expect(sweep.verdict("homeassistant/device/someone_else/config", current: current) == .keep)
        #expect(sweep.node(of: "homeassistant/device/\(node)/config") == node)
    }

    func published(_ out: [RegistryOutput]) -> [Publication] {
        out.compactMap { if case .publish(let p) = $0 { return p } else { return nil } }
    }

    func engine(_ t: InMemoryTransport, mode: DiscoveryMode, clock: any BridgeClock = SystemClock(), batch: Int = 50) -> BridgeEngine {
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        return BridgeEngine(settings: EngineSettings(scheme: scheme, version: "t", discoveryMode: mode, migrationGrace: 0.05,
                                                     reannounceBatch: batch, reannouncePause: 1),
                            transport: t, logger: logger, clock: clock)
    }

    /// An install announced per entity, then started per device: Home Assistant is asked to let go of each
    /// per-entity config (`migrate_discovery`) before the device config naming the same entities goes out,
    /// and the old topics are cleared only then.
    @Test func aPerEntityInstallIsMigratedBeforeItsDeviceConfigGoesOut() async throws {
        let t = InMemoryTransport()
        let e = engine(t, mode: .device)
        let node = "switchyard_b_test_lamp-1"
        let old = "homeassistant/light/\(node)/light/config"
        let deviceTopic = "homeassistant/device/\(node)/config"
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            #expect(!t.published.contains { $0.topic == deviceTopic }, "a device config went out before the sweep")
            t.inject(.connected(sessionPresent: false))
            try await waitUntil("the sweep's sentinel") { t.published.contains { $0.topic == "b/bridge/sweep" } }
            let nonce = t.published.last { $0.topic == "b/bridge/sweep" }!.payload
            // The broker's retained per-entity config of an earlier run, then the sentinel.
            let perEntity = EntityConfig.of(old, entityBuilder)
            t.inject(.message(InboundMessage(topic: old, payload: Array(perEntity.utf8), retain: true)))
            t.inject(.message(InboundMessage(topic: "b/bridge/sweep", payload: Array(nonce.utf8))))
            try await waitUntil("the device config") { t.published.contains { $0.topic == deviceTopic } }
            let order = t.published.enumerated().filter { $0.element.topic == old || $0.element.topic == deviceTopic }
            #expect(order.count == 3)
            #expect(order[0].element.topic == old && order[0].element.payload == #"{"migrate_discovery":true}"# && !order[0].element.retain)
            #expect(order[1].element.topic == old && order[1].element.payload.isEmpty && order[1].element.retain)
            #expect(order[2].element.topic == deviceTopic && !order[2].element.payload.isEmpty)
        }
    }

    /// A rename while the device configs wait for the sweep (the first seconds after a start or a standby
    /// takeover, when the config of the previous run stands on the broker and still reads the old topics):
    /// the old state, availability and details are cleared only after the new config has gone out, and a
    /// device renamed back meanwhile keeps its state (the soak found `virtual/outside` emptied under its
    /// standing config).
    @Test func aRenameBeforeTheSweepClearsTheOldTopicsOnlyAfterTheNewConfig() async throws {
        let t = InMemoryTransport()
        let e = engine(t, mode: .device)
        let deviceTopic = "homeassistant/device/switchyard_b_test_lamp-1/config"
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])]) }
            defer { t.finish() }
            try await waitUntil("its state") { t.published.contains { $0.topic == "b/test/lamp" } }
            await e.setDevicePolicies(["test": ["lamp-1": DevicePolicy(name: "desk")]])
            try await waitUntil("the state under the new name") { t.published.contains { $0.topic == "b/test/desk" } }
            #expect(!t.published.contains { $0.topic == "b/test/lamp" && $0.payload.isEmpty },
                    "b/test/lamp emptied while the config on the broker still reads it")
            // And back, still before the sweep: the lamp's state is there again, the desk's to be cleared.
            await e.setDevicePolicies([:])
            t.inject(.connected(sessionPresent: false))
            try await waitUntil("the sweep's sentinel") { t.published.contains { $0.topic == "b/bridge/sweep" } }
            let nonce = t.published.last { $0.topic == "b/bridge/sweep" }!.payload
            t.inject(.message(InboundMessage(topic: "b/bridge/sweep", payload: Array(nonce.utf8))))
            try await waitUntil("the desk's topics cleared") { t.published.contains { $0.topic == "b/test/desk" && $0.payload.isEmpty } }
            let config = try #require(t.published.lastIndex { $0.topic == deviceTopic && !$0.payload.isEmpty })
            #expect(t.published[config].payload.contains(#""b/test/lamp""#))
            for topic in ["b/test/desk", "b/test/desk/availability", "b/bridge/devices/test/desk"] {
                let cleared = try #require(t.published.firstIndex { $0.topic == topic && $0.payload.isEmpty && $0.retain }, "\(topic) not cleared")
                #expect(cleared > config, "\(topic) cleared before the config that replaces the one reading it")
            }
            #expect(!t.published.contains { ["b/test/lamp", "b/test/lamp/availability"].contains($0.topic) && $0.payload.isEmpty },
                    "the lamp's topics were cleared though it has them again")
            #expect(t.published.last { $0.topic == "b/test/lamp" }.map { !$0.payload.isEmpty } == true)
        }
    }

    /// Home Assistant's birth: what it may have lost while subscribing goes again, `reannounceBatch` devices
    /// at a time (a burst of thousands overflows the broker's queue for it: docs/performance.md).
    @Test func theBirthReannouncementGoesOutAFewDevicesAtATime() async throws {
        let t = InMemoryTransport()
        let clock = ManualClock()
        let e = engine(t, mode: .entity, clock: clock, batch: 10)
        let lamps = (0..<35).map { ScriptedAdapter.lamp("lamp-\($0)", name: "lamp\($0)") }
        let states: @Sendable () -> Int = { t.published.filter { $0.topic.hasPrefix("b/test/lamp") && !$0.topic.hasSuffix("/availability") }.count }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [ScriptedAdapter(devices: lamps)]) }
            defer { t.finish() }
            try await waitUntil("every first state") { states() == 35 }
            // The health loop and the settle timer sleep already; the re-announcement's waits come on top.
            let idle = clock.sleeping
            t.inject(.message(InboundMessage(topic: "homeassistant/status", payload: Array("online".utf8))))
            for expected in [45, 55, 65, 70] {
                try await waitUntil("the re-announcement asleep") { clock.sleeping > idle }
                clock.advance(by: .seconds(3))
                try await waitUntil("\(expected) states") { states() >= expected }
                #expect(states() == expected)
            }
        }
    }
}

/// A per-entity config as an earlier run retained it (it points at the bridge's topics, so the sweep reads
/// it as this bridge's).
enum EntityConfig {
    static func of(_ topic: String, _ builder: DiscoveryBuilder) -> String {
        let entry = builder.entries(adapter: "test", name: "lamp", device: ScriptedAdapter.lamp()).first { $0.topic == topic }!
        return String(decoding: entry.payload.bytes, as: UTF8.self)
    }
}
