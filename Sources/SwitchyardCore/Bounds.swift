
/// Counts of input refused or cut short at one of the bridge's bounds (a transaction too long, a full
/// command queue, an HTTP body or WebSocket message too large, …), published in `bridge/health` as
/// `limits`: a bound that is hit is visible, not silent.
public final class BoundsCounter: Sendable {
    let counts = Locked<[String: Int]>([:])
    public init() {}

    public func hit(_ bound: String, _ n: Int = 1) {
        counts.withLock { $0[bound, default: 0] += n }
    }

    public var snapshot: [String: Int] { counts.withLock { $0 } }
}

/// Where a bound is hit, the counter of the bridge whose work it is: each engine runs its adapters with
/// its own counter bound to the task (so two bridges in one process, as in the tests, never share counts);
/// work outside any engine counts in a process-wide one.
public enum Bounds {
    public static let process = BoundsCounter()
    @TaskLocal public static var counter = process

    /// Counts a hit in the current task's counter. Code that hits a bound off any task (a C library's
    /// thread) keeps the counter it was given when the work started.
    public static func hit(_ bound: String, _ n: Int = 1) { counter.hit(bound, n) }
}
