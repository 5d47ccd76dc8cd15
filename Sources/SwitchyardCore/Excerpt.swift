extension StringProtocol {
    /// Input quoted in a message: at most `max` bytes of UTF-8, cut at a scalar boundary, then "…".
    /// Counted in bytes, not characters: one character may carry any number of combining marks.
    public func excerpt(_ max: Int = 80) -> String {
        let head = Array(utf8.prefix(max + 1))
        guard head.count > max else { return String(self) }
        // head[end] is the first byte left out: while it continues a scalar, the cut moves back.
        var end = max
        while end > 0, UTF8.isContinuation(head[end]) { end -= 1 }
        return String(decoding: head[..<end], as: UTF8.self) + "…"
    }
}

extension JSONValue {
    /// The value as JSON, quoted in a message: at most 80 bytes (see `excerpt`).
    public var excerpt: String { String(decoding: prefixBytes(80), as: UTF8.self).excerpt() }
}
