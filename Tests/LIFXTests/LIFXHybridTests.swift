import Foundation
import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Both transports together, for longer than a poll or three: the cloud simulator over HTTP and the LAN
/// simulator over UDP (both on loopback), the bridge in-process with a real broker.
@Suite(.serialized) struct LIFXHybridTests {
    static let token = "hybrid-token"
    /// The cloud's Kitchen light, which the LAN has too (same serial, same group and location ids).
    static let shared = "d073d5000001"
    static let kitchenGroup = "06e3ec50395511e9a0757200055bf1c0"

    /// The demo's LAN lights, and the cloud's Kitchen on the LAN as well.
    static func lanDevices() -> [LIFXLANSimulator.Device] {
        var kitchen = LIFXLANSimulator.Device(serial: shared, label: "Kitchen", product: 27)
        kitchen.group = "Kitchen"
        kitchen.groupID = kitchenGroup
        kitchen.location = LIFXCloudSimulator.demoHome.name
        kitchen.locationID = LIFXCloudSimulator.demoHome.id
        return LIFXLANSimulator.demoDevices() + [kitchen]
    }

    static func settings(cloud: LIFXCloudSimulator, lanPort: Int, poll: Double, lanPoll: Double, offlineAfter: Double) -> LIFXSettings {
        var s = LIFXSettings()
        s.token = token
        s.apiURL = cloud.apiURL
        s.pollInterval = poll
        s.minInterval = 0.05
        s.retryDelay = 0.05
        s.lan.enabled = true
        s.lan.hosts = ["127.0.0.1:\(lanPort)"]
        s.lan.broadcast = []
        s.lan.pollInterval = lanPoll
        s.lan.offlineAfter = offlineAfter
        s.lan.discoveryGaps = [0.5]
        return s
    }

    /// A LAN-only light in the cloud's Kitchen group and home location (the ids real LIFX shares).
    static func kitchenDesk() -> LIFXLANSimulator.Device {
        var desk = LIFXLANSimulator.Device(serial: "d073d5100001", label: "Desk", product: 27)
        desk.group = "Kitchen"
        desk.groupID = kitchenGroup
        desk.locationID = LIFXCloudSimulator.demoHome.id
        return desk
    }

    /// What a subscriber to `<base>/#` saw, judged: no removal, each device added once under one name, no
    /// name clash, one result per transaction.
    static func judge(_ b: BridgeUnderTest, transactions: [String], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let events = b.probe.messages(on: "\(b.base)/bridge/event").compactMap { try? JSONValue.parse($0.payload) }
        let removed = events.filter { $0["type"] == "device_removed" }
        #expect(removed.isEmpty, "removed: \(removed)", sourceLocation: sourceLocation)
        var added: [String: [String]] = [:]
        for e in events where e["type"] == "device_added" {
            added[e["data"]?["id"]?.stringValue ?? "?", default: []].append(e["data"]?["name"]?.stringValue ?? "?")
        }
        #expect(added.values.allSatisfy { $0.count == 1 }, "added more than once: \(added.filter { $0.value.count > 1 })", sourceLocation: sourceLocation)
        let names = added.values.flatMap { $0 }
        #expect(Set(names).count == names.count, "one name for two devices: \(names.sorted())", sourceLocation: sourceLocation)
        let clashes = b.probe.messages(on: "\(b.base)/bridge/log").filter { $0.payload.contains("clashes with another device") }
        #expect(clashes.isEmpty, "\(clashes.map(\.payload))", sourceLocation: sourceLocation)
        let results = b.probe.messages.filter { $0.topic.hasSuffix("/result") }.compactMap { try? JSONValue.parse($0.payload) }
        var answered: [String: Int] = [:]
        for r in results { if case .string(let t)? = r["transaction"] { answered[t, default: 0] += 1 } }
        for t in transactions { #expect(answered[t] == 1, "transaction \(t): \(answered[t] ?? 0) results", sourceLocation: sourceLocation) }
    }

    /// Commands whose parts fail on both transports (a LAN light that answers nothing, a cloud that answers
    /// 500 three times) each get their error, and afterwards no outcome of theirs is left anywhere: an outcome
    /// kept for a command that stopped waiting (the first part failed) would show here.
    @Test func failedCommandsLeaveNoOutcomeBehind() async throws {
        let cloud = try await LIFXCloudSimulator.start(token: Self.token, lights: LIFXCloudSimulator.demoLights())
        let lan = try LIFXLANSimulator.start(devices: [Self.kitchenDesk()])
        defer { lan.stop() }
        let adapter = LIFXAdapter(settings: Self.settings(cloud: cloud, lanPort: lan.port, poll: 3600, lanPoll: 3600, offlineAfter: 90))
        try await withTeardown {
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: adapter) { b in
                let lifx = "\(b.base)/lifx"
                try await b.waitLIFX("desk") { $0["via"] == "lan" }
                try await b.waitLIFX("group/kitchen") { $0["lights"] == 2 }
                lan.setLoss(1)
                cloud.injectFailures([500, 500, 500, 500, 500, 500, 500, 500, 500])
                var transactions: [String] = []
                for i in 0..<3 {
                    b.probe.publish("\(lifx)/group/kitchen/set", #"{"brightness":\#(20 + i),"transaction":"g\#(i)"}"#)
                    transactions.append("g\(i)")
                }
                b.probe.publish("\(lifx)/desk/set", #"{"state":"OFF","transaction":"d"}"#)
                transactions.append("d")
                // While they are on their way their outcomes exist (the count counts).
                try await waitUntil("outcomes in flight", timeout: 5) { adapter.outstandingOutcomes > 0 }
                for t in transactions {
                    try await b.probe.waitFor("result \(t)", timeout: 60) { ms in ms.contains { $0.topic.hasSuffix("/result") && $0.payload.contains(#""transaction":"\#(t)""#) } }
                }
                let results = b.probe.messages.filter { $0.topic.hasSuffix("/result") }
                #expect(results.count == transactions.count && results.allSatisfy { $0.payload.contains(#""status":"error""#) })
                try await waitUntil("no outcome left", timeout: 10) { adapter.outstandingOutcomes == 0 }
                try Self.judge(b, transactions: transactions)
            }
        } teardown: {
            await cloud.stop()
        }
    }

    /// Reloads the adapter `rounds` times, sending `commands` (light names, one command each) while each
    /// reload runs; waits for every result and returns those that were not ok.
    static func commandsAcrossReloads(_ b: BridgeUnderTest, settings: LIFXSettings, rounds: Int, lights: [String]) async throws
        -> (transactions: [String], refused: [String]) {
        var transactions: [String] = []
        for round in 0..<rounds {
            let replaced = Task { await b.bridge.engine.replaceAdapters(start: [LIFXAdapter(settings: settings)], remove: []) }
            for (i, light) in lights.enumerated() {
                let t = "r\(round)\(light)\(i)"
                b.probe.publish("\(b.base)/lifx/\(light)/set", #"{"brightness":\#(10 + i),"transaction":"\#(t)"}"#)
                transactions.append(t)
            }
            await replaced.value
        }
        for t in transactions {
            try await b.probe.waitFor("result \(t)", timeout: 60) { ms in ms.contains { $0.topic.hasSuffix("/result") && $0.payload.contains(#""transaction":"\#(t)""#) } }
        }
        let refused = b.probe.messages.filter { $0.topic.hasSuffix("/result") && !$0.payload.contains(#""status":"ok""#) }.map(\.payload)
        return (transactions, refused)
    }

    /// A reload's new instance is routed commands at once (its lights carried over), before its run has
    /// opened the cloud's client and the LAN's socket: they wait for them and are carried out, never refused
    /// as "not connected" or "not reachable on the LAN".
    @Test func commandsRightAfterAReloadWaitForTheTransports() async throws {
        let cloud = try await LIFXCloudSimulator.start(token: Self.token, lights: LIFXCloudSimulator.demoLights())
        let lan = try LIFXLANSimulator.start(devices: [Self.kitchenDesk()])
        defer { lan.stop() }
        let settings = Self.settings(cloud: cloud, lanPort: lan.port, poll: 3600, lanPoll: 3600, offlineAfter: 90)
        try await withTeardown {
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: LIFXAdapter(settings: settings)) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "cloud" }
                try await b.waitLIFX("desk") { $0["via"] == "lan" }
                let (transactions, refused) = try await Self.commandsAcrossReloads(b, settings: settings, rounds: 5,
                                                                                  lights: ["kitchen", "desk", "kitchen", "desk", "kitchen", "desk", "kitchen", "desk"])
                #expect(refused.isEmpty, "\(refused)")
                try Self.judge(b, transactions: transactions)
            }
        } teardown: {
            await cloud.stop()
        }
    }

    /// The same with the LAN alone (no token): commands right after a reload wait for the new instance's
    /// socket instead of finding none ("not reachable on the LAN").
    @Test func lanCommandsRightAfterAReloadWaitForTheSocket() async throws {
        let lan = try LIFXLANSimulator.start(devices: [LIFXLANSimulator.Device(serial: "d073d5100001", label: "Desk", product: 27)])
        defer { lan.stop() }
        var settings = LIFXSettings()
        settings.lan.enabled = true
        settings.lan.hosts = ["127.0.0.1:\(lan.port)"]
        settings.lan.broadcast = []
        settings.lan.pollInterval = 3600
        settings.lan.discoveryGaps = [0.5]
        let lanOnly = settings
        try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: LIFXAdapter(settings: lanOnly)) { b in
            try await b.waitLIFX("desk") { $0["via"] == "lan" }
            let (_, refused) = try await Self.commandsAcrossReloads(b, settings: lanOnly, rounds: 8, lights: ["desk", "desk", "desk"])
            #expect(refused.isEmpty, "\(refused)")
        }
    }

    /// A long run of both together: cloud listings every 0.3 s (well over 20), LAN polls every
    /// 0.5 s, the LAN peer leaving and coming back three times, commands all along. No light a transport
    /// still sees is removed, nothing is published under two names, every command gets one result, the
    /// light both transports know goes over the cloud while the LAN is away and back over the LAN after, and
    /// no outcome is left at the end.
    @Test func bothTransportsTogetherThroughListingsAndLANOutages() async throws {
        let cloud = try await LIFXCloudSimulator.start(token: Self.token, lights: LIFXCloudSimulator.demoLights(),
                                                       scenes: LIFXCloudSimulator.demoScenes())
        var lan = try LIFXLANSimulator.start(devices: Self.lanDevices())
        let port = lan.port
        let adapter = LIFXAdapter(settings: Self.settings(cloud: cloud, lanPort: port, poll: 0.3, lanPoll: 0.5, offlineAfter: 2))
        try await withTeardown {
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: adapter) { b in
                let lifx = "\(b.base)/lifx"
                for name in ["desk", "shelf_strip", "candle", "porch", "clean", "living_ceiling", "living_ceiling_uplight", "hall_lamp", "lounge_left"] {
                    try await b.waitLIFX(name) { _ in true }
                }
                try await b.waitLIFX("kitchen", "over the LAN") { $0["via"] == "lan" }
                try await b.waitLIFX("location/home") { $0["lights"] == 11 }
                var transactions: [String] = []
                var n = 0
                /// A round of commands: a LAN light, a cloud light, the light on both, a group across both.
                func commands() {
                    for target in ["desk", "hall_lamp", "kitchen", "group/kitchen", "living_ceiling_uplight"] {
                        n += 1
                        b.probe.publish("\(lifx)/\(target)/set", #"{"brightness":\#(10 + n % 80),"transaction":"t\#(n)"}"#)
                        transactions.append("t\(n)")
                    }
                }
                /// Until every command sent so far has its result.
                func answered() async throws {
                    for t in transactions {
                        try await b.probe.waitFor("result \(t)", timeout: 60) { ms in
                            ms.contains { $0.topic.hasSuffix("/result") && $0.payload.contains(#""transaction":"\#(t)""#) }
                        }
                    }
                }
                func availability(_ name: String, _ payload: String) async throws {
                    try await b.probe.waitFor("\(name) \(payload)") { ms in ms.last { $0.topic == "\(lifx)/\(name)/availability" }?.payload == payload }
                }
                for cycle in 0..<3 {
                    // Up: commands flow while the cloud lists.
                    for _ in 0..<4 {
                        commands()
                        try await Task.sleep(for: .milliseconds(300))
                    }
                    try await answered()
                    // Away: the LAN lights go offline (not removed); the shared light goes over the cloud.
                    lan.stop()
                    try await availability("desk", "offline")
                    try await b.waitLIFX("kitchen", "over the cloud (cycle \(cycle))") { $0["via"] == "cloud" && $0["connected"] == true }
                    commands()
                    try await Task.sleep(for: .milliseconds(500))
                    // Back, on the same port.
                    lan = try LIFXLANSimulator.start(devices: Self.lanDevices(), port: port)
                    try await b.waitLIFX("desk", "back (cycle \(cycle))") { $0["connected"] == true }
                    try await availability("desk", "online")
                    try await b.waitLIFX("kitchen", "over the LAN again (cycle \(cycle))") { $0["via"] == "lan" }
                }
                commands()
                try await answered()
                let listings = cloud.requests.filter { $0.method == "GET" && $0.path.hasSuffix("/lights/all") }.count
                #expect(listings >= 20, "only \(listings) cloud listings")
                // Every light of both transports is still there, each under its one name.
                for name in ["desk", "shelf_strip", "candle", "porch", "clean", "living_ceiling", "kitchen", "hall_lamp", "group/study", "location/home"] {
                    #expect(b.lifxState(name) != nil, "\(name) has no state")
                }
                // Commands to the cloud's lights and to the light both know never failed; the LAN's failed only while it was away.
                let results = b.probe.messages.filter { $0.topic.hasSuffix("/result") }
                for target in ["hall_lamp", "kitchen"] {
                    let failed = results.filter { $0.topic == "\(lifx)/\(target)/result" && $0.payload.contains(#""status":"error""#) }
                    #expect(failed.isEmpty, "\(target): \(failed.map(\.payload))")
                }
                try Self.judge(b, transactions: transactions)
                try await waitUntil("no outcome left", timeout: 10) { adapter.outstandingOutcomes == 0 }
            }
        } teardown: {
            lan.stop()
            await cloud.stop()
        }
    }
}

/// The soak's LIFX invariant (docs/testing.md "The soak run"), shown catching what it is for.
@Suite struct LIFXSoakInvariantTests {
    func health(_ n: Int) -> [UInt8] { Array(#"{"adapters":{"lifx":{"outcomes":\#(n),"queue":0}}}"#.utf8) }

    @Test func outcomesThatClimbPastTheBoundAreABreach() {
        var w = LIFXOutcomeWatch(bound: 20)
        #expect(w.health(health(3)) == nil && w.health(health(20)) == nil)
        #expect(w.health(health(21))?.contains("outcomes not taken: 21") == true)
        #expect(w.health(Array(#"{"adapters":{"imp":{}}}"#.utf8)) == nil && w.highest == 21)
    }
}

extension LIFXHybridTests {
    /// The LAN finds its lights before the cloud's first listing comes (a slow cloud): nothing is listed
    /// until then, and then the LAN's lights are published with the rest.
    @Test func lightsTheLANFoundBeforeTheFirstListingArePublishedWithIt() async throws {
        let cloud = try await LIFXCloudSimulator.start(token: Self.token, lights: LIFXCloudSimulator.demoLights())
        cloud.setDelay(3)
        let lan = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices())
        defer { lan.stop() }
        try await withTeardown {
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] },
                                           adapter: LIFXAdapter(settings: Self.settings(cloud: cloud, lanPort: lan.port, poll: 3600, lanPoll: 3600,
                                                                                       offlineAfter: 90))) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "cloud" }
                for name in ["desk", "candle", "living_ceiling_uplight", "group/study"] {
                    try await b.waitLIFX(name, timeout: 10) { $0["via"] == "lan" }
                }
            }
        } teardown: {
            await cloud.stop()
        }
    }
}
