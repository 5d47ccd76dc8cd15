import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Finds what holds Swift's cooperative pool (one thread per core: two on the machines CI runs on). A thread
/// of its own asks the pool to run a tiny task every 100 ms and measures how late it runs; when one is
/// later than `SWITCHYARD_TEST_STALL_SECONDS` (default 2), every thread's stack is written (gdb, attached for
/// a moment) to the file named by `SWITCHYARD_TEST_STALLS`, once per stall. Off unless that variable is set:
/// `SWITCHYARD_TEST_STALLS=/tmp/stalls.txt make test` (docs/testing.md "A run that starves").
public enum StallWatch {
    static let started = Atomic<Bool>(false)

    /// Starts the watch, once per process, if the environment asks for it.
    public static func startIfAsked() {
        // Asked by every `waitUntil`: the environment (a dictionary built at each read) only the first time.
        guard !started.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let env = ProcessInfo.processInfo.environment
        guard let path = env["SWITCHYARD_TEST_STALLS"], !path.isEmpty else { return }
        let limit = env["SWITCHYARD_TEST_STALL_SECONDS"].flatMap(Double.init) ?? 2
        let thread = Thread { watch(path: path, limit: limit) }
        thread.name = "stall-watch"
        thread.start()
    }

    static func watch(path: String, limit: Double) {
        let ran = Ran()
        var asked: UInt64 = 0
        var askedAt = DispatchTime.now().uptimeNanoseconds
        var reported = 0.0
        while true {
            usleep(100_000)
            let now = DispatchTime.now().uptimeNanoseconds
            if ran.value.load(ordering: .acquiring) == asked {
                asked += 1
                askedAt = now
                reported = 0
                let n = asked
                Task.detached { ran.value.store(n, ordering: .releasing) }
                continue
            }
            let late = Double(now - askedAt) / 1e9
            // Once past the limit, and again every 5 s the stall goes on (a dump stops the process while gdb
            // reads its stacks: the time it takes is not counted against the next).
            guard late > limit + reported * 5 else { continue }
            reported += 1
            let started = DispatchTime.now().uptimeNanoseconds
            dump(path: path, late: late)
            askedAt += DispatchTime.now().uptimeNanoseconds - started
        }
    }

    final class Ran: Sendable { let value = Atomic<UInt64>(0) }

    /// Appends every thread's stack of this process to `path`.
    static func dump(path: String, late: Double) {
        let header = "=== \(Date()) the cooperative pool has not run a task for \(String(format: "%.1f", late)) s\n"
        if let h = FileHandle(forWritingAtPath: path) ?? (FileManager.default.createFile(atPath: path, contents: nil) ? FileHandle(forWritingAtPath: path) : nil) {
            h.seekToEndOfFile()
            h.write(Data(header.utf8))
            try? h.close()
        }
        guard let gdb = ["/usr/bin/gdb", "/bin/gdb"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else { return }
        let child = try? ChildProcess(path: gdb, arguments: ["-p", "\(getpid())", "-batch", "-nx", "-ex", "set pagination off",
                                                            "-ex", "thread apply all bt 40"], outputFile: path)
        guard let child else { return }
        for _ in 0..<600 where child.isRunning { usleep(100_000) }
        child.signal(SIGKILL)
    }
}

/// Runs `work` on a thread of its own and returns its result: for a test that computes for long (a property
/// test over thousands of random cases), which on Swift's cooperative pool would hold one of its two threads
/// for seconds (tens under AddressSanitizer) and starve every other test's tasks. The checks stay in the
/// test: `work` returns what they need.
public func offThePool<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
        let thread = Thread { c.resume(with: Result { try work() }) }
        thread.name = "test-compute"
        thread.stackSize = 8 << 20
        thread.start()
    }
}
