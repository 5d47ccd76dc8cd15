#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// A reference to a LIFX group or location: its id (32 hex digits, the LAN's 16 bytes), its name, and
/// when the device it came from stored that name (`updated_at`, ns; nil from the cloud).
struct LIFXRef: Sendable, Equatable, Hashable {
    var id: String
    var name: String
    var updatedAt: UInt64? = nil
}

struct LIFXCaps: Sendable, Equatable {
    var hasColor = true
    var hasVariableColorTemp = true
    var hasIR = false
    var hasMultizone = false
    var hasMatrix = false
    var hasHEV = false
    /// The Ceiling's sky effect (firmware 4.4 on).
    var hasSky = false
    /// A LIFX Ceiling: its uplight and downlight are lights of their own.
    var isCeiling = false
    var minKelvin = 2500
    var maxKelvin = 9000

    /// The light's kelvin range (a product with one kelvin has a range of one).
    var kelvinRange: ClosedRange<Int> { minKelvin...max(minKelvin, maxKelvin) }
}

/// One light in the user's units, already rounded (docs/topics.md: brightness and saturation to 1 %, hue to
/// 1°, kelvin to 1 K), so a poll returning 0.29999237 for 30 % compares equal and publishes nothing.
struct LIFXLight: Sendable, Equatable {
    var id: String
    var label = ""
    var connected = true
    var on = false
    var brightness = 100
    var hue = 0
    var saturation = 0
    var kelvin = 3500
    var group: LIFXRef?
    var location: LIFXRef?
    var model: String?
    var caps = LIFXCaps()
    var lastSeen: String?
    var effect = "off"
    /// How the bridge reaches the light: "lan" or "cloud".
    var via = "cloud"
    /// The firmware the light runs ("3.70"), where the LAN said it.
    var firmware: String?
    /// LAN only: a multizone light's zones (once read), the infrared LEDs' level (percent), a HEV clean cycle.
    var zones: [LIFXZone]?
    var infrared: Int?
    var clean: LIFXClean?
    /// LAN only: a LIFX Ceiling's 64 zones (LIFXCeiling), and the level a part had before it was turned off
    /// while the other stayed lit (by part name).
    var matrix: [LIFXZone]?
    var partLevels: [String: Int] = [:]

    /// The values a command can change (what a revert restores).
    struct Values: Sendable, Equatable {
        var on: Bool
        var brightness: Int
        var hue: Int
        var saturation: Int
        var kelvin: Int
    }

    var values: Values {
        get { Values(on: on, brightness: brightness, hue: hue, saturation: saturation, kelvin: kelvin) }
        set { on = newValue.on; brightness = newValue.brightness; hue = newValue.hue; saturation = newValue.saturation; kelvin = newValue.kelvin }
    }

    static func percent(_ v: Double) -> Int { Int((v * 100).rounded()) }
    static func degrees(_ v: Double) -> Int { Int(v.rounded()) % 360 }

    var colorMode: String { saturation == 0 ? "color_temp" : "hs" }

    /// The retained state (docs/topics.md "Devices").
    var fields: [String: JSONValue] {
        var o: [String: JSONValue] = [
            "state": on ? "ON" : "OFF", "brightness": JSONValue(brightness), "color_mode": .string(colorMode),
            "color": ["h": JSONValue(hue), "s": JSONValue(saturation)], "color_temp": JSONValue(kelvin),
            "label": .string(label), "connected": .bool(connected), "effect": .string(effect),
            "capabilities": [
                "color": .bool(caps.hasColor), "color_temp": .bool(caps.hasVariableColorTemp), "infrared": .bool(caps.hasIR),
                "multizone": .bool(caps.hasMultizone), "matrix": .bool(caps.hasMatrix), "hev": .bool(caps.hasHEV),
                "min_kelvin": JSONValue(caps.minKelvin), "max_kelvin": JSONValue(caps.maxKelvin),
            ],
        ]
        o["group"] = group.map { .string($0.name) } ?? .null
        o["location"] = location.map { .string($0.name) } ?? .null
        o["model"] = model.map(JSONValue.string) ?? .null
        o["last_seen"] = lastSeen.map(JSONValue.string) ?? .null
        o["via"] = .string(via)
        if let zones {
            o["zones"] = LIFXZone.runs(zones, hasColor: caps.hasColor)
            o["zone_count"] = JSONValue(zones.count)
        }
        if let infrared { o["infrared"] = JSONValue(infrared) }
        if let clean {
            o["clean_cycle"] = clean.active ? "ON" : "OFF"
            o["clean_remaining"] = JSONValue(clean.remaining)
            o["clean_last_result"] = clean.lastResult.map(JSONValue.string) ?? .null
        }
        return o
    }

    /// Applies a set in wire units (what LIFX will do), in the user's rounded units.
    mutating func apply(_ s: LIFXSet) {
        if let p = s.power { on = p }
        // A random hue as LIFX picks one (the LAN path sends what the state says).
        if s.color.random { saturation = 100; hue = Int.random(in: 0..<360) }
        if zones != nil {
            var change = s.color
            if change.random { change.hue = Double(hue); change.saturation = 1 }
            for i in zones!.indices { zones![i].apply(change, brightness: s.brightness, kelvinRange: caps.kelvinRange) }
        }
        if let k = s.color.kelvin { kelvin = k.clamped(to: caps.kelvinRange); saturation = 0 }
        if let h = s.color.hue { hue = Self.degrees(h) }
        if let sat = s.color.saturation { saturation = Self.percent(sat) }
        if let b = s.brightness { brightness = Self.percent(b) }
        if let b = s.color.brightness, s.brightness == nil { brightness = Self.percent(b) }
    }

    /// Applies a relative change (`state/delta`) as LIFX does: clipped to the light's range.
    mutating func apply(_ d: LIFXDelta) {
        if let p = d.power { on = p }
        if let b = d.brightness { brightness = min(100, max(0, brightness + Self.percent(b))) }
        if let k = d.kelvin { kelvin = (kelvin + k).clamped(to: caps.kelvinRange) }
        // Every zone moves from its own value, as the light does.
        if zones != nil {
            for i in zones!.indices {
                if let b = d.brightness { zones![i].brightness = min(100, max(0, zones![i].brightness + Self.percent(b))) }
                if let k = d.kelvin { zones![i].kelvin = (zones![i].kelvin + k).clamped(to: caps.kelvinRange) }
            }
        }
    }
}

/// A HEV light's clean cycle as the light reports it.
struct LIFXClean: Sendable, Equatable {
    var active = false
    /// Seconds left of the running cycle (0 when none runs).
    var remaining = 0
    /// How the last cycle ended (`success`, `busy`, `interrupted_by_lan`…), when the light said.
    var lastResult: String?
}

/// An absolute change, in wire units: what a command sets (the cloud sends it as a `PUT /lights/:selector/state`
/// body or one `states[]` entry, LIFXCloudAPI.swift).
struct LIFXSet: Sendable, Equatable {
    var power: Bool?
    var color = LIFXColorChange()
    /// 0–1; wins over a brightness inside the colour.
    var brightness: Double?
    var duration: Double

    /// Last value wins per field.
    func merged(with newer: LIFXSet) -> LIFXSet {
        var out = self
        if let p = newer.power { out.power = p }
        out.color = color.merged(with: newer.color)
        if let b = newer.brightness { out.brightness = b }
        if newer.color.brightness != nil, newer.brightness == nil { out.brightness = nil }
        out.duration = newer.duration
        return out
    }
}

/// A relative change (a group's `brightness_step`, `color_temp_step`): the cloud's `state/delta`.
struct LIFXDelta: Sendable, Equatable {
    var power: Bool?
    var brightness: Double?
    var kelvin: Int?
    var duration: Double

    func merged(with newer: LIFXDelta) -> LIFXDelta {
        var out = self
        if let p = newer.power { out.power = p }
        if let b = newer.brightness { out.brightness = (brightness ?? 0) + b }
        if let k = newer.kelvin { out.kelvin = (kelvin ?? 0) + k }
        out.duration = newer.duration
        return out
    }
}

/// A scene from `GET /scenes` (docs/upstreams/lifx-cloud.md §1.10).
struct LIFXScene: Sendable, Equatable {
    struct State: Sendable, Equatable {
        var selector: String
        var set: LIFXSet
    }
    var uuid: String
    var name: String
    var states: [State]
}

/// Group and location state (docs/topics.md "LIFX"; docs/upstreams/lifx-cloud.md §2.3 with its bug fixed): ON if any connected member is
/// ON; brightness, saturation and kelvin are means and hue a circular mean over the connected members
/// (over all members when none is connected, so the last known values stay meaningful).
enum LIFXAggregate {
    static func fields(_ members: [LIFXLight], name: String) -> [String: JSONValue] {
        let connected = members.filter(\.connected)
        let basis = connected.isEmpty ? members : connected
        let n = Double(max(basis.count, 1))
        let on = connected.contains { $0.on }
        let brightness = Int((Double(basis.map(\.brightness).reduce(0, +)) / n).rounded())
        let saturation = Int((Double(basis.map(\.saturation).reduce(0, +)) / n).rounded())
        let kelvin = Int((Double(basis.map(\.kelvin).reduce(0, +)) / n).rounded())
        return [
            "state": on ? "ON" : "OFF", "brightness": JSONValue(brightness),
            "color_mode": basis.allSatisfy { $0.colorMode == "color_temp" } ? "color_temp" : "hs",
            "color": ["h": JSONValue(circularMean(basis.map(\.hue))), "s": JSONValue(saturation)],
            "color_temp": JSONValue(kelvin), "connected": .bool(!connected.isEmpty), "label": .string(name),
            "lights": JSONValue(members.count),
        ]
    }

    /// atan2(Σ sin, Σ cos) mapped to [0, 360).
    static func circularMean(_ hues: [Int]) -> Int {
        guard !hues.isEmpty else { return 0 }
        var s = 0.0, c = 0.0
        for h in hues {
            let r = Double(h) * .pi / 180
            s += sin(r)
            c += cos(r)
        }
        if abs(s) < 1e-9 && abs(c) < 1e-9 { return hues[0] }
        var deg = atan2(s, c) * 180 / .pi
        if deg < 0 { deg += 360 }
        return Int(deg.rounded()) % 360
    }
}
