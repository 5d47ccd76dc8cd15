import Foundation
import ImpAdapter
import ImpSimulators
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The Imp adapter against the agent simulator over real HTTP on loopback, through the engine over the
/// in-memory transport (the unit tier). ImpTests runs the same adapter over a real broker.
@Suite struct ImpEngineTests {
    static func with<R: Sendable>(_ body: (InMemoryBridge, ImpAgentSimulator) async throws -> R) async throws -> R {
        let sim = try await ImpAgentSimulator.start(agents: [
            .init(id: ImpHarness.matrix, app: .matrixClock, appcode: ImpHarness.matrixCode),
            .init(id: ImpHarness.big, app: .bigClock, appcode: ImpHarness.bigCode),
        ])
        return try await withTeardown {
            let config = try SwitchyardConfig.parse(yaml: """
                imp:
                  base_url: \(sim.baseURL)
                  poll_interval: 3600
                  apps: {\(ImpHarness.matrixCode): matrixclock, \(ImpHarness.bigCode): bigclock}
                  devices:
                    - {name: hall_clock, agent_id: \(ImpHarness.matrix)}
                    - {name: big_clock, agent_id: \(ImpHarness.big)}
                """, file: "t.yaml", upstreams: [ImpUpstream()])
            let adapter = ImpAdapter(settings: try #require(config.settings(ImpUpstream())))
            return try await InMemoryBridge.with(adapters: [adapter]) { b in try await body(b, sim) }
        } teardown: {
            await sim.stop()
        }
    }

    @Test func stateIsReadPerProfileAndCommandsReachTheAgent() async throws {
        try await Self.with { b, sim in
            let clock = try await b.waitForState("imp", "hall_clock") { $0["agent"] == "online" }
            #expect(clock["app"] == "matrixclock" && clock["brightness"] == 47 && clock["brightness_raw"] == 7 && clock["power"] == "ON")
            try await b.waitFor("b/imp/hall_clock/availability", "online")
            try await b.waitForState("imp", "big_clock") { $0["agent"] == "online" }
            // BigClock stores brightness − 1; the state read back after the command says what the agent holds.
            b.command("imp", "big_clock", #"{"brightness": 100, "power": "OFF", "transaction": "t1"}"#)
            #expect(try await b.result("imp", "big_clock", transaction: "t1")["status"] == "ok")
            #expect(sim.agent(ImpHarness.big)?.bright == 15 && sim.agent(ImpHarness.big)?.on == false)
            let big = try await b.waitForState("imp", "big_clock") { $0["power"] == "OFF" }
            #expect(big["brightness"] == 100)
            #expect(!b.transport.published.contains { $0.payload.contains(ImpHarness.matrix) || $0.payload.contains(ImpHarness.big) })
        }
    }

    /// A device its agent reports disconnected: state and availability change together, and a command is
    /// refused without a request.
    @Test func aDisconnectedDeviceIsOfflineAndItsCommandsAreRefused() async throws {
        try await Self.with { b, sim in
            try await b.waitForState("imp", "hall_clock") { $0["agent"] == "online" }
            sim.setConnected(ImpHarness.matrix, false)
            b.send("b/imp/hall_clock/get", "")
            try await b.waitForState("imp", "hall_clock") { $0["device_connected"] == false && $0["agent"] == "online" }
            try await b.waitFor("b/imp/hall_clock/availability", "offline")
            b.command("imp", "hall_clock", #"{"power": "OFF", "transaction": "t2"}"#)
            let r = try await b.result("imp", "hall_clock", transaction: "t2")
            #expect(r["status"] == "error" && r["error"]?.stringValue?.contains("the device is offline") == true)
            #expect(!sim.requests.contains { $0.method == "POST" })
        }
    }
}

/// The Imp section of the config, read without a bridge.
@Suite struct ImpConfigTests {
    @Test func impConfigProblemsAreReportedWithoutRepeatingTheSecret() {
        do {
            _ = try SwitchyardConfig.parse(yaml: """
            imp:
              base_url: http://agent.example.com
              devices:
                - {name: a, agent_id: tooShort9}
                - {name: b, agent_id: abcdefghijkl, app: toaster}
              profiles:
                p:
                  format: dotted
                  fields:
                    - {name: x, from: /on, type: bool, set: {path: settings, body: '{oops'}}
            """, file: "t.yaml", upstreams: [ImpUpstream()])
            Issue.record("expected problems")
        } catch {
            let paths = error.problems.map(\.path)
            #expect(paths.contains("imp.base_url") && paths.contains("imp.devices[0].agent_id") && paths.contains("imp.devices[1].app"))
            #expect(paths.contains("imp.profiles.p.fields[0].from") && paths.contains("imp.profiles.p.fields[0].set.path")
                    && paths.contains("imp.profiles.p.fields[0].set.body"))
            #expect(!error.description.contains("tooShort9"))
        }
    }
}
