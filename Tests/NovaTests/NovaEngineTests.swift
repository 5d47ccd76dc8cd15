import Foundation
import NovaAdapter
import NovaSimulators
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The Nova adapter on a simulated radio (real HCI report bytes, ATT over socketpairs to simulated
/// flashes), through the engine over the in-memory transport (the unit tier). NovaBridgeTests runs it over
/// a real broker, NovaVMTests over a kernel Bluetooth stack.
@Suite struct NovaEngineTests {
    func with<R: Sendable>(_ body: (InMemoryBridge, SimulatedNovaRadio) async throws -> R) async throws -> R {
        let radio = SimulatedNovaRadio(flashes: [NovaHarness.key: -50, NovaHarness.fill: -80])
        let config = try SwitchyardConfig.parse(yaml: """
        nova:
          scan: {duration: 0.05, period: 0.25}
          names: {"\(NovaHarness.key)": key_light}
        """, file: "t.yaml", upstreams: [NovaUpstream()])
        let settings = try #require(config.settings(NovaUpstream()))
        return try await InMemoryBridge.with(adapters: [NovaAdapter(settings: settings, radio: radio)]) { b in try await body(b, radio) }
    }

    /// The strongest flash is connected, the weaker one heard; a flash is answered once it acks, and its
    /// state (lit, channels) and availability arrive together.
    @Test func theStrongestFlashIsConnectedAndFlashesOnItsAck() async throws {
        try await with { b, radio in
            let ready = try await b.waitForState("nova", "key_light") { $0["status"] == "ready" }
            #expect(ready["lit"] == false && ready["state"] == "OFF")
            try await b.waitFor("b/nova/key_light/availability", "online")
            #expect(try await b.waitForState("nova", "nova_d03972aabb02") { $0["status"] == "available" }["signal"] == 20)
            b.command("nova", "key_light", #"{"state": "ON", "preset": "bright", "timeout_ms": 10000, "transaction": "on"}"#)
            #expect(try await b.result("nova", "key_light", transaction: "on")["status"] == "ok")
            let lit = try await b.waitForState("nova", "key_light") { $0["lit"] == true }
            #expect(lit["warm"] == 255 && lit["cool"] == 255 && lit["brightness"] == 100)
            #expect(radio.peripheral(NovaHarness.key)?.frames == ["(00:L,FF,FF,2710)"])
            // Not connected: refused with the reason, nothing sent.
            b.command("nova", "nova_d03972aabb02", #"{"state": "ON", "transaction": "weak"}"#)
            let refused = try await b.result("nova", "nova_d03972aabb02", transaction: "weak")
            #expect(refused["status"] == "error" && refused["error"]?.stringValue?.contains("not connected") == true)
            #expect(radio.connects == 1)
        }
    }
}

/// The Nova section of the config and the channel arithmetic, without a radio.
@Suite struct NovaSettingsTests {
    @Test func novaConfigProblemsCarryTheirPosition() {
        let yaml = """
        nova:
          adapter: bluetooth0
          scan: {interval_ms: 10, window_ms: 20}
          auto_connect:
            whitelist: [D0:39:72:AA:BB]
          names:
            "D0:39:72:AA:BB:01": key
            "D0:39:72:AA:BB:02": key
        """
        do {
            _ = try SwitchyardConfig.parse(yaml: yaml, file: "n.yaml", upstreams: [NovaUpstream()])
            Issue.record("accepted")
        } catch {
            let text = error.problems.map(\.description)
            #expect(text.contains { $0.hasPrefix("n.yaml:2:12: nova.adapter") })
            #expect(text.contains { $0.contains("nova.scan.window_ms") && $0.contains("cannot exceed") })
            #expect(text.contains { $0.contains("nova.auto_connect.whitelist") && $0.contains("not a Bluetooth address") })
            #expect(text.contains { $0.contains("already given") })
        }
        let ok = try? SwitchyardConfig.parse(yaml: "nova: {}", file: "n.yaml", upstreams: [NovaUpstream()]).settings(NovaUpstream())
        #expect(ok == NovaAdapterSettings())
    }

    @Test func warmCoolAndBrightnessColourTemperatureConvertBothWays() {
        #expect(NovaAdapter.derived(NovaSettings(warm: 255, cool: 0, timeoutMs: 1)) == (100, 2700))
        #expect(NovaAdapter.derived(NovaSettings(warm: 0, cool: 255, timeoutMs: 1)) == (100, 6500))
        #expect(NovaAdapter.derived(NovaSettings(warm: 0, cool: 0, timeoutMs: 1)) == (0, nil))
        // Equal channels: the mired midpoint of 2700 K and 6500 K.
        #expect(NovaAdapter.derived(NovaSettings(warm: 255, cool: 255, timeoutMs: 1)).colorTemp == 3815)
        for (b, k) in [(100, 2700), (50, 3815), (80, 5000), (10, 6500)] {
            let (w, c) = NovaAdapter.channels(brightness: b, kelvin: k)
            let back = NovaAdapter.derived(NovaSettings(warm: w, cool: c, timeoutMs: 1))
            #expect(back.brightness == b)
            #expect(abs((back.colorTemp ?? 0) - k) <= 40, "\(k) K came back as \(back.colorTemp ?? 0) K")
        }
    }
}
