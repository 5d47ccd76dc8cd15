import Foundation
import Glibc
import Testing
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// The console of two `switchyard run` processes of one standby group (docs/operations.md "Two bridges, one
/// home") against a real Mosquitto: each page lists the group's instances with their roles, `/readyz` is
/// ready on the active instance only, `/metrics` has the role and the takeovers, through a kill -9.
@Suite struct StandbyConsoleTests {
    @Test func theConsoleShowsEachInstancesRoleAndTheTakeovers() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase(), dir = TestEnvironment.makeTempDir("standby-console")
        let ports = ["a": TestEnvironment.freePort(), "b": TestEnvironment.freePort()]
        var bridges: [String: BridgeProcess] = [:]
        defer { for b in bridges.values { b.signal(SIGKILL) } }
        func start(_ name: String) throws {
            let path = dir.appendingPathComponent("\(name).yaml").path
            // The same group (base topic, so client id); only the console's port differs.
            try """
            log: {level: warning}
            state_dir: \(dir.appendingPathComponent(name).path)
            web: {listen: "127.0.0.1:\(ports[name]!)"}
            mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(base), keepalive: 5}
            standby: {enabled: true, takeover_delay: 1}
            virtual: {devices: [{name: lamp, type: light}]}
            """.writeForTest(toFile: path, replacing: true)
            bridges[name] = try BridgeProcess(arguments: ["run", "-c", path, "--instance", name])
        }
        @Sendable func get(_ name: String, _ path: String) async -> HTTPProbe.Answer? {
            let port = ports[name]!
            return try? await HTTPProbe.offPool { try HTTPProbe.request(port: port, path, timeout: 2) }
        }
        @Sendable func metrics(_ name: String) async -> [String: Double] {
            PrometheusText.samples(await get(name, "/metrics")?.body ?? "")
        }

        try start("a")
        try await waitUntil("a ready", timeout: 30) { await get("a", "/readyz")?.status == 200 }
        try start("b")
        try await waitUntil("b's console", timeout: 30) { await get("b", "/livez")?.status == 200 }
        // b knows a as active and itself as standby: not ready, saying who is.
        try await waitUntil("b sees a active", timeout: 30) { await metrics("b")[#"switchyard_standby_instances{role="active"}"#] == 1 }
        let notReady = await get("b", "/readyz")
        #expect(notReady?.status == 503 && (notReady?.body ?? "").contains("active: a"), "\(String(describing: notReady))")
        var a = await metrics("a"), b = await metrics("b")
        #expect(a[#"switchyard_standby_role{name="a",role="active"}"#] == 1 && a[#"switchyard_standby_role{name="a",role="standby"}"#] == 0, "\(a)")
        #expect(a[#"switchyard_standby_takeovers_total{name="a"}"#] == 1, "\(a)")
        #expect(b[#"switchyard_standby_role{name="b",role="standby"}"#] == 1 && b[#"switchyard_standby_takeovers_total{name="b"}"#] == 0, "\(b)")
        #expect(b[#"switchyard_standby_instances{role="standby"}"#] == 1, "\(b)")

        // The page of the standby instance: its live status lists the group.
        let page = PageClient(port: ports["b"]!)
        defer { page.close() }
        let status = try await page.waitFor("b's status with the group", timeout: 20) {
            $0["t"] == "status" && $0["standby"]?["group"]?["a"] == "active" && $0["standby"]?["group"]?["b"] == "standby"
        }
        #expect(status["standby"]?["instance"] == "b" && status["standby"]?["role"] == "standby" && status["ready"] == false, "\(status)")

        // kill -9 of a: b takes over; its page, /readyz and /metrics say so.
        bridges["a"]!.signal(SIGKILL)
        try await waitUntil("b ready", timeout: 40) { await get("b", "/readyz")?.status == 200 }
        // (Its first status frames as active may say not ready: its adapters start after the hand-over pause.)
        let after = try await page.waitFor("b active and ready on its page", timeout: 20) {
            $0["t"] == "status" && $0["standby"]?["role"] == "active" && $0["standby"]?["group"]?["a"] == "offline" && $0["ready"] == true
        }
        #expect(after["standby"]?["takeovers"] == 1, "\(after)")
        b = await metrics("b")
        #expect(b[#"switchyard_standby_role{name="b",role="active"}"#] == 1 && b[#"switchyard_standby_role{name="b",role="standby"}"#] == 0, "\(b)")
        #expect(b[#"switchyard_standby_takeovers_total{name="b"}"#] == 1 && b[#"switchyard_standby_instances{role="offline"}"#] == 1, "\(b)")
        a = await metrics("a")
        #expect(a.isEmpty, "a is dead: \(a)")
    }
}
