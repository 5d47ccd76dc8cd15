/// `work`'s result, or `fallback` once `seconds` have passed on `clock`, whichever comes first: the two
/// race as children of one task group, and the loser is cancelled and awaited. `work` must end when
/// cancelled (waiting on a `Latch`, a stream, a sleep), since the group waits for it. The one shape of
/// every "wait for this, at most that long" (an adapter's drain, a page's command, the `/livez` probe).
public func firstResult<T: Sendable>(of work: @escaping @Sendable () async -> T, within seconds: Double,
                                     clock: any BridgeClock = SystemClock(), otherwise fallback: T) async -> T {
    await withTaskGroup(of: T.self) { g in
        g.addTask { await work() }
        g.addTask {
            try? await clock.sleep(seconds: seconds)
            return fallback
        }
        let first = await g.next() ?? fallback
        g.cancelAll()
        return first
    }
}
