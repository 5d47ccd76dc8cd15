extension Int {
    /// The value held within `r` (a kelvin within a light's range).
    func clamped(to r: ClosedRange<Int>) -> Int { Swift.min(Swift.max(self, r.lowerBound), r.upperBound) }
}
