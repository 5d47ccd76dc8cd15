import SwitchyardCore

/// The console's invariants over a soak run (docs/testing.md "The soak run", 9–11), fed what a probe, a
/// scraper and an open page see every few seconds; each `see` returns the breaches it found, in words.
/// Under hot standby one watch follows one instance's process: `/readyz` is ready on the active instance only.
public struct ConsoleWatch: Sendable {
    public private(set) var ready = 0
    public private(set) var notReadyExplained = 0
    /// Not ready on an instance standing by, as it should be.
    public private(set) var notReadyStandby = 0
    /// Probes a stopped process (killed, paused) did not answer.
    public private(set) var unreachable = 0
    public private(set) var scrapes = 0
    public private(set) var largestFrame = 0
    var last: [String: Double] = [:]
    var pageGone = false
    /// A frame larger than this for the demo's home is a page's queue growing, not its devices.
    public static let frameBound = 1 << 20

    public init() {}

    /// `inWindow(key)`: whether a fault of the schedule is on for that key now (`broker`, an adapter's id,
    /// `reload`; under hot standby `takeover`, while who is active changes, and `down`, while this process is
    /// stopped). `standby`: nil without hot standby, else whether this instance is not the active one.
    public mutating func see(readyz: (Int, String)?, metrics: String?, pageEnded: String?, largestFrame frame: Int,
                             standby: Bool? = nil, inWindow: (String) -> Bool) -> [String] {
        var out: [String] = []
        switch readyz {
        case (200, _)?:
            if standby == true && !inWindow("takeover") {
                out.append("/readyz ready on an instance that is not the active one")
            } else {
                ready += 1
            }
        case (let status, let body)?:
            let reasons = (try? JSONValue.parse(body))?["reasons"]?.arrayValue?.compactMap(\.stringValue) ?? ["HTTP \(status) \(body)"]
            // A process the schedule stopped (a pause) comes back without its connection: anything it says
            // until it has stood by again is its own recovery.
            let unexplained = inWindow("down") ? [] : reasons.filter { r in
                if r.hasPrefix("standby:") { return standby != true && !inWindow("takeover") }
                if r.hasPrefix("broker:") { return !inWindow("broker") }
                let adapter = String(r.prefix { $0 != ":" })
                return !(inWindow(adapter) || inWindow("reload"))
            }
            if !unexplained.isEmpty {
                out.append("/readyz not ready outside the schedule's faults: \(unexplained.joined(separator: "; "))")
            } else if standby == true && reasons.allSatisfy({ $0.hasPrefix("standby:") }) {
                notReadyStandby += 1
            } else {
                notReadyExplained += 1
            }
        case nil:
            if inWindow("down") { unreachable += 1 } else { out.append("/readyz did not answer") }
        }
        if metrics == nil, inWindow("down") {
            // Not answered by a stopped process: nothing to compare.
        } else if let metrics {
            let now = PrometheusText.samples(metrics)
            if now["switchyard_mqtt_connected"] == nil { out.append("/metrics has no switchyard_mqtt_connected") }
            out += PrometheusText.wentBackwards(last, now).map { "/metrics: \($0)" }
            last = now
            scrapes += 1
        } else {
            out.append("/metrics did not answer")
        }
        // A page of a process the schedule stopped may end (and is opened again); any other, once.
        if let pageEnded, !pageGone, !inWindow("down") {
            pageGone = true
            out.append("the console's open page was disconnected: \(pageEnded)")
        }
        if frame > Self.frameBound, largestFrame <= Self.frameBound { out.append("a frame of \(frame) bytes reached the page") }
        largestFrame = max(largestFrame, frame)
        return out
    }
}
