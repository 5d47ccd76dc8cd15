/// A one-shot signal: `wait` returns once `signal` has been called (at once if it already was), or
/// when the waiting task is cancelled.
public final class Latch: Sendable {
    struct State {
        var signalled = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }
    let state = Locked(State())

    public init() {}

    public var isSignalled: Bool { state.withLock { $0.signalled } }

    public func signal() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.signalled = true
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for w in waiters { w.resume() }
    }

    /// Waits for the signal even when the task is cancelled: for the end of something that always
    /// comes, and must have come before the caller goes on (a thread that is closing its sockets).
    public func waitUncancellable() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s -> Bool in
                if s.signalled { return true }
                s.nextID += 1
                s.waiters[s.nextID] = c
                return false
            }
            if now { c.resume() }
        }
    }

    public func wait() async {
        let id = state.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if s.signalled || Task.isCancelled { return true }
                    s.waiters[id] = c
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            let c = state.withLock { $0.waiters.removeValue(forKey: id) }
            c?.resume()
        }
    }
}
