import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with posix_spawn and reaped with waitpid. (Foundation's Process busy-waits
/// in waitUntilExit when called from a Swift-concurrency thread on Linux.)
public final class ChildProcess: @unchecked Sendable {
    public let pid: pid_t
    private var status: Int32?
    private let lock = NSLock()

    /// Starts `path` with `arguments`; stdout and stderr go to `outputFile` (appended).
    /// `stdinFile`: what the child reads (a FIFO lets a test type into it).
    public init(path: String, arguments: [String], environment: [String: String]? = nil, outputFile: String,
                stdinFile: String = "/dev/null") throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, stdinFile, O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputFile, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of this process goes to the child. Sockets opened without CLOEXEC (the
        // simulators' accepted connections, clients' sockets) would otherwise live on in every child
        // started meanwhile: a connection the parent closed stays open for its peer, and an epoll set
        // keeps reporting the old socket's hang-up under a descriptor number the parent has already
        // reused, so a fresh connection is dropped without an answer ("Server returned nothing").
        // (glibc ≥ 2.34 has the call; Swift's Glibc module does not import it, so it is looked up.)
        if let closeFrom = Self.addCloseFrom { _ = closeFrom(&actions, 3) }
        // Threads of a Swift process run with signals blocked; the child must not inherit that mask,
        // or it would ignore SIGTERM.
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attr, &empty)
        posix_spawnattr_setsigdefault(&attr, &all)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let env = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let envp = env.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var p: pid_t = 0
        let rc = posix_spawn(&p, path, &actions, &attr, argv, envp)
        guard rc == 0 else { throw TestError("posix_spawn \(path) failed: \(String(cString: strerror(rc)))") }
        pid = p
    }

    typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    static let addCloseFrom: AddCloseFrom? = {
        guard let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(sym, to: AddCloseFrom.self)
    }()

    /// Exit status (or 128+signal), once the process has ended; nil while it runs.
    public var exitStatus: Int32? {
        lock.lock()
        defer { lock.unlock() }
        if let status { return status }
        var s: Int32 = 0
        let r = waitpid(pid, &s, WNOHANG)
        guard r == pid else { return nil }
        let code = (s & 0x7f) == 0 ? (s >> 8) & 0xff : 128 + (s & 0x7f)
        status = code
        return code
    }

    public var isRunning: Bool { exitStatus == nil }

    public func signal(_ sig: Int32) { if isRunning { kill(pid, sig) } }

    /// Waits (polling, at most `timeout` seconds) for the exit; SIGKILL after that.
    @discardableResult
    public func wait(timeout: Double = 30) async -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let s = exitStatus { return s }
            try? await Task.sleep(for: .milliseconds(20))
        }
        kill(pid, SIGKILL)
        return nil
    }

    /// SIGTERM, then SIGKILL after `timeout` seconds; waits for the exit without holding a thread (a test's
    /// thread is one of the cooperative pool's two).
    public func stop(timeout: Double = 5) async {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        if await wait(timeout: timeout) == nil { _ = await wait(timeout: 5) }
    }

    /// SIGTERM and return: a thread of its own sends SIGKILL after 5 s if need be and reaps the process. For
    /// synchronous paths (`defer`, `deinit`), which must not block the cooperative pool's thread they run on.
    public func terminate() {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        let thread = Thread { [self] in
            for _ in 0..<250 {
                if !isRunning { return }
                usleep(20_000)
            }
            kill(pid, SIGKILL)
            while isRunning { usleep(10_000) }
        }
        thread.name = "reaper"
        thread.start()
    }

    /// SIGTERM, then SIGKILL after 5 s, and back once the process is gone, blocking the calling thread: for
    /// the bench's executable, never for a test (use `stop()` or `terminate()`).
    public func terminateAndReap() {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        for _ in 0..<250 {
            if !isRunning { return }
            usleep(20_000)
        }
        kill(pid, SIGKILL)
        while isRunning { usleep(10_000) }
    }
}

extension String {
    /// Writes the string to `path` (created or truncated) without the fsync that Foundation's `write(to…)`
    /// makes, atomic or not: on a machine busy writing (builds beside the tests) one fsync took seconds, and
    /// the test thread that waited for it was one of the cooperative pool's two. A test's files live as long
    /// as the test and need no durability. Readers that must never see a half-written file (a config reloaded
    /// by a running bridge) get it by rename: `replacing: true`.
    public func writeForTest(toFile path: String, replacing: Bool = false) throws {
        let target = replacing ? path + ".tmp-\(getpid())" : path
        guard let f = fopen(target, "w") else { throw TestError("cannot write \(target): \(String(cString: strerror(errno)))") }
        let bytes = Array(utf8)
        let written = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
        let closed = fclose(f)
        guard written == bytes.count, closed == 0 else { throw TestError("cannot write \(target): \(String(cString: strerror(errno)))") }
        if replacing, rename(target, path) != 0 { throw TestError("cannot rename to \(path): \(String(cString: strerror(errno)))") }
    }

    public func writeForTest(to url: URL, replacing: Bool = false) throws { try writeForTest(toFile: url.path, replacing: replacing) }
}
