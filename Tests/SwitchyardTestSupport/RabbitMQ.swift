import Foundation
import SwitchyardCore
#if canImport(Glibc)
import Glibc
#endif

/// What a test needs of a broker it started: where it listens, a restart, its log. Mosquitto (`Broker`) and
/// RabbitMQ's MQTT plugin (`RabbitMQBroker`) are both real brokers on a free loopback port.
public protocol TestBroker: AnyObject, Sendable {
    var kind: BrokerKind { get }
    var port: Int { get }
    /// Starts it again after `stop()` (on the same port, with whatever it keeps across restarts).
    func start() async throws
    /// Stops it and waits until it is gone.
    func stop() async
    /// Stops it without waiting (`defer`, `deinit`: paths that must not hold a thread of the cooperative pool).
    func stop()
    var log: String { get }
}

/// The brokers the tests can run over, and what differs between them that a test must know.
public enum BrokerKind: String, Sendable, CaseIterable, CustomStringConvertible {
    case mosquitto, rabbitmq

    public var description: String { self == .mosquitto ? "Mosquitto" : "RabbitMQ" }

    /// Why this broker cannot run here; nil when it can.
    public var unavailable: String? {
        switch self {
        case .mosquitto: TestEnvironment.which("mosquitto") == nil ? "mosquitto is not installed (make test installs it)" : nil
        case .rabbitmq: RabbitMQBroker.unavailable
        }
    }

    /// Starts a broker of this kind on a free loopback port (the tests' configuration: anonymous clients,
    /// Mosquitto without persistence).
    public func start() async throws -> any TestBroker {
        switch self {
        case .mosquitto: try await Broker.start()
        case .rabbitmq: try await RabbitMQBroker.start()
        }
    }

    /// The longest a broker lets the connection of a client that went silent stand before it closes it and
    /// sends its Last Will, for a keepalive of `keepalive` seconds, from each broker's source:
    /// - Mosquitto 2.0.11 looks at keepalives every 5 s or so (`keepalive__check`: when `last check + 5 <
    ///   now`, whole seconds) and closes a connection silent for more than keepalive × 3/2 (whole seconds):
    ///   at most 1.5 × keepalive + 7 s;
    /// - RabbitMQ 3.10.8 checks the socket's received-bytes counter every keepalive and gives up after two
    ///   checks without a change (`rabbit_heartbeat`): 2 to 3 × keepalive.
    /// MQTT 3.1.1 asks for 1.5 × keepalive [MQTT-3.1.2-24]: both wait longer, never less (which is the
    /// direction that keeps a hot-standby pair safe: design.md §18).
    public func keepaliveGrace(_ keepalive: Double) -> Double {
        switch self {
        case .mosquitto: keepalive * 1.5 + 7
        case .rabbitmq: keepalive * 3
        }
    }
}

extension Broker: TestBroker {
    public var kind: BrokerKind { .mosquitto }
}

/// A private RabbitMQ node with its MQTT plugin (`rabbitmq_mqtt`), started by the test as its own process:
/// its own node name, its data and logs in a directory of its own, the MQTT listener on a free loopback
/// port, anonymous MQTT clients (the plugin's default user, `guest`, which RabbitMQ allows from loopback
/// only), no AMQP listener, and an Erlang port mapper (epmd) of its own on a free port, stopped with it.
/// Nothing of the machine's own RabbitMQ is used (not its config, cookie, data or epmd).
///
/// What RabbitMQ keeps across `stop()` and `start()` (the same node, the same directory): retained
/// messages (its retained-message store is on disk) and persistent sessions (durable queues), like
/// Mosquitto with persistence on. Starting takes seconds (5 to 15 here: the Erlang VM, and a new node's
/// MQTT client-id tracker waits 3 to 6 s for peers before it elects itself); `start` waits at most
/// `startTimeout`, `stop` at most `stopTimeout` before it kills the node.
public final class RabbitMQBroker: TestBroker, @unchecked Sendable {
    public var kind: BrokerKind { .rabbitmq }
    public let port: Int
    let epmdPort: Int
    let distPort: Int
    let node: String
    let dir: URL
    let state = Locked<(node: ChildProcess?, epmd: ChildProcess?)>((nil, nil))
    public static let startTimeout = 90.0
    public static let stopTimeout = 30.0

    /// The server's start script (Debian's rabbitmq-server package; `SWITCHYARD_RABBITMQ_SERVER` names
    /// another). Not /usr/sbin/rabbitmq-server, which runs the machine's node as the rabbitmq user.
    public static var serverScript: String? {
        let candidates = [ProcessInfo.processInfo.environment["SWITCHYARD_RABBITMQ_SERVER"], "/usr/lib/rabbitmq/bin/rabbitmq-server"]
        return candidates.compactMap { $0 }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Why no node can be started here; nil when one can.
    public static var unavailable: String? {
        if serverScript == nil { return "RabbitMQ is not installed (Debian 12: apt-get install rabbitmq-server, which make test does)" }
        if TestEnvironment.which("epmd") == nil { return "epmd (Erlang's port mapper, erlang-base) is not installed" }
        let plugins = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/rabbitmq/lib")) ?? []
        let hasMQTT = plugins.contains { dir in
            ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/rabbitmq/lib/\(dir)/plugins")) ?? []).contains { $0.hasPrefix("rabbitmq_mqtt-") }
        }
        if ProcessInfo.processInfo.environment["SWITCHYARD_RABBITMQ_SERVER"] == nil && !hasMQTT {
            return "RabbitMQ's MQTT plugin (rabbitmq_mqtt) is not installed"
        }
        return nil
    }

    public init() throws {
        if TestEnvironment.isUnitTier {
            throw TestError("this test starts a RabbitMQ node, which the unit tier (make test-unit) has not: "
                + "list its suite in Tests/integration-suites.txt (docs/testing.md \"Two tiers\")")
        }
        if let why = Self.unavailable { throw TestError(why) }
        port = TestEnvironment.freePort()
        epmdPort = TestEnvironment.freePort()
        distPort = TestEnvironment.freePort()
        let id = UUID().uuidString.prefix(8).lowercased()
        node = "sy\(id)@localhost"
        dir = TestEnvironment.makeTempDir("rabbitmq")
        try """
        listeners.tcp = none
        mqtt.listeners.tcp.default = 127.0.0.1:\(port)
        mqtt.allow_anonymous = true
        disk_free_limit.absolute = 1MB
        log.console = false
        log.file.level = info
        """.writeForTest(to: dir.appendingPathComponent("rabbitmq.conf"))
        try "[rabbitmq_mqtt].\n".writeForTest(to: dir.appendingPathComponent("enabled_plugins"))
        try "".writeForTest(to: dir.appendingPathComponent("rabbitmq-env.conf"))
    }

    /// A node on free ports (tried again with other ports if one was taken meanwhile).
    public static func start() async throws -> RabbitMQBroker {
        StallWatch.startIfAsked()
        var lastError: (any Error)?
        for _ in 0..<2 {
            do {
                let b = try RabbitMQBroker()
                try await b.start()
                return b
            } catch {
                lastError = error
            }
        }
        throw lastError ?? TestError("RabbitMQ did not start")
    }

    var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("RABBITMQ_") && $0.key != "ERL_EPMD_PORT" }
        let path = dir.path
        env["HOME"] = path   // the Erlang cookie (.erlang.cookie) is made here
        env["ERL_EPMD_PORT"] = "\(epmdPort)"
        env["RABBITMQ_NODENAME"] = node
        env["RABBITMQ_DIST_PORT"] = "\(distPort)"
        env["RABBITMQ_CONFIG_FILE"] = "\(path)/rabbitmq.conf"
        env["RABBITMQ_CONF_ENV_FILE"] = "\(path)/rabbitmq-env.conf"
        env["RABBITMQ_ENABLED_PLUGINS_FILE"] = "\(path)/enabled_plugins"
        env["RABBITMQ_MNESIA_BASE"] = "\(path)/mnesia"
        env["RABBITMQ_LOG_BASE"] = "\(path)/log"
        env["RABBITMQ_PID_FILE"] = "\(path)/rabbitmq.pid"
        // The script then runs the Erlang VM in its own process (exec), not under a shell that forwards
        // signals: SIGTERM reaches the node itself (a clean stop) and so does SIGKILL. `-noinput` keeps the
        // VM from reading stdin, which the script leaves it when input is allowed.
        env["RABBITMQ_ALLOW_INPUT"] = "true"
        env["RABBITMQ_SERVER_START_ARGS"] = "-noinput"
        return env
    }

    public func start() async throws {
        let epmdRunning = state.withLock { $0.epmd?.isRunning ?? false }
        if !epmdRunning {
            let epmd = try ChildProcess(path: TestEnvironment.which("epmd")!, arguments: ["-port", "\(epmdPort)", "-address", "127.0.0.1"],
                                        outputFile: dir.appendingPathComponent("epmd.log").path)
            state.withLock { $0.epmd = epmd }
            for _ in 0..<100 where !TestEnvironment.canConnect(port: epmdPort) && epmd.isRunning { await TestEnvironment.sleep(0.02) }
        }
        let p = try ChildProcess(path: Self.serverScript!, arguments: [], environment: environment,
                                 outputFile: dir.appendingPathComponent("stdout.log").path)
        state.withLock { $0.node = p }
        let deadline = Date().addingTimeInterval(Self.startTimeout)
        // The MQTT listener opens last, once the plugin's client-id tracker has its leader: then a client
        // that connects is served.
        while Date() < deadline && p.isRunning {
            if TestEnvironment.canConnect(port: port), let probe = try? await MQTTProbe.connect(port: port) {
                probe.close()
                return
            }
            await TestEnvironment.sleep(0.1)
        }
        let why = p.isRunning ? "not serving MQTT on port \(port) after \(Int(Self.startTimeout)) s" : "exited with status \(p.exitStatus ?? -1)"
        await stop()
        throw TestError("RabbitMQ node \(node) \(why); its output:\n\(output.suffix(3_000))\nits log:\n\(log.suffix(3_000))")
    }

    /// SIGTERM (the node stops cleanly: sessions and retained messages written), SIGKILL after
    /// `stopTimeout`; then its epmd.
    public func stop() async {
        let (node, epmd) = state.withLock { s in
            defer { s = (nil, nil) }
            return s
        }
        await node?.stop(timeout: Self.stopTimeout)
        await epmd?.stop(timeout: 5)
    }

    public func stop() {
        let (node, epmd) = state.withLock { s in
            defer { s = (nil, nil) }
            return s
        }
        node?.terminate()
        epmd?.terminate()
    }

    /// `kill -9` of the node (its epmd stays for a `start`).
    public func kill() async {
        guard let p = state.withLock({ s in defer { s.node = nil }; return s.node }) else { return }
        p.signal(SIGKILL)
        await p.wait(timeout: 10)
    }

    /// The node's own log (connections, client-id takeovers, keepalive timeouts).
    public var log: String {
        (try? String(contentsOf: dir.appendingPathComponent("log/\(node).log"), encoding: .utf8)) ?? ""
    }

    var output: String { (try? String(contentsOf: dir.appendingPathComponent("stdout.log"), encoding: .utf8)) ?? "" }

    deinit { stop() }
}
