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
    public var secretKeys: Set<String> { ["token"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> HAMirrorSettings {
        var h = HAMirrorSettings()
        if let (url, mark) = s.scalar("url") {
            if let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), ["ws", "wss"].contains(scheme), c.host?.isEmpty == false {
                h.url = url
            } else {
                s.problem(mark, key: "url", "expected ws://host:8123/api/websocket or wss://…, got '\(url)'")
            }
        }
        s.record("url", .string(HAMirror.redactedURL(h.url)))
        h.token = s.secret("token")
        let entities = s.section("entities")
        h.include = entities.stringList("include").map(\.0)
        h.exclude = entities.stringList("exclude").map(\.0)
        entities.finish()
        let events = s.stringList("events")
        h.events = events.map(\.0)
        for (e, mark) in events where e.isEmpty || e.contains("/") || e.contains("+") || e.contains("#") {
            s.problem(mark, key: "events", "'\(e)' cannot be an event topic segment")
        }
        h.publishAttributes = s.bool("publish_attributes", true)
        h.publishTimestamps = s.bool("publish_timestamps", false)
        let services = s.section("services")
        h.allow = services.stringList("allow").map(\.0)
        services.finish()
        h.feed = HAMirrorSettings.Feed(rawValue: s.choice("feed", "entities", HAMirrorSettings.Feed.allCases.map(\.rawValue))) ?? .entities
        h.maxMessageSize = s.int("max_message_bytes", h.maxMessageSize, min: 65536)
        h.ownUniqueIDPrefix = "switchyard_\(Naming.normaliseID(bridge.baseTopic))_"
        s.finish()
        return h
    }

    public func makeAdapter(_ settings: HAMirrorSettings) -> any Adapter { HAMirror(settings: settings) }
}
