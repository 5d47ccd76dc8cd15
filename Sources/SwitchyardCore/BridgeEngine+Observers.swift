#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What the operator console (docs/console.md) sees of the engine: every message it publishes (through
/// `ObservedTransport`, which sits between the engine and the broker), each command's outcome, and a
/// snapshot of the adapters. Called on the engine's actor or an adapter's worker: an observer must
/// return at once and never wait, so that a slow page can never slow the engine (the console coalesces
/// and drops on its side).
public protocol EngineObserver: AnyObject, Sendable {
    /// A message the engine handed to the transport (state, availability, bridge/*, results, discovery…):
    /// its payload as the transport got it, bytes or the source that writes them (details, discovery
    /// configs, `bridge/info`, `bridge/devices`), so that keeping it costs no copy.
    func published(topic: String, body: PayloadBody, retain: Bool)
    /// A command that reached an adapter was answered (ok or an error) `seconds` after it was routed.
    func commandFinished(adapter: String, ok: Bool, seconds: Double)
    /// A command refused before it reached an adapter (validation, unknown device, too old, …).
    func commandRefused(topic: String)
}

/// The transport the engine publishes through when a console is running: hands every publication to the
/// broker's transport, then shows it to the observer. Everything else is the wrapped transport's.
public final class ObservedTransport: MQTTTransport {
    public let wrapped: any MQTTTransport
    let observer: any EngineObserver

    public init(_ wrapped: any MQTTTransport, observer: any EngineObserver) {
        self.wrapped = wrapped
        self.observer = observer
    }

    public var events: AsyncStream<TransportEvent> { wrapped.events }
    public func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool) {
        wrapped.publish(topic, payload, qos: qos, retain: retain)
        observer.published(topic: topic, body: .bytes(payload), retain: retain)
    }
    /// The batch goes to the broker's transport whole (its lanes and payload sources kept); the observer
    /// sees each message with the same body.
    public func publish(_ batch: [Publication]) {
        wrapped.publish(batch)
        for p in batch { observer.published(topic: p.topic, body: p.body, retain: p.retain) }
    }
    public func setSubscriptions(_ filters: [String]) { wrapped.setSubscriptions(filters) }
    public func stats() -> TransportStats { wrapped.stats() }
    public func release(_ message: InboundMessage) { wrapped.release(message) }
}

/// The engine's side of observation: the observer, behind a lock, so that an adapter's worker can report
/// a command's outcome itself. A command carries the adapter it was routed to and when (`Reply`), so
/// nothing is kept here per command.
final class EngineObservers: Sendable {
    let current = Locked<(any EngineObserver)?>(nil)

    var observer: (any EngineObserver)? { current.withLock { $0 } }

    func commandFinished(_ r: BridgeEngine.Reply, ok: Bool, at now: MonotonicInstant) {
        observer?.commandFinished(adapter: r.adapter, ok: ok, seconds: (now - r.routedAt).seconds)
    }

    func commandRefused(_ topic: String) { observer?.commandRefused(topic: topic) }
}

/// One adapter as the console shows it (`/readyz`, `/metrics`).
public struct AdapterSnapshot: Sendable, Equatable {
    public var id: String
    public var status: AdapterStatus
    /// A mirror (Home Assistant): its topics are the upstream's tree, not devices.
    public var mirror: Bool
    public var devices: Int
    /// Upstream requests and those that failed, since the bridge started (a reload's new instance of
    /// the adapter goes on from the old one's): they only grow.
    public var requests: Int
    public var errors: Int
    public var lastError: String?
    public var lastOK: Date?
    /// Bytes of commands waiting in its queue.
    public var queuedBytes: Int

    public init(id: String, status: AdapterStatus, mirror: Bool = false, devices: Int, requests: Int, errors: Int, lastError: String?,
                lastOK: Date?, queuedBytes: Int) {
        self.id = id
        self.status = status
        self.mirror = mirror
        self.devices = devices
        self.requests = requests
        self.errors = errors
        self.lastError = lastError
        self.lastOK = lastOK
        self.queuedBytes = queuedBytes
    }
}

/// The engine as the operator console sees it: what it reads (a snapshot, the bounds' counters, whether the
/// core answers) and the two things it does (a command as if from the broker, a line on bridge/log).
/// `BridgeEngine` is one; a hot-standby instance gives the console a view that follows whichever engine
/// is running (none while it waits), and a test can give it a twin.
public protocol ConsoleEngine: Sendable {
    var bounds: BoundsCounter { get }
    func snapshot() async -> EngineSnapshot
    func submit(topic: String, payload: [UInt8]) async
    func consoleLog(_ level: BridgeLogLevel, _ message: String) async
    func isAlive() async -> Bool
}

extension BridgeEngine: ConsoleEngine {
    public func consoleLog(_ level: BridgeLogLevel, _ message: String) { log(level, message) }
}

public struct EngineSnapshot: Sendable, Equatable {
    public var version: String
    public var uptime: Double
    public var adapters: [AdapterSnapshot]
    public var scheme: TopicScheme
    /// The engine has stopped (its `run` returned or is returning).
    public var stopped: Bool
    /// Under hot standby (design.md §18): this instance's name and role, and why it is not serving when it
    /// is not; nil without standby.
    public var standby: StandbySnapshot?

    public init(version: String, uptime: Double, adapters: [AdapterSnapshot], scheme: TopicScheme, stopped: Bool, standby: StandbySnapshot? = nil) {
        self.version = version
        self.uptime = uptime
        self.adapters = adapters
        self.scheme = scheme
        self.stopped = stopped
        self.standby = standby
    }
}

/// An instance of a standby group as the console shows it.
public struct StandbySnapshot: Sendable, Equatable {
    public var instance: String
    public var role: String
    /// Every instance the group has seen, with its role.
    public var group: [String: String]
    public var takeovers: Int
    public init(instance: String, role: String, group: [String: String], takeovers: Int) {
        self.instance = instance
        self.role = role
        self.group = group
        self.takeovers = takeovers
    }

    /// As `bridge/info`, `bridge/health` and the console's status carry it: `{instance, role, group, takeovers}`.
    public var json: JSONValue {
        ["instance": .string(instance), "role": .string(role), "group": .object(group.mapValues(JSONValue.string)),
         "takeovers": JSONValue(takeovers)]
    }
}

extension BridgeEngine {
    /// Starts showing the engine's command outcomes to `observer` (its publications reach it through the
    /// `ObservedTransport` the engine was given).
    public func observe(_ observer: any EngineObserver) {
        observers.current.withLock { $0 = observer }
    }

    /// What the console reads on each `/metrics`, `/readyz` and page connection.
    public func snapshot() -> EngineSnapshot {
        let adapters = adapterOrder.compactMap { id in
            entries[id].map { s in
                AdapterSnapshot(id: id, status: s.status, mirror: s.adapter is any MirrorAdapter, devices: s.registry.devices.count,
                                requests: s.requests, errors: s.errors, lastError: s.lastError, lastOK: s.lastOK, queuedBytes: s.hosted.queued.bytes.load(ordering: .relaxed))
            }
        }
        return EngineSnapshot(version: settings.version, uptime: uptime, adapters: adapters, scheme: scheme, stopped: stopped, standby: standby)
    }

    /// A message handed to the engine as if it had come from the broker (the console's controls): routed
    /// and validated by the same `InboundRouter`, answered on the same result and response topics. Never
    /// retained, never old. It runs on the caller's task: the bounds it hits are this bridge's.
    public func submit(topic: String, payload: [UInt8]) {
        var m = InboundMessage(topic: topic, payload: payload, retain: false, qos: 1)
        m.fromConsole = true
        Bounds.$counter.withValue(bounds) { handle(m) }
    }
}
