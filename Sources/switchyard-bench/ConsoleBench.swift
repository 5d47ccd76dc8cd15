import Foundation
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// The console's figures (docs/console.md "What it costs"): a state change → visible in an open page, with
/// every device churning; and (in `memory`) the bridge's peak memory with the console and one page open.
extension SwitchyardBench {
    /// One waiter at a time for a payload on one topic, answered from the page's reading task.
    final class Arrival: Sendable {
        let state = Locked<(needle: String?, at: ContinuousClock.Instant?)>((nil, nil))
        func arm(_ needle: String) { state.withLock { $0 = (needle, nil) } }
        func see(_ payload: String?, _ at: ContinuousClock.Instant) {
            state.withLock { s in if let n = s.needle, s.at == nil, payload?.contains(n) == true { s.at = at } }
        }
        var at: ContinuousClock.Instant? { state.withLock { $0.at } }
    }

    /// `/set` on one light published → its new state in a page's WebSocket (and, in the same run, at a MQTT
    /// subscriber), while every other light gets about `rate` commands a second between them.
    func consoleFigures(port: Int) async throws -> [Figure] {
        let base = "con\(UUID().uuidString.prefix(4).lowercased())"
        let web = TestEnvironment.freePort()
        let bridge = try BridgeUnderFault.start(port: port, devices: devices, base: base, extraYAML: "web: {listen: \"127.0.0.1:\(web)\"}\n")
        defer { bridge.child.terminateAndReap() }
        let sub = try await CountingSubscriber(port: port, filters: ["\(base)/virtual/+"], trackTopics: true)
        defer { sub.close() }
        guard await sub.waitForTopics(devices, timeout: 60) else { throw BenchError("console: only \(sub.distinctTopics) states") }
        let target = "\(base)/virtual/l0"
        let arrival = Arrival()
        try await PageClient.waitForListener(port: web)
        let page = PageClient(port: web, keepFrames: false) { topic, payload, at in if topic == target { arrival.see(payload, at) } }
        defer { page.close() }
        do {
            try await waitUntil("the page has every light", timeout: 60) { page.topicCount >= self.devices }
        } catch {
            let end = await page.ended(within: 0).map { "\($0)" } ?? "open"
            throw BenchError("console: the page has \(page.topicCount) of \(devices) lights after 60 s; its connection: \(end)")
        }
        let pub = try await MQTTProbe.connect(port: port)
        defer { pub.close() }
        let churner = try await MQTTProbe.connect(port: port)
        defer { churner.close() }
        let (devices, rate) = (self.devices, max(20, consoleChurn))
        let churn = Task {
            var i = 0
            while !Task.isCancelled {
                for _ in 0..<(rate / 20) {
                    churner.publish("\(base)/virtual/l\(1 + i % (devices - 1))/set", #"{"brightness": \#(1 + i % 99)}"#)
                    i += 1
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
            return i
        }
        var toPage: [Double] = [], toMQTT: [Double] = []
        let samples = min(commands, 1000)
        for i in 0..<samples {
            let value = 1 + i % 99
            let needle = "\"brightness\":\(value),"
            arrival.arm(needle)
            let waiter = await sub.expect(topic: target, containing: needle, timeout: 10)
            let t0 = ContinuousClock.now
            pub.publish("\(target)/set", #"{"brightness": \#(value)}"#)
            guard await waiter.value else { throw BenchError("console: command \(i) got no state") }
            let mqtt = ContinuousClock.now
            let deadline = t0 + .seconds(10)
            while arrival.at == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .microseconds(200)) }
            guard let at = arrival.at else { throw BenchError("console: command \(i)'s state never reached the page") }
            toPage.append((at - t0).seconds * 1000)
            toMQTT.append((mqtt - t0).seconds * 1000)
            try await Task.sleep(for: .milliseconds(20))
        }
        churn.cancel()
        let churned = await churn.value
        let metrics = PrometheusText.samples((try? HTTPProbe.request(port: web, "/metrics").body) ?? "")
        toPage.sort()
        toMQTT.sort()
        func pct(_ a: [Double], _ p: Double) -> Double { a[min(a.count - 1, Int(Double(a.count) * p))] }
        // A page that fell behind (sent everything again) or was cut off would make the figures meaningless: said.
        let trouble = (metrics["switchyard_web_resyncs_total"] ?? 0) + (metrics[#"switchyard_web_clients_cut_total{reason="slow"}"#] ?? 0)
        let what = "\(devices) lights, \(churned) other commands meanwhile" + (trouble > 0 ? "; \(Int(trouble)) page resyncs or cuts!" : "")
        return [
            Figure(scenario: "console", name: "/set → state in an open page p50 (\(what))", value: pct(toPage, 0.5), unit: "ms"),
            Figure(scenario: "console", name: "/set → state in an open page p99", value: pct(toPage, 0.99), unit: "ms"),
            Figure(scenario: "console", name: "/set → state in an open page max", value: toPage.last ?? 0, unit: "ms"),
            Figure(scenario: "console", name: "/set → state at a MQTT subscriber p50 (same run)", value: pct(toMQTT, 0.5), unit: "ms"),
            Figure(scenario: "console", name: "/set → state at a MQTT subscriber p99 (same run)", value: pct(toMQTT, 0.99), unit: "ms"),
        ]
    }
}
