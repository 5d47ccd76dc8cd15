import Foundation
import Glibc
import ImpSimulators
import LIFXSimulators
import LivecodingSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// What a running `switchyard` process holds across reloads, and what it says in its log.
@Suite struct LifecycleProcessTests {
    static func count(_ pid: Int32, _ dir: String) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/\(dir)")) ?? []).count
    }

    /// A reload that changes nothing leaks nothing, and one that restarts an adapter releases what the
    /// old one held: threads and open descriptors come back to their count after the first reload.
    @Test func reloadsLeakNoThreadsOrDescriptors() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let lifx = try await LIFXCloudSimulator.start(token: "t", lights: LIFXCloudSimulator.demoLights())
        let imp = try await ImpAgentSimulator.start(agents: [.init(id: "demoMatrix01", app: .matrixClock, appcode: "E967EC6D")])
        let lc = try await LivecodingSimulator.start(clientID: "c", clientSecret: "s", channels: [.init(slug: "alice", live: true)])
        try await withTeardown {
            let base = uniqueBase()
            let dir = TestEnvironment.makeTempDir("reload")
            let path = dir.appendingPathComponent("config.yaml").path
            func config(lifxPoll: Int) -> String {
                """
                state_dir: \(dir.path)
                log: {level: warning}
                mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(base)}
                lifx: {token: t, api_url: "\(lifx.apiURL)", poll_interval: \(lifxPoll)}
                imp: {base_url: "\(imp.baseURL)", poll_interval: 5, devices: [{name: clock, agent_id: demoMatrix01}]}
                livecoding: {api_url: "\(lc.apiURL)", oauth_url: "\(lc.oauthURL)", client_id: c, client_secret: s, channels: [alice], poll_interval: 5}
                """
            }
            try config(lifxPoll: 30).writeForTest(toFile: path, replacing: true)
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            try await probe.subscribe("\(base)/bridge/response/config/reload", "\(base)/lifx/kitchen", "\(base)/imp/clock")
            let bridge = try BridgeProcess(arguments: ["run", "-c", path])
            defer { bridge.signal(SIGKILL) }
            let pid = bridge.child.pid
            // The cloud adapters have done real work (their HTTP clients, connections) before counting starts.
            try await probe.waitFor(topic: "\(base)/lifx/kitchen")
            try await probe.waitFor(topic: "\(base)/imp/clock")
            var answered = 0
            func reload() async throws {
                bridge.signal(SIGHUP)
                answered += 1
                let n = answered
                let ms = try await probe.waitFor("reload \(n) answered") { $0.filter { $0.topic.hasSuffix("config/reload") }.count >= n }
                let r = try JSONValue.parse(ms.filter { $0.topic.hasSuffix("config/reload") }[n - 1].payload)
                #expect(r["status"] == "ok", "\(r)")
            }
            /// Threads and descriptors once they have settled (a stopped client's thread ends moments after
            /// its adapter's run returns): the last of three equal readings 100 ms apart, within 10 s.
            func settled() async throws -> (threads: Int, fds: Int) {
                var last = (threads: -1, fds: -1), same = 0
                for _ in 0..<100 {
                    let now = (threads: Self.count(pid, "task"), fds: Self.count(pid, "fd"))
                    same = now == last ? same + 1 : 0
                    last = now
                    if same == 2 { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
                return last
            }
            try await reload()
            let base0 = try await settled()
            for _ in 0..<50 { try await reload() }
            let unchanged = try await settled()
            // The LIFX section changes: that adapter, and only it, restarts each time.
            for i in 1...5 {
                try config(lifxPoll: 30 + i).writeForTest(toFile: path, replacing: true)
                try await reload()
            }
            let ms = probe.messages.filter { $0.topic.hasSuffix("config/reload") }
            let last = try JSONValue.parse(try #require(ms.last).payload)
            #expect(last["data"]?["adapters_restarted"] == ["lifx"])
            #expect(try JSONValue.parse(ms[1].payload)["data"]?["adapters_restarted"] == [])
            let changed = try await settled()
            print("reload: after the first reload \(base0); after 50 more \(unchanged); after 5 lifx restarts \(changed)")
            #expect(abs(unchanged.threads - base0.threads) <= 2 && abs(unchanged.fds - base0.fds) <= 2, "\(base0) → \(unchanged)")
            #expect(abs(changed.threads - base0.threads) <= 2 && abs(changed.fds - base0.fds) <= 2, "\(base0) → \(changed)")
            bridge.signal(SIGTERM)
            #expect(try await bridge.waitForExit() == 0)
        } teardown: {
            await lifx.stop()
            await imp.stop()
            await lc.stop()
        }
    }

    /// No component changes the process's log level: with the Home Assistant mirror configured (and
    /// Home Assistant down), its connection error is in the process log at the default level, and so is
    /// `stopped` after SIGTERM.
    @Test func theHAMirrorDoesNotSilenceTheProcessLog() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let closedPort = TestEnvironment.freePort()
        let path = TestEnvironment.makeTempDir("halog").appendingPathComponent("config.yaml").path
        try """
        mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(base)}
        ha: {url: "ws://127.0.0.1:\(closedPort)/api/websocket", token: secret-token}
        """.writeForTest(toFile: path, replacing: true)
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/bridge/info")
        let bridge = try BridgeProcess(arguments: ["run", "-c", path])
        defer { bridge.signal(SIGKILL) }
        try await probe.waitFor("the HA error in bridge/info") { ms in ms.contains { $0.payload.contains("cannot connect to ws://127.0.0.1") } }
        try await waitUntil("the HA error in the process log") { bridge.outputText.contains("ha: cannot connect to ws://127.0.0.1:\(closedPort)") }
        #expect(bridge.outputText.contains(" error switchyard.core: ha: cannot connect"), "\(bridge.outputText)")
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
        #expect(bridge.outputText.contains(" info switchyard: stopped"), "\(bridge.outputText)")
        #expect(!bridge.outputText.contains("secret-token"))
    }
}
