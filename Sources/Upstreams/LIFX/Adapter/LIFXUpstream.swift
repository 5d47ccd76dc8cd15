import SwitchyardConfig
import SwitchyardCore

/// `lifx:` — LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API and the LAN protocol.
public struct LIFXUpstream: Upstream {
    public init() {}
    public var key: String { LIFXAdapter.id }
    public var summary: String { "LIFX lights, groups, locations and scenes over the LIFX cloud API and the LAN protocol." }
    public var secretKeys: Set<String> { ["token"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> LIFXSettings {
        var l = LIFXSettings()
        l.token = s.secret("token", doc: "The LIFX cloud token (https://cloud.lifx.com/settings); without one only the LAN is used.")
        l.apiURL = s.cloudURL("api_url", l.apiURL, secret: "the token", doc: "The LIFX HTTP API; https only (http:// for a loopback simulator).")
        l.pollInterval = s.double("poll_interval", 30, min: 2, max: 86_400, doc: "Seconds between cloud listings (each costs 1 of 120 requests a minute).")
        l.defaultTransition = s.double("default_transition", 0.5, min: 0, max: 3600, doc: "Seconds, when a command gives no transition.")
        l.minInterval = s.double("min_interval", 0.5, min: 0, max: 60, doc: "Seconds; commands arriving this soon after a send merge into the next request.")
        l.groups = s.bool("groups", true, doc: "Publish groups as switchyard/lifx/group/<name>.")
        l.locations = s.bool("locations", true, doc: "Publish locations as switchyard/lifx/location/<name>.")
        var seen: [String: String] = [:]
        for (id, name, mark) in s.stringMap("names", doc: "Light id (12 hex digits) -> name (topic); default a slug of the LIFX label.") {
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
        let lan = s.section("lan", doc: "The LAN protocol: lights found there are commanded there.")
        l.lan.enabled = lan.bool("enabled", false, doc: "Discover and control lights on the local network.")
        for (h, mark) in lan.stringList("hosts", doc: "Unicast discovery targets besides broadcast: IPv4[:port].") where LIFXLANEndpoint(h) == nil {
            lan.problem(mark, key: "hosts", "'\(h)' is not an IPv4 address with an optional :port")
        }
        l.lan.hosts = lan.stringList("hosts").map(\.0)
        if lan.has("broadcast") {
            for (h, mark) in lan.stringList("broadcast", doc: "Broadcast addresses (IPv4[:port]); unset: every up interface's; [] none.") where LIFXLANEndpoint(h) == nil {
                lan.problem(mark, key: "broadcast", "'\(h)' is not an IPv4 address with an optional :port")
            }
            l.lan.broadcast = lan.stringList("broadcast").map(\.0)
        }
        l.lan.pollInterval = lan.double("poll_interval", 10, min: 1, max: 3600, doc: "Seconds between state reads of each LAN light.")
        l.lan.offlineAfter = lan.double("offline_after", 90, min: 5, max: 86_400, doc: "Seconds without an answer before a light is unavailable.")
        l.lan.localPort = lan.int("local_port", 0, min: 0, max: 65535, doc: "Our UDP port (0: any; fix one when a firewall must let replies in).")
        lan.finish()
        s.finish()
        return l
    }

    public func makeAdapter(_ settings: LIFXSettings) -> any Adapter { LIFXAdapter(settings: settings) }
}
