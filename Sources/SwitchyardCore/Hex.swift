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
