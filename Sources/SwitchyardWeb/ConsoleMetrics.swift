import Prometheus
import SwitchyardCore

/// `/metrics` (docs/console.md lists every series): swift-prometheus's collectors on this console's own
/// registry (no process-wide bootstrap: several bridges can live in one test process), each family made
/// with its `# HELP` text (`help`), so that `promtool check metrics` finds nothing to say. Figures the
/// bridge keeps as totals (the transport's, each adapter's, the bounds; each only grows) are read at
/// each scrape and added as increments.
final class ConsoleMetrics: Sendable {
    let registry = PrometheusCollectorRegistry()

    struct Totals {
        /// Last total seen per series key, to turn totals into increments.
        var last: [String: Int] = [:]
        var counters: [String: Counter] = [:]
        var gauges: [String: Gauge] = [:]
        var histograms: [String: DurationHistogram] = [:]
    }
    let totals = Locked(Totals())

    /// Every family's `# HELP` text: what docs/console.md's table says of it. A family missing here is a
    /// programming error (it would be exposed without one).
    static let help: [String: String] = [
        "switchyard_build_info": "The bridge's version, as a label; always 1.",
        "switchyard_uptime_seconds": "Seconds since the bridge's engine started.",
        "switchyard_resident_memory_bytes": "Resident memory of the bridge's process (VmRSS).",
        "switchyard_mqtt_connected": "1 while the bridge is connected to its MQTT broker, else 0.",
        "switchyard_mqtt_connects_total": "Successful connections to the broker (reconnects are this minus 1).",
        "switchyard_mqtt_messages_published_total": "Messages the broker acknowledged.",
        "switchyard_mqtt_messages_received_total": "Messages received from the broker.",
        "switchyard_mqtt_outbox_messages": "Messages waiting for the broker's acknowledgement.",
        "switchyard_mqtt_outbox_event_bytes": "Non-retained payload bytes in the outbox.",
        "switchyard_mqtt_outbox_dropped_total": "Non-retained messages dropped at the outbox's bound.",
        "switchyard_mqtt_inbound_pauses_total": "Times reading from the broker stopped at the mqtt.inbound bounds.",
        "switchyard_mqtt_oversize_total": "Payloads over mqtt.max_payload, refused.",
        "switchyard_adapter_status": "1 for the adapter's status now (starting, running, disabled, error), 0 for the others.",
        "switchyard_adapter_devices": "Devices the adapter lists.",
        "switchyard_adapter_queue_bytes": "Bytes of commands waiting in the adapter's queue.",
        "switchyard_upstream_requests_total": "Requests the adapter made to its upstream (HTTP, LAN, BLE).",
        "switchyard_upstream_errors_total": "Requests to the adapter's upstream that failed.",
        "switchyard_commands_total": "Commands that reached an adapter, by their outcome.",
        "switchyard_commands_refused_total": "Commands refused before an adapter (validation, unknown device, too old).",
        "switchyard_command_duration_seconds": "Seconds from a command's routing to its answer (queue and upstream).",
        "switchyard_bounds_hit_total": "Times each bound of the bridge and its console was hit.",
        "switchyard_log_messages_total": "Lines published on bridge/log, by level.",
        "switchyard_web_clients": "Console pages open.",
        "switchyard_web_clients_cut_total": "Console pages cut off (slow: not taking their frames; replies: answers waiting past their bound).",
        "switchyard_web_resyncs_total": "Console pages sent everything again after falling behind.",
        "switchyard_web_login_failures_total": "Wrong tokens given at the console's login form.",
        "switchyard_standby_role": "Under hot standby: 1 for this instance's role now (standby, active), 0 for the other.",
        "switchyard_standby_takeovers_total": "Under hot standby: times this instance took the bridge over.",
        "switchyard_standby_instances": "Under hot standby: instances of the group this one knows of, by their role.",
        "switchyard_web_retained_topics": "Retained topics under the base topic in the transport's ledger, discovery configs left out.",
    ]

    static let commandBuckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
    ]

    init() {}

    static func key(_ name: String, _ labels: [(String, String)]) -> String {
        labels.isEmpty ? name : name + "{" + labels.map { "\($0.0)=\($0.1)" }.joined(separator: ",") + "}"
    }

    /// The family's name and `# HELP` text (the whole name as the descriptor's metric name, no unit added).
    static func descriptor(_ name: String) -> MetricNameDescriptor {
        guard let h = help[name] else { preconditionFailure("no HELP text for \(name)") }
        return MetricNameDescriptor(metricName: name, unitName: "", helpText: h)
    }

    /// The collector of this name and labels, made (by the registry) the first time it is asked for.
    func cached<M>(_ name: String, _ labels: [(String, String)], _ table: WritableKeyPath<Totals, [String: M]>, _ make: () -> M) -> M {
        let k = Self.key(name, labels)
        return totals.withLock { t in
            if let m = t[keyPath: table][k] { return m }
            let m = make()
            t[keyPath: table][k] = m
            return m
        }
    }

    func counter(_ name: String, _ labels: [(String, String)] = []) -> Counter {
        cached(name, labels, \.counters) { registry.makeCounter(descriptor: Self.descriptor(name), labels: labels) }
    }

    func gauge(_ name: String, _ labels: [(String, String)] = []) -> Gauge {
        cached(name, labels, \.gauges) { registry.makeGauge(descriptor: Self.descriptor(name), labels: labels) }
    }

    func histogram(_ name: String, _ labels: [(String, String)] = []) -> DurationHistogram {
        cached(name, labels, \.histograms) {
            registry.makeDurationHistogram(descriptor: Self.descriptor(name), labels: labels, buckets: Self.commandBuckets)
        }
    }

    /// Adds what a total grew by since the last scrape. The engine's totals only grow (an adapter's are
    /// carried across its restarts): one that did not grow adds nothing.
    func total(_ name: String, _ labels: [(String, String)] = [], _ value: Int) {
        let k = Self.key(name, labels)
        let step = totals.withLock { t -> Int in
            let before = t.last[k] ?? 0
            t.last[k] = max(before, value)
            return max(0, value - before)
        }
        let c = counter(name, labels)
        if step > 0 { c.increment(by: Int64(step)) }
    }

    // MARK: events, as they happen

    func commandFinished(adapter: String, ok: Bool, seconds: Double) {
        counter("switchyard_commands_total", [("adapter", adapter), ("result", ok ? "ok" : "error")]).increment()
        histogram("switchyard_command_duration_seconds", [("adapter", adapter)]).recordNanoseconds(Int64(max(0, seconds) * 1e9))
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
        gauge("switchyard_build_info", [("version", e.version)]).set(1.0)
        gauge("switchyard_uptime_seconds").set(Double(e.uptime))
        if let rss { gauge("switchyard_resident_memory_bytes").set(Double(rss)) }
        gauge("switchyard_mqtt_connected").set(s.connected ? 1.0 : 0.0)
        total("switchyard_mqtt_messages_published_total", [], s.published)
        total("switchyard_mqtt_messages_received_total", [], s.received)
        total("switchyard_mqtt_connects_total", [], s.connects)
        total("switchyard_mqtt_outbox_dropped_total", [], s.dropped)
        total("switchyard_mqtt_inbound_pauses_total", [], s.inboundPauses)
        total("switchyard_mqtt_oversize_total", [], s.oversize)
        gauge("switchyard_mqtt_outbox_messages").set(Double(s.outbox))
        gauge("switchyard_mqtt_outbox_event_bytes").set(Double(s.outboxEventBytes))
        for a in e.adapters {
            let l = [("adapter", a.id)]
            for st in AdapterStatus.kinds { gauge("switchyard_adapter_status", l + [("status", st)]).set(st == a.status.kind ? 1.0 : 0.0) }
            gauge("switchyard_adapter_devices", l).set(Double(a.devices))
            gauge("switchyard_adapter_queue_bytes", l).set(Double(a.queuedBytes))
            total("switchyard_upstream_requests_total", l, a.requests)
            total("switchyard_upstream_errors_total", l, a.errors)
        }
        if let sb = e.standby {
            for role in ["standby", "active"] { gauge("switchyard_standby_role", [("name", sb.instance), ("role", role)]).set(sb.role == role ? 1.0 : 0.0) }
            total("switchyard_standby_takeovers_total", [("name", sb.instance)], sb.takeovers)
            for role in ["standby", "active", "offline"] {
                gauge("switchyard_standby_instances", [("role", role)]).set(Double(sb.group.values.filter { $0 == role }.count))
            }
        }
        for (bound, n) in bounds { total("switchyard_bounds_hit_total", [("bound", bound)], n) }
        gauge("switchyard_web_clients").set(Double(clients))
        gauge("switchyard_web_retained_topics").set(Double(retained))
    }

    func exposition() -> [UInt8] { registry.emitToBuffer() }
}
