#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardConfig
import SwitchyardCore

/// `ha:` — Home Assistant mirrored over its WebSocket API.
public struct HomeAssistantUpstream: Upstream {
    public init() {}
    public var key: String { HAMirror.id }
    public var summary: String { "Home Assistant mirrored over its WebSocket API, with allowed service calls back." }
    public var secretKeys: Set<String> { ["token"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> HAMirrorSettings {
        var h = HAMirrorSettings()
        if let (url, mark) = s.scalar("url", doc: "ws://host:8123/api/websocket or wss://…", shownDefault: .string(HAMirrorSettings().url)) {
            if let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), ["ws", "wss"].contains(scheme), c.host?.isEmpty == false {
                h.url = url
            } else {
                s.problem(mark, key: "url", "expected ws://host:8123/api/websocket or wss://…, got '\(url)'")
            }
        }
        s.record("url", .string(HAMirror.redactedURL(h.url)))
        h.token = s.secret("token", doc: "A long-lived access token (HA profile -> security).")
        let entities = s.section("entities", doc: "Which entities are mirrored.")
        h.include = entities.stringList("include", doc: "Globs, e.g. light.*; empty: every entity.").map(\.0)
        h.exclude = entities.stringList("exclude", doc: "Globs of entities left out.").map(\.0)
        entities.finish()
        let events = s.stringList("events", doc: "Event types mirrored to switchyard/ha/_event/<type>.")
        h.events = events.map(\.0)
        for (e, mark) in events where e.isEmpty || e.contains("/") || e.contains("+") || e.contains("#") {
            s.problem(mark, key: "events", "'\(e)' cannot be an event topic segment")
        }
        h.publishAttributes = s.bool("publish_attributes", true, doc: "One retained topic per attribute, JSON-encoded.")
        h.publishTimestamps = s.bool("publish_timestamps", false, doc: "last_changed / last_updated topics.")
        let services = s.section("services", doc: "Service calls allowed from MQTT.")
        h.allow = services.stringList("allow", doc: "domain.service globs, e.g. light.*; empty: none.").map(\.0)
        services.finish()
        h.feed = HAMirrorSettings.Feed(rawValue: s.choice("feed", "entities", HAMirrorSettings.Feed.allCases.map(\.rawValue),
                                                          doc: "entities (subscribe_entities, compact) or state_changed.")) ?? .entities
        h.maxMessageSize = s.int("max_message_bytes", h.maxMessageSize, min: 65536, doc: "A larger WebSocket message from HA closes the connection.")
        h.ownUniqueIDPrefix = "switchyard_\(Naming.normaliseID(bridge.baseTopic))_"
        s.finish()
        return h
    }

    public func makeAdapter(_ settings: HAMirrorSettings) -> any Adapter { HAMirror(settings: settings) }
}
