import Foundation
import SwitchyardCore
#if canImport(Glibc)
import Glibc
#endif

/// Instances of one standby group (design.md §18: `switchyard run --instance <name>` processes of the same
/// config) over one broker, with the virtual adapter (`lamp`, and `spare`, which no command of `commander`
/// touches) and a LIFX cloud (the caller's simulator, by its API URL), and a plain client subscribed to the
/// whole base topic that keeps what a user would look at: each instance's role on
/// `bridge/instances/<name>`, the takeover events, every command's results, the virtual lights' states.
/// What FailoverTests and the bench's `failover` scenario drive.
public final class FailoverRig: @unchecked Sendable {
    /// The instances' MQTT keepalive (seconds).
    public static let keepalive = 5
    /// `standby.takeover_delay` (seconds); each instance adds up to half of it again (its jitter).
    public static let takeoverDelay = 1.0
    public let broker: any TestBroker
    /// Whether the config has `standby:` (off: one plain bridge, the bench's restart baseline).
    public let standby: Bool
    public let base = uniqueBase()
    public let dir = TestEnvironment.makeTempDir("failover")
    public let probe: MQTTProbe
    public var configPath: String { dir.appendingPathComponent("config.yaml").path }
    let processes = Locked<[String: BridgeProcess]>([:])
    let ledger = Locked(Ledger())

    /// A command sent by `commander`.
    public struct Sent: Sendable {
        public var transaction: String
        public var topic: String
        public var at: Date
    }

    /// A result read on a `/result` topic.
    public struct Answer: Sendable {
        public var transaction: String
        public var status: String
        /// The result's `error`, when it has one.
        public var error: String?
        public var at: Date
    }

    /// An instance's role as it said it (`cleared`: the topic was emptied).
    public struct RoleChange: Sendable {
        public var name: String
        public var role: String
        public var at: Date
    }

    struct Ledger {
        var roles: [String: String] = [:]
        var roleChanges: [RoleChange] = []
        /// When `bridge/info` was read, each time.
        var infos: [Date] = []
        var takeovers: [(event: JSONValue, at: Date)] = []
        var answers: [String: [Answer]] = [:]
        var answerLog: [Answer] = []
        /// Each virtual device's states, as read (`<base>/virtual/<name>`).
        var virtual: [String: [(state: JSONValue, at: Date)]] = [:]
        var logs: [String] = []
        var sent: [Sent] = []
    }

    init(broker: any TestBroker, probe: MQTTProbe, standby: Bool) {
        self.broker = broker
        self.probe = probe
        self.standby = standby
    }

    /// The rig over `broker` and the LIFX cloud at `lifxURL` (token `t`); every instance it started is
    /// killed when `body` returns or throws. `standby: false` leaves `standby:` out of the config: each
    /// process started is then a plain bridge (started without `--instance`). `lifxMore` goes inside the
    /// `lifx:` section (`lan: {…}`), `more` after the config (other upstreams' sections).
    public static func with<R: Sendable>(broker: any TestBroker, lifxURL: String, standby: Bool = true, lifxMore: String = "", more: String = "",
                                         _ body: (FailoverRig) async throws -> R) async throws -> R {
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        let rig = FailoverRig(broker: broker, probe: probe, standby: standby)
        defer { rig.killAll() }
        try """
        log: {level: info}
        state_dir: \(rig.dir.path)
        web: {enabled: false}
        mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(rig.base), keepalive: \(keepalive)}
        \(standby ? "standby: {enabled: true, takeover_delay: \(takeoverDelay)}" : "")
        virtual: {devices: [{name: lamp, type: light}, {name: spare, type: light}]}
        lifx: {token: t, api_url: "\(lifxURL)", poll_interval: 2, min_interval: 0.05\(lifxMore.isEmpty ? "" : ", " + lifxMore)}
        \(more)
        """.writeForTest(toFile: rig.configPath, replacing: true)
        probe.stream { [weak rig] m in rig?.read(m) }
        try await probe.subscribe("\(rig.base)/#")
        return try await body(rig)
    }

    /// What the client read: kept as the figures the tests and the bench look at (not every message: a
    /// bench's run is minutes of 20 commands a second).
    func read(_ m: MQTTProbe.Message) {
        let instances = "\(base)/bridge/instances/"
        if m.topic.hasPrefix(instances) {
            let name = String(m.topic.dropFirst(instances.count))
            guard name != "_ping" else { return }
            let role = m.payload.isEmpty ? "cleared" : (try? JSONValue.parse(m.payload))?["role"]?.stringValue ?? "?"
            ledger.withLock {
                $0.roles[name] = role
                $0.roleChanges.append(RoleChange(name: name, role: role, at: m.at))
            }
        } else if m.topic == "\(base)/bridge/event" {
            guard let e = try? JSONValue.parse(m.payload), e["type"] == "takeover" else { return }
            ledger.withLock { $0.takeovers.append((e, m.at)) }
        } else if m.topic == "\(base)/bridge/info" {
            ledger.withLock { $0.infos.append(m.at) }
        } else if m.topic == "\(base)/bridge/log" {
            ledger.withLock { $0.logs.append(m.payload) }
        } else if m.topic.hasSuffix("/result") {
            guard let r = try? JSONValue.parse(m.payload), let t = r["transaction"]?.stringValue else { return }
            let a = Answer(transaction: t, status: r["status"]?.stringValue ?? "?", error: r["error"]?.stringValue, at: m.at)
            ledger.withLock {
                $0.answers[t, default: []].append(a)
                $0.answerLog.append(a)
            }
        } else if m.topic.hasPrefix("\(base)/virtual/"), case let name = m.topic.dropFirst("\(base)/virtual/".count), !name.contains("/"),
                  let state = try? JSONValue.parse(m.payload) {
            ledger.withLock { $0.virtual[String(name), default: []].append((state, m.at)) }
        }
    }

    // MARK: instances

    /// Starts an instance (the first one started takes over: nobody is active yet); without standby, a
    /// bridge process known to the rig as `name`.
    public func start(_ name: String) throws {
        let p = try BridgeProcess(arguments: ["run", "-c", configPath] + (standby ? ["--instance", name] : []))
        processes.withLock { $0[name] = p }
    }

    public func process(_ name: String) -> BridgeProcess? { processes.withLock { $0[name] } }

    public func signal(_ name: String, _ sig: Int32) { process(name)?.signal(sig) }

    func killAll() { for p in processes.withLock({ Array($0.values) }) { p.signal(SIGKILL) } }

    // MARK: what the client read

    /// Each instance's last role on `bridge/instances/<name>`.
    public var roles: [String: String] { ledger.withLock { $0.roles } }
    public var roleChanges: [RoleChange] { ledger.withLock { $0.roleChanges } }
    public var takeovers: [JSONValue] { ledger.withLock { $0.takeovers.map(\.event) } }
    /// The takeover events with the time the client read each.
    public var takeoverTimes: [(event: JSONValue, at: Date)] { ledger.withLock { $0.takeovers } }
    /// Everything said on `bridge/log`.
    public var logs: [String] { ledger.withLock { $0.logs } }
    /// The virtual lamp's last state.
    public var lamp: JSONValue? { ledger.withLock { $0.virtual["lamp"]?.last?.state } }

    /// A virtual device's first state read after `after`.
    public func state(of device: String, after: Date) -> JSONValue? {
        ledger.withLock { $0.virtual[device]?.first { $0.at > after }?.state }
    }

    /// Forgets the roles read so far (a restarted broker without persistence forgot them too).
    public func forgetRoles() { ledger.withLock { $0.roles = [:] } }

    public func waitRole(_ name: String, _ role: String, timeout: Double = 30) async throws {
        try await waitUntil("\(name) \(role)", timeout: timeout) { self.roles[name] == role }
    }

    public func waitActive(_ name: String, timeout: Double = 30) async throws { try await waitRole(name, "active", timeout: timeout) }

    /// Waits for `bridge/info` from the latest active phase: its engine has subscribed to the command topics
    /// by then (it says `active` before its engine starts, and a command published in between is not
    /// delivered to it).
    public func waitInfo(timeout: Double = 30) async throws {
        try await waitUntil("bridge/info from the active instance", timeout: timeout) {
            self.ledger.withLock { l in
                guard let active = l.roleChanges.last(where: { $0.role == "active" })?.at else { return false }
                return l.infos.contains { $0 >= active }
            }
        }
    }

    /// Each time an instance said `active` while another's last word was `active` too, in words: what no kill,
    /// pause or stop may cause (design.md §18). Inside a broker restart's window the group picks an active
    /// instance again, and each may have claimed before it heard the other: the caller leaves those out
    /// (`after`).
    public func doubleClaims(after: Date = .distantPast) -> [String] {
        var last: [String: String] = [:]
        var out: [String] = []
        for c in roleChanges {
            last[c.name] = c.role
            guard c.role == "active", c.at > after else { continue }
            for (other, role) in last where other != c.name && role == "active" {
                out.append("\(c.name) claimed active at \(c.at) while \(other) still did")
            }
        }
        return out
    }

    /// The first time the client read `name` say `role` after `after`.
    public func said(_ name: String, _ role: String, after: Date) -> Date? {
        ledger.withLock { l in l.roleChanges.first { $0.name == name && $0.role == role && $0.at > after }?.at }
    }

    // MARK: commands

    public var sent: [Sent] { ledger.withLock { $0.sent } }

    /// Commands with transactions, 20 a second, in turn to the virtual lamp and a LIFX light (brightness
    /// rising, so the last one is the state to end in), until cancelled.
    public func commander() -> Task<Void, Never> {
        Task {
            var n = 0
            while !Task.isCancelled {
                n += 1
                let lamp = n % 2 == 0
                let topic = lamp ? "\(base)/virtual/lamp/set" : "\(base)/lifx/kitchen/set"
                let transaction = "c\(n)"
                ledger.withLock { $0.sent.append(Sent(transaction: transaction, topic: topic, at: Date())) }
                probe.publish(topic, #"{"state":"ON","brightness":\#(Self.brightness(n)),"transaction":"\#(transaction)"}"#)
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
    }

    /// The brightness command `n` asks for.
    public static func brightness(_ n: Int) -> Int { 1 + n % 100 }

    /// Every result read, by transaction: the statuses, one per time it was answered.
    public var results: [String: [String]] { ledger.withLock { $0.answers.mapValues { $0.map(\.status) } } }

    /// The first result the client read after `after` (of any command).
    public func firstAnswer(after: Date) -> Answer? {
        ledger.withLock { l in l.answerLog.first { $0.at > after } }
    }

    /// The first result the client read of a command sent after `after`: after a kill -9 at `after`, one
    /// only a process that took over or started since can have given (a result the dead one published just
    /// before may still be on its way to the client).
    public func firstAnswer(toCommandSentAfter after: Date) -> Answer? {
        ledger.withLock { l in
            let later = Set(l.sent.lazy.filter { $0.at > after }.map(\.transaction))
            return l.answerLog.first { $0.at > after && later.contains($0.transaction) }
        }
    }

    /// Every result that was not `ok`, in the order read.
    public var failures: [Answer] { ledger.withLock { $0.answerLog.filter { $0.status != "ok" } } }

    /// Sent commands without a result yet.
    public var unanswered: [Sent] {
        ledger.withLock { l in l.sent.filter { l.answers[$0.transaction] == nil } }
    }

    /// Waits until every sent command has a result, and returns those answered more than once.
    @discardableResult
    public func everyCommandAnswered(timeout: Double = 40) async throws -> [String: [String]] {
        do {
            try await waitUntil("every command answered", timeout: timeout) { self.unanswered.isEmpty }
        } catch {
            throw TestError("\(unanswered.count) commands never answered: \(unanswered.prefix(20).map(\.transaction))")
        }
        return results.filter { $0.value.count > 1 }
    }
}
