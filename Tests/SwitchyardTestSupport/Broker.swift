import Foundation
import SwitchyardCore
#if canImport(Glibc)
import Glibc
#endif

public enum TestEnvironment {
    /// Ports already handed out in this process: a test that stops and restarts its broker must not
    /// find its port taken by another test's broker in the gap.
    static let issued = Locked<Set<Int>>([])

    /// A TCP port on 127.0.0.1 that nothing listens on right now and no other test of this process got.
    ///
    /// It is taken below the kernel's ephemeral range (`ip_local_port_range`) when there is room: a
    /// port from that range can be given, between this check and the child's `bind`, to any outgoing
    /// connection on the machine as its local port, and the child's `bind` then fails (seen as a rare
    /// flake of a command that listens on a configured port).
    public static func freePort() -> Int {
        let low = ephemeralRangeStart()
        if low > 11_000 {
            for _ in 0..<200 {
                let p = Int.random(in: 10_000..<low)
                guard canBind(port: p), issued.withLock({ $0.insert(p).inserted }) else { continue }
                return p
            }
        }
        for _ in 0..<100 {
            let p = anyFreePort()
            if issued.withLock({ $0.insert(p).inserted }) { return p }
        }
        return anyFreePort()
    }

    static func ephemeralRangeStart() -> Int {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        return text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first.flatMap { Int($0) } ?? 0
    }

    static func canBind(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let len = socklen_t(MemoryLayout<sockaddr_in>.size)
        return withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } } == 0
    }

    static func anyFreePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    public static func canConnect(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        return rc == 0
    }

    /// Set by `make test-unit` (SWITCHYARD_TEST_TIER=unit): no broker may start.
    public static var isUnitTier: Bool { ProcessInfo.processInfo.environment["SWITCHYARD_TEST_TIER"] == "unit" }

    public static func makeTempDir(_ prefix: String) -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Finds a program on PATH, also in the sbin directories where Debian puts `mosquitto`.
    public static func which(_ name: String) -> String? {
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "") + ":/usr/sbin:/sbin:/usr/local/sbin"
        for dir in path.split(separator: ":") {
            let p = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        return nil
    }

    /// The `switchyard` executable built next to the test binary (or $SWITCHYARD_BIN).
    public static func switchyardBinary() -> String? {
        if let p = ProcessInfo.processInfo.environment["SWITCHYARD_BIN"] { return p }
        return builtExecutable("switchyard")
    }

    /// The `switchyard-sim` executable (demo, simulated Nova flash) built next to the test binary.
    public static func simulatorBinary() -> String? { builtExecutable("switchyard-sim") }

    static func builtExecutable(_ name: String) -> String? {
        guard let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = dir.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            dir = dir.deletingLastPathComponent()
        }
        return nil
    }

    public static func sleep(_ seconds: Double) async {
        try? await Task.sleep(for: .seconds(seconds))
    }
}

/// Polls `condition` (every 20 ms) until it holds, for `timeout` seconds of the time this wait was given
/// to run (`PollBudget`), and at most four times `timeout` on the wall clock.
public func waitUntil(_ what: String, timeout: Double = 30, _ condition: @Sendable () async -> Bool) async throws {
    StallWatch.startIfAsked()
    var budget = PollBudget(timeout)
    repeat {
        let asked = budget.now
        if await condition() { return }
        if await !budget.sleep(0.02, checkedSince: asked) { break }
    } while true
    throw TestError("timed out waiting until \(what)")
}

/// The time budget of a polling wait: `timeout` seconds of the time the wait was given to run, and at most
/// four times `timeout` on the wall clock.
///
/// Why not the wall clock alone: on a loaded machine the cooperative pool (one thread per core) can be busy
/// for seconds with other tests' work, and what a wait waits for (an engine's actor hops, an adapter's task,
/// a message handed over from the network thread) is queued behind it as the wait itself is. A short sleep
/// that comes back seconds late says so: such a step counts as at most a quarter of a second, so the budget
/// is spent only while the test could make progress; a wait for something that never comes still ends (on a
/// quiet pool after `timeout`, on a starved one after at most 4 × `timeout`). The check's own time counts
/// in full.
public struct PollBudget: Sendable {
    let clock = ContinuousClock()
    let start: ContinuousClock.Instant
    let timeout: Duration
    var spent = Duration.zero

    public init(_ timeout: Double) {
        start = clock.now
        self.timeout = .seconds(timeout)
    }

    public var now: ContinuousClock.Instant { clock.now }

    /// Sleeps `seconds` after a check that began at `asked`; false once the budget is spent.
    public mutating func sleep(_ seconds: Double, checkedSince asked: ContinuousClock.Instant) async -> Bool {
        let slept = clock.now
        await TestEnvironment.sleep(seconds)
        spent += (slept - asked) + min(clock.now - slept, .milliseconds(250))
        return spent < timeout && clock.now - start < timeout * 4
    }
}

public struct TestError: Error, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}

/// A real Mosquitto broker on a free 127.0.0.1 port, with its own config and persistence off.
public final class Broker: @unchecked Sendable {
    public let port: Int
    let dir: URL
    var process: ChildProcess?
    let extraConfig: String

    /// `extraConfig` is appended to the generated config; `$DIR/` in it stands for the broker's directory
    /// (`persistence true` + `persistence_location $DIR/` keeps retained messages and sessions across restarts).
    public init(extraConfig: String = "") throws {
        if TestEnvironment.isUnitTier {
            throw TestError("this test starts a Mosquitto broker, which the unit tier (make test-unit) has not: "
                + "list its suite in Tests/integration-suites.txt (docs/testing.md \"Two tiers\")")
        }
        guard TestEnvironment.which("mosquitto") != nil else { throw TestError("mosquitto is not installed (make test installs it)") }
        port = TestEnvironment.freePort()
        dir = TestEnvironment.makeTempDir("broker")
        // Started as root, mosquitto drops to its own user: it must be able to write its log here.
        chmod(dir.path, 0o777)
        self.extraConfig = extraConfig
    }

    public static func start(extraConfig: String = "") async throws -> Broker {
        StallWatch.startIfAsked()
        var lastError: (any Error)?
        for _ in 0..<3 {
            do {
                let b = try Broker(extraConfig: extraConfig)
                try await b.start()
                return b
            } catch {
                lastError = error
            }
        }
        throw lastError ?? TestError("broker did not start")
    }

    public func start() async throws {
        let conf = dir.appendingPathComponent("mosquitto.conf")
        try """
        listener \(port) 127.0.0.1
        allow_anonymous true
        \(extraConfig.contains("persistence ") ? "" : "persistence false")
        max_queued_messages 0
        log_dest file \(dir.path)/mosquitto.log
        log_type error
        log_type warning
        log_type notice
        \(extraConfig.replacingOccurrences(of: "$DIR/", with: directory))
        """.writeForTest(to: conf, replacing: true)
        let p = try ChildProcess(path: TestEnvironment.which("mosquitto")!, arguments: ["-c", conf.path],
                                 outputFile: dir.appendingPathComponent("stdout.log").path)
        process = p
        for _ in 0..<200 {
            // Our own mosquitto must be the one that answers (not another test's listener).
            if p.isRunning && TestEnvironment.canConnect(port: port) {
                await TestEnvironment.sleep(0.05)
                if p.isRunning { return }
            }
            if !p.isRunning { break }
            await TestEnvironment.sleep(0.05)
        }
        await stop()
        throw TestError("mosquitto did not start on port \(port)")
    }

    /// Stops the broker and waits until it is gone (its port is free for `start` again); with persistence
    /// off, every retained message is gone.
    public func stop() async {
        await process?.stop()
        process = nil
    }

    /// Stops the broker without waiting for it (`defer`, `deinit`: synchronous paths, which must not hold
    /// a thread of the cooperative pool): it is gone a moment later.
    public func stop() {
        process?.terminate()
        process = nil
    }

    /// `kill -9`: the broker saves nothing and says goodbye to nobody (its clients see the socket close).
    public func kill() async {
        guard let p = process else { return }
        p.signal(SIGKILL)
        await p.wait(timeout: 10)
        process = nil
    }

    /// The broker's own directory (config, log; a `persistence_location` may point here).
    public var directory: String { dir.path + "/" }

    public var log: String { (try? String(contentsOf: dir.appendingPathComponent("mosquitto.log"), encoding: .utf8)) ?? "" }

    deinit { stop() }
}

/// A TCP listener on 127.0.0.1 that accepts connections and never answers: a broker that is "up" but stuck.
public final class SilentListener: @unchecked Sendable {
    public let port: Int
    let fd: Int32
    var accepted: [Int32] = []
    let lock = NSLock()
    var closed = false

    public init() throws {
        let sock = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(TestEnvironment.freePort()).bigEndian)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sock, $0, len) } }
        guard ok == 0, listen(sock, 16) == 0 else { throw TestError("listen failed") }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(sock, $0, &len) } }
        fd = sock
        port = Int(UInt16(bigEndian: addr.sin_port))
        let t = Thread { [self] in
            while true {
                let c = accept(fd, nil, nil)
                if c < 0 { return }
                lock.lock()
                accepted.append(c)
                lock.unlock()
            }
        }
        t.start()
    }

    public var connections: Int {
        lock.lock()
        defer { lock.unlock() }
        return accepted.count
    }

    public func close() {
        lock.lock()
        defer { lock.unlock() }
        guard !closed else { return }
        closed = true
        shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
        for c in accepted { Glibc.close(c) }
    }

    deinit { close() }
}
