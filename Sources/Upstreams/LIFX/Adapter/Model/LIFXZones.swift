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

    init(_ c: LIFXLANMessage.HSBK) {
        self.init(hue: c.degrees, saturation: c.saturationPercent, brightness: c.brightnessPercent, kelvin: Int(c.kelvin))
    }

    var hsbk: LIFXLANMessage.HSBK {
        LIFXLANMessage.HSBK(degrees: hue, saturationPercent: saturation, brightnessPercent: brightness, kelvin: kelvin)
    }

    /// The same change a whole-light command makes, on this zone (kelvin alone means white, as on the light).
    mutating func apply(_ c: LIFXColorChange, brightness b: Double?, kelvinRange: ClosedRange<Int>) {
        if let k = c.kelvin { kelvin = k.clamped(to: kelvinRange); saturation = 0 }
        if let h = c.hue { hue = LIFXLight.degrees(h) }
        if let s = c.saturation { saturation = LIFXLight.percent(s) }
        if let b = b ?? c.brightness { brightness = LIFXLight.percent(b) }
    }
}

/// Reassembles a device's zones from the replies to one read: StateZone, StateMultiZone or
/// ExtendedStateMultiZone, in any order, over as many packets as the zone count needs (a reply may repeat
/// zones another already gave). A reply that names another zone count than the first, or carries a colour no
/// device reports, makes the read invalid: nothing of it is used.
public struct LIFXZoneAssembler: Sendable {
    public private(set) var count: Int?
    private(set) var zones: [LIFXLANMessage.HSBK?] = []
    private(set) var filled = 0
    public private(set) var invalid = false

    public init() {}

    /// The replies to one read, taken in the order given.
    init(_ packets: [LIFXLANPacket]) {
        for p in packets { add(p) }
    }

    /// Takes one reply; false when it is not a zone reply or contradicts the ones before.
    @discardableResult
    public mutating func add(_ packet: LIFXLANPacket) -> Bool {
        guard !invalid else { return false }
        guard let chunk = LIFXLANMessage.zoneChunk(packet), chunk.colors.allSatisfy(\.plausible) else { invalid = true; return false }
        if count == nil {
            count = chunk.count
            zones = Array(repeating: nil, count: chunk.count)
        }
        guard chunk.count == count else { invalid = true; return false }
        for (i, c) in chunk.colors.enumerated() {
            if zones[chunk.index + i] == nil { filled += 1 }
            zones[chunk.index + i] = c
        }
        return true
    }

    public var isComplete: Bool { !invalid && count != nil && filled == count }

    /// Every zone, once all have arrived.
    public var complete: [LIFXLANMessage.HSBK]? { isComplete ? zones.compactMap { $0 } : nil }
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
