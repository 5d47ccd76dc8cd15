import SwitchyardCore

/// The LIFX LAN protocol at the byte level (docs/upstreams/lifx-lan.md): the 36-byte little-endian
/// header and the messages the bridge sends and reads. Decoding trusts nothing: a packet whose size
/// field, protocol number or payload length is wrong is refused (fuzzed: switchyard-fuzz lifx-lan).
public struct LIFXLANHeader: Sendable, Equatable {
    public var size: Int
    public var tagged: Bool
    public var source: UInt32
    /// The device's serial in the first 6 bytes; all zero = every device.
    public var target: UInt64
    public var ackRequired: Bool
    public var resRequired: Bool
    public var sequence: UInt8
    public var type: UInt16

    public static let length = 36
}

public struct LIFXLANPacket: Sendable, Equatable {
    public var header: LIFXLANHeader
    public var payload: [UInt8]

    public init(header: LIFXLANHeader, payload: [UInt8]) {
        self.header = header
        self.payload = payload
    }

    public init(type: UInt16, source: UInt32, target: UInt64 = 0, sequence: UInt8, tagged: Bool = false,
                ackRequired: Bool = false, resRequired: Bool = false, payload: [UInt8] = []) {
        header = LIFXLANHeader(size: LIFXLANHeader.length + payload.count, tagged: tagged, source: source, target: target,
                               ackRequired: ackRequired, resRequired: resRequired, sequence: sequence, type: type)
        self.payload = payload
    }

    /// The datagram: header then payload.
    public var bytes: [UInt8] {
        var b: [UInt8] = []
        b.reserveCapacity(LIFXLANHeader.length + payload.count)
        b.le16(UInt16(LIFXLANHeader.length + payload.count))
        b.le16(1024 | 1 << 12 | (header.tagged ? 1 << 13 : 0))   // protocol 1024, addressable
        b.le32(header.source)
        b.le64(header.target)
        b += [UInt8](repeating: 0, count: 6)
        b.append((header.resRequired ? 1 : 0) | (header.ackRequired ? 2 : 0))
        b.append(header.sequence)
        b.le64(0)
        b.le16(header.type)
        b.le16(0)
        return b + payload
    }

    /// Reads one datagram; nil when it is not a well-formed LIFX packet.
    public static func decode(_ d: [UInt8]) -> LIFXLANPacket? {
        guard d.count >= LIFXLANHeader.length else { return nil }
        let size = Int(d.u16(0))
        let proto = d.u16(2)
        guard size == d.count, proto & 0x0FFF == 1024, proto & 0x1000 != 0 else { return nil }
        let flags = d[22]
        let h = LIFXLANHeader(size: size, tagged: proto & 0x2000 != 0, source: d.u32(4), target: d.u64(8),
                              ackRequired: flags & 2 != 0, resRequired: flags & 1 != 0, sequence: d[23], type: d.u16(32))
        return LIFXLANPacket(header: h, payload: Array(d[LIFXLANHeader.length...]))
    }
}

/// Message types and payloads (only what the bridge uses).
public enum LIFXLANMessage {
    public static let getService: UInt16 = 2, stateService: UInt16 = 3
    public static let getHostFirmware: UInt16 = 14, stateHostFirmware: UInt16 = 15
    public static let getLabel: UInt16 = 23, stateLabel: UInt16 = 25
    public static let getVersion: UInt16 = 32, stateVersion: UInt16 = 33
    public static let acknowledgement: UInt16 = 45
    public static let getLocation: UInt16 = 48, stateLocation: UInt16 = 50
    public static let getGroup: UInt16 = 51, stateGroup: UInt16 = 53
    public static let lightGet: UInt16 = 101, setColor: UInt16 = 102, lightState: UInt16 = 107
    public static let lightSetPower: UInt16 = 117
    public static let setWaveformOptional: UInt16 = 119
    public static let getInfrared: UInt16 = 120, stateInfrared: UInt16 = 121, setInfrared: UInt16 = 122
    public static let getHevCycle: UInt16 = 142, setHevCycle: UInt16 = 143, stateHevCycle: UInt16 = 144
    public static let getLastHevCycleResult: UInt16 = 148, stateLastHevCycleResult: UInt16 = 149
    public static let stateUnhandled: UInt16 = 223
    public static let setColorZones: UInt16 = 501, getColorZones: UInt16 = 502, stateZone: UInt16 = 503, stateMultiZone: UInt16 = 506
    public static let getMultiZoneEffect: UInt16 = 507, setMultiZoneEffect: UInt16 = 508, stateMultiZoneEffect: UInt16 = 509
    public static let extendedSetColorZones: UInt16 = 510, extendedGetColorZones: UInt16 = 511, extendedStateMultiZone: UInt16 = 512
    public static let tileGet64: UInt16 = 707, tileState64: UInt16 = 711, tileSet64: UInt16 = 715
    public static let tileGetEffect: UInt16 = 718, tileSetEffect: UInt16 = 719, tileStateEffect: UInt16 = 720

    /// LightWaveform: the shapes SetWaveformOptional draws.
    public enum Waveform: UInt8, Sendable { case saw = 0, sine = 1, halfSine = 2, triangle = 3, pulse = 4 }
    /// MultiZoneApplicationRequest (and its extended twin): stage only, stage and show, show what is staged.
    public enum Apply: UInt8, Sendable { case noApply = 0, apply = 1, applyOnly = 2 }
    /// Zones in one ExtendedSetColorZones / ExtendedStateMultiZone.
    public static let extendedZones = 82
    /// The most zones the bridge takes from a device (`LIFXZone.maxCount`).
    public static let maxZones = LIFXZone.maxCount

    /// HSBK as the wire has it: every component u16, kelvin in kelvin.
    public struct HSBK: Sendable, Equatable {
        public var hue: UInt16, saturation: UInt16, brightness: UInt16, kelvin: UInt16
        public init(hue: UInt16, saturation: UInt16, brightness: UInt16, kelvin: UInt16) {
            self.hue = hue; self.saturation = saturation; self.brightness = brightness; self.kelvin = kelvin
        }
        /// From the user's units: hue in degrees, saturation and brightness in percent.
        public init(degrees: Int, saturationPercent: Int, brightnessPercent: Int, kelvin: Int) {
            hue = UInt16((Double(degrees % 360) * 65536 / 360).rounded()) // 360° wraps to 0
            saturation = UInt16((Double(min(max(saturationPercent, 0), 100)) * 65535 / 100).rounded())
            brightness = UInt16((Double(min(max(brightnessPercent, 0), 100)) * 65535 / 100).rounded())
            self.kelvin = UInt16(min(max(kelvin, 1000), 65535))
        }
        public var degrees: Int { Int((Double(hue) * 360 / 65536).rounded()) % 360 }
        public var saturationPercent: Int { Int((Double(saturation) * 100 / 65535).rounded()) }
        public var brightnessPercent: Int { Int((Double(brightness) * 100 / 65535).rounded()) }
        /// Kelvin as devices report it: 1000–12000 K (a value outside is a broken reply, not a colour).
        public var plausible: Bool { kelvin >= 1000 && kelvin <= 12000 }
        public var bytes: [UInt8] { var b: [UInt8] = []; b.le16(hue); b.le16(saturation); b.le16(brightness); b.le16(kelvin); return b }
        static func read(_ p: [UInt8], _ i: Int) -> HSBK { HSBK(hue: p.u16(i), saturation: p.u16(i + 2), brightness: p.u16(i + 4), kelvin: p.u16(i + 6)) }
    }

    public static func setColor(_ c: HSBK, durationMs: UInt32) -> [UInt8] {
        var b: [UInt8] = [0] + c.bytes
        b.le32(durationMs)
        return b
    }

    public static func setPower(on: Bool, durationMs: UInt32) -> [UInt8] {
        var b: [UInt8] = []
        b.le16(on ? 65535 : 0)
        b.le32(durationMs)
        return b
    }

    /// SetWaveformOptional: a waveform towards `color`, changing only the components flagged; `period` in ms,
    /// `skew` -32768…32767 for 0…1 (the duty cycle of PULSE is 1 − skew; SINE peaks at skew).
    public static func waveformOptional(transient: Bool, color: HSBK, periodMs: UInt32, cycles: Float, skew: Int16,
                                        waveform: Waveform, set: (hue: Bool, saturation: Bool, brightness: Bool, kelvin: Bool)) -> [UInt8] {
        var b: [UInt8] = [0, transient ? 1 : 0] + color.bytes
        b.le32(periodMs)
        b.le32(cycles.bitPattern)
        b.le16(UInt16(bitPattern: skew))
        b.append(waveform.rawValue)
        b += [set.hue, set.saturation, set.brightness, set.kelvin].map { $0 ? 1 : 0 }
        return b
    }

    public static func setInfrared(_ level: UInt16) -> [UInt8] { var b: [UInt8] = []; b.le16(level); return b }

    /// SetHevCycle: start (with a duration in seconds, 0 = the device's default) or stop a clean cycle.
    public static func setHevCycle(enable: Bool, durationS: UInt32) -> [UInt8] {
        var b: [UInt8] = [enable ? 1 : 0]
        b.le32(durationS)
        return b
    }

    /// SetColorZones (legacy): one colour for zones start…end.
    public static func setColorZones(start: UInt8, end: UInt8, color: HSBK, durationMs: UInt32, apply: Apply) -> [UInt8] {
        var b: [UInt8] = [start, end] + color.bytes
        b.le32(durationMs)
        b.append(apply.rawValue)
        return b
    }

    public static func getColorZones(start: UInt8, end: UInt8) -> [UInt8] { [start, end] }

    /// ExtendedSetColorZones: up to 82 colours from `index` (the array is padded to 82).
    public static func extendedSetColorZones(index: UInt16, colors: ArraySlice<HSBK>, durationMs: UInt32, apply: Apply) -> [UInt8] {
        precondition(colors.count <= extendedZones)
        var b: [UInt8] = []
        b.reserveCapacity(664)
        b.le32(durationMs)
        b.append(apply.rawValue)
        b.le16(index)
        b.append(UInt8(colors.count))
        for c in colors { b += c.bytes }
        b += [UInt8](repeating: 0, count: 8 * (extendedZones - colors.count))
        return b
    }

    /// MultiZoneSetEffect: type 0 = off, 1 = move; `speedMs` per cycle, `durationNs` 0 = until stopped;
    /// parameter 1 of move is the direction (1 forward, 0 reversed).
    public static func setMultiZoneEffect(instance: UInt32, type: UInt8, speedMs: UInt32, durationNs: UInt64, parameters: [UInt32]) -> [UInt8] {
        var b: [UInt8] = []
        b.le32(instance)
        b.append(type)
        b += [0, 0]
        b.le32(speedMs)
        b.le64(durationNs)
        b += [UInt8](repeating: 0, count: 8)
        for i in 0..<8 { b.le32(i < parameters.count ? parameters[i] : 0) }
        return b
    }

    /// TileSetEffect: type 0 = off, 2 = morph, 3 = flame, 5 = sky; up to 8 u32 parameters (sky: its type,
    /// then the clouds' minimum and maximum saturation); a palette of up to 16 colours (morph).
    public static func tileSetEffect(instance: UInt32, type: UInt8, speedMs: UInt32, durationNs: UInt64, parameters: [UInt32] = [],
                                     palette: [HSBK]) -> [UInt8] {
        var b: [UInt8] = [0, 0]
        b.le32(instance)
        b.append(type)
        b.le32(speedMs)
        b.le64(durationNs)
        b += [UInt8](repeating: 0, count: 8)
        for i in 0..<8 { b.le32(i < parameters.count ? parameters[i] : 0) }
        let p = palette.prefix(16)
        b.append(UInt8(p.count))
        for c in p { b += c.bytes }
        b += [UInt8](repeating: 0, count: 8 * (16 - p.count))
        return b
    }

    public static let tileGetEffectPayload: [UInt8] = [0, 0]

    /// TileGet64: tile 0, one tile, frame buffer 0, the rectangle from (x, y) `width` zones wide.
    public static func tileGet64(x: UInt8, y: UInt8, width: UInt8) -> [UInt8] { [0, 1, 0, x, y, width] }

    /// TileSet64: tile 0, one tile, frame buffer 0 from (x, y) `width` zones wide, row by row, with a duration;
    /// 64 colours (padded).
    public static func tileSet64(x: UInt8, y: UInt8, width: UInt8, durationMs: UInt32, colors: [HSBK]) -> [UInt8] {
        var b: [UInt8] = [0, 1, 0, x, y, width]
        b.reserveCapacity(522)
        b.le32(durationMs)
        for c in colors.prefix(64) { b += c.bytes }
        b += [UInt8](repeating: 0, count: 8 * (64 - min(colors.count, 64)))
        return b
    }

    /// TileState64: tile index, rectangle, 64 colours.
    public static func state64(_ p: [UInt8]) -> [HSBK]? {
        p.count == 517 ? (0..<64).map { HSBK.read(p, 5 + 8 * $0) } : nil
    }

    /// StateInfrared: the infrared LEDs' level.
    public static func infrared(_ p: [UInt8]) -> UInt16? { p.count == 2 ? p.u16(0) : nil }

    /// StateHevCycle: the cycle's length and what is left of it (0 = none running), in seconds.
    public static func hevCycle(_ p: [UInt8]) -> (durationS: UInt32, remainingS: UInt32, lastPower: Bool)? {
        p.count == 9 ? (p.u32(0), p.u32(4), p[8] != 0) : nil
    }

    /// LightLastHevCycleResult, as words.
    public static func hevResult(_ p: [UInt8]) -> String? {
        guard p.count == 1 else { return nil }
        switch p[0] {
        case 0: return "success"
        case 1: return "busy"
        case 2: return "interrupted_by_reset"
        case 3: return "interrupted_by_homekit"
        case 4: return "interrupted_by_lan"
        case 5: return "interrupted_by_cloud"
        case 255: return "none"
        default: return nil
        }
    }

    /// The effect type a StateEffect (509 multizone, 720 matrix) reports; 0 = none.
    public static func effectType(_ packet: LIFXLANPacket) -> UInt8? {
        switch (packet.header.type, packet.payload.count) {
        case (stateMultiZoneEffect, 59): return packet.payload[4]
        case (tileStateEffect, 187): return packet.payload[5]
        default: return nil
        }
    }

    /// Zones a StateZone (503), StateMultiZone (506) or ExtendedStateMultiZone (512) reports: the device's
    /// zone count, the first zone's index and the colours from there (padding past the count left out).
    public struct ZoneChunk: Sendable, Equatable {
        public var count: Int
        public var index: Int
        public var colors: [HSBK]
    }

    public static func zoneChunk(_ packet: LIFXLANPacket) -> ZoneChunk? {
        let p = packet.payload
        let (count, index, n, at): (Int, Int, Int, Int)
        switch (packet.header.type, p.count) {
        case (stateZone, 10): (count, index, n, at) = (Int(p[0]), Int(p[1]), 1, 2)
        case (stateMultiZone, 66): (count, index, n, at) = (Int(p[0]), Int(p[1]), 8, 2)
        case (extendedStateMultiZone, 661):
            (count, index, n, at) = (Int(p.u16(0)), Int(p.u16(2)), Int(p[4]), 5)
            guard n <= extendedZones else { return nil }
        default: return nil
        }
        guard count > 0, count <= maxZones, index < count else { return nil }
        let colors = (0..<min(n, count - index)).map { HSBK.read(p, at + 8 * $0) }
        return ZoneChunk(count: count, index: index, colors: colors)
    }

    /// StateService: the service (1 = UDP) and its port.
    public static func service(_ p: [UInt8]) -> (service: UInt8, port: UInt32)? {
        p.count == 5 ? (p[0], p.u32(1)) : nil
    }

    /// LightState: colour, power (on while the level is above 0: it passes through values in between
    /// during a transition) and label.
    public static func lightState(_ p: [UInt8]) -> (color: HSBK, on: Bool, label: String)? {
        guard p.count == 52 else { return nil }
        return (HSBK.read(p, 0), p.u16(10) > 0, label(p, 12))
    }

    public static func stateLabel(_ p: [UInt8]) -> String? { p.count == 32 ? label(p, 0) : nil }

    /// StateVersion: vendor and product ids.
    public static func version(_ p: [UInt8]) -> (vendor: UInt32, product: UInt32)? { p.count == 12 ? (p.u32(0), p.u32(4)) : nil }

    /// StateHostFirmware: major and minor version.
    public static func firmware(_ p: [UInt8]) -> (major: Int, minor: Int)? { p.count == 20 ? (Int(p.u16(18)), Int(p.u16(16))) : nil }

    /// StateGroup / StateLocation: 16-byte id (hex), label, updated_at (ns since the epoch).
    public static func membership(_ p: [UInt8]) -> (id: String, label: String, updatedAt: UInt64)? {
        guard p.count == 56 else { return nil }
        return (p[0..<16].hexString, label(p, 16), p.u64(48))
    }

    /// A fixed 32-byte string, NUL-padded (not terminated when full), invalid UTF-8 repaired.
    static func label(_ p: [UInt8], _ at: Int) -> String {
        let raw = p[at..<(at + 32)]
        return String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
    }
}

extension Array where Element == UInt8 {
    mutating func le16(_ v: UInt16) { append(UInt8(v & 0xFF)); append(UInt8(v >> 8)) }
    mutating func le32(_ v: UInt32) { for i in 0..<4 { append(UInt8(truncatingIfNeeded: v >> (8 * i))) } }
    mutating func le64(_ v: UInt64) { for i in 0..<8 { append(UInt8(truncatingIfNeeded: v >> (8 * i))) } }
    func u16(_ i: Int) -> UInt16 { UInt16(self[i]) | UInt16(self[i + 1]) << 8 }
    func u32(_ i: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(self[i + $1]) << (8 * $1) } }
    func u64(_ i: Int) -> UInt64 { (0..<8).reduce(0) { $0 | UInt64(self[i + $1]) << (8 * $1) } }
}

/// Serials: 12 hex digits (the cloud's light id) ⇄ the header's target (6 bytes, little-endian order of
/// the wire = the serial's byte order).
public enum LIFXSerial {
    public static func target(_ serial: String) -> UInt64? {
        let s = serial.lowercased()
        guard s.utf8.count == 12, s.utf8.allSatisfy(\.isASCIIHexDigit), let v = UInt64(s, radix: 16) else { return nil }
        var t: UInt64 = 0
        for i in 0..<6 { t |= ((v >> (8 * (5 - i))) & 0xFF) << (8 * i) }
        return t
    }

    public static func serial(_ target: UInt64) -> String {
        (0..<6).map { UInt8(truncatingIfNeeded: target >> (8 * $0)) }.hexString
    }
}
