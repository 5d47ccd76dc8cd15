/// The Nova V1 text protocol (docs/upstreams/nova.md §2.3): requests `(ID:BODY)` with BODY `P`, `O` or
/// `L,ww,cc,tttt` in upper-case zero-padded hex, and acks `(ID:A)`. Acks are parsed strictly
/// (`^\(([0-9A-Fa-f]{2}):A\)$`), unlike the SDKs' loose patterns.
public enum NovaCommand: Sendable, Equatable {
    case ping
    case off
    case light(warm: UInt8, cool: UInt8, timeoutMs: UInt16)

    /// The SDK shortcut: a light with no output or no duration is an `O`.
    public static func flash(warm: UInt8, cool: UInt8, timeoutMs: UInt16) -> NovaCommand {
        (warm == 0 && cool == 0) || timeoutMs == 0 ? .off : .light(warm: warm, cool: cool, timeoutMs: timeoutMs)
    }
}

public enum NovaCodec {
    static func hex(_ v: Int, _ width: Int) -> String {
        let digits = Array("0123456789ABCDEF")
        var out = ""
        for shift in stride(from: (width - 1) * 4, through: 0, by: -4) { out.append(digits[(v >> shift) & 0xF]) }
        return out
    }

    public static func encode(_ command: NovaCommand, id: UInt8) -> [UInt8] {
        let body: String
        switch command {
        case .ping: body = "P"
        case .off: body = "O"
        case .light(let w, let c, let t): body = "L,\(hex(Int(w), 2)),\(hex(Int(c), 2)),\(hex(Int(t), 4))"
        }
        return Array("(\(hex(Int(id), 2)):\(body))".utf8)
    }

    /// The request id an ack carries, or nil when the bytes are not exactly an ack.
    public static func ack(_ bytes: [UInt8]) -> UInt8? {
        guard bytes.count == 6, bytes[0] == UInt8(ascii: "("), bytes[3] == UInt8(ascii: ":"), bytes[4] == UInt8(ascii: "A"),
              bytes[5] == UInt8(ascii: ")"), let hi = nibble(bytes[1]), let lo = nibble(bytes[2]) else { return nil }
        return hi << 4 | lo
    }

    static func nibble(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return b - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return b - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return b - UInt8(ascii: "a") + 10
        default: return nil
        }
    }
}

/// Flash settings in the hardware's unit (PWM 0–255, timeout in ms) and the SDK's presets.
public struct NovaSettings: Sendable, Equatable {
    public var warm: UInt8
    public var cool: UInt8
    public var timeoutMs: UInt16
    public init(warm: UInt8, cool: UInt8, timeoutMs: UInt16) {
        self.warm = warm
        self.cool = cool
        self.timeoutMs = timeoutMs
    }

    /// iOS v2 / Android presets (docs/upstreams/nova.md §2.5).
    public static let presets: [String: (warm: UInt8, cool: UInt8)] = [
        "bright": (255, 255), "gentle": (31, 31), "neutral": (0, 255), "warm": (255, 127),
    ]

    /// design.md §14: PWM 1–64 is raised to 64 (the protocol forbids low PWM for long) unless allowed.
    /// Returns the settings and whether anything was raised.
    public func protected(allowLowPWM: Bool) -> (NovaSettings, Bool) {
        guard !allowLowPWM else { return (self, false) }
        var s = self
        if (1...64).contains(s.warm) { s.warm = 64 }
        if (1...64).contains(s.cool) { s.cool = 64 }
        return (s, s != self)
    }
}

/// Signal strength from RSSI (NVNovaV1Flash.m): `max(0, min(5, 9 + rssi/10)) / 5`, in percent;
/// nil for 127 ("not available" in HCI reports and in the SDK).
public func novaSignal(rssi: Int) -> Int? {
    guard rssi != 127 else { return nil }
    let s = max(0.0, min(5.0, 9.0 + Double(rssi) / 10.0)) / 5.0
    return Int((s * 100).rounded())
}
