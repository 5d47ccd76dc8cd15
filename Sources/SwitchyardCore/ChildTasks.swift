/// A handle for starting child tasks of a task group that `withChildTasks` runs: work that starts
/// somewhere without a task group at hand (a callback, a timer armed by a command) still runs as a
/// child of the component's `run`, is cancelled with it and has ended when it returns. Never an
/// unstructured `Task`.
public struct ChildTasks: Sendable {
    public typealias Job = @Sendable () async -> Void
    let queue: AsyncStream<Job>.Continuation

    /// Starts `job` as a child; false once the owner has stopped (the job is not run).
    @discardableResult
    public func spawn(_ job: @escaping Job) -> Bool {
        if case .enqueued = queue.yield(job) { return true }
        return false
    }
}

/// Runs `body` with a `ChildTasks` handle. When `body` returns, spawned children still running are
/// cancelled and awaited, and spawning does nothing any more.
public func withChildTasks<R: Sendable>(isolation: isolated (any Actor)? = #isolation,
                                        _ body: (ChildTasks) async throws -> R) async throws -> R {
    let (jobs, queue) = AsyncStream.makeStream(of: ChildTasks.Job.self)
    return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
        group.addTask {
            await withDiscardingTaskGroup { children in
                for await job in jobs { children.addTask { await job() } }
            }
        }
        defer {
            queue.finish()
            group.cancelAll()
        }
        return try await body(ChildTasks(queue: queue))
    }
}
