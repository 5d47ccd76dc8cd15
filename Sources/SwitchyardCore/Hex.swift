extension UInt8 {
    /// `0`–`9`, `a`–`f`, `A`–`F`.
    public var isASCIIHexDigit: Bool {
        (0x30...0x39).contains(self) || (0x41...0x46).contains(self) || (0x61...0x66).contains(self)
    }
}

/// Lower-case hex digits, as bytes (shared by `hexString` and the JSON `\u00XX` escape).
let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

extension Sequence<UInt8> {
    /// Lower-case hex, two digits a byte.
    public var hexString: String {
        let hex = hexDigits
        var out: [UInt8] = []
        for b in self { out += [hex[Int(b >> 4)], hex[Int(b & 0xF)]] }
        return String(decoding: out, as: UTF8.self)
    }
}

/// `count` bytes from the system's random source, as lower-case hex (`2 × count` digits): nonces,
/// session ids, an OAuth `state`.
public func randomHex(bytes count: Int) -> String {
    var rng = SystemRandomNumberGenerator()
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }.hexString
}
