import SwitchyardConfig
import SwitchyardCore

/// `lifx:` — LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API and the LAN protocol.
public struct LIFXUpstream: Upstream {
    public init() {}
    public var key: String { LIFXAdapter.id }
    public var secretKeys: Set<String> { ["token"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> LIFXSettings {
        var l = LIFXSettings()
        l.token = s.secret("token")
        l.apiURL = s.cloudURL("api_url", l.apiURL, secret: "the token")
        l.pollInterval = s.double("poll_interval", 30, min: 2, max: 86_400)
        l.defaultTransition = s.double("default_transition", 0.5, min: 0, max: 3600)
        l.minInterval = s.double("min_interval", 0.5, min: 0, max: 60)
        l.groups = s.bool("groups", true)
        l.locations = s.bool("locations", true)
        var seen: [String: String] = [:]
        for (id, name, mark) in s.stringMap("names") {
            if id.count != 12 || !id.allSatisfy(\.isHexDigit) {
                s.problem(mark, key: "names.\(id)", "'\(id)' is not a LIFX light id (12 hex digits, e.g. d073d5014c49)")
            }
            if let p = Naming.problem(withName: name, reservedPrefixes: LIFXAdapter.namespaces) {
                s.problem(mark, key: "names.\(id)", p)
            } else if let other = seen[name] {
                s.problem(mark, key: "names.\(id)", "name '\(name)' is already given to \(other)")
            }
            seen[name] = id
            l.names[id.lowercased()] = name
        }
        let lan = s.section("lan")
        l.lan.enabled = lan.bool("enabled", false)
        for (h, mark) in lan.stringList("hosts") where LIFXLANEndpoint(h) == nil {
            lan.problem(mark, key: "hosts", "'\(h)' is not an IPv4 address with an optional :port")
        }
        l.lan.hosts = lan.stringList("hosts").map(\.0)
        if lan.has("broadcast") {
            for (h, mark) in lan.stringList("broadcast") where LIFXLANEndpoint(h) == nil {
                lan.problem(mark, key: "broadcast", "'\(h)' is not an IPv4 address with an optional :port")
            }
            l.lan.broadcast = lan.stringList("broadcast").map(\.0)
        }
        l.lan.pollInterval = lan.double("poll_interval", 10, min: 1, max: 3600)
        l.lan.offlineAfter = lan.double("offline_after", 90, min: 5, max: 86_400)
        l.lan.localPort = lan.int("local_port", 0, min: 0, max: 65535)
        lan.finish()
        s.finish()
        return l
    }

    public func makeAdapter(_ settings: LIFXSettings) -> any Adapter { LIFXAdapter(settings: settings) }
}
