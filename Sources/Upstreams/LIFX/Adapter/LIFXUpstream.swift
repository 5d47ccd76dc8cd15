import SwitchyardConfig
import SwitchyardCore

/// `lifx:` — LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API.
public struct LIFXUpstream: Upstream {
    public init() {}
    public var key: String { "lifx" }
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
        s.finish()
        return l
    }

    public func makeAdapter(_ settings: LIFXSettings) -> any Adapter { LIFXAdapter(settings: settings) }
}
