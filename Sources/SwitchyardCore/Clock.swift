#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// A point on a monotonic clock: time since the clock's own origin, never wall-clock time. Every timer
/// of the bridge (timeouts, backoff, pacing, schedules) is measured in these; wall-clock time (`Date`)
/// is only for timestamps in payloads and for expiry times an upstream gives as dates.
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    public var sinceOrigin: Duration
    public init(sinceOrigin: Duration) { self.sinceOrigin = sinceOrigin }

    public static func < (a: MonotonicInstant, b: MonotonicInstant) -> Bool { a.sinceOrigin < b.sinceOrigin }
    public static func + (a: MonotonicInstant, d: Duration) -> MonotonicInstant { MonotonicInstant(sinceOrigin: a.sinceOrigin + d) }
    public static func - (a: MonotonicInstant, d: Duration) -> MonotonicInstant { MonotonicInstant(sinceOrigin: a.sinceOrigin - d) }
    public static func - (a: MonotonicInstant, b: MonotonicInstant) -> Duration { a.sinceOrigin - b.sinceOrigin }
    public func adding(seconds: Double) -> MonotonicInstant { self + .seconds(seconds) }
    public static let origin = MonotonicInstant(sinceOrigin: .zero)
    /// Earlier than anything a clock reads (for "never happened").
    public static let distantPast = MonotonicInstant(sinceOrigin: .seconds(-1_000_000_000))
    public var description: String { "\(sinceOrigin.seconds) s" }
}

extension Duration {
    /// The duration in whole nanoseconds, clamped to Int64 (for a time kept in an atomic).
    public var nanosecondsClamped: Int64 {
        let (s, atto) = components
        let (ns, overflow) = s.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? (s < 0 ? .min : .max) : ns &+ atto / 1_000_000_000
    }

    /// The duration in seconds, as a Double (for messages, ratios and `Task.sleep`).
    public var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) / 1e18
    }
}

/// The time source of a component that runs timers: `SystemClock` in the bridge; `ManualClock` where a
/// test moves time itself instead of sleeping.
public protocol BridgeClock: Sendable {
    func now() -> MonotonicInstant
    /// Wall-clock time as this clock sees it, for turning a date an upstream gives (a rate budget's reset)
    /// into a deadline on `now()`: `Date()` for the process's clock; a manual clock's moves with it.
    func wallNow() -> Date
    /// Returns at `deadline` (at once if it has passed); throws `CancellationError` when cancelled.
    func sleep(until deadline: MonotonicInstant) async throws
}

extension BridgeClock {
    public func wallNow() -> Date { Date() }
    public func sleep(for d: Duration) async throws { try await sleep(until: now() + d) }
    public func sleep(seconds: Double) async throws { try await sleep(until: now().adding(seconds: seconds)) }
}

/// The process's monotonic clock (`ContinuousClock`: it keeps counting while the machine sleeps, and
/// never jumps when the wall clock is set).
public struct SystemClock: BridgeClock {
    static let origin = ContinuousClock.now
    public init() {}
    public func now() -> MonotonicInstant { MonotonicInstant(sinceOrigin: Self.origin.duration(to: .now)) }
    public func sleep(until deadline: MonotonicInstant) async throws {
        try await Task.sleep(until: Self.origin.advanced(by: deadline.sinceOrigin), clock: .continuous)
    }
}

/// A clock that moves only when told to (`advance`), for tests of timers that must not sleep.
/// Sleepers whose deadline has been reached are resumed by `advance`, in deadline order.
public final class ManualClock: BridgeClock {
    struct Sleeper {
        var deadline: MonotonicInstant
        var id: UInt64
        var continuation: CheckedContinuation<Void, any Error>
    }
    struct State {
        var now = MonotonicInstant.origin
        var sleepers: [Sleeper] = []
        var nextID: UInt64 = 0
    }
    let state = Locked(State())
    /// The wall-clock time at `origin`: the clock's wall time moves only as it is advanced.
    let wallOrigin = Date()

    public init() {}

    public func now() -> MonotonicInstant { state.withLock { $0.now } }

    public func wallNow() -> Date { wallOrigin.addingTimeInterval((now() - .origin).seconds) }

    /// How many sleepers are waiting (a test waits for the component to be asleep before advancing).
    public var sleeping: Int { state.withLock { $0.sleepers.count } }

    /// The earliest deadline anyone sleeps until.
    public var nextDeadline: MonotonicInstant? { state.withLock { $0.sleepers.map(\.deadline).min() } }

    public func advance(by d: Duration) { advance(to: now() + d) }

    public func advance(to instant: MonotonicInstant) {
        let due = state.withLock { s -> [Sleeper] in
            if instant > s.now { s.now = instant }
            let due = s.sleepers.filter { $0.deadline <= s.now }.sorted { ($0.deadline, $0.id) < ($1.deadline, $1.id) }
            s.sleepers.removeAll { $0.deadline <= s.now }
            return due
        }
        for d in due { d.continuation.resume() }
    }

    public func sleep(until deadline: MonotonicInstant) async throws {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { s -> Bool in
                    if deadline <= s.now || Task.isCancelled { return true }
                    s.sleepers.append(Sleeper(deadline: deadline, id: id, continuation: c))
                    return false
                }
                if resumeNow { c.resume() }
            }
        } onCancel: {
            let c = state.withLock { s -> CheckedContinuation<Void, any Error>? in
                guard let i = s.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return s.sleepers.remove(at: i).continuation
            }
            c?.resume(throwing: CancellationError())
        }
        try Task.checkCancellation()
    }
}
