import Foundation
import Logging
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
@testable import SwitchyardWeb
import SwitchyardWebTesting
import Testing

/// The engine as the console sees it, played by a twin (`ConsoleEngine`): whatever snapshot the test sets,
/// a core that stops answering, and the commands and log lines the console hands it, recorded. The console
/// is the real one, listening on loopback; no engine, no broker (the unit tier).
final class ConsoleEngineTwin: ConsoleEngine, Sendable {
    let bounds = BoundsCounter()
    let state = Locked(EngineSnapshot(version: "twin", uptime: 1, adapters: [], scheme: TopicScheme(base: "t"), stopped: false))
    let wedged = Locked(false)
    let submitted = Locked<[(topic: String, payload: String)]>([])
    let logged = Locked<[(BridgeLogLevel, String)]>([])

    func snapshot() async -> EngineSnapshot { state.withLock { $0 } }
    func submit(topic: String, payload: [UInt8]) async {
        submitted.withLock { $0.append((topic, String(decoding: payload, as: UTF8.self))) }
    }
    func consoleLog(_ level: BridgeLogLevel, _ message: String) async { logged.withLock { $0.append((level, message)) } }
    /// A wedged core never answers: the question waits for as long as the test runs (bounded: 60 s).
    func isAlive() async -> Bool {
        for _ in 0..<600 where wedged.withLock({ $0 }) { try? await Task.sleep(for: .milliseconds(100)) }
        return !wedged.withLock { $0 }
    }

    static func adapter(_ id: String, _ status: AdapterStatus, devices: Int = 1) -> AdapterSnapshot {
        AdapterSnapshot(id: id, status: status, devices: devices, requests: 3, errors: 0, lastError: nil, lastOK: nil, queuedBytes: 0)
    }
}

@Suite struct ConsoleEngineTwinTests {
    /// Runs the real console over the twin and an in-memory transport (connected or not).
    static func with(_ twin: ConsoleEngineTwin, connected: Bool = true, _ body: (Int) async throws -> Void) async throws {
        var settings = SwitchyardConfig.Web()
        settings.port = 0
        var quiet = Logger(label: "switchyard.web")
        quiet.logLevel = .critical
        let transport = InMemoryTransport()
        let feed = ConsoleFeed(scheme: TopicScheme(base: "t"), store: transport)
        let console = ConsoleService(settings: settings, engine: twin, feed: feed, transportStats: { transport.stats() }, logger: quiet)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await console.run() }
            if connected { transport.inject(.connected(sessionPresent: false)) }
            defer {
                twin.wedged.withLock { $0 = false }
                group.cancelAll()
            }
            try await waitUntil("the console listens", timeout: 30) { console.address != nil }
            try await body(Int(console.address!.split(separator: ":").last!)!)
        }
    }

    static func get(_ port: Int, _ path: String) async throws -> HTTPProbe.Answer {
        try await HTTPProbe.offPool { try HTTPProbe.request(port: port, path, timeout: 15) }
    }

    /// `/readyz` is the engine's snapshot and the transport's link, read at each request.
    @Test func readinessFollowsTheSnapshotItIsGiven() async throws {
        let twin = ConsoleEngineTwin()
        twin.state.withLock { $0.adapters = [ConsoleEngineTwin.adapter("lifx", .starting), ConsoleEngineTwin.adapter("imp", .running)] }
        try await Self.with(twin) { port in
            var r = try await Self.get(port, "/readyz")
            #expect(r.status == 503 && r.body.contains("lifx: starting") && !r.body.contains("imp"), "\(r.body)")
            twin.state.withLock { $0.adapters[0].status = .running }
            r = try await Self.get(port, "/readyz")
            #expect(r.status == 200, "\(r.body)")
            twin.state.withLock { $0.adapters[1].status = .error("agent unreachable") }
            r = try await Self.get(port, "/readyz")
            #expect(r.status == 503 && r.body.contains("imp: error"), "\(r.body)")
            // A standby instance is never ready, whatever its adapters, and names the active one.
            twin.state.withLock {
                $0.adapters[1].status = .running
                $0.standby = StandbySnapshot(instance: "b", role: "standby", group: ["a": "active", "b": "standby"], takeovers: 0)
            }
            r = try await Self.get(port, "/readyz")
            #expect(r.status == 503 && r.body.contains("standby: not the active instance (active: a)"), "\(r.body)")
            twin.state.withLock { $0.stopped = true; $0.standby = nil }
            r = try await Self.get(port, "/readyz")
            #expect(r.status == 503 && r.body.contains("stopping"), "\(r.body)")
        }
        try await Self.with(ConsoleEngineTwin(), connected: false) { port in
            let r = try await Self.get(port, "/readyz")
            #expect(r.status == 503 && r.body.contains("broker: not connected"), "\(r.body)")
        }
    }

    /// `/livez` asks the core: a core that does not answer within 5 s fails it, and the probe itself still
    /// answers (the question is not a child of the request).
    @Test func aCoreThatDoesNotAnswerFailsLivez() async throws {
        let twin = ConsoleEngineTwin()
        try await Self.with(twin) { port in
            let alive = try await HTTPProbe.alive { try await Self.get(port, "/livez") }
            #expect(alive.status == 200, "/livez answered \(alive.status): \(alive.body.prefix(200))")
            twin.wedged.withLock { $0 = true }
            let started = ContinuousClock.now
            let r = try await Self.get(port, "/livez")
            #expect(r.status == 503 && r.body.contains("does not answer"), "\(r.body)")
            #expect(ContinuousClock.now - started < .seconds(14), "the probe waited for the core")
        }
    }

    /// A page's command goes to the engine as if from the broker, on the topic the page names, with its
    /// payload; `/metrics` shows the snapshot's adapters.
    @Test func aPagesCommandIsSubmittedAndTheMetricsAreTheSnapshots() async throws {
        let twin = ConsoleEngineTwin()
        twin.state.withLock { $0.adapters = [ConsoleEngineTwin.adapter("virtual", .running, devices: 7)] }
        try await Self.with(twin) { port in
            let page = PageClient(port: port)
            defer { page.close() }
            _ = try await page.waitFor("synced") { $0["t"] == "synced" }
            page.send(["t": "cmd", "id": 1, "topic": "t/virtual/lamp/set", "payload": ["state": "ON"]])
            try await waitUntil("the command reaches the engine", timeout: 15) { !twin.submitted.withLock { $0.isEmpty } }
            let sent = twin.submitted.withLock { $0 }
            #expect(sent.count == 1 && sent[0].topic == "t/virtual/lamp/set", "\(sent)")
            #expect((try? JSONValue.parse(Array(sent[0].payload.utf8)))?["state"] == "ON", "\(sent)")
            let metrics = PrometheusText.samples(try await Self.get(port, "/metrics").body)
            #expect(metrics[#"switchyard_adapter_devices{adapter="virtual"}"#] == 7, "\(metrics.keys.sorted())")
            #expect(metrics[#"switchyard_adapter_status{adapter="virtual",status="running"}"#] == 1)
        }
    }
}
