#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A dedicated POSIX thread for blocking loops (libmosquitto's network loop, libcurl's multi loop, BLE
/// sockets) that must stay off Swift's cooperative pool. Plain pthreads rather than Foundation's
/// `Thread`, so that the daemon's modules need only FoundationEssentials.
public enum OSThread {
    private final class Start {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// The calling thread's kernel id (its directory under /proc/self/task), 0 where /proc is missing.
    /// Read from the /proc/thread-self link: Swift's Glibc module does not import gettid(2).
    public static func currentID() -> Int32 {
        #if os(Linux)
        var buf = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buf, buf.count - 1)
        guard n > 0 else { return 0 }
        let path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return path.split(separator: "/").last.flatMap { Int32($0) } ?? 0
        #else
        return 0
        #endif
    }

    /// Starts `body` on a new detached thread named `name` (the kernel shows the first 15 bytes).
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let start = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        defer { pthread_attr_destroy(&attr) }
        pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
        #if canImport(Glibc)
        var thread = pthread_t()
        #else
        var thread: pthread_t?
        #endif
        let rc = pthread_create(&thread, &attr, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            #if os(Linux)
            // What pthread_setname_np does on Linux (Glibc's module map does not export it).
            let fd = open("/proc/thread-self/comm", O_WRONLY)
            if fd >= 0 {
                let name = Array(start.name.utf8.prefix(15))
                _ = name.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
            }
            #else
            _ = pthread_setname_np(start.name)
            #endif
            start.body()
            return nil
        }, start)
        precondition(rc == 0, "pthread_create failed with \(rc)")
    }
}
