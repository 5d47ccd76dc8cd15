import SwitchyardConfig
import SwitchyardCore

/// `nova:` — Nova Bluetooth LE flashes through the kernel's Bluetooth stack.
public struct NovaUpstream: Upstream {
    /// The radio the adapter uses; nil: the configured kernel adapter (`HCIRadio`). The demo gives a
    /// simulated one.
    let radio: (any NovaRadio)?
    public init(radio: (any NovaRadio)? = nil) { self.radio = radio }
    public var key: String { NovaAdapter.id }
    public var summary: String { "Nova Bluetooth LE flashes through the kernel's Bluetooth stack." }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> NovaAdapterSettings {
        var n = NovaAdapterSettings()
        n.adapter = s.string("adapter", "hci0", doc: "The kernel's Bluetooth adapter (hciconfig -a).")
        if !n.adapter.hasPrefix("hci") || Int(n.adapter.dropFirst(3)) == nil {
            s.problem(at: "adapter", "expected an adapter name like hci0, got '\(n.adapter)'")
        }
        let scan = s.section("scan", doc: "LE scanning.")
        n.scanDuration = scan.double("duration", 0.9, min: 0.02, max: 60, doc: "Seconds of each scan (shorter than period).")
        n.scanPeriod = scan.double("period", 4, min: 0.1, max: 3600, doc: "Seconds from one scan to the next.")
        n.scanIntervalMs = scan.double("interval_ms", 10, min: 2.5, max: 10_240, doc: "The HCI scan interval.")
        n.scanWindowMs = scan.double("window_ms", 10, min: 2.5, max: 10_240, doc: "The HCI scan window (at most interval_ms).")
        if n.scanWindowMs > n.scanIntervalMs {
            scan.problem(at: "window_ms", "the scan window (\(n.scanWindowMs) ms) cannot exceed the interval (\(n.scanIntervalMs) ms)")
        }
        if n.scanDuration >= n.scanPeriod {
            scan.problem(at: "duration", "the scan duration (\(n.scanDuration) s) must be shorter than the period (\(n.scanPeriod) s), or nothing else gets the radio")
        }
        scan.finish()
        let auto = s.section("auto_connect", doc: "Connecting to flashes after each scan, strongest first.")
        n.autoConnect = auto.bool("enabled", true, doc: "Connect by itself.")
        n.maxFlashes = auto.int("max_flashes", 1, min: 0, max: 20, doc: "Flashes connected at once.")
        n.minSignal = auto.int("min_signal", 10, min: 0, max: 100, doc: "Percent; a flash with an unknown signal is not held back.")
        n.whitelist = auto.stringList("whitelist", doc: "Addresses connected to; empty: any.").compactMap { address(auto, "whitelist", $0.0, $0.1) }
        n.blacklist = auto.stringList("blacklist", doc: "Addresses never connected to.").compactMap { address(auto, "blacklist", $0.0, $0.1) }
        auto.record("whitelist", .array(n.whitelist.map(JSONValue.string)))
        auto.record("blacklist", .array(n.blacklist.map(JSONValue.string)))
        auto.finish()
        n.defaultTimeoutMs = s.int("default_timeout_ms", 10_000, min: 1, max: 65_535, doc: "A flash's auto-off when a command gives no timeout_ms.")
        n.connectTimeout = s.double("connect_timeout", 10, min: 1, max: 120, doc: "Seconds for one LE connection attempt.")
        n.allowLowPWM = s.bool("allow_low_pwm", false, doc: "false: warm/cool 1-64 are raised to 64 (the protocol forbids holding them).")
        var seen: [String: String] = [:]
        for (raw, name, mark) in s.stringMap("names", doc: "Address -> name; default nova_<address without colons>.") {
            guard let a = address(s, "names.\(raw)", raw, mark) else { continue }
            if let p = Naming.problem(withName: name) {
                s.problem(mark, key: "names.\(raw)", p)
            } else if let other = seen[name] {
                s.problem(mark, key: "names.\(raw)", "name '\(name)' is already given to \(other)")
            }
            seen[name] = a
            n.names[a] = name
        }
        s.finish()
        return n
    }

    /// `AA:BB:CC:DD:EE:FF` (either case), returned upper case.
    func address(_ s: ConfigSection, _ key: String, _ value: String, _ mark: YAMLMark?) -> String? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else {
            s.problem(mark, key: key, "'\(value)' is not a Bluetooth address (six hex pairs, e.g. D0:39:72:AA:BB:CC)")
            return nil
        }
        return value.uppercased()
    }

    public func makeAdapter(_ settings: NovaAdapterSettings) -> any Adapter {
        NovaAdapter(settings: settings, radio: radio ?? HCIRadio(adapter: settings.adapter))
    }
}
