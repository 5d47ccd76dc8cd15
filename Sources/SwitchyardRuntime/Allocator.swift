#if canImport(Glibc)
import CMalloc
#endif
import ServiceLifecycle
import SwitchyardCore

/// glibc's allocator gives every thread that allocates under contention an arena of its own, up to eight
/// per core, and memory freed into one arena is never reused by another. The bridge's work moves between
/// Swift's cooperative threads, SwiftNIO's two and the MQTT network thread, so the heap spreads over
/// several arenas, each holding its own free space, resident and varying from run to run. One arena keeps
/// that space in one place. Each thread keeps its own lock-free cache of small blocks (tcache), so the
/// arena's lock is rarely taken, even at a start when every thread allocates.
public enum Allocator {
    /// Limits glibc to one malloc arena unless the environment already sets the limit
    /// (`MALLOC_ARENA_MAX`, or `arena_max` in `GLIBC_TUNABLES`). Call before the bridge starts its threads.
    public static func limitArenas(environment: [String: String]) {
        #if canImport(Glibc)
        if environment["MALLOC_ARENA_MAX"] != nil || environment["GLIBC_TUNABLES"]?.contains("arena_max") == true { return }
        _ = mallopt(M_ARENA_MAX, 1)
        #endif
    }
}

extension Allocator {
    /// Returns the heap's free space to the kernel: glibc keeps freed memory inside the heap (only its
    /// top is given back, and only past 128 kB of free space), so after a burst of input (a flood of
    /// hostile payloads can grow the heap many times over) the pages stay resident although the queues
    /// have drained. `malloc_trim` releases every free page in the heap.
    public static func trim() {
        #if canImport(Glibc)
        _ = malloc_trim(0)
        #endif
    }
}

/// Once a second: when the resident set has grown by more than `slack` bytes since the last trim, the
/// heap is trimmed (`SWITCHYARD_MALLOC_TRIM=0` turns it off, to compare). A trim walks the heap, so it
/// runs only after growth: an idle bridge never pays for it.
struct MemoryTrimService: Service {
    var interval: Duration = .seconds(1)
    var slack = 4 << 20

    func run() async throws {
        guard var settled = ProcessStats.residentBytes() else { return }
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            // Ended at once by a graceful shutdown, which would otherwise wait out the interval.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            guard let rss = ProcessStats.residentBytes() else { return }
            if rss > settled + slack {
                Allocator.trim()
                settled = ProcessStats.residentBytes() ?? rss
            } else if rss < settled {
                settled = rss
            }
        }
    }
}
