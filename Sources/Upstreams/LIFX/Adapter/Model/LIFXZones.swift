import SwitchyardCore

/// One zone of a multizone light (a strip, a Beam, a Neon) in the user's units, rounded as the light's
/// own values are (docs/topics.md "LIFX over the LAN", zones).
struct LIFXZone: Sendable, Equatable {
    var hue: Int
    var saturation: Int
    var brightness: Int
    var kelvin: Int

    init(hue: Int, saturation: Int, brightness: Int, kelvin: Int) {
        self.hue = hue; self.saturation = saturation; self.brightness = brightness; self.kelvin = kelvin
    }

    /// The most zones the bridge takes from a light (every product has far fewer: 120 at most).
    static let maxCount = 512

    /// The same change a whole-light command makes, on this zone (kelvin alone means white, as on the light).
    mutating func apply(_ c: LIFXColorChange, brightness b: Double?, kelvinRange: ClosedRange<Int>) {
        if let k = c.kelvin { kelvin = k.clamped(to: kelvinRange); saturation = 0 }
        if let h = c.hue { hue = LIFXLight.degrees(h) }
        if let s = c.saturation { saturation = LIFXLight.percent(s) }
        if let b = b ?? c.brightness { brightness = LIFXLight.percent(b) }
    }
}

extension LIFXLight {
    /// The light's own colour (hue, saturation, brightness, kelvin) as one value.
    var wholeColour: LIFXZone {
        get { LIFXZone(hue: hue, saturation: saturation, brightness: brightness, kelvin: kelvin) }
        set { hue = newValue.hue; saturation = newValue.saturation; brightness = newValue.brightness; kelvin = newValue.kelvin }
    }

    /// Takes in what a device reported over the LAN (power and colour), in the user's units.
    mutating func takeReported(on: Bool, colour: LIFXZone) {
        self.on = on
        wholeColour = colour
    }
}

extension LIFXZone {
    /// Runs of equal neighbouring zones, as the state shows them: 120 zones of one colour are one entry.
    static func runs(_ zones: [LIFXZone], hasColor: Bool) -> JSONValue {
        var out: [JSONValue] = []
        var start = 0
        for i in zones.indices where i == zones.count - 1 || zones[i + 1] != zones[i] {
            let z = zones[i]
            var o: [String: JSONValue] = ["start": JSONValue(start), "end": JSONValue(i), "brightness": JSONValue(z.brightness),
                                          "color_temp": JSONValue(z.kelvin)]
            if hasColor { o["color"] = ["h": JSONValue(z.hue), "s": JSONValue(z.saturation)] }
            out.append(.object(o))
            start = i + 1
        }
        return .array(out)
    }

    /// A `zones` command: each segment `{"start","end","color","brightness","color_temp"}` changes zones
    /// start…end (end defaults to start); what a segment leaves out each zone keeps. Refuses a segment past the
    /// light's zones or backwards, and a colour string it cannot read, naming the segment. Returns notes for
    /// kelvin that was clamped to the light's range.
    static func apply(segments: [JSONValue], to zones: inout [LIFXZone], kelvinRange: ClosedRange<Int>) throws(AdapterError) -> [String] {
        var notes: [String] = []
        for (n, seg) in segments.enumerated() {
            guard let start = seg["start"]?.intValue else { throw AdapterError("zones[\(n)]: give a start zone") }
            let end = seg["end"]?.intValue ?? start
            guard start <= end else { throw AdapterError("zones[\(n)]: start \(start) is after end \(end)") }
            guard end < zones.count else {
                throw AdapterError("zones[\(n)]: zone \(end) is past the light's \(zones.count) zones (0–\(zones.count - 1))")
            }
            // Kelvin first (it means white), then a colour given beside it wins for hue and saturation.
            var change = LIFXColorChange()
            if let k = seg["color_temp"]?.intValue {
                let c = k.clamped(to: kelvinRange)
                if c != k { notes.append("zones[\(n)]: color_temp \(k) K is outside the light's range \(kelvinRange.lowerBound)–\(kelvinRange.upperBound) K; clamped to \(c) K") }
                change = LIFXColorChange(kelvin: c)
            }
            switch seg["color"] {
            case .object(let o)?:
                change = change.merged(with: LIFXColorChange(hue: o["h"]?.doubleValue, saturation: o["s"]?.doubleValue.map { $0 / 100 }))
            case .string(let text)?:
                let parsed: LIFXColorChange
                do { parsed = try LIFXColorChange.parse(text) } catch { throw AdapterError("zones[\(n)]: \(error.description)") }
                if parsed.random { throw AdapterError("zones[\(n)]: random is not a zone colour") }
                change = change.merged(with: parsed)
            default: break
            }
            let b = seg["brightness"]?.doubleValue.map { $0 / 100 }
            if change.isEmpty && b == nil { throw AdapterError("zones[\(n)]: give a color, brightness or color_temp") }
            for i in start...end { zones[i].apply(change, brightness: b, kelvinRange: kelvinRange) }
        }
        return notes
    }
}
