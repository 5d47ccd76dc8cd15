import Foundation
@testable import LIFXAdapter
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The LIFX Ceiling's uplight and downlight (docs/topics.md "LIFX Ceiling"): the messages laid out by hand
/// from protocol.yml's field lists, and the parts' commands on the matrix.
@Suite struct LIFXCeilingUnitTests {
    func hex(_ s: String) -> [UInt8] { s.split(separator: " ").map { UInt8($0, radix: 16)! } }
    typealias HSBK = LIFXLANMessage.HSBK

    @Test func tileMessagesHaveProtocolYmlsLayout() throws {
        // TileGet64: tile_index u8, length u8, rect {fb_index, x, y, width}.
        #expect(LIFXLANMessage.tileGet64(x: 0, y: 0, width: 8) == hex("00 01 00 00 00 08"))
        // TileSet64: tile_index, length, rect, duration u32, 64 colours: the uplight alone at (7, 7), 500 ms.
        let blue = HSBK(hue: 43691, saturation: 65535, brightness: 26214, kelvin: 3500)
        let set = LIFXLANMessage.tileSet64(x: 7, y: 7, width: 8, durationMs: 500, colors: [blue])
        #expect(set.count == 522)
        #expect(Array(set[0..<18]) == hex("00 01 00 07 07 08 f4 01 00 00 ab aa ff ff 66 66 ac 0d"))
        #expect(set[18...].allSatisfy { $0 == 0 })
        // TileState64: tile_index, rect, 64 colours.
        var state: [UInt8] = hex("00 00 00 00 08")
        for i in 0..<64 { state += [UInt8(i), 0, 0, 0, UInt8(i), 0, 0x8c, 0x0a] }
        let colours = try #require(LIFXLANMessage.state64(state))
        #expect(colours.count == 64 && colours[63] == HSBK(hue: 63, saturation: 0, brightness: 63, kelvin: 2700))
        #expect(LIFXLANMessage.state64(Array(state.dropLast())) == nil)
        // TileSetEffect SKY (5): parameter 0 the sky type, 1 and 2 the clouds' saturation range (u32 each, from byte 27).
        let sky = LIFXLANMessage.tileSetEffect(instance: 1, type: 5, speedMs: 50_000, durationNs: 0, parameters: [2, 50, 180], palette: [])
        #expect(sky.count == 188 && sky[6] == 5)
        #expect(Array(sky[27..<39]) == hex("02 00 00 00 32 00 00 00 b4 00 00 00") && sky[39..<59].allSatisfy { $0 == 0 })
    }

    func ceiling(on: Bool) -> LIFXLight {
        var l = LIFXLight(id: "d073d5c0ffee")
        l.label = "Ceiling"
        l.on = on
        l.caps.isCeiling = true
        l.matrix = (0..<64).map { $0 == 63 ? LIFXZone(hue: 240, saturation: 100, brightness: 50, kelvin: 3500)
                                           : LIFXZone(hue: 0, saturation: 0, brightness: 80, kelvin: 2700) }
        return l
    }

    func change(_ f: [String: JSONValue]) throws -> LIFXCeiling.Change { try LIFXCeiling.Change(f, kelvinRange: 1500...9000) }

    /// A part's command changes its own zones; the power follows what the other part needs.
    @Test func aPartChangesItsZonesAndThePowerAsTheOtherNeeds() throws {
        var l = ceiling(on: false)
        // Off: the uplight on alone darkens the downlight first (its level kept), then powers the Ceiling on.
        LIFXCeiling.apply(try change(["state": "ON", "brightness": 40]), to: .uplight, of: &l)
        #expect(l.on && l.matrix![63].brightness == 40 && l.matrix![0..<63].allSatisfy { $0.brightness == 0 })
        #expect(l.partFields(.downlight)["state"] == "OFF" && l.partFields(.downlight)["brightness"] == 80)
        #expect(l.partFields(.uplight)["state"] == "ON" && l.partFields(.uplight)["color"] == ["h": 240, "s": 100])
        // The downlight on again comes back at its level; a colour temperature makes it white.
        LIFXCeiling.apply(try change(["state": "ON", "color_temp": 3000]), to: .downlight, of: &l)
        #expect(l.matrix![0..<63].allSatisfy { $0.brightness == 80 && $0.kelvin == 3000 && $0.saturation == 0 })
        #expect(l.matrix![63].brightness == 40)
        // The uplight off while the downlight is lit: its zone goes dark, the power stays.
        LIFXCeiling.apply(try change(["state": "OFF"]), to: .uplight, of: &l)
        #expect(l.on && l.matrix![63].brightness == 0 && l.partFields(.uplight)["brightness"] == 40)
        // The downlight off with the uplight dark: the Ceiling powers off, its zones kept.
        LIFXCeiling.apply(try change(["state": "TOGGLE"]), to: .downlight, of: &l)
        #expect(!l.on && l.matrix![0].brightness == 80)
        // brightness 0 without a state is off, like a whole light's.
        #expect(try change(["brightness": 0]).on == false)
        #expect(throws: AdapterError.self) { try change(["color": "random"]) }
    }

    @Test func partIDsNameTheCeilingAndThePart() {
        #expect(LIFXCeilingPart.parse("d073d5c0ffee_uplight")! == ("d073d5c0ffee", .uplight))
        #expect(LIFXCeilingPart.parse("d073d5c0ffee_downlight")! == ("d073d5c0ffee", .downlight))
        #expect(LIFXCeilingPart.parse("d073d5c0ffee") == nil && LIFXCeilingPart.parse("group_1234") == nil)
    }
}

/// A LIFX Ceiling (product 176) in lifx-emulator, which models it as an 8 × 8 matrix whose last zone is the
/// uplight (docs/upstreams/lifx-lan.md "The emulator"): what the emulator saves is the judge, with the
/// expected values worked out from the protocol's units (`Wire`).
@Suite(.serialized, .enabled(if: LIFXEmulator.unavailableReason == nil, Comment(rawValue: LIFXEmulator.unavailableReason ?? "")))
struct LIFXCeilingEmulatorTests {
    static let serial = "d073d5ce1176"

    func zones(_ persisted: JSONValue) -> [JSONValue] { persisted["tile_devices"]?.arrayValue?.first?["colors"]?.arrayValue ?? [] }

    @Test func theUplightAndDownlightAreTwoLightsDrivenThroughTheMatrix() async throws {
        try await LIFXEmulator.with(devices: """
          - product_id: 176
            serial: \(Self.serial)
            label: Ceiling
        """) { e in
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#", "homeassistant/#"] }, adapter: LIFXAdapter(settings: LANBridge.settings(e))) { b in
                let lifx = "\(b.base)/lifx"
                try await b.waitLIFX("ceiling_uplight") { $0["via"] == "lan" }
                try await b.waitLIFX("ceiling_downlight") { $0["via"] == "lan" }
                // Home Assistant sees one device, the Ceiling, with three lights: the whole, its uplight and its
                // downlight; sky among the whole's effects; one Connected entity, the Ceiling's.
                let node = "switchyard_\(b.base)_lifx_\(Self.serial)"
                for n in [node, "\(node)_uplight", "\(node)_downlight"] {
                    try await b.probe.waitFor(topic: "homeassistant/light/\(n)/light/config")
                }
                let whole = try JSONValue.parse(b.probe.last("homeassistant/light/\(node)/light/config")!)
                #expect(whole["effect_list"]?.arrayValue?.contains("sky") == true)
                #expect(whole["device"]?["identifiers"] == [.string(node)] && whole["name"] == .null)
                for (part, name) in [("uplight", "Uplight"), ("downlight", "Downlight")] {
                    let config = try JSONValue.parse(b.probe.last("homeassistant/light/\(node)_\(part)/light/config")!)
                    #expect(config["device"]?["identifiers"] == [.string(node)], "the \(part) joins the Ceiling's device")
                    #expect(config["device"]?["name"] == whole["device"]?["name"] && config["device"]?["model"] == nil)
                    #expect(config["name"] == .string(name))
                    #expect(config["state_topic"] == .string("\(lifx)/ceiling_\(part)"))
                    let details = try JSONValue.parse(try await b.probe.waitFor(topic: "\(b.base)/bridge/devices/lifx/ceiling_\(part)").payload)
                    #expect(details["part_of"] == .string(Self.serial))
                }
                let connected = Set(b.probe.messages.map(\.topic).filter { $0.hasPrefix("homeassistant/binary_sensor/\(node)") && $0.hasSuffix("/connected/config") })
                #expect(connected == ["homeassistant/binary_sensor/\(node)/connected/config"])

                // The whole Ceiling off, then the uplight on alone: the downlight is darkened before the power comes on.
                b.probe.publish("\(lifx)/ceiling/set", #"{"state":"OFF","transition":0,"transaction":"off"}"#)
                try await b.probe.waitFor(topic: "\(lifx)/ceiling/result", payload: #"{"status":"ok","transaction":"off"}"#)
                let before = zones(try await e.waitPersisted(Self.serial, "off") { $0["power_level"] == 0 })
                try #require(before.count == 64)
                b.probe.publish("\(lifx)/ceiling_uplight/set", #"{"state":"ON","brightness":40,"color_temp":2700,"transition":0,"transaction":"u"}"#)
                try await b.probe.waitFor(topic: "\(lifx)/ceiling_uplight/result", payload: #"{"status":"ok","transaction":"u"}"#)
                let lit = try await e.waitPersisted(Self.serial, "the uplight lit") { p in
                    p["power_level"] == 65535 && self.zones(p).last?["brightness"] == JSONValue(Wire.level(40))
                }
                let up = try #require(zones(lit).last)
                #expect(up["kelvin"] == 2700 && up["saturation"] == 0)
                #expect(zones(lit).prefix(63).allSatisfy { $0["brightness"] == 0 })
                // The downlight on at 70 %: its zones only; the uplight as it was.
                b.probe.publish("\(lifx)/ceiling_downlight/set", #"{"state":"ON","brightness":70,"transition":0,"transaction":"d"}"#)
                try await b.probe.waitFor(topic: "\(lifx)/ceiling_downlight/result", payload: #"{"status":"ok","transaction":"d"}"#)
                let both = try await e.waitPersisted(Self.serial, "the downlight lit") { p in
                    self.zones(p).prefix(63).allSatisfy { $0["brightness"] == JSONValue(Wire.level(70)) }
                }
                #expect(zones(both).last == up)
                for (i, z) in zones(both).prefix(63).enumerated() {
                    #expect(z["hue"] == before[i]["hue"] && z["kelvin"] == before[i]["kelvin"], "zone \(i) kept its colour")
                }
                // The uplight off while the downlight is lit: its zone goes dark, the power stays on.
                b.probe.publish("\(lifx)/ceiling_uplight/set", #"{"state":"OFF","transition":0}"#)
                try await e.waitPersisted(Self.serial, "the uplight dark") { p in
                    p["power_level"] == 65535 && self.zones(p).last?["brightness"] == 0
                }
                try await b.waitLIFX("ceiling_uplight", "off, its level kept") { $0["state"] == "OFF" && $0["brightness"] == 40 }
                // The downlight off as well: the Ceiling powers off.
                b.probe.publish("\(lifx)/ceiling_downlight/set", #"{"state":"OFF","transition":0}"#)
                try await e.waitPersisted(Self.serial, "powered off") { $0["power_level"] == 0 }

                // The sky effect on the whole Ceiling (firmware 4.10 has it).
                b.probe.publish("\(lifx)/ceiling/set", #"{"effect":{"name":"sky","sky_type":"sunrise","period":30},"transaction":"s"}"#)
                try await b.probe.waitFor(topic: "\(lifx)/ceiling/result", payload: #"{"status":"ok","transaction":"s"}"#)
                try await e.waitPersisted(Self.serial, "sky") { $0["tile_effect_type"] == 5 && $0["tile_effect_sky_type"] == 0 }
            }
        }
    }
}
