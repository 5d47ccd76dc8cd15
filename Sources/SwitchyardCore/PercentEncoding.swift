extension StringProtocol {
    /// Percent-encodes every UTF-8 byte except ASCII letters and digits, RFC 3986's unreserved `-._~`
    /// and the characters in `keeping`.
    public func percentEncoded(keeping: String = "") -> String {
        let keep = Set(keeping.utf8)
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        for b in utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            default:
                if keep.contains(b) {
                    out.append(b)
                } else {
                    out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0xF)]]
                }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
