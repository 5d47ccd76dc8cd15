import CMosquitto
import Foundation
import Synchronization
import SwitchyardTestSupport

/// The `switchyard` process as the process scenarios run it: `devices` virtual lights on the given broker,
/// plus `extraYAML` (top-level sections).
struct BridgeUnderFault {
    let child: ChildProcess
    let base: String
    let dir: URL
    /// Just before the process was spawned (its config written already).
    let startedAt: Date

    static func start(port: Int, devices: Int, base: String = "flt\(UUID().uuidString.prefix(4).lowercased())", discovery: Bool = false,
                      preConsole: Bool = false, extraYAML: String = "") throws -> BridgeUnderFault {
        guard let bin = TestEnvironment.switchyardBinary() else { throw BenchError("switchyard executable not found next to switchyard-bench") }
        let dir = TestEnvironment.makeTempDir("bench")
        // The console is off unless the scenario gives a web: section (its figures then compare with earlier runs).
        let web = extraYAML.contains("web:") || preConsole ? "" : "web: {enabled: false}\n"
        var yaml = "log: {level: error}\nmqtt:\n  url: mqtt://127.0.0.1:\(port)\n  base_topic: \(base)\n\(web)\(extraYAML)homeassistant: {discovery: \(discovery)}\nvirtual:\n  devices:\n"
        for i in 0..<devices { yaml += "    - {name: l\(i), type: light}\n" }
        let config = dir.appendingPathComponent("config.yaml").path
        try yaml.write(toFile: config, atomically: true, encoding: .utf8)
        let startedAt = Date()
        let child = try ChildProcess(path: bin, arguments: ["run", "-c", config], outputFile: dir.appendingPathComponent("out.log").path)
        return BridgeUnderFault(child: child, base: base, dir: dir, startedAt: startedAt)
    }

    /// One of the process's /proc files (they report size 0: read to the end, not by their stat size).
    func proc(_ file: String) -> String {
        (try? FileHandle(forReadingAtPath: "/proc/\(child.pid)/\(file)")?.readToEnd()).flatMap { $0 }.map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    /// A field of /proc/<pid>/status in MB (VmRSS, VmHWM, RssAnon, …), read now or from one `status` read
    /// (figures that must add up come from the same instant).
    func mb(_ key: String, in status: String? = nil) -> Double {
        for line in (status ?? proc("status")).split(separator: "\n") where line.hasPrefix(key + ":") {
            return (Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) / 1024
        }
        return 0
    }
}

/// A reproducible stream of hostile payloads (SplitMix64), a mix of what a peer can send: random bytes, deep
/// nesting, huge numbers, invalid UTF-8, 100 kB transactions, payloads just under and over max_payload.
struct HostileMix {
    var seed: UInt64
    let maxPayload: Int

    mutating func next() -> UInt64 {
        seed &+= 0x9E37_79B9_7F4A_7C15
        var z = seed
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(n, 1))) }

    /// The i-th payload: rare big ones (1 % each), many small ones.
    mutating func payload(_ i: Int) -> [UInt8] {
        switch i % 100 {
        case 0: return Array(repeating: UInt8(ascii: "["), count: 200_000)
        case 1: return Self.padded(#"{"state":"ON","x":""#, to: maxPayload - 1)
        case 2: return Self.padded(#"{"state":"ON","x":""#, to: maxPayload + 1)
        case 3: return Array(#"{"state":"ON","transaction":""#.utf8) + Array(repeating: UInt8(ascii: "t"), count: 100_000) + Array(#""}"#.utf8)
        default: break
        }
        switch below(9) {
        case 0: return (0..<(1 + below(512))).map { _ in UInt8(truncatingIfNeeded: next()) }
        case 1:
            let depth = 1_000 + below(4_000)
            return Array(String(repeating: #"{"a":"#, count: depth).utf8)
                + Array("1".utf8) + Array(repeating: UInt8(ascii: "}"), count: depth)
        case 2: return Array(#"{"brightness":1e999999,"color_temp":-1e-999999}"#.utf8)
        case 3: return Array(#"{"brightness":"#.utf8) + (0..<5_000).map { _ in UInt8(ascii: "0") + UInt8(below(10)) } + [UInt8(ascii: "}")]
        case 4: return Array(#"{"state":""#.utf8) + [0xFF, 0xFE, 0xC0, 0x80, 0xED, 0xA0, 0x80] + Array(#""}"#.utf8)
        case 5: return Array(#"{"brightness":"ON","state":42,"color":{"h":"x"},"nope":null}"#.utf8)
        case 6: return Array(("[" + (0..<1_000).map { "{\"k\($0)\":\($0)}" }.joined(separator: ",") + "]").utf8)
        case 7: return Array(("{" + (0..<1_000).map { "\"key\($0)\":\"\(String(repeating: "v", count: 8))\"" }.joined(separator: ",") + "}").utf8)
        default: return Array(#"{"state":"ON","transaction":"#.utf8) + Array(String(repeating: "[", count: 3_000).utf8)
        }
    }

    static func padded(_ prefix: String, to size: Int) -> [UInt8] {
        var b = Array(prefix.utf8)
        let tail = Array(#""}"#.utf8)
        b += Array(repeating: UInt8(ascii: "p"), count: max(0, size - b.count - tail.count))
        return b + tail
    }

    /// Command and request topics, in turn.
    static func topic(_ i: Int, base: String, devices: Int) -> String {
        let d = "\(base)/virtual/l\(i % devices)"
        switch (i / 7) % 7 {
        case 0: return "\(d)/set"
        case 1: return "\(d)/set/brightness"
        case 2: return "\(d)/set/state"
        case 3: return "\(d)/get"
        case 4: return "\(base)/bridge/request/health_check"
        case 5: return "\(base)/bridge/request/nope"
        default: return "\(d)/set"
        }
    }
}

extension SwitchyardBench {
    /// `hostile`: N hostile payloads at full speed (QoS 0 and 1 in turn) against the real process with
    /// 10 lights, then a `health_check` on the same connection (so the broker hands it to the bridge after
    /// the whole burst). A plain subscriber to the same topics, which only counts what it receives, is the
    /// baseline: the bridge's inbound rate is given as a ratio to its rate, and the answer's delay is counted
    /// from the moment that subscriber had the whole burst. Then peak and settled memory against idle.
    func hostileFigures(port: Int) async throws -> [Figure] {
        let devices = 10
        let bridge = try BridgeUnderFault.start(port: port, devices: devices)
        defer { bridge.child.terminateAndReap() }
        let base = bridge.base
        let states = try await CountingSubscriber(port: port, filters: ["\(base)/virtual/+"], trackTopics: true)
        defer { states.close() }
        guard await states.waitForTopics(devices, timeout: 60) else { throw BenchError("hostile: the lights' states did not arrive") }
        try await Task.sleep(for: .seconds(1))
        let idleRSS = bridge.mb("VmRSS")
        let answers = try await CountingSubscriber(port: port, filters: ["\(base)/bridge/response/#"], trackTopics: true)
        defer { answers.close() }
        // The same subscriptions as the bridge's own for these topics, QoS 1 like the bridge's.
        let plain = try await CountingSubscriber(port: port, filters: ["\(base)/virtual/+/set", "\(base)/virtual/+/set/+", "\(base)/virtual/+/get",
                                                                       "\(base)/bridge/request/#"], decodes: false)
        defer { plain.close() }

        var mix = HostileMix(seed: 18, maxPayload: 256 * 1024)
        let n = hostilePayloads
        let raw = try RawStream.connect(port: port)
        defer { raw.close() }
        let waiter = await answers.expect(topic: "\(base)/bridge/response/health_check", containing: "hostile-final", timeout: 600)
        let start = Date()
        for i in 0..<n {
            raw.publish(HostileMix.topic(i, base: base, devices: devices), mix.payload(i), qos: Int32(i % 2))
            // The bench's own client must not queue everything in its memory: wait for it to drain a little.
            if i % 500 == 499 { try await raw.drain() }
        }
        raw.publish("\(base)/bridge/request/health_check", Array(#"{"transaction":"hostile-final"}"#.utf8), qos: 1)
        try await raw.drain()
        let sent = Date().timeIntervalSince(start)
        guard await plain.waitForCount(n + 1, timeout: 600) else { throw BenchError("hostile: the plain subscriber got \(plain.count) of \(n + 1)") }
        let plainEnd = plain.lastArrival
        guard await waiter.value else { throw BenchError("hostile: health_check got no answer") }
        let answeredAt = answers.waiterHitAt ?? Date()
        let plainRate = Double(n) / plainEnd.timeIntervalSince(start)
        let bridgeRate = Double(n) / answeredAt.timeIntervalSince(start)
        let peak = bridge.mb("VmHWM")
        try await Task.sleep(for: .seconds(3))
        let after = bridge.mb("VmRSS")
        guard bridge.child.isRunning else { throw BenchError("hostile: the bridge died") }
        return [
            Figure(scenario: "hostile", name: "\(n) hostile payloads published in", value: sent, unit: "s"),
            Figure(scenario: "hostile", name: "plain subscriber: the same payloads received", value: plainRate, unit: "msg/s"),
            Figure(scenario: "hostile", name: "bridge: the same payloads processed (goal: ratio ≥ 0.8)", value: bridgeRate, unit: "msg/s",
                   ratio: bridgeRate / plainRate, baseline: "plain subscriber"),
            Figure(scenario: "hostile", name: "health_check answered after the burst (goal ≤ 1000)", value: max(0, answeredAt.timeIntervalSince(plainEnd)) * 1000,
                   unit: "ms"),
            Figure(scenario: "hostile", name: "VmRSS idle (10 lights)", value: idleRSS, unit: "MB"),
            Figure(scenario: "hostile", name: "VmHWM − idle (goal ≤ 48)", value: peak - idleRSS, unit: "MB"),
            Figure(scenario: "hostile", name: "VmRSS 3 s after the burst − idle (goal ≤ 16)", value: after - idleRSS, unit: "MB"),
        ]
    }

    /// `reconnect`: a broker without persistence killed (-9) and restarted `restarts` times, down
    /// 0.2–2 s and up 1–3 s at a time, with 1 000 lights on the bridge: how long from the broker
    /// accepting connections until the bridge is back, and until the whole retained tree is back.
    func reconnectFigures() async throws -> [Figure] {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let devices = self.devices
        let bridge = try BridgeUnderFault.start(port: broker.port, devices: devices)
        defer { bridge.child.terminateAndReap() }
        let base = bridge.base
        let first = try await CountingSubscriber(port: broker.port, filters: ["\(base)/virtual/+"], trackTopics: true)
        guard await first.waitForTopics(devices, timeout: 60) else { throw BenchError("reconnect: the lights' states did not arrive") }
        first.close()
        var mix = HostileMix(seed: 20, maxPayload: 0)
        var back: [Double] = []
        var tree: [Double] = []
        var longestAway = 0.0
        for _ in 0..<restarts {
            await broker.kill()
            try await Task.sleep(for: .milliseconds(200 + mix.below(1_800)))
            try await broker.start()
            let up = Date()
            let upFor = 1.0 + Double(mix.below(2_000)) / 1000
            // A subscriber of our own, first in: it sees the bridge's birth and every retained state come back.
            let sub = try await CountingSubscriber(port: broker.port, filters: ["\(base)/bridge/state", "\(base)/virtual/+"], trackTopics: true)
            defer { sub.close() }
            let online = await sub.waitUntil(timeout: upFor - Date().timeIntervalSince(up)) { $0.topics["\(base)/bridge/state"] == "online" }
            let onlineAt = Date().timeIntervalSince(up)
            if online { back.append(onlineAt) }
            longestAway = max(longestAway, online ? onlineAt : upFor)
            if await sub.waitUntil(timeout: max(0, upFor - Date().timeIntervalSince(up)), { $0.topics.count >= devices + 1 }) {
                tree.append(Date().timeIntervalSince(up))
            }
            let left = upFor - Date().timeIntervalSince(up)
            if left > 0 { try await Task.sleep(for: .seconds(left)) }
        }
        func pct(_ xs: [Double], _ p: Double) -> Double {
            let s = xs.sorted()
            return s.isEmpty ? 0 : s[min(s.count - 1, Int(Double(s.count) * p))]
        }
        return [
            Figure(scenario: "reconnect", name: "broker up → bridge online, median (\(back.count) of \(restarts) lifetimes)", value: pct(back, 0.5) * 1000, unit: "ms"),
            Figure(scenario: "reconnect", name: "broker up → bridge online, worst", value: (back.max() ?? 0) * 1000, unit: "ms"),
            Figure(scenario: "reconnect", name: "broker up → \(devices) retained states back, median (\(tree.count) of \(restarts))", value: pct(tree, 0.5) * 1000, unit: "ms"),
            Figure(scenario: "reconnect", name: "broker up → \(devices) retained states back, worst", value: (tree.max() ?? 0) * 1000, unit: "ms"),
            Figure(scenario: "reconnect", name: "longest time away while the broker was up", value: longestAway * 1000, unit: "ms"),
        ]
    }
}

/// A plain libmosquitto publisher of raw bytes that can wait until what it published has gone out
/// (libmosquitto reports a QoS 0 message once written, a QoS 1 message once acknowledged).
final class RawStream: @unchecked Sendable {
    let handle: OpaquePointer
    let done = Atomic<Int>(0)
    var published = 0

    private init(handle: OpaquePointer) { self.handle = handle }

    static func connect(port: Int) throws -> RawStream {
        _ = CountingSubscriber.initialised
        guard let h = mosquitto_new("bench-raw-\(UUID().uuidString.prefix(6))", true, nil) else { throw BenchError("mosquitto_new") }
        let stream = RawStream(handle: h)
        mosquitto_user_data_set(h, Unmanaged.passUnretained(stream).toOpaque())
        mosquitto_publish_callback_set(h) { _, obj, _ in
            guard let obj else { return }
            Unmanaged<RawStream>.fromOpaque(obj).takeUnretainedValue().done.add(1, ordering: .relaxed)
        }
        mosquitto_int_option(h, MOSQ_OPT_SEND_MAXIMUM, 100)
        mosquitto_int_option(h, MOSQ_OPT_TCP_NODELAY, 1)
        mosquitto_loop_start(h)
        guard mosquitto_connect(h, "127.0.0.1", Int32(port), 60) == MOSQ_ERR_SUCCESS.rawValue else { throw BenchError("raw connect") }
        return stream
    }

    func publish(_ topic: String, _ payload: [UInt8], qos: Int32, retain: Bool = false) {
        let rc = payload.withUnsafeBytes { b in mosquitto_publish(handle, nil, topic, Int32(b.count), b.baseAddress, qos, retain) }
        if rc == MOSQ_ERR_SUCCESS.rawValue { published += 1 }
    }

    /// Waits until everything published so far has gone out (at most 60 s).
    func drain() async throws {
        for _ in 0..<60_000 where done.load(ordering: .relaxed) < published { try await Task.sleep(for: .milliseconds(1)) }
    }

    func close() {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
        mosquitto_destroy(handle)
    }
}
