#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// Everything the transport needs to reach the broker, already validated by the config layer.
public struct MQTTSettings: Sendable {
    public struct TLS: Sendable {
        public var caFile: String?
        public var caPath: String?
        public var certFile: String?
        public var keyFile: String?
        /// Verify the broker's certificate and host name (default true; `false` is for lab brokers only).
        public var verify: Bool
        public init(caFile: String? = nil, caPath: String? = nil, certFile: String? = nil, keyFile: String? = nil, verify: Bool = true) {
            self.caFile = caFile
            self.caPath = caPath
            self.certFile = certFile
            self.keyFile = keyFile
            self.verify = verify
        }
    }

    public var host: String
    public var port: Int
    public var tls: TLS?
    /// 4 = MQTT 3.1.1, 5 = MQTT 5.
    public var protocolVersion: Int
    public var clientID: String
    public var username: String?
    public var password: String?
    public var keepalive: Int
    /// MQTT 5 session expiry (seconds); 3.1.1 uses clean_session = false.
    public var sessionExpiry: Int
    /// `<base>/bridge/state`: the Last Will (`willPayload`) and the birth message (`birthPayload`) on every connect.
    public var stateTopic: String
    /// None: no birth message (a connection whose retained message on `stateTopic` says more than online).
    public var birthPayload: [UInt8]? = Array("online".utf8)
    /// When set, the birth message instead of `birthPayload`: asked on the network thread at every connect, for
    /// what is true at that moment (a standby instance's role with when it said it, design.md §18). Must be
    /// cheap and safe from any thread.
    public var birth: (@Sendable () -> [UInt8])? = nil
    public var willPayload: [UInt8] = Array("offline".utf8)
    /// False for a clean session (MQTT 3.1.1 clean_session, MQTT 5 no session kept): what a connection that
    /// only watches wants. The bridge's own connection keeps its session (design.md §3).
    public var persistentSession = true
    /// False: the first connection's end (or `connectAttempts` failed attempts before one) ends the
    /// transport: its network thread stops and `events` finishes, with `endReason` saying why. A standby's
    /// connection as the active instance is so (design.md §18): it must not take the client id back.
    public var reconnects = true
    public var connectAttempts = 3
    /// QoS 1 messages in flight at once (fewer when the broker's MQTT 5 Receive Maximum says so); the rest wait
    /// in the outbox.
    public var maxInflight: Int
    /// MQTT 5: at most this many topic aliases on a connection (fewer when the broker's Topic Alias Maximum
    /// says so); 0: none (`TopicAliases`).
    public var maxTopicAliases: Int
    /// Non-retained messages kept while disconnected; the oldest is dropped past this.
    public var maxEvents: Int
    /// The same bound in payload bytes.
    public var maxEventBytes: Int
    /// Inbound messages (and their payload bytes) waiting for the core. At either bound the network
    /// thread stops reading the socket until the core has caught up: TCP pushes back to the broker,
    /// which keeps QoS 1 messages for the session. One read may pass the bound by what libmosquitto
    /// reads in one go (at most about `maxInflight` packets).
    public var maxInbound: Int
    public var maxInboundBytes: Int
    /// Inbound payloads larger than this are not copied: the core gets their size only (and refuses them).
    public var maxPayload: Int
    public var reconnectMinDelay: Double
    public var reconnectMaxDelay: Double
    /// No CONNACK within this many seconds of a TCP connect counts as a failed attempt.
    public var connectTimeout: Double
    /// Without a successful connection for this long, the libmosquitto client is destroyed and recreated.
    public var stuckAfter: Double

    public init(host: String = "127.0.0.1", port: Int = 1883, tls: TLS? = nil, protocolVersion: Int = 4, clientID: String,
                username: String? = nil, password: String? = nil, keepalive: Int = 60, sessionExpiry: Int = 3600,
                stateTopic: String, maxInflight: Int = 100, maxTopicAliases: Int = 1_000, maxEvents: Int = 10_000, maxEventBytes: Int = 8 << 20,
                maxInbound: Int = 1_000, maxInboundBytes: Int = 4 << 20, maxPayload: Int = 256 * 1024,
                reconnectMinDelay: Double = 0.1, reconnectMaxDelay: Double = 1, connectTimeout: Double = 10, stuckAfter: Double = 120) {
        self.host = host
        self.port = port
        self.tls = tls
        self.protocolVersion = protocolVersion
        self.clientID = clientID
        self.username = username
        self.password = password
        self.keepalive = keepalive
        self.sessionExpiry = sessionExpiry
        self.stateTopic = stateTopic
        self.maxInflight = maxInflight
        self.maxTopicAliases = maxTopicAliases
        self.maxEvents = maxEvents
        self.maxEventBytes = maxEventBytes
        self.maxInbound = maxInbound
        self.maxInboundBytes = maxInboundBytes
        self.maxPayload = maxPayload
        self.reconnectMinDelay = reconnectMinDelay
        self.reconnectMaxDelay = reconnectMaxDelay
        self.connectTimeout = connectTimeout
        self.stuckAfter = stuckAfter
    }

    /// Bounded exponential backoff with jitter: the n-th retry waits between half and all of
    /// min(max, min·2ⁿ). (libmosquitto's own "exponential" backoff is quadratic and can latch.)
    public func backoff(attempt: Int, random: Double = Double.random(in: 0...1)) -> Double {
        let capped = min(reconnectMaxDelay, reconnectMinDelay * pow(2, Double(min(attempt, 30))))
        return capped / 2 + capped / 2 * random
    }
}
