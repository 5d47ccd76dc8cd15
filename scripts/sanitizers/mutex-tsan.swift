// ThreadSanitizer's blind spot for Synchronization.Mutex on Linux, in one file (docs/testing.md "Sanitizers").
//
//   swiftc -sanitize=thread scripts/sanitizers/mutex-tsan.swift -o /tmp/mutex-tsan && /tmp/mutex-tsan
//       → "WARNING: ThreadSanitizer: Swift access race", though every access is inside Mutex.withLock
//         and the count comes out exact (n = 200000)
//   swiftc -sanitize=thread -D PTHREAD scripts/sanitizers/mutex-tsan.swift -o /tmp/mutex-tsan && /tmp/mutex-tsan
//       → no warning: the same program over a pthread mutex, which TSan intercepts
//
// Mutex's lock is a futex inside the standard library, which is not built with TSan: TSan sees neither
// the acquire nor the release, so it finds no ordering between one critical section and the next.
import Foundation
import Synchronization

final class Box: @unchecked Sendable { var n = 0 }
let box = Box()

#if PTHREAD
final class Lock: @unchecked Sendable {
    let m = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    init() { pthread_mutex_init(m, nil) }
    func withLock<R>(_ body: () -> R) -> R { pthread_mutex_lock(m); defer { pthread_mutex_unlock(m) }; return body() }
}
let lock = Lock()
func increment() { lock.withLock { box.n += 1 } }
func count() -> Int { lock.withLock { box.n } }
#else
let lock = Mutex<Void>(())
func increment() { lock.withLock { _ in box.n += 1 } }
func count() -> Int { lock.withLock { _ in box.n } }
#endif

let threads = (0..<2).map { _ in Thread { for _ in 0..<100_000 { increment() } } }
for t in threads { t.start() }
while threads.contains(where: { !$0.isFinished }) { usleep(1000) }
print("n =", count())
