#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The engine's settings, from the config (`BridgeRuntime.engineSettings`) or a test.
public struct EngineSettings: Sendable {
    public var scheme: TopicScheme
    public var discovery: Bool
    public var version: String
    /// Commands older than this (when their age is known) are dropped.
    public var commandMaxAge: TimeInterval
    public var maxPayload: Int
    public var healthInterval: TimeInterval
    public var commandQueueLimit: Int
    /// The same bound in bytes (fields, mirror payloads, topics).
    public var commandQueueBytes: Int
    /// Delay before re-announcing after `homeassistant/status` = online.
    public var reannounceDelay: ClosedRange<Double>
    /// Commands for devices an adapter has not listed yet are held this long after it starts (until its
    /// first listing); then they are refused as unknown.
    public var settleTimeout: Double
    /// At most this many held commands, and this many payload bytes, per adapter.
    public var heldLimit: Int
    public var heldBytesLimit: Int
    /// When an adapter is replaced (a reload), the commands already queued for it are carried out by it
    /// for at most this long before it is stopped; commands that arrive meanwhile wait for the new one.
    public var drainTimeout: Double
    /// `origin.support_url` in discovery (`homeassistant.support_url`); none by default.
    public var supportURL: String?
    /// MQTT 5 Message Expiry Interval of the bridge's non-retained messages (`mqtt.message_expiry`); none by default.
    public var expiry = MessageExpiry()
    /// One discovery config per device or per entity (`homeassistant.discovery_mode`; the config's default is
    /// `device`, this initialiser's `entity`, which the engine's older tests are written for).
    public var discoveryMode: DiscoveryMode
    /// After Home Assistant was asked to let go of the other mode's configs (`migrate_discovery`), this long
    /// before they are cleared and the new ones announced: Home Assistant unloads each entity in a task of its
    /// own, and a config naming an entity still unloading is dropped by it, together with the rest of its device.
    public var migrationGrace: Double
    /// A re-announcement (Home Assistant's birth, `republish`) goes out this many devices at a time, one
    /// hand-over every `reannouncePause` seconds: a burst of thousands overflows the broker's queue for Home
    /// Assistant's client (Mosquitto drops what is beyond 1000 by default), and what is dropped is lost.
    public var reannounceBatch: Int
    public var reannouncePause: Double

    public init(scheme: TopicScheme, discovery: Bool = true, version: String, commandMaxAge: TimeInterval = 30,
                maxPayload: Int = 256 * 1024, healthInterval: TimeInterval = 60, commandQueueLimit: Int = 1000, commandQueueBytes: Int = 4 << 20,
                reannounceDelay: ClosedRange<Double> = 0.5...3, settleTimeout: Double = 15, heldLimit: Int = 1000,
                heldBytesLimit: Int = 1 << 20, drainTimeout: Double = 5, supportURL: String? = nil,
                discoveryMode: DiscoveryMode = .entity, migrationGrace: Double = 3, reannounceBatch: Int = 50, reannouncePause: Double = 0.25) {
        self.scheme = scheme
        self.discovery = discovery
        self.version = version
        self.commandMaxAge = commandMaxAge
        self.maxPayload = maxPayload
        self.healthInterval = healthInterval
        self.commandQueueLimit = commandQueueLimit
        self.commandQueueBytes = commandQueueBytes
        self.reannounceDelay = reannounceDelay
        self.settleTimeout = settleTimeout
        self.heldLimit = heldLimit
        self.heldBytesLimit = heldBytesLimit
        self.drainTimeout = drainTimeout
        self.supportURL = supportURL
        self.discoveryMode = discoveryMode
        self.migrationGrace = migrationGrace
        self.reannounceBatch = max(1, reannounceBatch)
        self.reannouncePause = reannouncePause
    }
}

/// How long (seconds; 0: forever) each kind of non-retained message the bridge publishes lives, as its MQTT 5
/// Message Expiry Interval (`mqtt.message_expiry`, docs/topics.md "MQTT 5"): a client that reconnects after an
/// hour is not handed an hour of stale events, log lines and results from its session.
public struct MessageExpiry: Sendable, Equatable {
    /// `bridge/event` (and the Home Assistant mirror's events).
    public var events: UInt32
    /// `bridge/log`.
    public var logs: UInt32
    /// `<device>/result`, `bridge/response/<path>` and answers on a client's Response Topic.
    public var results: UInt32

    public init(events: UInt32 = 0, logs: UInt32 = 0, results: UInt32 = 0) {
        self.events = events
        self.logs = logs
        self.results = results
    }
}
