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
    /// `prepare` runs on the simulator and the adapter before the bridge starts.
    static func with<R: Sendable>(prepare: (ImpAgentSimulator, ImpAdapter) async throws -> Void = { _, _ in },
                                  _ body: (InMemoryBridge, ImpAgentSimulator) async throws -> R) async throws -> R {
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
            try await prepare(sim, adapter)
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

    /// A standby takeover's new instance starts from the apps the group's previous active instance detected
    /// (each device's last state): the device is listed with its app's fields before its agent has answered,
    /// so a command is judged against them and reaches the adapter, which asks the agent first (here it is
    /// gone: the answer says so, not that the fields are unknown). A restored app the agent contradicts is
    /// corrected at the first read.
    @Test func aTakeoverStartsFromTheAppsThePreviousInstanceDetected() async throws {
        try await Self.with(prepare: { sim, adapter in
            sim.setGone(ImpHarness.matrix, true)
            // The hall clock's appcode names its app through this config's `apps`; the big clock's last state
            // names the wrong app, which its agent corrects.
            await adapter.restore(states: ["hall_clock": ["app": "renamed", "appcode": .string(ImpHarness.matrixCode), "brightness": 47],
                                           "big_clock": ["app": "matrixclock", "appcode": .null]])
        }) { b, _ in
            b.command("imp", "hall_clock", #"{"brightness": 20, "transaction": "t1"}"#)
            let r = try await b.result("imp", "hall_clock", transaction: "t1")
            #expect(r["status"] == "error" && r["error"]?.stringValue?.contains("agent unreachable") == true, "\(r)")
            try await b.waitForState("imp", "big_clock") { $0["agent"] == "online" && $0["app"] == "bigclock" }
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
