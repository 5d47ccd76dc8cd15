/// A first-in first-out async lock: `run` calls one operation at a time, in the order they were asked
/// for (for a resource that takes one request at a time, like a Bluetooth controller).
public actor SerialGate {
    var busy = false
    var waiters: [CheckedContinuation<Void, Never>] = []

    public init() {}

    public func run<T: Sendable>(_ operation: @Sendable () async throws -> T) async throws -> T {
        if busy {
            await withCheckedContinuation { waiters.append($0) }
        } else {
            busy = true
        }
        defer {
            if waiters.isEmpty { busy = false } else { waiters.removeFirst().resume() }
        }
        return try await operation()
    }
}
