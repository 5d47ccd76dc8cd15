import SwitchyardCore

/// The two lights of a LIFX Ceiling (products 176 and 177): one device whose 8 × 8 matrix has the downlight
/// in zones 0–62 and the uplight in zone 63 (docs/upstreams/lifx-lan.md "LIFX Ceiling"). Each is published
/// as a light of its own, `<ceiling>_downlight` and `<ceiling>_uplight` (docs/topics.md), driven through the
/// matrix over the LAN.
enum LIFXCeilingPart: String, CaseIterable, Sendable {
    case downlight, uplight

    var other: LIFXCeilingPart { self == .uplight ? .downlight : .uplight }
    var title: String { self == .uplight ? "Uplight" : "Downlight" }
    var zones: Range<Int> { self == .uplight ? LIFXCeiling.uplight..<LIFXCeiling.zones : 0..<LIFXCeiling.uplight }

    func deviceID(_ serial: String) -> String { "\(serial)_\(rawValue)" }

    /// `d073d5…_uplight` → the Ceiling's serial and the part.
    static func parse(_ deviceID: String) -> (serial: String, part: LIFXCeilingPart)? {
        for p in allCases where deviceID.hasSuffix("_\(p.rawValue)") {
            return (String(deviceID.dropLast(p.rawValue.count + 1)), p)
        }
        return nil
    }
}

enum LIFXCeiling {
    static let width: UInt8 = 8
    static let zones = 64
    /// The uplight's zone (the last); the downlight is every zone before it.
    static let uplight = 63

    /// A part as the matrix shows it: the uplight's zone; the downlight's first zone, at its brightest zone's level.
    static func colour(_ p: LIFXCeilingPart, _ matrix: [LIFXZone]) -> LIFXZone {
        var z = matrix[p.zones.lowerBound]
        z.brightness = matrix[p.zones].map(\.brightness).max() ?? 0
        return z
    }

    /// A command for one part, read: `state` ON/OFF/TOGGLE, `brightness`, `color`, `color_temp`.
    struct Change: Sendable, Equatable {
        var on: Bool?
        var toggle = false
        var brightness: Int?
        var colour = LIFXColorChange()

        init(_ f: [String: JSONValue], kelvinRange: ClosedRange<Int>) throws(AdapterError) {
            if case .string(let s) = f["state"] {
                if s == "TOGGLE" { toggle = true } else { on = s == "ON" }
            }
            if let b = f["brightness"]?.intValue {
                // Like a whole light: 0 without a state turns the part off and keeps its brightness.
                if b == 0 && on == nil && !toggle { on = false } else { brightness = b }
            }
            switch f["color"] {
            case .object(let o)?:
                colour = LIFXColorChange(hue: o["h"]?.doubleValue, saturation: o["s"]?.doubleValue.map { $0 / 100 })
            case .string(let text)?:
                do { colour = try LIFXColorChange.parse(text) } catch { throw AdapterError("\(error.description); nothing was sent") }
                if colour.random { throw AdapterError("random is not a colour for one part of a LIFX Ceiling; nothing was sent") }
            default: break
            }
            if let k = f["color_temp"]?.intValue { colour = colour.merged(with: LIFXColorChange(kelvin: k.clamped(to: kelvinRange))) }
            if on == nil, !toggle, brightness == nil, colour.isEmpty, f["transition"] == nil {
                throw AdapterError("nothing to do: the command changes no field")
            }
        }
    }

    /// Applies a part's command to the Ceiling: its zones take the colour and level; turning it off darkens its
    /// zones while the other part is lit (its level is kept for when it comes on again), else powers the
    /// Ceiling off; turning it on while the Ceiling is off darkens the other part first, then powers it on.
    static func apply(_ c: Change, to p: LIFXCeilingPart, of l: inout LIFXLight) {
        guard var m = l.matrix, m.count == zones else { return }
        let lit = l.on && colour(p, m).brightness > 0
        let otherLit = l.on && colour(p.other, m).brightness > 0
        let on = c.toggle ? !lit : (c.on ?? true)
        if !on {
            if otherLit {
                l.partLevels[p.rawValue] = colour(p, m).brightness
                for i in p.zones { m[i].brightness = 0 }
            } else {
                l.on = false
            }
        } else {
            let current = colour(p, m).brightness
            let level = c.brightness ?? (current > 0 && l.on ? nil : l.partLevels[p.rawValue] ?? 100)
            for i in p.zones {
                m[i].apply(c.colour, brightness: nil, kelvinRange: l.caps.kelvinRange)
                if let level { m[i].brightness = level }
            }
            l.partLevels[p.rawValue] = nil
            if !l.on {
                let other = colour(p.other, m).brightness
                if other > 0 { l.partLevels[p.other.rawValue] = other }
                for i in p.other.zones { m[i].brightness = 0 }
                l.on = true
            }
        }
        l.matrix = m
    }
}

extension LIFXLight {
    /// A Ceiling part's retained state: a light's fields (docs/topics.md "LIFX Ceiling").
    func partFields(_ p: LIFXCeilingPart) -> [String: JSONValue] {
        guard let m = matrix, m.count == LIFXCeiling.zones else { return [:] }
        let z = LIFXCeiling.colour(p, m)
        let lit = on && z.brightness > 0
        let level = z.brightness > 0 ? z.brightness : partLevels[p.rawValue] ?? 0
        return [
            "state": lit ? "ON" : "OFF", "brightness": JSONValue(level), "color_mode": z.saturation == 0 ? "color_temp" : "hs",
            "color": ["h": JSONValue(z.hue), "s": JSONValue(z.saturation)], "color_temp": JSONValue(z.kelvin),
            "connected": .bool(connected), "via": .string(via), "label": .string("\(label) \(p.title)"),
        ]
    }
}
