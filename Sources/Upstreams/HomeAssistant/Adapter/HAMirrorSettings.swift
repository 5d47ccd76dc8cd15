#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

public struct HAMirrorSettings: Sendable, Equatable {
    public enum Feed: String, Sendable, Equatable, CaseIterable {
        /// `subscribe_entities`: a snapshot then compressed diffs (HA's own recommendation).
        case entities
        /// `subscribe_events state_changed` plus a `get_states` snapshot.
        case stateChanged = "state_changed"
    }

    public var url = "ws://127.0.0.1:8123/api/websocket"
    public var token: String?
    public var include: [String] = []
    public var exclude: [String] = []
    public var events: [String] = []
    public var publishAttributes = true
    public var publishTimestamps = false
    /// `domain.service` globs; nothing is allowed by default.
    public var allow: [String] = []
    public var feed = Feed.entities
    /// Application-level ping every this many seconds; no pong within `pingTimeout` = a dead link.
    public var pingInterval = 30.0
    public var pingTimeout = 10.0
    public var reconnectMinDelay = 1.0
    public var reconnectMaxDelay = 60.0
    /// After `auth_invalid`: a bad token must not hammer HA.
    public var authRetryDelay = 300.0
    public var callTimeout = 30.0
    /// Largest message accepted from HA (`ha.max_message_bytes`; a big install's snapshot is a few MB,
    /// in one frame). A larger one closes the connection (counted as `ha_message` in `bridge/health`).
    public var maxMessageSize = 16 << 20
    /// `switchyard_<base_topic>_`: entities HA made from this bridge's own discovery are not mirrored back.
    public var ownUniqueIDPrefix = "switchyard_switchyard_"
    public init() {}

    /// Include/exclude over entity ids (fnmatch globs); no include list = everything.
    public func entityAllowed(_ id: String) -> Bool {
        if !include.isEmpty && !include.contains(where: { Self.glob($0, id) }) { return false }
        return !exclude.contains { Self.glob($0, id) }
    }

    public func serviceAllowed(_ domainService: String) -> Bool { allow.contains { Self.glob($0, domainService) } }

    public static func glob(_ pattern: String, _ text: String) -> Bool { fnmatch(pattern, text, 0) == 0 }
}
