#if canImport(Glibc)
import Glibc
#endif

/// A value behind a pthread mutex, with the shape of `Synchronization.Mutex` (`withLock`), used instead
/// of it everywhere. On Linux, `Mutex` waits on a futex inside the standard library, which is not built
/// with ThreadSanitizer: TSan sees no ordering between one critical section and the next and reports
/// every access made under the lock as a race (docs/testing.md "Sanitizers" gives the reproduction).
/// TSan intercepts pthread mutexes, and an uncontended one costs the same.
public final class Locked<Value: ~Copyable>: @unchecked Sendable {
    private var value: Value
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    public init(_ value: consuming Value) {
        self.value = value
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    public func withLock<Result: ~Copyable, E: Error>(_ body: (inout Value) throws(E) -> Result) throws(E) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
