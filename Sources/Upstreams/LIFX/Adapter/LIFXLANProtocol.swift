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
    public static let stateUnhandled: UInt16 = 223

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
        var bytes: [UInt8] { var b: [UInt8] = []; b.le16(hue); b.le16(saturation); b.le16(brightness); b.le16(kelvin); return b }
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
        guard s.utf8.count == 12, let v = UInt64(s, radix: 16) else { return nil }
        var t: UInt64 = 0
        for i in 0..<6 { t |= ((v >> (8 * (5 - i))) & 0xFF) << (8 * i) }
        return t
    }

    public static func serial(_ target: UInt64) -> String {
        (0..<6).map { UInt8(truncatingIfNeeded: target >> (8 * $0)) }.hexString
    }
}

/// What the bridge knows of LIFX products (from the public LIFX products list): colour, the kelvin
/// range, and whether the LAN path covers the product's special features (multizone, matrix, infrared,
/// HEV are not driven over the LAN yet; their lights are still switched and dimmed).
public struct LIFXProduct: Sendable, Equatable {
    public var name: String
    public var hasColor: Bool
    public var minKelvin: Int
    public var maxKelvin: Int
    public var multizone = false
    public var matrix = false
    public var infrared = false
    public var hev = false

    static func color(_ n: String, _ lo: Int = 2500, _ hi: Int = 9000) -> LIFXProduct { LIFXProduct(name: n, hasColor: true, minKelvin: lo, maxKelvin: hi) }
    static func white(_ n: String, _ lo: Int, _ hi: Int) -> LIFXProduct { LIFXProduct(name: n, hasColor: false, minKelvin: lo, maxKelvin: hi) }

    public static let table: [UInt32: LIFXProduct] = {
        var t: [UInt32: LIFXProduct] = [:]
        for id: UInt32 in [1, 2, 3, 15, 20, 22, 23, 24, 27, 28, 43, 44, 49, 52, 53, 59, 62, 63, 91, 92, 93, 94, 97, 98] { t[id] = .color("LIFX Color") }
        for id: UInt32 in [25, 26, 29, 30, 45, 46, 64, 65, 109, 110, 111, 112] { var p = LIFXProduct.color("LIFX+ (infrared)"); p.infrared = true; t[id] = p }
        for id: UInt32 in [31, 32, 38, 56, 117, 118, 119, 120] { var p = LIFXProduct.color("LIFX Z / Beam"); p.multizone = true; t[id] = p }
        for id: UInt32 in [55, 57, 68, 137, 138] { var p = LIFXProduct.color("LIFX Tile / Candle", 1500, 9000); p.matrix = true; t[id] = p }
        for id: UInt32 in [90, 99] { var p = LIFXProduct.color("LIFX Clean", 1500, 9000); p.hev = true; t[id] = p }
        for id: UInt32 in [10, 11, 18, 19] { t[id] = .white("LIFX White", 2700, 6500) }
        for id: UInt32 in [50, 60] { t[id] = .white("LIFX Mini Day and Dusk", 1500, 4000) }
        for id: UInt32 in [12, 13, 51, 54, 61, 66] { t[id] = .white("LIFX White (fixed)", 2700, 2700) }
        return t
    }()

    /// An unknown product is taken as a colour light with the common range (said in its details).
    public static func lookup(_ id: UInt32) -> LIFXProduct { table[id] ?? .color("LIFX product \(id)") }
}
