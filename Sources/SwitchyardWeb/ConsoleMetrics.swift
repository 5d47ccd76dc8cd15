import CoreMetrics
import Prometheus
import SwitchyardCore

/// `/metrics` (docs/console.md lists every series): swift-metrics types made by a Prometheus factory over
/// this console's own registry (no process-wide bootstrap: several bridges can live in one test process).
/// Figures the bridge keeps as totals (the transport's, each adapter's, the bounds) are read at each scrape
/// and added as increments, so that a counter never goes backwards, even when an adapter restarts with its
/// own counts from zero.
final class ConsoleMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()
    let factory: PrometheusMetricsFactory

    struct Totals {
        /// Last total seen per series key, to turn totals into increments.
        var last: [String: Int] = [:]
        var counters: [String: CoreMetrics.Counter] = [:]
        var gauges: [String: CoreMetrics.Gauge] = [:]
        var timers: [String: CoreMetrics.Timer] = [:]
    }
    let totals = Locked(Totals())

    static let statuses = ["starting", "running", "disabled", "error"]

    init() {
        var f = PrometheusMetricsFactory(registry: registry)
        f.durationHistogramBuckets["switchyard_command_duration_seconds"] = [
            .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
            .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
        ]
        factory = f
    }

    static func key(_ name: String, _ labels: [(String, String)]) -> String {
        labels.isEmpty ? name : name + "{" + labels.map { "\($0.0)=\($0.1)" }.joined(separator: ",") + "}"
    }

    /// The metric of this name and labels, made (by the Prometheus factory) the first time it is asked for.
    func cached<M>(_ name: String, _ labels: [(String, String)], _ table: WritableKeyPath<Totals, [String: M]>, _ make: () -> M) -> M {
        let k = Self.key(name, labels)
        return totals.withLock { t in
            if let m = t[keyPath: table][k] { return m }
            let m = make()
            t[keyPath: table][k] = m
            return m
        }
    }

    func counter(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Counter {
        cached(name, labels, \.counters) { CoreMetrics.Counter(label: name, dimensions: labels, factory: factory) }
    }

    func gauge(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Gauge {
        cached(name, labels, \.gauges) { CoreMetrics.Gauge(label: name, dimensions: labels, factory: factory) }
    }

    func timer(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Timer {
        cached(name, labels, \.timers) { CoreMetrics.Timer(label: name, dimensions: labels, preferredDisplayUnit: .seconds, factory: factory) }
    }

    /// Adds what a total grew by since the last scrape; a total smaller than before started again from zero
    /// (an adapter restarted): all of it is new.
    func total(_ name: String, _ labels: [(String, String)] = [], _ value: Int) {
        let k = Self.key(name, labels)
        let step = totals.withLock { t -> Int in
            let before = t.last[k] ?? 0
            t.last[k] = value
            return value >= before ? value - before : value
        }
        let c = counter(name, labels)
        if step > 0 { c.increment(by: Int64(step)) }
    }

    // MARK: events, as they happen

    func commandFinished(adapter: String, ok: Bool, seconds: Double) {
        counter("switchyard_commands_total", [("adapter", adapter), ("result", ok ? "ok" : "error")]).increment()
        timer("switchyard_command_duration_seconds", [("adapter", adapter)]).recordNanoseconds(Int64(max(0, seconds) * 1e9))
    }

    func commandRefused() { counter("switchyard_commands_refused_total").increment() }

    /// A `bridge/log` line, counted by level.
    func logged(_ payload: [UInt8]) {
        let level = (try? JSONValue.parse(payload))?["level"]?.stringValue ?? "unknown"
        counter("switchyard_log_messages_total", [("level", ["info", "warning", "error"].contains(level) ? level : "unknown")]).increment()
    }

    func clientCut(_ reason: String) { counter("switchyard_web_clients_cut_total", [("reason", reason)]).increment() }
    func resynced() { counter("switchyard_web_resyncs_total").increment() }
    func loginFailed() { counter("switchyard_web_login_failures_total").increment() }

    // MARK: read at each scrape

    func update(engine e: EngineSnapshot, transport s: TransportStats, bounds: [String: Int], rss: Int?, clients: Int, retained: Int) {
        gauge("switchyard_build_info", [("version", e.version)]).record(1)
        gauge("switchyard_uptime_seconds").record(e.uptime)
        if let rss { gauge("switchyard_resident_memory_bytes").record(rss) }
        gauge("switchyard_mqtt_connected").record(s.connected ? 1 : 0)
        total("switchyard_mqtt_messages_published_total", [], s.published)
        total("switchyard_mqtt_messages_received_total", [], s.received)
        total("switchyard_mqtt_connects_total", [], s.connects)
        total("switchyard_mqtt_outbox_dropped_total", [], s.dropped)
        total("switchyard_mqtt_inbound_pauses_total", [], s.inboundPauses)
        total("switchyard_mqtt_oversize_total", [], s.oversize)
        gauge("switchyard_mqtt_outbox_messages").record(s.outbox)
        gauge("switchyard_mqtt_outbox_event_bytes").record(s.outboxEventBytes)
        for a in e.adapters {
            let l = [("adapter", a.id)]
            let now: String
            switch a.status {
            case .starting: now = "starting"
            case .running: now = "running"
            case .disabled: now = "disabled"
            case .error: now = "error"
            }
            for st in Self.statuses { gauge("switchyard_adapter_status", l + [("status", st)]).record(st == now ? 1 : 0) }
            gauge("switchyard_adapter_devices", l).record(a.devices)
            gauge("switchyard_adapter_queue_bytes", l).record(a.queuedBytes)
            total("switchyard_upstream_requests_total", l, a.requests)
            total("switchyard_upstream_errors_total", l, a.errors)
        }
        for (bound, n) in bounds { total("switchyard_bounds_hit_total", [("bound", bound)], n) }
        gauge("switchyard_web_clients").record(clients)
        gauge("switchyard_web_retained_topics").record(retained)
    }

    func exposition() -> [UInt8] { registry.emitToBuffer() }
}
