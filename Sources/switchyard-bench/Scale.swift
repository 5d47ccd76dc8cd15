import Foundation
import HomeAssistantSimulators
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// One run of the real `switchyard` process with `devices` virtual lights and, when `entities` > 0, a Home
/// Assistant mirror of that many entities: start-up times, then memory after `churn` seconds of commands
/// and HA changes.
struct ProcessRun {
    /// Process start → every device's retained state at a subscriber that was there before the start.
    var statesMs: Double
    /// Process start → every mirrored entity's state (0 without a mirror).
    var mirroredMs: Double
    /// Commands and HA changes made during the churn.
    var churned: Int
    var hwm: Double
    var rss: Double
    var anon: Double
    var file: Double
    var linkage: String
}

/// The payload of a virtual light's first state: the raw baseline publishes the same bytes.
let lightStatePayload = #"{"brightness":100,"color":{"h":0,"s":0},"color_mode":"color_temp","color_temp":3500,"state":"OFF"}"#

extension SwitchyardBench {
    /// The simulated Home Assistant's entities for the memory figures: sensors with two attributes each.
    static func memoryEntities(_ n: Int) -> [HomeAssistantSimulator.Entity] {
        (0..<n).map { HomeAssistantSimulator.Entity("sensor.s\($0)", "0", ["friendly_name": .string("S \($0)"), "unit_of_measurement": "W"]) }
    }

    func measureProcess(port: Int, devices: Int, entities: Int, churn: Double) async throws -> ProcessRun {
        guard entities > 0 else { return try await measureProcess(port: port, devices: devices, ha: nil, churn: churn) }
        let sim = try await HomeAssistantSimulator.start(token: "bench", entities: Self.memoryEntities(entities))
        return try await withTeardown {
            try await measureProcess(port: port, devices: devices, ha: (sim, entities), churn: churn)
        } teardown: {
            await sim.stop()
        }
    }

    /// `console`: with the console listening and one page open all along, reading everything the devices
    /// view reads (not the mirror's topics).
    func measureProcess(port: Int, devices: Int, ha: (sim: HomeAssistantSimulator, entities: Int)?, churn: Double,
                        console: Bool = false) async throws -> ProcessRun {
        let base = "proc\(UUID().uuidString.prefix(4).lowercased())"
        // The subscribers are there before the process starts: the first state is timed from the start.
        let sub = try await CountingSubscriber(port: port, filters: ["\(base)/virtual/+"], trackTopics: true, topicTarget: devices)
        defer { sub.close() }
        let haState = try await CountingSubscriber(port: port, filters: ["\(base)/ha/sensor/+/state"], trackTopics: true,
                                                   topicTarget: ha?.entities ?? .max)
        defer { haState.close() }
        let web = TestEnvironment.freePort()
        let bridge = try BridgeUnderFault.start(port: port, devices: devices, base: base, discovery: true, preConsole: preConsole,
                                                extraYAML: (ha.map { "ha: {url: \"\($0.sim.url)\", token: bench}\n" } ?? "")
                                                    + (console ? "web: {listen: \"127.0.0.1:\(web)\"}\n" : ""))
        let start = bridge.startedAt
        let child = bridge.child
        defer { child.terminateAndReap() }
        guard await sub.waitForTopics(devices, timeout: 120), let statesAt = sub.targetReachedAt else {
            throw BenchError("startup: only \(sub.distinctTopics) of \(devices) states")
        }
        var mirroredMs = 0.0
        if let ha {
            guard await haState.waitForTopics(ha.entities, timeout: 120), let at = haState.targetReachedAt else {
                throw BenchError("memory: only \(haState.distinctTopics) of \(ha.entities) mirrored states")
            }
            mirroredMs = at.timeIntervalSince(start) * 1000
        }
        if console { try await PageClient.waitForListener(port: web) }
        let page = console ? PageClient(port: web, keepFrames: false) : nil
        defer { page?.close() }
        if let page { try await waitUntil("the page has every light", timeout: 60) { page.topicCount >= devices } }
        let pub = try await MQTTProbe.connect(port: port)
        defer { pub.close() }
        let end = Date().addingTimeInterval(churn)
        var i = 0
        while Date() < end {
            pub.publish("\(base)/virtual/l\(i % devices)/set", #"{"brightness": \#(1 + i % 99)}"#)
            if let ha { ha.sim.set("sensor.s\(i % ha.entities)", state: "\(i)") }
            i += 1
            if i % 50 == 0 { try await Task.sleep(for: .milliseconds(50)) }
        }
        try await Task.sleep(for: .seconds(1))
        guard child.isRunning else { throw BenchError("the bridge died during the churn") }
        let status = bridge.proc("status")
        if let dump = ProcessInfo.processInfo.environment["SWITCHYARD_BENCH_SMAPS"] {
            try? bridge.proc("smaps").write(toFile: dump, atomically: false, encoding: .utf8)
        }
        // Which build is measured: `make bench` measures the deployable one (`make release`: Swift runtime and Foundation linked in).
        let linkage = bridge.proc("maps").contains("libswiftCore.so") ? "Swift runtime as shared libraries" : "Swift runtime linked in"
        return ProcessRun(statesMs: statesAt.timeIntervalSince(start) * 1000, mirroredMs: mirroredMs, churned: i,
                          hwm: bridge.mb("VmHWM", in: status), rss: bridge.mb("VmRSS", in: status), anon: bridge.mb("RssAnon", in: status),
                          file: bridge.mb("RssFile", in: status), linkage: linkage)
    }

    /// A broker of its own for one measurement (configured as the bench's): what an earlier process left
    /// there (its retained tree, a persistent session still subscribed to every discovery config, which the
    /// broker then queues for it) would make each later start-up slower than the one before.
    func onFreshBroker<R>(_ body: (Int) async throws -> R) async throws -> R {
        let broker = try await Broker.start(extraConfig: Self.brokerConfig)
        defer { broker.stop() }
        return try await body(broker.port)
    }

    static func median(_ xs: [Double]) -> Double {
        let s = xs.sorted()
        return s.isEmpty ? 0 : s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
    }

    /// Raw libmosquitto: `count` retained QoS 1 messages round-robin on `topics` topics (as many as messages
    /// by default), from a client connected for the purpose → a subscriber that was there first;
    /// milliseconds until the last arrived. Its own topics, so that no retained copy of an earlier
    /// measurement is counted.
    func rawPublishMs(port: Int, count: Int, topics: Int? = nil, payload: String) async throws -> Double {
        let prefix = "raw\(UUID().uuidString.prefix(6).lowercased())"
        let sub = try await CountingSubscriber(port: port, filters: ["\(prefix)/#"])
        defer { sub.close() }
        let start = Date()
        let raw = try RawPublisher.publish(port: port, topics: (0..<(topics ?? count)).map { "\(prefix)/d\($0)" },
                                           payloads: Array(repeating: payload, count: count), qos: 1, retain: true)
        defer { raw.close() }
        guard await sub.waitForCount(count, timeout: 120) else { throw BenchError("raw: only \(sub.count) of \(count) arrived") }
        return sub.lastAt.timeIntervalSince(start) * 1000
    }

    /// `scale`: start-up and memory at each of `scaleDevices` (with 5× as many HA entities), so that growth is
    /// visible in one run. Per size: raw publishing of as many retained states (the ratio's baseline), the
    /// process with the devices only, and with the devices and the mirror. Heap per device is the devices-only
    /// process's RssAnon over a one-light process's, per entity the mirror's process over the devices-only one.
    /// The start-up ratio is of medians over `scaleRepeats` runs of each, in turn.
    func scaleFigures(port: Int) async throws -> [Figure] {
        var out: [Figure] = []
        let idle = try await onFreshBroker { try await measureProcess(port: $0, devices: 1, entities: 0, churn: scaleChurnSeconds) }
        out.append(Figure(scenario: "scale", name: "RssAnon, one light, after \(Int(scaleChurnSeconds)) s churn (\(idle.linkage))", value: idle.anon, unit: "MB"))
        for n in scaleDevices {
            let e = n * 5
            // Start-up against raw publishing, in turn, `scaleRepeats` times: medians (a shared machine's load
            // moves either by half from one run to the next).
            var raws: [Double] = [], starts: [Double] = []
            for _ in 0..<max(1, scaleRepeats) {
                try await onFreshBroker { port in
                    raws.append(try await rawPublishMs(port: port, count: n, payload: lightStatePayload))
                    starts.append(try await measureProcess(port: port, devices: n, entities: 0, churn: 0).statesMs)
                }
            }
            let raw = Self.median(raws), start = Self.median(starts)
            if ProcessInfo.processInfo.environment["SWITCHYARD_BENCH_VERBOSE"] != nil {
                print("scale \(n): raw runs \(raws.map { Int($0) }) ms, start-up runs \(starts.map { Int($0) }) ms")
            }
            let d = try await onFreshBroker { try await measureProcess(port: $0, devices: n, entities: 0, churn: scaleChurnSeconds) }
            let c = try await onFreshBroker { try await measureProcess(port: $0, devices: n, entities: e, churn: scaleChurnSeconds) }
            let perDevice = (d.anon - idle.anon) * 1_048_576 / Double(n)
            let perEntity = (c.anon - d.anon) * 1_048_576 / Double(e)
            out += [
                Figure(scenario: "scale", name: "\(n): raw: \(n) retained QoS 1 publishes → subscriber (median of \(raws.count))", value: raw, unit: "ms"),
                Figure(scenario: "scale", name: "\(n): start → \(n) retained states (median of \(starts.count))", value: start, unit: "ms", ratio: start / raw),
                Figure(scenario: "scale", name: "\(n): start → \(n) states, with a mirror of \(e)", value: c.statesMs, unit: "ms", ratio: c.statesMs / raw),
                Figure(scenario: "scale", name: "\(n): start → \(e) mirrored entity states", value: c.mirroredMs, unit: "ms"),
                Figure(scenario: "scale", name: "\(n): VmHWM, \(n) devices + \(e) entities, after churn", value: c.hwm, unit: "MB"),
                Figure(scenario: "scale", name: "\(n):   RssAnon (heap, stacks)", value: c.anon, unit: "MB"),
                Figure(scenario: "scale", name: "\(n):   RssFile (binary, shared libraries)", value: c.file, unit: "MB"),
                Figure(scenario: "scale", name: "\(n): VmHWM, \(n) devices only", value: d.hwm, unit: "MB"),
                Figure(scenario: "scale", name: "\(n): heap per device: (RssAnon − one light's) / \(n)", value: perDevice, unit: "B"),
                Figure(scenario: "scale", name: "\(n): heap per entity: (RssAnon − devices-only) / \(e)", value: perEntity, unit: "B"),
            ]
        }
        return out
    }
}
