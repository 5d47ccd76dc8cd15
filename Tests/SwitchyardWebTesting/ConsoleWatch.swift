import SwitchyardCore

/// The console's invariants over a soak run (docs/testing.md "The soak run", 8–10), fed what a probe, a
/// scraper and an open page see every few seconds; each `see` returns the breaches it found, in words.
public struct ConsoleWatch: Sendable {
    public private(set) var ready = 0
    public private(set) var notReadyExplained = 0
    public private(set) var scrapes = 0
    public private(set) var largestFrame = 0
    var last: [String: Double] = [:]
    var pageGone = false
    /// A frame larger than this for the demo's home is a page's queue growing, not its devices.
    public static let frameBound = 1 << 20

    public init() {}

    /// `inWindow(key)`: whether a fault of the schedule is on for that key now (`broker`, an adapter's id,
    /// `reload`).
    public mutating func see(readyz: (Int, String)?, metrics: String?, pageEnded: String?, largestFrame frame: Int,
                             inWindow: (String) -> Bool) -> [String] {
        var out: [String] = []
        switch readyz {
        case (200, _)?:
            ready += 1
        case (let status, let body)?:
            let reasons = (try? JSONValue.parse(body))?["reasons"]?.arrayValue?.compactMap(\.stringValue) ?? ["HTTP \(status) \(body)"]
            let unexplained = reasons.filter { r in
                if r.hasPrefix("broker:") { return !inWindow("broker") }
                let adapter = String(r.prefix { $0 != ":" })
                return !(inWindow(adapter) || inWindow("reload"))
            }
            if unexplained.isEmpty { notReadyExplained += 1 } else {
                out.append("/readyz not ready outside the schedule's faults: \(unexplained.joined(separator: "; "))")
            }
        case nil:
            out.append("/readyz did not answer")
        }
        if let metrics {
            let now = PrometheusText.samples(metrics)
            if now["switchyard_mqtt_connected"] == nil { out.append("/metrics has no switchyard_mqtt_connected") }
            out += PrometheusText.wentBackwards(last, now).map { "/metrics: \($0)" }
            last = now
            scrapes += 1
        } else {
            out.append("/metrics did not answer")
        }
        if let pageEnded, !pageGone {
            pageGone = true
            out.append("the console's open page was disconnected: \(pageEnded)")
        }
        if frame > Self.frameBound, largestFrame <= Self.frameBound { out.append("a frame of \(frame) bytes reached the page") }
        largestFrame = max(largestFrame, frame)
        return out
    }
}
