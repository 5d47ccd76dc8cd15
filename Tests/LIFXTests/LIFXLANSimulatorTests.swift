import Foundation
import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The LAN simulator the demo and the benchmark use, with the bridge: it must answer what the bridge asks as
/// lifx-emulator does (the tests' peer), or `make run` and the `lifx-lan` bench would show something else.
@Suite struct LIFXLANSimulatorTests {
    @Test func theBridgeFindsTheDemosLightsAndCommandsThem() async throws {
        // The demo's lights, and a LIFX Switch.
        let sim = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices() + [
            LIFXLANSimulator.Device(serial: "d073d5100006", label: "Wall", product: 70),
        ])
        defer { sim.stop() }
        var s = LIFXSettings()
        s.lan.enabled = true
        s.lan.hosts = ["127.0.0.1:\(sim.port)"]
        s.lan.broadcast = []
        s.lan.pollInterval = 3600
        try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: LIFXAdapter(settings: s)) { b in
            let z = try await b.waitLIFX("shelf_strip") { $0["zone_count"] == 16 }
            #expect(z["group"] == "Study" && z["model"] == "LIFX Z" && (z["zones"]?.arrayValue?.count ?? 0) == 16)
            #expect(try await b.waitLIFX("porch") { $0["infrared"] != nil }["infrared"] == 0)
            #expect(try await b.waitLIFX("clean") { $0["clean_cycle"] != nil }["clean_last_result"] == "success")
            try await b.waitLIFX("candle") { $0["capabilities"]?["matrix"] == true }
            try await b.waitLIFX("desk") { $0["via"] == "lan" }
            // Zones over extended multizone (the LIFX Z at 3.70), a firmware effect, infrared, a clean cycle.
            b.probe.publish("\(b.base)/lifx/shelf_strip/set", #"{"zones":[{"start":0,"end":7,"color":{"h":240,"s":100}}],"transition":0,"transaction":1}"#)
            try await b.probe.waitFor(topic: "\(b.base)/lifx/shelf_strip/result", payload: #"{"status":"ok","transaction":1}"#)
            let zones = try #require(sim.device("d073d5100002")?.zones)
            #expect(zones[0..<8].allSatisfy { $0[0] == UInt16(Wire.hue(240)) && $0[1] == 65535 } && zones[8][0] != UInt16(Wire.hue(240)))
            // (A slow acknowledgement under load brings a retry: at least one.)
            #expect(sim.received(510) >= 1 && sim.received(501) == 0)
            b.probe.publish("\(b.base)/lifx/candle/set/effect", "flame")
            try await waitUntil("flame") { sim.device("d073d5100003")?.effect == 3 }
            b.probe.publish("\(b.base)/lifx/porch/set/infrared", "50")
            try await waitUntil("infrared") { sim.device("d073d5100004")?.infrared == UInt16(Wire.level(50)) }
            b.probe.publish("\(b.base)/lifx/clean/set", #"{"clean_cycle":"ON","clean_duration":600}"#)
            try await waitUntil("a clean cycle") { sim.device("d073d5100005")?.hevRemaining == 600 }
            // A LIFX Switch is no light.
            #expect(!b.probe.messages.contains { $0.topic.hasPrefix("\(b.base)/lifx/wall") })
        }
    }
}
