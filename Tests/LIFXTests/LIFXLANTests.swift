import Foundation
import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The LAN codec on the protocol's published byte examples (LIFX's "encoding a packet" page and packets
/// the emulator accepted; docs/upstreams/lifx-lan.md "Byte examples").
@Suite struct LIFXLANCodecTests {
    func hex(_ s: String) -> [UInt8] { s.split(separator: " ").map { UInt8($0, radix: 16)! } }

    @Test func packetsAreByteForByteThePublishedExamples() {
        let target = LIFXSerial.target("d073d5000001")!
        #expect(LIFXLANPacket(type: 2, source: 0x1234_5678, sequence: 1, tagged: true).bytes
                == hex("24 00 00 34 78 56 34 12 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 02 00 00 00"))
        #expect(LIFXLANPacket(type: 117, source: 0x1234_5678, target: target, sequence: 4, ackRequired: true,
                              payload: LIFXLANMessage.setPower(on: true, durationMs: 500)).bytes
                == hex("2a 00 00 14 78 56 34 12 d0 73 d5 00 00 01 00 00 00 00 00 00 00 00 02 04 00 00 00 00 00 00 00 00 75 00 00 00 ff ff f4 01 00 00"))
        let green = LIFXLANMessage.HSBK(degrees: 120, saturationPercent: 100, brightnessPercent: 100, kelvin: 3500)
        #expect(LIFXLANPacket(type: 102, source: 0x1234_5678, target: target, sequence: 5, ackRequired: true, resRequired: true,
                              payload: LIFXLANMessage.setColor(green, durationMs: 1000)).bytes
                == hex("31 00 00 14 78 56 34 12 d0 73 d5 00 00 01 00 00 00 00 00 00 00 00 03 05 00 00 00 00 00 00 00 00 66 00 00 00 00 55 55 ff ff ff ff ac 0d e8 03 00 00"))
        // LIFX's own example: source 2, target d073d5001337, ack, sequence 1, 1024 ms.
        #expect(LIFXLANPacket(type: 102, source: 2, target: LIFXSerial.target("d073d5001337")!, sequence: 1, ackRequired: true,
                              payload: LIFXLANMessage.setColor(green, durationMs: 1024)).bytes
                == hex("31 00 00 14 02 00 00 00 d0 73 d5 00 13 37 00 00 00 00 00 00 00 00 02 01 00 00 00 00 00 00 00 00 66 00 00 00 00 55 55 ff ff ff ff ac 0d 00 04 00 00"))
    }

    @Test func theDocsDecodeExampleAndBadPacketsAreRefused() throws {
        let h = try #require(LIFXLANPacket.decode(hex("24 00 00 14 00 03 47 46 d0 73 d5 00 13 37 00 00 00 00 00 00 00 00 07 01 00 00 00 00 00 00 00 00 14 00 00 00"))).header
        #expect(h.size == 36 && !h.tagged && h.source == 1_179_058_944 && LIFXSerial.serial(h.target) == "d073d5001337")
        #expect(h.resRequired && h.ackRequired && h.sequence == 1 && h.type == 20)
        let good = LIFXLANPacket(type: 107, source: 9, sequence: 3, payload: [UInt8](repeating: 0, count: 52)).bytes
        #expect(LIFXLANPacket.decode(Array(good.dropLast())) == nil)                 // size field disagrees
        var wrongProtocol = good; wrongProtocol[2] = 0x01
        #expect(LIFXLANPacket.decode(wrongProtocol) == nil)
        #expect(LIFXLANPacket.decode(Array(good.prefix(20))) == nil)
        // A LightState of the wrong length is no state.
        #expect(LIFXLANMessage.lightState([UInt8](repeating: 0xFF, count: 51)) == nil)
        // Power between 0 and 65535 (a transition) reads as on.
        var st = [UInt8](repeating: 0, count: 52); st[10] = 0x10
        #expect(LIFXLANMessage.lightState(st)?.on == true)
    }
}

/// The LAN path against lifx-emulator (a real peer over UDP on 127.0.0.1).
@Suite(.serialized, .enabled(if: LIFXEmulator.unavailableReason == nil, Comment(rawValue: LIFXEmulator.unavailableReason ?? "")))
struct LIFXLANTests {
    static let kitchen = "d073d5aabb01", hall = "d073d5aabb02"

    /// A colour light and a white-only one (whose StateService list starts with a non-UDP service on port 0).
    /// `PORT` is the emulator's own port, known when it starts.
    static var devices: String {
        """
          - product_id: 27
            serial: \(kitchen)
            label: Kitchen
            power_level: 0
            color: [0, 0, 65535, 3500]
            group: Downstairs
            location: Home
          - product_id: 50
            serial: \(hall)
            label: Hall
            power_level: 65535
            advertised_services: [[5, 0], [1, PORT]]
        """
    }

    @Test func discoveryFindsExactlyTheDevicesAndTheirStateOverTheLAN() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
        try await LANBridge.with(e) { b in
            let k = try await b.waitLIFX("kitchen") { $0["via"] == "lan" }
            #expect(k["state"] == "OFF" && k["brightness"] == 100 && k["color_temp"] == 3500 && k["group"] == "Downstairs")
            #expect(k["capabilities"]?["color"] == true)
            let h = try await b.waitLIFX("hall") { $0["via"] == "lan" }
            #expect(h["state"] == "ON" && h["capabilities"]?["color"] == false && h["capabilities"]?["max_kelvin"] == 4000)
            try await b.probe.waitFor(topic: "\(b.base)/lifx/group/downstairs")
            let lights = Set(b.probe.messages.map(\.topic).filter { $0.hasPrefix("\(b.base)/lifx/") && !$0.contains("/group/") && !$0.contains("/location/") }
                .map { String($0.dropFirst(b.base.count + 6).split(separator: "/")[0]) })
            #expect(lights == ["kitchen", "hall"])
        }
        }
    }

    @Test func commandsReachTheLightAndWhatALightLacksIsRefusedOrClamped() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
            try await LANBridge.with(e) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "lan" }
                try await b.waitLIFX("hall") { $0["via"] == "lan" }
                b.probe.publish("\(b.base)/lifx/kitchen/set", #"{"state":"ON","brightness":40,"color":{"h":120,"s":100},"transition":0,"transaction":"k"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/kitchen/result", payload: #"{"status":"ok","transaction":"k"}"#)
                let d = try await e.device(Self.kitchen)
                #expect(d["power_level"] == 65535)
                #expect(d["color"] == ["hue": 21845, "saturation": 65535, "brightness": 26214, "kelvin": 3500])
                // The white-only light: no colour (refused before anything is sent), kelvin clamped to its range.
                let sentBefore = try await e.received()[102, default: 0]
                b.probe.publish("\(b.base)/lifx/hall/set", #"{"color":{"h":10,"s":50},"transaction":"c"}"#)
                try await b.probe.waitFor("the refusal") { ms in ms.contains { $0.topic == "\(b.base)/lifx/hall/result" && $0.payload.contains("unknown field 'color'") } }
                #expect(try await e.received()[102, default: 0] == sentBefore)
                b.probe.publish("\(b.base)/lifx/hall/set", #"{"color_temp":9000,"transaction":"t"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/hall/result", payload: #"{"status":"ok","transaction":"t"}"#)
                #expect(b.lifxState("hall")?["color_temp"] == 4000)
                #expect(b.probe.messages(on: "\(b.base)/bridge/log").contains { $0.payload.contains("clamped to 4000 K") })
            }
        }
    }

    /// 30 % of the Sets and Gets to one light lost (request and acknowledgement alike): every command
    /// gets a result, the light ends in the last command's state, and no request took more than 5
    /// datagrams.
    @Test func underThirtyPercentLossCommandsEndInTheExactFinalState() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
            try await e.setScenario(Self.kitchen, #"{"drop_packets":{"101":0.3,"102":0.3,"117":0.3}}"#)
            try await LANBridge.with(e) { b in
                try await b.waitLIFX("kitchen", timeout: 60) { $0["via"] == "lan" }
                let before = try await e.received()
                let n = 100
                for i in 1...n {
                    b.probe.publish("\(b.base)/lifx/kitchen/set", #"{"brightness":\#(i),"transition":0,"transaction":\#(i)}"#)
                    if i % 10 == 0 { await TestEnvironment.sleep(0.05) }
                }
                try await b.probe.waitFor("every result", timeout: 120) { ms in ms.filter { $0.topic == "\(b.base)/lifx/kitchen/result" }.count >= n }
                let results = b.probe.messages(on: "\(b.base)/lifx/kitchen/result").compactMap { try? JSONValue.parse($0.payload) }
                // The last command failing (0.3⁵ for each datagram) is what a user sees and repeats.
                if results.first(where: { $0["transaction"] == JSONValue(n) })?["status"] != "ok" {
                    b.probe.publish("\(b.base)/lifx/kitchen/set", #"{"brightness":\#(n),"transition":0,"transaction":"again"}"#)
                    try await b.probe.waitFor("the repeated command") { ms in ms.contains { $0.topic == "\(b.base)/lifx/kitchen/result" && $0.payload.contains("again") } }
                }
                let d = try await e.device(Self.kitchen)
                #expect(d["color"]?["brightness"] == JSONValue(65535))
                #expect(d["power_level"] == 65535)
                let sets = try await e.received()[102, default: 0] - before[102, default: 0]
                let okRounds = results.filter { $0["status"] == "ok" }.count
                #expect(sets <= 5 * n, "\(sets) SetColor datagrams for \(n) commands")
                #expect(okRounds >= n - 5)
            }
        }
    }

    @Test func aLightGoneIsUnavailableOnlyAfterOfflineAfterAndComesBack() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
            try await LANBridge.with(e, configure: { $0.lan.pollInterval = 1; $0.lan.offlineAfter = 6 }) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "lan" }
                _ = try await e.call("DELETE", "/api/devices/\(Self.kitchen)")
                let gone = Date()
                // One lost reply, or five, changes nothing: still online well inside offline_after.
                await TestEnvironment.sleep(3)
                #expect(b.probe.last("\(b.base)/lifx/kitchen/availability") == "online")
                try await b.probe.waitFor(topic: "\(b.base)/lifx/kitchen/availability", payload: "offline", timeout: 60)
                // offline_after counts from the last answer, which came up to one poll interval before the removal.
                #expect(Date().timeIntervalSince(gone) >= 6 - 1)
                _ = try await e.call("POST", "/api/devices", #"{"product_id":27,"serial":"\#(Self.kitchen)","label":"Kitchen"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/kitchen/availability", payload: "online", timeout: 60)
            }
        }
    }

    @Test func malformedAndInvalidStatesNeitherCrashNorPublishNonsense() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
            try await LANBridge.with(e, configure: { $0.lan.pollInterval = 1 }) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "lan" }
                try await e.setScenario(Self.kitchen, #"{"malformed_packets":[107],"invalid_field_values":[107]}"#)
                await TestEnvironment.sleep(4)
                for m in b.probe.messages(on: "\(b.base)/lifx/kitchen") {
                    let s = try JSONValue.parse(m.payload)
                    let bri = s["brightness"]?.intValue ?? -1, k = s["color_temp"]?.intValue ?? -1, hue = s["color"]?["h"]?.intValue ?? -1
                    #expect((0...100).contains(bri) && (1500...9000).contains(k) && (0..<360).contains(hue), "published \(m.payload)")
                }
                _ = try await e.call("DELETE", "/api/scenarios/devices/\(Self.kitchen)")
                b.probe.publish("\(b.base)/lifx/kitchen/set", #"{"brightness":77,"transaction":"after"}"#)
                try await b.probe.waitFor(topic: "\(b.base)/lifx/kitchen/result", payload: #"{"status":"ok","transaction":"after"}"#)
            }
        }
    }

    /// More commands than sequence numbers, one after another: every reply matched to its own request.
    @Test func theSequenceWrapsWithoutAReplyMatchedToTheWrongCommand() async throws {
        try await LIFXEmulator.with(devices: Self.devices) { e in
            try await LANBridge.with(e) { b in
                try await b.waitLIFX("kitchen") { $0["via"] == "lan" }
                for i in 1...300 {
                    let value = 1 + i % 100
                    b.probe.publish("\(b.base)/lifx/kitchen/set", #"{"brightness":\#(value),"transition":0,"transaction":\#(i)}"#)
                    try await b.probe.waitFor("result \(i)") { ms in ms.contains { $0.topic == "\(b.base)/lifx/kitchen/result" && $0.payload.contains(#""transaction":\#(i)}"#) } }
                }
                let results = b.probe.messages(on: "\(b.base)/lifx/kitchen/result")
                #expect(results.count == 300 && results.allSatisfy { $0.payload.contains(#""status":"ok""#) })
                let d = try await e.device(Self.kitchen)
                #expect(d["color"]?["brightness"] == JSONValue(Int((Double(1 + 300 % 100) * 65535 / 100).rounded())))
            }
        }
    }

    /// A light both clouds know goes over the LAN (the cloud sees no request for it); a cloud-only light
    /// over the cloud.
    @Test func hybridTheLANWinsForALightOnBothAndTheCloudServesTheRest() async throws {
        let shared = "d073d5000001"   // the cloud simulator's kitchen
        try await LIFXEmulator.with(devices: """
          - product_id: 27
            serial: \(shared)
            label: Kitchen
            power_level: 0
        """) { e in
            try await LIFXHarness.with(configure: { s in
                s.lan.enabled = true
                s.lan.hosts = ["127.0.0.1:\(e.port)"]
                s.lan.broadcast = []
                s.lan.pollInterval = 3600
            }) { h in
                try await h.waitState("kitchen", timeout: 30, "over the LAN") { $0["via"] == "lan" }
                let hallState = try await h.waitState("hall_lamp", timeout: 30, "over the cloud") { $0["via"] == "cloud" }
                #expect(hallState["via"] == "cloud")
                h.sim.clearRequests()
                h.probe.publish(h.topic("kitchen") + "/set", #"{"state":"ON","brightness":55,"transaction":"lan"}"#)
                h.probe.publish(h.topic("hall_lamp") + "/set", #"{"state":"ON","brightness":45,"transaction":"cloud"}"#)
                try await h.probe.waitFor(topic: h.topic("kitchen") + "/result", payload: #"{"status":"ok","transaction":"lan"}"#)
                try await h.probe.waitFor(topic: h.topic("hall_lamp") + "/result", payload: #"{"status":"ok","transaction":"cloud"}"#)
                // The default transition (0.5 s) is emulated: the level climbs to full.
                try await waitUntil("the LAN light on") { (try? await e.device(shared))?["power_level"] == 65535 }
                let puts = h.sim.requests.filter { $0.method == "PUT" }
                #expect(!puts.contains { $0.path.contains(shared) || $0.text.contains(shared) }, "the cloud saw a request for the LAN light")
                #expect(puts.contains { $0.path.contains("d073d5000003") || $0.text.contains("d073d5000003") })
            }
        }
    }
}
