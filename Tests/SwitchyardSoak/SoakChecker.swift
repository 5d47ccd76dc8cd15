import Foundation
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// What the soak's subscriber to `#` sees, judged as it arrives (the invariants of docs/testing.md).
actor SoakChecker {
    let base: String
    let started: Date
    let say: @Sendable (String) -> Void
    var breaches: [SoakReport.Breach] = []
    var discovery = DiscoveryReadWatch()
    var ledger = TransactionLedger()
    var outcomes = LIFXOutcomeWatch()
    /// A fault's window per key (an adapter id, or "broker"): errors about that key inside it were provoked.
    var windows: [String: [(from: Double, until: Double?)]] = [:]
    var brokerDown = false
    /// Devices (`adapter/name`) whose removal the schedule caused.
    var removable: Set<String> = []
    var availability: [String: String] = [:]
    var states: Set<String> = []
    var later: [(rel: String, payload: String, by: Double, because: String)] = []
    var samples: [(t: Double, threads: Double, fds: Double, rss: Double)] = []
    var counts = (messages: 0, errorsProvoked: 0, removals: 0, lostWithBroker: 0, resultsError: 0, partial: 0)
    var console = ConsoleWatch()
    var management = ManagementWatch()
    /// `label` of each device's details (`bridge/devices/<adapter>/<name>`), by `adapter/name`.
    var labels: [String: String] = [:]
    /// Device topics whose retained state was cleared (an empty payload), by `adapter/name`.
    var cleared: Set<String> = []
    /// Responses to the schedule's management requests, by their transaction (`m…`).
    var responses: [String: String] = [:]

    /// The demo's groups and scene: their states against their members', their results' failed members.
    var groups = GroupWatch(groups: SoakRun.groups)

    init(base: String, started: Date, say: @escaping @Sendable (String) -> Void) {
        self.base = base
        self.started = started
        self.say = say
    }

    var now: Double { Date().timeIntervalSince(started) }

    func breach(_ what: String) {
        let b = SoakReport.Breach(at: now, what: what)
        breaches.append(b)
        say("BREACH \(b)")
    }

    func event(_ what: String) { say(String(format: "%7.1f s  ", now) + what) }

    func hasState(_ rel: String) -> Bool { states.contains(rel) }

    func see(_ m: MQTTProbe.Message) {
        counts.messages += 1
        let payload = Array(m.payload.utf8)
        if let b = discovery.see(topic: m.topic, payload: payload, retain: m.retain) { breach(b) }
        guard m.topic.hasPrefix(base + "/") else { return }
        let rel = String(m.topic.dropFirst(base.count + 1))
        // Not judged around a broker restart: the retained topics come back in the order the broker gives them.
        if let b = groups.see(rel: rel, payload: payload, at: now), !inBrokerWindow(now) { breach(b) }
        if rel.hasSuffix("/result") {
            if let b = ledger.result(payload, redeliveryPossible: inBrokerWindow(now)) { breach(b) }
            if m.payload.contains(#""status":"error""#) { counts.resultsError += 1 }
            let (failed, b) = groups.failed(group: String(rel.dropLast("/result".count)), result: payload)
            if let b { breach(b) }
            if !failed.isEmpty { counts.partial += 1 }
            for member in failed where !provoked(member, at: now) {
                breach("\(rel): \(member) failed with no fault of its upstream under way: \(m.payload)")
            }
        } else if rel.hasSuffix("/availability") {
            availability[String(rel.dropLast("/availability".count))] = m.payload
        } else if rel == "bridge/log" {
            log(payload)
        } else if rel == "bridge/health" {
            if let b = outcomes.health(payload) { breach(b) }
        } else if rel == "bridge/event" {
            if let b = management.event(payload) { breach(b) }
            guard let j = try? JSONValue.parse(payload), j["type"] == "device_removed",
                  case .string(let adapter)? = j["data"]?["adapter"], case .string(let name)? = j["data"]?["name"] else { return }
            counts.removals += 1
            if !removable.contains("\(adapter)/\(name)") {
                breach("\(adapter)/\(name) removed although its upstream still lists it (\(j["data"]?["reason"]?.stringValue ?? ""))")
            }
        } else if rel.hasPrefix("bridge/response/") {
            if let j = try? JSONValue.parse(payload), case .string(let t)? = j["transaction"], t.hasPrefix("m") { responses[t] = m.payload }
        } else if rel.hasPrefix("bridge/devices/") {
            let device = String(rel.dropFirst("bridge/devices/".count))
            labels[device] = (try? JSONValue.parse(payload))?["label"]?.stringValue
        } else if !m.payload.isEmpty, !rel.hasPrefix("bridge/") {
            states.insert(rel)
            cleared.remove(rel)
        } else if m.payload.isEmpty, !rel.hasPrefix("bridge/"), m.retain || states.contains(rel) {
            states.remove(rel)
            cleared.insert(rel)
        }
    }

    /// An error on bridge/log is a breach unless a fault of the schedule provoked it: one about the
    /// adapter (its topic or its "adapter:" prefix) inside that adapter's fault window, anything inside the
    /// broker's, and the refusal of the deliberate unknown device.
    func log(_ payload: [UInt8]) {
        guard let j = try? JSONValue.parse(payload) else { return }
        let message = j["message"]?.stringValue ?? ""
        // One thing under two names (a LIFX location seen by both transports under two ids was).
        if message.contains("clashes with another device") { breach("published under a second name: \(message)") }
        guard j["level"] == "error" else { return }
        if message.contains("unknown device 'nosuch'") { return }
        // A group's or scene's members that failed: provoked when each one's upstream is in a fault.
        if let failed = GroupWatch.failedInLog(message) {
            if !failed.isEmpty, failed.allSatisfy({ provoked($0, at: now) }) {
                counts.errorsProvoked += 1
                return
            }
            return breach("unprovoked error on bridge/log: \(message)")
        }
        var keys = ["broker"]
        if case .string(let topic)? = j["topic"], topic.hasPrefix(base + "/") {
            keys.append(String(topic.dropFirst(base.count + 1).prefix { $0 != "/" }))
        }
        if let colon = message.firstIndex(of: ":") { keys.append(String(message[..<colon])) }
        let t = now
        for k in keys where (windows[k] ?? []).contains(where: { t >= $0.from && t <= ($0.until ?? .infinity) }) {
            counts.errorsProvoked += 1
            return
        }
        breach("unprovoked error on bridge/log: \(message) \(j["topic"]?.stringValue ?? "")")
    }

    // MARK: management

    func expectRename(adapter: String, from: String, to: String) { management.expectRename(adapter: adapter, from: from, to: to) }
    func expectChange() { management.expectChange() }
    func watching(_ devices: Set<String>) { management.watched = devices }
    func label(_ device: String) -> String? { labels[device] }
    func isCleared(_ rel: String) -> Bool { cleared.contains(rel) }
    func response(_ transaction: String) -> String? { responses[transaction] }
    /// Renames asked for that never showed (checked at the end).
    /// At the end: a group still disagreeing with its members past the window.
    func checkGroups() { while let b = groups.due(at: now) { breach(b) } }
    func checkManagement() { for r in management.unmet { breach("a rename asked for never showed on bridge/event: \(r)") } }

    /// Whether a device's failure (`adapter/name`) at `t` is one the schedule gives: its adapter's fault, a
    /// reload (which restarts every adapter) or a broker restart.
    func provoked(_ device: String, at t: Double) -> Bool {
        let adapter = String(device.prefix { $0 != "/" })
        return [adapter, "reload", "broker"].contains { k in (windows[k] ?? []).contains { t >= $0.from && t <= ($0.until ?? .infinity) } }
    }

    func faultBegins(_ key: String, _ what: String) {
        windows[key, default: []].append((now, nil))
        if key == "broker" { brokerDown = true }
        if !what.isEmpty { event(what) }
    }

    func faultEnds(_ key: String, grace: Double) {
        guard var w = windows[key], let last = w.popLast() else { return }
        w.append((last.from, now + grace))
        windows[key] = w
        if key == "broker" { brokerDown = false }
    }

    /// The broker lost every retained message: the discovery configs standing are those it is given again.
    func brokerRestarted() {
        discovery = DiscoveryReadWatch()
        groups.forgetPending()
    }

    func expectRemoval(of device: String, allowed: Bool) {
        if allowed { removable.insert(device) } else { removable.remove(device) }
    }

    func expectAvailability(_ rel: String, _ payload: String, because: String) {
        if availability[rel] != payload { breach("\(rel) is \(availability[rel] ?? "unknown"), not \(payload), though \(because)") }
    }

    func expectAvailabilityLater(_ rel: String, _ payload: String, within: Double, because: String) {
        later.append((rel, payload, now + within, because))
    }

    /// Expectations whose time has come: met by then, or breached.
    func checkAvailabilityExpectations(final: Bool = false) {
        var keep: [(rel: String, payload: String, by: Double, because: String)] = []
        for e in later {
            if availability[e.rel] == e.payload { continue }
            if now >= e.by || final { breach("\(e.rel) still \(availability[e.rel] ?? "unknown"), not \(e.payload), though \(e.because)") } else { keep.append(e) }
        }
        later = keep
    }

    func sent(_ transaction: String, topic: String) {
        ledger.sent(transaction, topic: topic, at: now)
        checkAvailabilityExpectations()
        checkOverdue(olderThan: 60)
    }

    var openCommands: Int { ledger.open.count }

    /// Whether `t` is inside a broker restart's window (the restart and its grace after).
    func inBrokerWindow(_ t: Double) -> Bool {
        (windows["broker"] ?? []).contains { t >= $0.from && t <= ($0.until ?? .infinity) }
    }

    /// Unanswered commands: a breach, unless sent around a broker restart (a subscriber offline misses
    /// what is published meanwhile; counted apart).
    func checkOverdue(olderThan: Double) {
        let t = now
        let late = ledger.open.filter { t - $0.value.at > olderThan }
        guard !late.isEmpty else { return }
        for line in ledger.overdue(now: t, olderThan: olderThan) {
            guard let tr = line.split(separator: " ").dropFirst().first.map(String.init), let sent = late[tr] else { continue }
            let nearBroker = (windows["broker"] ?? []).contains { sent.at >= $0.from - 10 && sent.at <= ($0.until ?? .infinity) }
            if nearBroker { counts.lostWithBroker += 1 } else { breach(line) }
        }
    }

    /// The console's invariants (docs/testing.md 9–11): not ready only for a reason the schedule gives (the
    /// broker in its window; an adapter in its fault window or a reload's), `/metrics` readable and no counter
    /// going backwards, the page's WebSocket open all along and its frames bounded.
    func console(readyz: (Int, String)?, metrics: String?, pageEnded: String?, largestFrame: Int) {
        let t = now
        let inWindow = { (key: String) in (self.windows[key] ?? []).contains { t >= $0.from && t <= ($0.until ?? .infinity) } }
        for b in console.see(readyz: readyz, metrics: metrics, pageEnded: pageEnded, largestFrame: largestFrame, inWindow: inWindow) { breach(b) }
    }

    func sample(threads: Double, fds: Double, rssMB: Double) { samples.append((now, threads, fds, rssMB)) }

    /// The breaches, the resource slopes over the run's second half (a breach past the tolerance), and
    /// the figures.
    func report() -> SoakReport {
        var r = SoakReport()
        if let last = samples.last?.t {
            let half = samples.filter { $0.t >= last / 2 }
            let span = max(1, (half.last?.t ?? 0) - (half.first?.t ?? 0))
            let checks: [(String, KeyPath<(t: Double, threads: Double, fds: Double, rss: Double), Double>, Double, String)] = [
                ("threads", \.threads, 3, ""), ("open files", \.fds, 4, ""), ("VmRSS", \.rss, 4, "MB"),
            ]
            for (name, key, tolerance, unit) in checks {
                let s = slope(half.map { (x: $0.t, y: $0[keyPath: key]) })
                let growth = s * span
                r.figures.append(.init(name: "\(name): first / last sample", value: samples.first![keyPath: key], unit: unit))
                r.figures.append(.init(name: "\(name): last sample", value: samples.last![keyPath: key], unit: unit))
                r.figures.append(.init(name: "\(name): growth over the second half (slope × \(Int(span)) s)", value: growth, unit: unit))
                // Under AddressSanitizer freed memory waits in its quarantine (256 MB), so resident memory
                // grows by design: reported, not judged.
                let judged = !(name == "VmRSS" && ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil)
                if judged, growth > tolerance {
                    breaches.append(.init(at: last, what: "\(name) grew by \(String(format: "%.2f", growth)) \(unit) over the second half (tolerance \(tolerance))"))
                }
            }
        }
        r.breaches = breaches
        r.figures += [
            .init(name: "messages seen by the checker", value: Double(counts.messages), unit: ""),
            .init(name: "commands answered (exactly once each)", value: Double(ledger.answered), unit: ""),
            .init(name: "  of which ok", value: Double(ledger.ok), unit: ""),
            .init(name: "commands sent around a broker restart, result not seen", value: Double(counts.lostWithBroker), unit: ""),
            .init(name: "results delivered again after a broker restart (QoS 1)", value: Double(ledger.redelivered), unit: ""),
            .init(name: "errors on bridge/log provoked by the schedule", value: Double(counts.errorsProvoked), unit: ""),
            .init(name: "group and scene results partial, each failure in a fault window", value: Double(counts.partial), unit: ""),
            .init(name: "group states compared with their members'", value: Double(groups.checked), unit: ""),
            .init(name: "  of which agreed only after a member's newer state", value: Double(groups.converged), unit: ""),
            .init(name: "devices removed (all by a reload that dropped them)", value: Double(counts.removals), unit: ""),
            .init(name: "LIFX outcomes not taken, highest in bridge/health", value: Double(outcomes.highest), unit: ""),
            .init(name: "console: /readyz ready / not ready (explained) samples", value: Double(console.ready), unit: ""),
            .init(name: "console: /readyz not ready, explained by the schedule", value: Double(console.notReadyExplained), unit: ""),
            .init(name: "console: /metrics scrapes compared", value: Double(console.scrapes), unit: ""),
            .init(name: "console: the page's largest frame", value: Double(console.largestFrame), unit: "bytes"),
        ]
        return r
    }
}
