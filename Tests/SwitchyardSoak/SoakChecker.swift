import Foundation
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// What the soak's subscriber to `#` sees, judged as it arrives (the invariants of docs/testing.md).
actor SoakChecker {
    let base: String
    /// The base topic of the bridge that serves the Nova flashes beside the standby group.
    let novaBase: String
    let started: Date
    let say: @Sendable (String) -> Void
    var breaches: [SoakReport.Breach] = []
    var discovery = DiscoveryReadWatch()
    var ledger = TransactionLedger()
    var outcomes = LIFXOutcomeWatch()
    /// A fault's window per key (an adapter id, or "broker"): errors about that key inside it were provoked.
    var windows: [String: [(from: Double, until: Double?)]] = [:]
    var brokerDown = false
    /// When the broker was started again after each restart.
    var brokerUp: [Double] = []
    /// Devices (`adapter/name`) whose removal the schedule caused.
    var removable: Set<String> = []
    var availability: [String: String] = [:]
    var states: Set<String> = []
    var later: [(rel: String, payload: String, by: Double, because: String)] = []
    /// Resource samples by process (`east#2`: the instance's second process; `nova`), each with the role its
    /// instance had and the number of that process's phase (a change of role starts a new one).
    var samples: [String: [(t: Double, role: String, phase: Int, threads: Double, fds: Double, rss: Double)]] = [:]
    var counts = (messages: 0, errorsProvoked: 0, removals: 0, lostWithBroker: 0, resultsError: 0, partial: 0)
    /// The console of each instance's process (`east#2`), judged apart: a process started again is a new one.
    var consoles: [String: ConsoleWatch] = [:]
    /// Hot standby: takeovers and claims (`TakeoverWatch`), the upstreams' requests by instance.
    var takeovers = TakeoverWatch()
    var upstream = UpstreamInstanceWatch()
    var management = ManagementWatch()
    /// `label` of each device's details (`bridge/devices/<adapter>/<name>`), by `adapter/name`.
    var labels: [String: String] = [:]
    /// Device topics whose retained state was cleared (an empty payload), by `adapter/name`.
    var cleared: Set<String> = []
    /// Responses to the schedule's management requests, by their transaction (`m…`).
    var responses: [String: String] = [:]

    /// The demo's groups and scene: their states against their members', their results' failed members.
    var groups = GroupWatch(groups: SoakRun.groups)

    init(base: String, novaBase: String, started: Date, say: @escaping @Sendable (String) -> Void) {
        self.base = base
        self.novaBase = novaBase
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
        let rel: String
        if m.topic.hasPrefix(base + "/") {
            rel = String(m.topic.dropFirst(base.count + 1))
            if rel.hasPrefix("bridge/instances/") { return instance(rel, m) }
            if rel == "bridge/event" { takeoverEvent(m) }
        } else if m.topic.hasPrefix(novaBase + "/") {
            rel = String(m.topic.dropFirst(novaBase.count + 1))
        } else {
            return
        }
        // Not judged around a broker restart: the retained topics come back in the order the broker gives them.
        if let b = groups.see(rel: rel, payload: payload, at: now), !inBrokerWindow(now) { breach(b) }
        if rel.hasSuffix("/result") {
            if let b = ledger.result(payload, at: now, redeliveryPossible: inBrokerWindow(now)) { breach(b) }
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
            let listing = takeovers.takeovers.last.map { now - $0.at <= SoakRun.settle } ?? false
            if let b = management.event(payload, firstListing: listing) { breach(b) }
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
        if case .string(let topic)? = j["topic"], let b = [base, novaBase].first(where: { topic.hasPrefix($0 + "/") }) {
            keys.append(String(topic.dropFirst(b.count + 1).prefix { $0 != "/" }))
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
        brokerUp.append(now)
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

    /// The latest time an availability expectation is due by (the run's end waits for it).
    var lastExpectationDue: Double? { later.map(\.by).max() }

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

    /// Whether a fault of the schedule is on for `key` now (its window, grace included).
    func inWindow(_ key: String) -> Bool {
        let t = now
        return (windows[key] ?? []).contains { t >= $0.from && t <= ($0.until ?? .infinity) }
    }

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

    /// The console's invariants (docs/testing.md 9–11) for one instance's process (`process`: `east#2`): not
    /// ready only for a reason the schedule gives (the broker in its window; an adapter in its fault window
    /// or a reload's; on the instance the group does not have active, standing by), `/metrics` readable and no
    /// counter going backwards, the page's WebSocket open all along and its frames bounded; a process the
    /// schedule stopped (killed, paused, being started again) may not answer, and its page may end.
    func console(instance name: String, process: String, readyz: (Int, String)?, metrics: String?, pageEnded: String?, largestFrame: Int) {
        let t = now
        let within = { (key: String) in (self.windows[key] ?? []).contains { t >= $0.from && t <= ($0.until ?? .infinity) } }
        let inWindow = { (key: String) -> Bool in
            switch key {
            case "down": within("down:" + name)
            // Who is active changes with a takeover the schedule caused, and when a broker restart has the
            // group pick one again.
            case "takeover": within("takeover") || within("broker")
            default: within(key)
            }
        }
        var watch = consoles[process] ?? ConsoleWatch()
        for b in watch.see(readyz: readyz, metrics: metrics, pageEnded: pageEnded, largestFrame: largestFrame,
                           standby: takeovers.active != name, inWindow: inWindow) {
            breach("\(process): \(b)")
        }
        consoles[process] = watch
    }

    /// A process's threads, open files and resident memory; `process` `east#2` is sampled with its instance's
    /// role now (judged per role: a standby runs no adapter).
    func sample(process: String, instance: String?, threads: Double, fds: Double, rssMB: Double) {
        let role = instance.map { takeovers.claims[$0] ?? "unknown" } ?? "bridge"
        let last = samples[process]?.last
        let phase = (last?.phase ?? 0) + (last.map { $0.role == role ? 0 : 1 } ?? 0)
        samples[process, default: []].append((now, role, phase, threads, fds, rssMB))
    }

    /// Every resource sample, one line each (`t,process,role,phase,threads,fds,rss_mb`), for the run's files.
    func samplesCSV() -> String {
        var out = "t,process,role,phase,threads,fds,rss_mb\n"
        for (process, all) in samples.sorted(by: { $0.key < $1.key }) {
            for x in all {
                out += String(format: "%.1f,", x.t) + "\(process),\(x.role),\(x.phase)," + String(format: "%.0f,%.0f,%.2f\n", x.threads, x.fds, x.rss)
            }
        }
        return out
    }

    // MARK: hot standby

    /// A run-clock time of something the probe read (when it read it, not when the checker got to it).
    func runTime(_ d: Date) -> Double { d.timeIntervalSince(started) }

    /// When an instance became active, as far as the upstream watch is concerned: when it was seen, or, when
    /// seen within 10 s of the broker's start after a restart (the subscriber was cut off itself and may
    /// see the claim late, once it is back), when the broker came back: no instance can take the client id
    /// before, and the one active before lost its connection when the broker stopped.
    func activation(seen t: Double) -> (at: Double, uncertain: Bool) {
        brokerUp.last { $0 <= t && t - $0 <= 10 }.map { ($0, true) } ?? (t, false)
    }

    func instance(_ rel: String, _ m: MQTTProbe.Message) {
        let name = String(rel.dropFirst("bridge/instances/".count))
        guard name != "_ping" else { return }
        let t = runTime(m.at)
        if let b = takeovers.claim(name, payload: Array(m.payload.utf8), explained: inBrokerWindow(t)) { breach(b) }
        if takeovers.claims[name] == "active" {
            let a = activation(seen: t)
            upstream.activated(name, at: a.at, uncertain: a.uncertain)
        }
    }

    func takeoverEvent(_ m: MQTTProbe.Message) {
        let t = runTime(m.at)
        let count = takeovers.takeovers.count
        if let b = takeovers.event(Array(m.payload.utf8), at: t, explained: inBrokerWindow(t)) { breach(b) }
        guard takeovers.takeovers.count > count, let last = takeovers.takeovers.last else { return }
        groups.resume(deadlinesFrom: t + SoakRun.settle)
        let a = activation(seen: t)
        upstream.activated(last.to, at: a.at, uncertain: a.uncertain)
        event("takeover \(last.from ?? "none") → \(last.to), gap_ms \(Int(last.gapMs))"
              + (last.afterFault.map { String(format: ", %.1f s after the fault", $0) } ?? ""))
    }

    var activeInstance: String? { takeovers.active }
    var secondsSinceLastTakeover: Double { takeovers.takeovers.last.map { now - $0.at } ?? .infinity }
    func claim(_ name: String) -> String? { takeovers.claims[name] }
    func takeoversSeen(from name: String, after t: Double) -> Bool { takeovers.takeovers.contains { $0.from == name && $0.at > t } }

    /// The schedule stops the active instance `name` (`what`: "kill -9", "SIGSTOP"): a takeover from it is due
    /// within `within` s; what is unanswered may be answered twice; it may not answer its console meanwhile.
    @discardableResult
    func handOverBegins(_ name: String, what: String, within: Double) -> Double {
        let t = now
        // The new instance carries out again what the stopped one had taken by the time it has settled.
        ledger.handOver(until: t + within + SoakRun.settle)
        takeovers.expect(from: name, what: what, at: t, within: within)
        groups.activeStops()
        faultBegins("takeover", "\(what) of \(name), the active instance")
        faultBegins("down:" + name, "")
        return t
    }

    func handOverEnds(_ name: String, grace: Double) {
        faultEnds("takeover", grace: grace)
        groups.resume(deadlinesFrom: now)
        faultEnds("down:" + name, grace: 10)
    }

    /// Requests the upstream simulators received (`at` on the run's clock), judged once every activation
    /// before them can have been seen (`before`).
    func requests(_ rs: [(instance: String?, at: Double, what: String)], judgeBefore horizon: Double) {
        for r in rs { upstream.request(instance: r.instance, at: r.at, what: r.what) }
        for b in upstream.judge(before: horizon) { breach(b) }
        for b in takeovers.overdue(now: now) { breach(b) }
    }

    /// Seconds into a standby phase before its threads and open files count (rule 8).
    static let standbySettle = 5.0

    /// The breaches, the resource slopes over the run's second half (a breach past the tolerance), and
    /// the figures.
    func report() -> SoakReport {
        var r = SoakReport()
        // Rule 8 under hot standby. Threads and open files of each process: the standby role across its
        // phases (each active phase starts the adapters and its connection and must give them all back when it
        // ends, so a standby after one holds what a standby held before), each active phase on its own. Resident memory per phase: the heap an active
        // phase grew is not all returned to the system, so a standby after one is larger without a leak.
        // A series is judged over the run's second half when it covers a quarter of the run there.
        let end = samples.values.compactMap { $0.last?.t }.max() ?? 0
        typealias Sample = (t: Double, role: String, phase: Int, threads: Double, fds: Double, rss: Double)
        // `pooled`: judged by the slope within its phases, over the time they cover (`pooledSlope`).
        var series: [(name: String, samples: [Sample], keys: [(String, KeyPath<Sample, Double>, Double, String)], pooled: Bool)] = []
        let held: [(String, KeyPath<Sample, Double>, Double, String)] = [("threads", \.threads, 3, ""), ("open files", \.fds, 4, "")]
        let memory: [(String, KeyPath<Sample, Double>, Double, String)] = [("VmRSS", \.rss, 4, "MB")]
        for (process, all) in samples.sorted(by: { $0.key < $1.key }) {
            // What an active phase holds is judged once it has settled (the engine's settle time): before, its
            // adapters are still opening their connections. And by the growth within its phases: the schedule's
            // faults (an upstream gone, the LAN lights leaving) set the level each phase holds, and phases at
            // different levels, joined, read as a slope. What a phase keeps after it ends is the standby
            // series' to judge, across phases.
            var phaseStart: [Int: Double] = [:]
            for s in all where phaseStart[s.phase] == nil { phaseStart[s.phase] = s.t }
            for role in ["bridge", "active", "standby"] {
                let mine = all.filter { $0.role == role }
                guard !mine.isEmpty else { continue }
                // Each phase counts from its settle time: an active one's once its adapters have opened their
                // connections; a standby one after an active phase once that phase's connections have had
                // time to close (a sample at the start of a standby phase, in a broker restart's window, once
                // read 5 open files above the standby level before it). A plain bridge has one phase.
                let settle = role == "active" ? SoakRun.settle : role == "standby" ? Self.standbySettle : 0
                let settled = mine.filter { $0.t - (phaseStart[$0.phase] ?? 0) >= settle }
                if !settled.isEmpty { series.append(("\(process) \(role)", settled, held, role == "active")) }
                for phase in Set(mine.map(\.phase)).sorted() {
                    let n = mine.filter { $0.phase == phase }
                    series.append(("\(process) \(role) phase \(phase)", n, memory, false))
                }
            }
        }
        var judgedSeries = 0
        for (name, all, keys, pooled) in series {
            let half = all.filter { $0.t >= end / 2 }
            let phases = Dictionary(grouping: half, by: \.phase).values.map { $0.sorted { $0.t < $1.t } }
            // The time the series covers: from first to last sample, or the sum of its phases' spans. A process's
            // active phases are judged when they cover an eighth of the run there and at least a minute (so in
            // the hour's run; the short run's phases are too short for a slope to mean anything).
            let covered = pooled ? phases.map { ($0.last?.t ?? 0) - ($0.first?.t ?? 0) }.reduce(0, +) : (half.last?.t ?? 0) - (half.first?.t ?? 0)
            guard half.count >= 10, let last = half.last, covered >= (pooled ? max(end / 8, 60) : end / 4) else { continue }
            judgedSeries += 1
            let span = max(1, covered)
            for (what, key, tolerance, unit) in keys {
                let rate = pooled ? pooledSlope(phases.map { $0.map { (x: $0.t, y: $0[keyPath: key]) } })
                                  : slope(half.map { (x: $0.t, y: $0[keyPath: key]) })
                let growth = rate * span
                r.figures.append(.init(name: "\(name): \(what) first / last sample", value: all.first![keyPath: key], unit: unit))
                r.figures.append(.init(name: "\(name): \(what) last sample", value: all.last![keyPath: key], unit: unit))
                r.figures.append(.init(name: "\(name): \(what) growth over the second half (slope × \(Int(span)) s)", value: growth, unit: unit))
                // Under AddressSanitizer freed memory waits in its quarantine (256 MB), so resident memory
                // grows by design: reported, not judged.
                let judged = !(what == "VmRSS" && ProcessInfo.processInfo.environment["ASAN_OPTIONS"] != nil)
                if judged, growth > tolerance {
                    breaches.append(.init(at: last.t, what: "\(name): \(what) grew by \(String(format: "%.2f", growth)) \(unit) over the second half (tolerance \(tolerance))"))
                }
            }
        }
        r.figures.append(.init(name: "resource series judged (process, role; memory per phase)", value: Double(judgedSeries), unit: ""))
        r.breaches = breaches
        let traffic: [SoakReport.Figure] = [
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
        ]
        r.figures += traffic
        let watches = Array(consoles.values)
        func total(_ key: KeyPath<ConsoleWatch, Int>) -> Double { Double(watches.map { $0[keyPath: key] }.reduce(0, +)) }
        let console: [SoakReport.Figure] = [
            .init(name: "console: /readyz ready samples", value: total(\.ready), unit: ""),
            .init(name: "console: /readyz not ready, standing by", value: total(\.notReadyStandby), unit: ""),
            .init(name: "console: /readyz not ready, explained by the schedule", value: total(\.notReadyExplained), unit: ""),
            .init(name: "console: no answer from a stopped instance", value: total(\.unreachable), unit: ""),
            .init(name: "console: /metrics scrapes compared", value: total(\.scrapes), unit: ""),
            .init(name: "console: the pages' largest frame", value: Double(watches.map(\.largestFrame).max() ?? 0), unit: "bytes"),
        ]
        r.figures += console
        let caused = takeovers.takeovers.compactMap(\.afterFault).sorted()
        let gaps = takeovers.takeovers.filter { $0.afterFault != nil }.map(\.gapMs).sorted()
        let standby: [SoakReport.Figure] = [
            .init(name: "takeovers seen (the start and broker restarts included)", value: Double(takeovers.takeovers.count), unit: ""),
            .init(name: "takeovers after a kill -9 or a pause of the active instance", value: Double(caused.count), unit: ""),
            .init(name: "  fault to takeover event, median", value: caused.isEmpty ? 0 : caused[caused.count / 2], unit: "s"),
            .init(name: "  fault to takeover event, worst", value: caused.last ?? 0, unit: "s"),
            .init(name: "  gap_ms the events reported, worst", value: gaps.last ?? 0, unit: "ms"),
            .init(name: "two instances claiming active in a broker restart's window", value: Double(takeovers.overlapsExplained), unit: ""),
            .init(name: "commands unanswered at a hand-over, most at one", value: Double(ledger.openAtHandOver), unit: ""),
            .init(name: "commands answered twice (unanswered at a hand-over)", value: Double(ledger.answeredTwice), unit: ""),
        ]
        r.figures += standby
        for (name, n) in upstream.judged.sorted(by: { $0.key < $1.key }) {
            r.figures.append(.init(name: "upstream HTTP requests judged from \(name)", value: Double(n), unit: ""))
        }
        return r
    }
}
