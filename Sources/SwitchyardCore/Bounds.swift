
/// Process-wide counts of input refused or cut short at one of the bridge's bounds (a transaction too
/// long, a full command queue, an HTTP body or WebSocket message too large, …), published in
/// `bridge/health` as `limits`: a bound that is hit is visible, not silent.
public enum Bounds {
    static let counts = Locked<[String: Int]>([:])

    public static func hit(_ bound: String, _ n: Int = 1) {
        counts.withLock { $0[bound, default: 0] += n }
    }

    public static var snapshot: [String: Int] { counts.withLock { $0 } }
}
