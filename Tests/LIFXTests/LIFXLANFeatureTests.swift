import Foundation
import LIFXAdapter
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Multizone, infrared, HEV, firmware effects and waveforms over the LAN, against lifx-emulator: what the
/// emulator holds afterwards (its REST API, or the state it saves) is the judge, with expected values worked
/// out from the protocol's units (`Wire`), never from the bridge's own code.
@Suite(.serialized, .enabled(if: LIFXEmulator.unavailableReason == nil, Comment(rawValue: LIFXEmulator.unavailableReason ?? "")))
struct LIFXLANFeatureTests {
    static let strip = "d073d5a00016", oldZ = "d073d5a00032", beam = "d073d5a00080", neon = "d073d5a00120"

    /// A LIFX Z of the first kind (legacy messages only), a LIFX Z on firmware 2.60 (extended multizone comes
    /// with 2.77), a Beam of 80 zones and an Outdoor Neon of 120 (extended: two replies of 82 + 38 zones).
    static let zoneDevices = """
      - product_id: 31
        serial: \(strip)
        label: Strip
        zone_count: 16
      - product_id: 32
        serial: \(oldZ)
        label: Old Z
        zone_count: 16
      - product_id: 38
        serial: \(beam)
        label: Beam
        zone_count: 80
      - product_id: 161
        serial: \(neon)
        label: Neon
        zone_count: 120
    """
    static let zoneScenarios = """
    scenarios:
      devices:
        \(oldZ):
          firmware_version: [2, 60]
    """

    /// The zones a state shows (runs of equal zones), one entry per zone: (hue°, saturation %, brightness %, K).
    static func expand(_ state: JSONValue) -> [[Int]] {
        var out: [[Int]] = []
        for run in state["zones"]?.arrayValue ?? [] {
            let start = run["start"]?.intValue ?? 0, end = run["end"]?.intValue ?? -1
            guard end >= start else { continue }
            let z = [run["color"]?["h"]?.intValue ?? -1, run["color"]?["s"]?.intValue ?? -1, run["brightness"]?.intValue ?? -1, run["color_temp"]?.intValue ?? -1]
            out += Array(repeating: z, count: end - start + 1)
        }
        return out
    }

    /// The emulator's zones in the user's units.
    static func zones(_ device: JSONValue) -> [[Int]] {
        (device["zone_colors"]?.arrayValue ?? []).map {
            [Wire.degrees($0["hue"]?.intValue ?? 0), Wire.percent($0["saturation"]?.intValue ?? 0),
             Wire.percent($0["brightness"]?.intValue ?? 0), $0["kelvin"]?.intValue ?? 0]
        }
    }

    @Test func zonesOf16And80And120AreReadAndSetWithTheMessagesEachDeviceHas() async throws {
        try await LIFXEmulator.with(devices: Self.zoneDevices, scenarios: Self.zoneScenarios) { e in
            try await LANBridge.with(e) { b in
                // Read: every zone as the emulator holds it, however many replies it took.
                for (name, serial, n) in [("strip", Self.strip, 16), ("old_z", Self.oldZ, 16), ("beam", Self.beam, 80), ("neon", Self.neon, 120)] {
                    let s = try await b.waitLIFX(name, "\(n) zones") { $0["zone_count"] == JSONValue(n) }
                    #expect(s["capabilities"]?["multizone"] == true)
                    #expect(Self.expand(s) == Self.zones(try await e.device(serial)), "\(name)'s zones")
                }
                // Which messages each used: a re-read now, then the emulator's log of what it received.
                for (name, serial, extended) in [("strip", Self.strip, false), ("old_z", Self.oldZ, false), ("neon", Self.neon, true)] {
                    b.probe.publish("\(b.base)/lifx/\(name)/get", "")
                    try await waitUntil("\(name) re-read") { (try? await e.receivedTypes(serial))?.contains(extended ? 511 : 502) == true }
                    #expect(try await e.receivedTypes(serial).contains(extended ? 502 : 511) == false, "\(name) read with the wrong messages")
                }

                // Set, extended, two messages (82 + 38 zones): two segments.
                let before = Self.zones(try await e.device(Self.neon))
                b.probe.publish("\(b.base)/lifx/neon/set", #"{"zones":[{"start":0,"end":59,"color":{"h":240,"s":100},"brightness":50},{"start":60,"end":119,"color_temp":2700,"brightness":80}],"transition":0,"transaction":"n"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/neon/result", payload: #"{"status":"ok","transaction":"n"}"#)
                let neon = try await e.device(Self.neon)["zone_colors"]?.arrayValue ?? []
                #expect(neon.count == 120)
                for (i, z) in neon.enumerated() {
                    if i < 60 {
                        #expect(z["hue"] == JSONValue(Wire.hue(240)) && z["saturation"] == 65535 && z["brightness"] == JSONValue(Wire.level(50)), "zone \(i): \(z)")
                        #expect(z["kelvin"] == JSONValue(before[i][3]))
                    } else {
                        #expect(z["saturation"] == 0 && z["brightness"] == JSONValue(Wire.level(80)) && z["kelvin"] == 2700, "zone \(i): \(z)")
                        #expect(Wire.degrees(z["hue"]?.intValue ?? -1) == before[i][0], "zone \(i) kept its hue")
                    }
                }
                // Both pieces arrived (the values above); retries under load may add datagrams, never legacy ones.
                let neonTypes = try await e.receivedTypes(Self.neon)
                #expect(neonTypes.filter { $0 == 510 }.count >= 2 && !neonTypes.contains(501))
                // The published state shows what was set.
                let ns = try await b.waitLIFX("neon", "the zones set") { Self.expand($0).first?[0] == 240 }
                #expect(Self.expand(ns) == Self.zones(try await e.device(Self.neon)))

                // Set, legacy: one SetColorZones for a run of equal zones; the rest of the strip untouched.
                for (name, serial) in [("strip", Self.strip), ("old_z", Self.oldZ)] {
                    let was = Self.zones(try await e.device(serial))
                    b.probe.publish("\(b.base)/lifx/\(name)/set", #"{"zones":[{"start":2,"end":5,"color":"red"}],"transition":0,"transaction":"\#(name)"}"#)
                    try await b.probe.waitFor(topic: "\(b.base)/lifx/\(name)/result", payload: #"{"status":"ok","transaction":"\#(name)"}"#)
                    let now = Self.zones(try await e.device(serial))
                    for i in 0..<16 {
                        let want = (2...5).contains(i) ? [0, 100, was[i][2], was[i][3]] : was[i]
                        #expect(now[i] == want, "\(name) zone \(i)")
                    }
                    let types = try await e.receivedTypes(serial)
                    #expect(types.contains(501) && !types.contains(510), "\(name): \(types)")
                }

                // A whole-light brightness on a strip of many colours: every zone keeps its colour (one extended message).
                let rainbow = Self.zones(try await e.device(Self.beam))
                #expect(Set(rainbow.map { $0[0] }).count > 10)
                b.probe.publish("\(b.base)/lifx/beam/set", #"{"brightness":40,"transition":0,"transaction":"b"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/beam/result", payload: #"{"status":"ok","transaction":"b"}"#)
                let dimmed = Self.zones(try await e.device(Self.beam))
                #expect(dimmed.map { [$0[0], $0[1], $0[3]] } == rainbow.map { [$0[0], $0[1], $0[3]] } && dimmed.allSatisfy { $0[2] == 40 })
                #expect(try await e.receivedTypes(Self.beam).contains(510))
                // One colour for all: a SetColor, no zone message.
                let zoneMessages = try await e.received()[510, default: 0]
                b.probe.publish("\(b.base)/lifx/beam/set", #"{"color":{"h":120,"s":100},"transition":0,"transaction":"c"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/beam/result", payload: #"{"status":"ok","transaction":"c"}"#)
                #expect(Self.zones(try await e.device(Self.beam)).allSatisfy { $0[0] == 120 && $0[1] == 100 && $0[2] == 40 })
                let (counted, beamTypes) = (try await e.received(), try await e.receivedTypes(Self.beam))
                #expect(counted[510, default: 0] == zoneMessages && beamTypes.contains(102))

                // Refused before anything is sent: past the strip's zones, backwards, a bad colour.
                let sent = try await e.received()
                for (payload, words) in [(#"{"zones":[{"start":10,"end":16,"brightness":5}]}"#, "past the light's 16 zones"),
                                         (#"{"zones":[{"start":9,"end":3,"brightness":5}]}"#, "start 9 is after end 3"),
                                         (#"{"zones":[{"start":1,"color":"mauve"}]}"#, "unknown component 'mauve'")] {
                    b.probe.publish("\(b.base)/lifx/strip/set", payload)
                    try await b.probe.waitFor(words) { ms in ms.contains { $0.topic == "\(b.base)/bridge/log" && $0.payload.contains(words) } }
                }
                let after = try await e.received()
                #expect(after[501, default: 0] == sent[501, default: 0] && after[510, default: 0] == sent[510, default: 0])
            }
        }
    }

    static let porch = "d073d5b00029", clean = "d073d5b00090", candle = "d073d5b00057", bar = "d073d5b00038", bulb = "d073d5b00027",
               wallSwitch = "d073d5b00070"

    static let featureDevices = """
      - product_id: 29
        serial: \(porch)
        label: Porch
      - product_id: 90
        serial: \(clean)
        label: Clean
      - product_id: 57
        serial: \(candle)
        label: Candle
      - product_id: 38
        serial: \(bar)
        label: Bar
        zone_count: 20
      - product_id: 27
        serial: \(bulb)
        label: Bulb
        power_level: 65535
        color: [\(Wire.hue(240)), 65535, 65535, 3500]
      - product_id: 70
        serial: \(wallSwitch)
        label: Wall Switch
    """

    @Test func infraredCleanCycleAndFirmwareEffectsReachTheDevice() async throws {
        try await LIFXEmulator.with(devices: Self.featureDevices) { e in
            try await LANBridge.with(e) { b in
                // Infrared: read (the emulator starts at 16384 = 25 %) and set.
                let p = try await b.waitLIFX("porch") { $0["infrared"] != nil }
                #expect(p["infrared"] == 25 && p["capabilities"]?["infrared"] == true)
                b.probe.publish("\(b.base)/lifx/porch/set/infrared", "60")
                try await e.waitPersisted(Self.porch, "infrared 60 %") { $0["infrared_brightness"] == JSONValue(Wire.level(60)) }

                // A clean cycle of 30 minutes, then stopped.
                let c = try await b.waitLIFX("clean") { $0["clean_cycle"] != nil }
                #expect(c["clean_cycle"] == "OFF" && c["capabilities"]?["hev"] == true)
                b.probe.publish("\(b.base)/lifx/clean/set", #"{"clean_cycle":"ON","clean_duration":1800,"transaction":"h"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/clean/result", payload: #"{"status":"ok","transaction":"h"}"#)
                let running = try await e.waitPersisted(Self.clean, "a cycle") { $0["hev_cycle_current_duration_s"] == 1800 }
                #expect((1...1800).contains(running["hev_cycle_remaining_s"]?.intValue ?? 0))
                b.probe.publish("\(b.base)/lifx/clean/get", "")
                let polled = try await b.waitLIFX("clean", "the cycle read back") { ($0["clean_remaining"]?.intValue ?? 0) > 0 }
                #expect(polled["clean_cycle"] == "ON" && (polled["clean_remaining"]?.intValue ?? 0) <= 1800)
                b.probe.publish("\(b.base)/lifx/clean/set/clean_cycle", "OFF")
                try await e.waitPersisted(Self.clean, "the cycle stopped") { $0["hev_cycle_remaining_s"] == 0 }

                // Matrix: morph (8 colours by default), flame, off.
                try await b.waitLIFX("candle") { $0["via"] == "lan" }
                b.probe.publish("\(b.base)/lifx/candle/set", #"{"effect":{"name":"morph","period":3},"transaction":"m"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/candle/result", payload: #"{"status":"ok","transaction":"m"}"#)
                try await e.waitPersisted(Self.candle, "morph") {
                    $0["tile_effect_type"] == 2 && $0["tile_effect_speed_ms"] == 3000 && $0["tile_effect_palette_count"] == 8
                }
                b.probe.publish("\(b.base)/lifx/candle/get", "")
                try await b.waitLIFX("candle", "morph read back") { $0["effect"] == "morph" }
                b.probe.publish("\(b.base)/lifx/candle/set/effect", "flame")
                try await e.waitPersisted(Self.candle, "flame") { $0["tile_effect_type"] == 3 }
                b.probe.publish("\(b.base)/lifx/candle/set/effect", "off")
                try await e.waitPersisted(Self.candle, "no effect") { $0["tile_effect_type"] == 0 }

                // Multizone: move backwards, 2 s a cycle, then off.
                try await b.waitLIFX("bar") { $0["zone_count"] == 20 }
                b.probe.publish("\(b.base)/lifx/bar/set", #"{"effect":{"name":"move","period":2,"direction":"backward"}}"#)
                try await e.waitPersisted(Self.bar, "move") {
                    $0["multizone_effect_type"] == 1 && $0["multizone_effect_speed_ms"] == 2000 && $0["multizone_effect_parameters"]?.arrayValue?.dropFirst().first == 0
                }
                b.probe.publish("\(b.base)/lifx/bar/set/effect", "off")
                try await e.waitPersisted(Self.bar, "no effect") { $0["multizone_effect_type"] == 0 }

                // What a product lacks is refused: the candle has no zones to move, the porch no clean cycle.
                for (light, payload, words) in [("candle", #"{"effect":"move"}"#, "cannot run it (its effects: breathe, pulse, morph, flame, off)"),
                                                 ("porch", #"{"clean_cycle":"ON"}"#, "unknown field 'clean_cycle'"),
                                                 ("bar", #"{"effect":"flame"}"#, "cannot run it (its effects: breathe, pulse, move, off)")] {
                    b.probe.publish("\(b.base)/lifx/\(light)/set", payload)
                    try await b.probe.waitFor(words) { ms in ms.contains { $0.topic == "\(b.base)/bridge/log" && $0.payload.contains(words) } }
                }
                // A LIFX Switch answers discovery but is no light.
                #expect(!b.probe.messages.contains { $0.topic.hasPrefix("\(b.base)/lifx/wall_switch") })
            }
        }
    }

    /// breathe and pulse as SetWaveformOptional, judged by the colour the emulator works out for each moment.
    @Test func breatheAndPulseRunOnTheLightAndEndWhereTheyShould() async throws {
        try await LIFXEmulator.with(devices: Self.featureDevices) { e in
            try await LANBridge.with(e) { b in
                try await b.waitLIFX("bulb") { $0["via"] == "lan" }
                // Breathe towards red over 4 s, once: red at the peak, blue again at the end (a sine returns).
                b.probe.publish("\(b.base)/lifx/bulb/set", #"{"effect":{"name":"breathe","color":"red","period":4,"cycles":1},"transaction":"b"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/bulb/result", payload: #"{"status":"ok","transaction":"b"}"#)
                var nearest = 360
                for _ in 0..<50 {
                    let h = Wire.degrees(try await e.device(Self.bulb)["color"]?["hue"]?.intValue ?? 240)
                    nearest = min(nearest, h, 360 - h)
                    await TestEnvironment.sleep(0.1)
                }
                #expect(nearest <= 20, "the hue came within \(nearest)° of red")
                try await waitUntil("blue again", timeout: 10) { (try? await e.device(Self.bulb))?["color"]?["hue"]?.intValue.map(Wire.degrees) == 240 }
                #expect(try await e.device(Self.bulb)["color"]?["saturation"] == 65535)
                // Pulse to green, kept (persist): it stays green; brightness untouched.
                b.probe.publish("\(b.base)/lifx/bulb/set", #"{"effect":{"name":"pulse","color":"green","period":0.5,"cycles":1,"persist":true},"transaction":"p"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/bulb/result", payload: #"{"status":"ok","transaction":"p"}"#)
                await TestEnvironment.sleep(1.5)
                let d = try await e.device(Self.bulb)
                #expect(Wire.degrees(d["color"]?["hue"]?.intValue ?? -1) == 120 && d["color"]?["brightness"] == 65535)
                #expect(try await e.receivedTypes(Self.bulb).filter { $0 == 119 }.count >= 2)
            }
        }
    }

    /// A device that comes back at another address (here another port: the same serial on a second emulator)
    /// is found there by the discovery rounds a silent device restarts, before `offline_after`.
    @Test func aDeviceThatMovesIsFoundAtItsNewAddressBeforeItWouldBeOffline() async throws {
        let serial = "d073d5c00001"
        try await LIFXEmulator.with(devices: "  - {product_id: 27, serial: \(serial), label: Mover}") { a in
        try await LIFXEmulator.with(devices: "  - {product_id: 27, serial: d073d5c00002, label: Other}") { bEmu in
            try await LANBridge.with(a, configure: { s in
                s.lan.hosts = ["127.0.0.1:\(a.port)", "127.0.0.1:\(bEmu.port)"]
                s.lan.pollInterval = 1
                s.lan.offlineAfter = 15
                // After two quick rounds discovery waits 30 s: without a restart the move is seen only then.
                s.lan.discoveryGaps = [0.5, 30]
                // The emulator's REST API re-creates a device without its label: the name is configured.
                s.names[serial] = "mover"
            }) { b in
                try await b.waitLIFX("mover") { $0["via"] == "lan" }
                try await b.waitLIFX("other") { $0["via"] == "lan" }
                await TestEnvironment.sleep(1.5)   // past the quick rounds
                _ = try await a.call("DELETE", "/api/devices/\(serial)")
                _ = try await bEmu.call("POST", "/api/devices", #"{"product_id":27,"serial":"\#(serial)","label":"Mover"}"#)
                try await waitUntil("the bridge asking the new address", timeout: 14) { (try? await bEmu.receivedTypes(serial))?.contains(101) == true }
                b.probe.publish("\(b.base)/lifx/mover/set", #"{"brightness":33,"transition":0,"transaction":"moved"}"#)
                let r = try await b.probe.waitFor(topic: "\(b.base)/lifx/mover/result")
                #expect(r.payload == #"{"status":"ok","transaction":"moved"}"#)
                #expect(try await bEmu.device(serial)["color"]?["brightness"] == JSONValue(Wire.level(33)))
                #expect(!b.probe.messages(on: "\(b.base)/lifx/mover/availability").contains { $0.payload == "offline" })
            }
        }
        }
    }
}
