#if canImport(Glibc)
import CMalloc
#endif

/// glibc's allocator gives every thread that allocates under contention an arena of its own, up to eight
/// per core, and memory freed into one arena is never reused by another. The bridge's work moves between
/// Swift's cooperative threads, SwiftNIO's two and the MQTT network thread, so the heap spread over four
/// or more arenas, each holding its own free space: about 3 MB of the memory bench's RSS, and its run-to-
/// run spread. One arena keeps that space in one place. Each thread keeps its own lock-free cache of small
/// blocks (tcache), so the arena's lock is rarely taken: the bench's start-up figure (1 000 devices
/// published, all threads allocating) did not move beyond its run-to-run noise (140-230 ms either way).
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
