#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// What a colour command changes, channel by channel, in wire units (hue degrees, saturation and
/// brightness 0–1, kelvin). Parsed from a LIFX colour string (docs/upstreams/lifx-cloud.md §1.7), `#rrggbb` or `{h, s}`,
/// so a bad string is refused before any request is spent, the optimistic state is exact, and
/// merged commands are re-encoded as one canonical string.
public struct LIFXColorChange: Sendable, Equatable {
    public var hue: Double?
    public var saturation: Double?
    public var brightness: Double?
    public var kelvin: Int?
    /// `random`: a random hue with full saturation, chosen by LIFX.
    public var random = false

    public init(hue: Double? = nil, saturation: Double? = nil, brightness: Double? = nil, kelvin: Int? = nil, random: Bool = false) {
        self.hue = hue
        self.saturation = saturation
        self.brightness = brightness
        self.kelvin = kelvin
        self.random = random
    }

    public var isEmpty: Bool { hue == nil && saturation == nil && brightness == nil && kelvin == nil && !random }

    /// Later channels win, as LIFX applies components left to right.
    public func merged(with newer: LIFXColorChange) -> LIFXColorChange {
        var out = self
        if newer.random { out.random = true; out.hue = nil; out.saturation = nil }
        if let k = newer.kelvin { out.kelvin = k; out.saturation = 0 }
        if let h = newer.hue { out.hue = h; out.random = false }
        if let s = newer.saturation { out.saturation = s }
        if let b = newer.brightness { out.brightness = b }
        return out
    }

    /// The colour string sent to LIFX, without brightness (which travels in its own field).
    /// Kelvin first: it resets saturation to 0, which a later `saturation:` may override.
    public var wireString: String? {
        var parts: [String] = []
        if random { parts.append("random") }
        if let k = kelvin { parts.append("kelvin:\(k)") }
        if let h = hue { parts.append("hue:\(LIFXColorChange.format(h))") }
        if let s = saturation, !(kelvin != nil && s == 0 && hue == nil) { parts.append("saturation:\(LIFXColorChange.format(s))") }
        return parts.isEmpty ? nil : parts.joined(separator: " ")
    }

    static func format(_ v: Double) -> String {
        let r = (v * 10_000).rounded() / 10_000
        if r == r.rounded() { return String(Int(r)) }
        // Four decimals from the integer ten-thousandths, trailing zeros dropped.
        let n = Int((abs(r) * 10_000).rounded())
        var fraction = String(n % 10_000)
        fraction = String(repeating: "0", count: 4 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return "\(r < 0 ? "-" : "")\(n / 10_000).\(fraction)"
    }

    // MARK: parsing

    /// Named colours (LIFX staff, community t/1067: the list is complete).
    static let named: [String: (hue: Double?, saturation: Double)] = [
        "white": (nil, 0), "red": (0, 1), "orange": (36, 1), "yellow": (60, 1), "cyan": (180, 1),
        "green": (120, 1), "blue": (250, 1), "purple": (280, 1), "pink": (325, 1),
    ]

    static let grammar = "a colour name (white, red, orange, yellow, cyan, green, blue, purple, pink), hue:0–360, "
        + "saturation:0–1, brightness:0–1, kelvin:1500–9000, #rrggbb, rgb:r,g,b or random"

    /// Parses a LIFX colour string. Throws a message naming the component that is wrong.
    public static func parse(_ text: String) throws(LIFXColorError) -> LIFXColorChange {
        let components = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        if components.isEmpty { throw LIFXColorError("empty colour string (expected \(grammar))") }
        var out = LIFXColorChange()
        for raw in components {
            let c = raw.lowercased()
            func bad(_ why: String) -> LIFXColorError { LIFXColorError("colour '\(text.excerpt(60))': \(why)") }
            if let n = named[c] {
                out = out.merged(with: LIFXColorChange(hue: n.hue, saturation: n.saturation))
            } else if c == "random" {
                out = out.merged(with: LIFXColorChange(random: true))
            } else if let v = value(c, "hue:") {
                guard let h = Double(v), h.isFinite, (0...360).contains(h) else { throw bad("hue must be 0–360, got '\(v.excerpt(40))'") }
                out = out.merged(with: LIFXColorChange(hue: h))
            } else if let v = value(c, "saturation:") {
                guard let s = fraction(v) else { throw bad("saturation must be 0–1 (or 0–100%), got '\(v.excerpt(40))'") }
                out = out.merged(with: LIFXColorChange(saturation: s))
            } else if let v = value(c, "brightness:") {
                guard let b = fraction(v) else { throw bad("brightness must be 0–1 (or 0–100%), got '\(v.excerpt(40))'") }
                out = out.merged(with: LIFXColorChange(brightness: b))
            } else if let v = value(c, "kelvin:") {
                guard let k = Int(v), (1500...9000).contains(k) else { throw bad("kelvin must be an integer 1500–9000, got '\(v.excerpt(40))'") }
                out = out.merged(with: LIFXColorChange(kelvin: k))
            } else if c.hasPrefix("#") || c.hasPrefix("hex:") {
                let hex = c.hasPrefix("hex:") ? String(c.dropFirst(4).drop(while: { $0 == "#" })) : String(c.dropFirst())
                guard let rgb = hexRGB(hex) else { throw bad("'\(raw.excerpt(40))' is not #rrggbb") }
                out = out.merged(with: fromRGB(rgb))
            } else if let v = value(c, "rgb:") {
                let parts = v.split(separator: ",", omittingEmptySubsequences: false).map { Int($0) }
                guard parts.count == 3, parts.allSatisfy({ $0 != nil && (0...255).contains($0!) }) else {
                    throw bad("rgb needs three values 0–255 (rgb:255,0,0), got '\(v.excerpt(40))'")
                }
                out = out.merged(with: fromRGB((parts[0]!, parts[1]!, parts[2]!)))
            } else {
                throw bad("unknown component '\(raw.excerpt(40))' (expected \(grammar))")
            }
        }
        return out
    }

    static func value(_ c: String, _ prefix: String) -> String? {
        c.hasPrefix(prefix) ? String(c.dropFirst(prefix.count)) : nil
    }

    static func fraction(_ v: String) -> Double? {
        if v.hasSuffix("%") {
            guard let p = Double(v.dropLast()), p.isFinite, (0...100).contains(p) else { return nil }
            return p / 100
        }
        guard let f = Double(v), f.isFinite, (0...1).contains(f) else { return nil }
        return f
    }

    static func hexRGB(_ hex: String) -> (Int, Int, Int)? {
        // Digits only: `Int(_:radix:)` takes a sign (`-00001` would be -1).
        guard hex.utf8.count == 6, hex.utf8.allSatisfy(\.isASCIIHexDigit), let n = Int(hex, radix: 16) else { return nil }
        return ((n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF)
    }

    /// RGB → HSV, as LIFX interprets `#rrggbb` and `rgb:` (hue, saturation and brightness all set).
    static func fromRGB(_ rgb: (Int, Int, Int)) -> LIFXColorChange {
        let r = Double(rgb.0) / 255, g = Double(rgb.1) / 255, b = Double(rgb.2) / 255
        let mx = max(r, g, b), mn = min(r, g, b), d = mx - mn
        var h = 0.0
        if d > 0 {
            if mx == r { h = 60 * ((g - b) / d).truncatingRemainder(dividingBy: 6) }
            else if mx == g { h = 60 * ((b - r) / d + 2) }
            else { h = 60 * ((r - g) / d + 4) }
        }
        if h < 0 { h += 360 }
        return LIFXColorChange(hue: h, saturation: mx == 0 ? 0 : d / mx, brightness: mx)
    }
}

public struct LIFXColorError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ d: String) { description = d }
}
