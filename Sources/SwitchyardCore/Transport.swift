#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// A message received from the broker, copied out of the transport's buffers.
public struct InboundMessage: Sendable, Equatable {
    public var topic: String
    public var payload: [UInt8]
    public var retain: Bool
    public var qos: Int
    /// MQTT v5 user properties (empty under 3.1.1).
    public var userProperties: [String: String]
    /// When it was received, by the wall clock: set against a sender's MQTT 5 `timestamp` (a command's age).
    public var receivedAt: Date
    /// When it was received, by the process's monotonic clock: how long it has been held (a hand-back's age).
    public var receivedAtMonotonic: MonotonicInstant
    /// Set when the payload was over `max_payload` and not copied (`payload` is then empty): its size.
    public var oversize: Int?
    /// MQTT v5: the sender's Response Topic and Correlation Data (nil without a Response Topic, and always
    /// under 3.1.1).
    public var replyTo: ReplyTo?
    /// Handed over by the operator console (`BridgeEngine.submit`), not received from the broker.
    public var fromConsole = false

    public init(topic: String, payload: [UInt8], retain: Bool = false, qos: Int = 1, userProperties: [String: String] = [:],
                receivedAt: Date = Date(), receivedAtMonotonic: MonotonicInstant = SystemClock().now(), oversize: Int? = nil,
                replyTo: ReplyTo? = nil) {
        self.topic = topic
        self.payload = payload
        self.retain = retain
        self.qos = qos
        self.userProperties = userProperties
        self.receivedAt = receivedAt
        self.receivedAtMonotonic = receivedAtMonotonic
        self.oversize = oversize
        self.replyTo = replyTo
    }

    /// The payload's size on the wire, copied or not.
    public var size: Int { oversize ?? payload.count }
}

/// MQTT 5 request/response (docs/topics.md "MQTT 5"): where a v5 client wants the answer to its request or
/// command (the PUBLISH's Response Topic) and what to echo with it (its Correlation Data). A peer's bytes,
/// so bounded before they are held: the transport copies either only within its bound, and past it keeps
/// only the size (the router then refuses the message, counted as `response_topic` / `correlation_data`).
public struct ReplyTo: Sendable, Equatable {
    /// The Response Topic (empty when it was over `maxTopicBytes` and not copied).
    public var topic: String
    /// The Correlation Data, if the client sent any (nil also when it was over `maxCorrelationBytes`).
    public var correlationData: [UInt8]?
    /// The sizes as received, copied or not.
    public var topicBytes: Int
    public var correlationBytes: Int

    /// A Response Topic longer than this is refused (a client's reply topic is a few dozen bytes).
    public static let maxTopicBytes = 512
    /// Correlation Data longer than this is refused (as a `transaction` over 256 bytes is): a UUID is 16 or 36.
    public static let maxCorrelationBytes = 256

    public init(topic: String, correlationData: [UInt8]? = nil) {
        self.topic = topic
        self.correlationData = correlationData
        topicBytes = topic.utf8.count
        correlationBytes = correlationData?.count ?? 0
    }

    /// As read off the wire: each part copied only within its bound. `correlation` nil: none was sent.
    public init(topic: UnsafeRawBufferPointer, correlation: UnsafeRawBufferPointer?) {
        topicBytes = topic.count
        correlationBytes = correlation?.count ?? 0
        self.topic = topic.count <= Self.maxTopicBytes ? String(decoding: topic, as: UTF8.self) : ""
        if let correlation, correlation.count <= Self.maxCorrelationBytes { correlationData = Array(correlation) } else { correlationData = nil }
    }

    /// What the transport holds of it, as counted against `mqtt.inbound.max_bytes`.
    public var footprint: Int { topic.utf8.count + (correlationData?.count ?? 0) }
}

/// The MQTT 5 properties of a message the bridge publishes. Under 3.1.1 the broker is told none of them
/// (docs/topics.md "MQTT 5" says what a 3.1.1 subscriber sees instead). Never on a retained message.
public struct MessageProperties: Sendable, Equatable {
    /// Message Expiry Interval in seconds; 0: the message does not expire. The time it waited in the outbox is
    /// taken off when it is sent, and it is dropped there once it has expired.
    public var expiry: UInt32
    /// Correlation Data: on an answer published to a client's Response Topic, its request's.
    public var correlationData: [UInt8]?

    public init(expiry: UInt32 = 0, correlationData: [UInt8]? = nil) {
        self.expiry = expiry
        self.correlationData = correlationData
    }

    public static let none = MessageProperties()
    public var isEmpty: Bool { expiry == 0 && correlationData == nil }
}

/// Why a transport that does not reconnect ended (`MosquittoTransport.endReason`).
public enum TransportEnd: String, Sendable, Equatable {
    /// The connection was lost (the broker went away, the network, a pause past the keepalive).
    case lost
    /// The broker said another client took the session over (MQTT 5 DISCONNECT 0x8E).
    case takenOver = "taken_over"
    /// No connection was made.
    case neverConnected = "never_connected"
}

public enum TransportEvent: Sendable, Equatable {
    case connected(sessionPresent: Bool)
    case disconnected(reason: String)
    case message(InboundMessage)
    /// A message the transport will not send: over the broker's Maximum Packet Size (MQTT 5 CONNACK). It is
    /// dropped, not sent (the broker would close the connection); a retained topic keeps the broker's last value.
    case refused(topic: String, reason: String)
}

public struct TransportStats: Sendable, Equatable {
    public var connected = false
    /// Messages waiting in the outbox (not yet acknowledged by the broker).
    public var outbox = 0
    /// Non-retained messages dropped because the outbox was full.
    public var dropped = 0
    public var published = 0
    public var received = 0
    public var connects = 0
    public var clientRecreations = 0
    /// Non-retained payload bytes waiting in the outbox.
    public var outboxEventBytes = 0
    /// Times the network thread stopped reading because the core had `max_inbound` messages or bytes waiting.
    public var inboundPauses = 0
    /// Payloads over `max_payload`, refused without being copied.
    public var oversize = 0
    /// Non-retained messages whose Message Expiry Interval ran out while they waited in the outbox.
    public var expired = 0
    /// What the broker said in its MQTT 5 CONNACK (nil: not said, or 3.1.1): how many QoS 1 messages it takes
    /// in flight, its largest packet, how many topic aliases it takes.
    public var receiveMaximum: Int?
    public var maximumPacketSize: Int?
    public var topicAliasMaximum: Int?
    /// The most QoS 1 messages that awaited their PUBACK at once.
    public var peakInflight = 0
    public init() {}
}

/// When a message may go, relative to the others waiting for the broker. Each lane goes out only while the
/// lanes before it are empty, in the order its messages were handed over, so that a subscriber sees the tree
/// early: on a start with ten thousand devices, every state (`now`) before the new devices' availability
/// and `device_added` events (`soon`), and those before their discovery configs and details (`late`). Only
/// what nothing depends on is deferred: removals, renames and every later change go `now`, in order.
/// Events keep their order among themselves whatever their lanes.
public enum Lane: UInt8, Sendable, Comparable {
    case now, soon, late

    public static func < (a: Lane, b: Lane) -> Bool { a.rawValue < b.rawValue }
}

/// A payload made only when it is sent (and again at every reconnect), from what its owner keeps anyway:
/// the transport then holds no serialised copy (a device's discovery configs and details: kilobytes a
/// device, for every device). It must give the same bytes every time, and be safe to call from the network
/// thread.
public protocol PayloadSource: AnyObject, Sendable {
    func payload() -> [UInt8]
}

/// A publication's payload: bytes, or the source that makes them when they are sent.
public enum PayloadBody: Sendable {
    case bytes([UInt8])
    case source(any PayloadSource)

    public var bytes: [UInt8] {
        switch self {
        case .bytes(let b): return b
        case .source(let s): return s.payload()
        }
    }
}

/// The latest payload of every retained topic a transport keeps for the broker (MosquittoTransport's
/// ledger, which re-publishes them on every connect), readable by whoever shows them (the console's feed),
/// so that nobody keeps a second index of them. A topic being cleared reads as absent.
public protocol RetainedStore: AnyObject, Sendable {
    func retainedBody(_ topic: String) -> PayloadBody?
    /// Every retained topic that begins with `prefix` and, past it, contains `infix` (when given), and begins
    /// with none of `excluding`, with its payload, in no particular order.
    func retained(under prefix: String, containing infix: String?, excluding: [String]) -> [(topic: String, body: PayloadBody)]
    /// How many retained topics begin with `prefix` and with none of `excluding`.
    func retainedCount(under prefix: String, excluding: [String]) -> Int
}

/// The broker, as the core sees it. Publishing never fails: a message the broker has not
/// acknowledged stays in the transport's outbox and is sent after a reconnect. Every retained topic
/// ever published is kept (latest value) and re-published on every connect, so a broker restarted
/// without persistence gets the whole tree back.
public protocol MQTTTransport: AnyObject, Sendable {
    /// Ordered events from the network. One consumer.
    var events: AsyncStream<TransportEvent> { get }
    func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool)
    /// Several messages in one hand-over, in order (each in its lane).
    func publish(_ batch: [Publication])
    /// Replaces the set of subscriptions; kept across reconnects.
    func setSubscriptions(_ filters: [String])
    func stats() -> TransportStats
    /// The consumer is done with a message from `events`: its count and bytes no longer hold back reading.
    func release(_ message: InboundMessage)
}

extension MQTTTransport {
    public func release(_ message: InboundMessage) {}

    /// One by one, in order, lanes aside (a transport without lanes sends in the order handed over).
    public func publish(_ batch: [Publication]) {
        for p in batch { publish(p.topic, p.payload, qos: p.qos, retain: p.retain) }
    }

    public func publish(_ topic: String, _ text: String, qos: Int = 1, retain: Bool = false) {
        publish(topic, Array(text.utf8), qos: qos, retain: retain)
    }
    public func publish(_ topic: String, json: JSONValue, qos: Int = 1, retain: Bool = false) {
        publish(topic, json.bytes, qos: qos, retain: retain)
    }
}

/// An in-memory transport for unit tests of routing: records publishes, lets tests inject messages.
public final class InMemoryTransport: MQTTTransport {
    public struct Published: Sendable, Equatable {
        public var topic: String
        public var payload: String
        public var qos: Int
        public var retain: Bool
        public var properties = MessageProperties.none
    }

    public let events: AsyncStream<TransportEvent>
    private let continuation: AsyncStream<TransportEvent>.Continuation
    private let state = Locked<(published: [Published], subscriptions: [String], stats: TransportStats)>(([], [], TransportStats()))
    private let releasedCount = Locked(0)
    /// The latest body of each retained topic, as the real transport's ledger keeps it.
    private let latest = Locked<[String: PayloadBody]>([:])

    public init() {
        (events, continuation) = AsyncStream.makeStream(of: TransportEvent.self)
    }

    public func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool) {
        publish([Publication(topic, payload, qos: qos, retain: retain)])
    }

    public func publish(_ batch: [Publication]) {
        latest.withLock { l in
            for p in batch where p.retain {
                if case .bytes(let b) = p.body, b.isEmpty { l[p.topic] = nil } else { l[p.topic] = p.body }
            }
        }
        // One batch is recorded under one lock, so a reader sees all of it or none of it, as the engine
        // handed it over (a group's state and its availability, say).
        let records = batch.map { p in
            Published(topic: p.topic, payload: String(decoding: p.payload, as: UTF8.self), qos: p.qos, retain: p.retain, properties: p.properties)
        }
        state.withLock {
            $0.published.append(contentsOf: records)
            $0.stats.published += records.count
        }
    }
    public func setSubscriptions(_ filters: [String]) { state.withLock { $0.subscriptions = filters } }
    public func stats() -> TransportStats { state.withLock { $0.stats } }

    public var published: [Published] { state.withLock { $0.published } }
    public var subscriptions: [String] { state.withLock { $0.subscriptions } }
    /// Messages the consumer has taken and released (the engine releases each once it has handled it).
    public var released: Int { releasedCount.withLock { $0 } }
    public func release(_ message: InboundMessage) { releasedCount.withLock { $0 += 1 } }
    public func clear() { state.withLock { $0.published.removeAll() } }
    /// Hands the engine an event as the broker's link would; a connect or a loss is also what `stats` says
    /// of the link from then on.
    public func inject(_ event: TransportEvent) {
        switch event {
        case .connected: state.withLock { $0.stats.connected = true }
        case .disconnected: state.withLock { $0.stats.connected = false }
        default: break
        }
        continuation.yield(event)
    }
    public func finish() { continuation.finish() }
}

extension InMemoryTransport: RetainedStore {
    public func retainedBody(_ topic: String) -> PayloadBody? { latest.withLock { $0[topic] } }
    public func retained(under prefix: String, containing infix: String?, excluding: [String]) -> [(topic: String, body: PayloadBody)] {
        latest.withLock { l in
            l.filter { topic, _ in
                topic.hasPrefix(prefix) && (infix.map { topic.dropFirst(prefix.count).contains($0) } ?? true)
                    && !excluding.contains { topic.hasPrefix($0) }
            }.map { (topic: $0.key, body: $0.value) }
        }
    }
    public func retainedCount(under prefix: String, excluding: [String]) -> Int {
        latest.withLock { l in l.keys.count { t in t.hasPrefix(prefix) && !excluding.contains { t.hasPrefix($0) } } }
    }
}
