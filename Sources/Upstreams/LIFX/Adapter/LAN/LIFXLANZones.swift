import SwitchyardCore

extension LIFXZone {
    init(_ c: LIFXLANMessage.HSBK) {
        self.init(hue: c.degrees, saturation: c.saturationPercent, brightness: c.brightnessPercent, kelvin: Int(c.kelvin))
    }

    /// The zone as the wire has it.
    var hsbk: LIFXLANMessage.HSBK {
        LIFXLANMessage.HSBK(degrees: hue, saturationPercent: saturation, brightnessPercent: brightness, kelvin: kelvin)
    }
}

extension LIFXLANMessage.HSBK {
    /// This colour with what a colour change names replaced, as a zone takes it (kelvin alone means white).
    func applying(_ c: LIFXColorChange) -> LIFXLANMessage.HSBK {
        var z = LIFXZone(self)
        z.apply(c, brightness: nil, kelvinRange: 1500...9000)
        return z.hsbk
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
