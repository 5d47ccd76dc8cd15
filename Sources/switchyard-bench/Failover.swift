import Foundation
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
#if canImport(Glibc)
import Glibc
#endif

extension SwitchyardBench {
    /// `failover`: two `switchyard run --instance` processes of one standby group (design.md §18, the
    /// `FailoverRig` of the tests: the virtual adapter and the LIFX cloud simulator, keepalive 5 s,
    /// `takeover_delay: 1`) over a broker of its own, under commands with transactions at 20 a second
    /// throughout, and `kills` times: kill -9 of whichever instance is active, wait until the other serves,
    /// start the killed one again, wait until it stands by. Per kill: the gap from the kill to the first
    /// result the other instance published (as a client read them, after it said it was active), and
    /// the gap its `takeover` event gives (`gap_ms`: from the Last Will it read to holding the client id);
    /// the standby's peak memory (VmHWM) just before the kill, when it has only ever waited, and the
    /// active's. Then every command's results: all answered, how many twice.
    /// Baselines, in the same run over the same broker: kill -9 of one bridge without standby restarted
    /// at once (what a supervisor on the same host gives at best) → the first command sent after the kill
    /// answered, the gap's ratio; kill -9 of a plain client with a Last Will → its Will at a subscriber,
    /// the part of the gap the broker takes.
    func failoverFigures() async throws -> [Figure] {
        guard let kind = BrokerKind(rawValue: failoverBroker) else {
            throw BenchError("unknown broker '\(failoverBroker)' (known: \(BrokerKind.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        if let why = kind.unavailable { throw BenchError("failover: \(why)") }
        let broker = try await kind.start()
        defer { broker.stop() }
        let lifx = try await LIFXCloudSimulator.start(token: "t", lights: LIFXCloudSimulator.demoLights())
        // 10 LIFX commands a second for minutes would spend the cloud's budget (120 a minute, as the real one):
        // raised, so that a command answered with an error is the failover's doing, not the budget's.
        lifx.setRateLimit(1_000_000, window: 60)
        let kills = max(1, self.kills)
        return try await withTeardown {
            let will = try await willLatencies(port: broker.port, count: min(kills, 5))
            let restart = try await FailoverRig.with(broker: broker, lifxURL: lifx.apiURL, standby: false) { rig in
                try await restartLatencies(rig, count: min(kills, 5))
            }
            return try await FailoverRig.with(broker: broker, lifxURL: lifx.apiURL) { rig in
                try await failoverRun(rig, kills: kills, willMs: will, restartMs: restart, broker: kind)
            }
        } teardown: {
            await lifx.stop()
        }
    }

    func failoverRun(_ rig: FailoverRig, kills: Int, willMs: [Double], restartMs: [Double], broker: BrokerKind) async throws -> [Figure] {
        try rig.start("a")
        try await rig.waitActive("a", timeout: 60)
        try rig.start("b")
        try await rig.waitRole("b", "standby", timeout: 60)
        let commands = rig.commander()
        try await Task.sleep(for: .seconds(2))
        var gaps: [Double] = [], eventGaps: [Double] = [], activeAfter: [Double] = []
        var activeHWM: [Double] = [], standbyHWM: [Double] = [], standbyRSS: [Double] = []
        for k in 1...kills {
            // a is active first; each kill makes the other one active.
            let (active, standby) = k % 2 == 1 ? ("a", "b") : ("b", "a")
            guard let dying = rig.process(active), let waiting = rig.process(standby) else { throw BenchError("failover: an instance is missing") }
            // The standby has only ever waited (b from the start, then each killed instance started again).
            standbyRSS.append(Self.procMB(waiting.child.pid, "VmRSS"))
            standbyHWM.append(Self.procMB(waiting.child.pid, "VmHWM"))
            activeHWM.append(Self.procMB(dying.child.pid, "VmHWM"))
            let events = rig.takeoverTimes.count
            let killedAt = Date()
            rig.signal(active, SIGKILL)
            try await rig.waitActive(standby, timeout: 60)
            guard let saidActive = rig.said(standby, "active", after: killedAt) else { throw BenchError("failover: \(standby) never said it was active") }
            activeAfter.append(saidActive.timeIntervalSince(killedAt))
            try await waitUntil("\(standby) answers a command (kill \(k))", timeout: 60) { rig.firstAnswer(after: saidActive) != nil }
            gaps.append(rig.firstAnswer(after: saidActive)!.at.timeIntervalSince(killedAt))
            try await waitUntil("the takeover event (kill \(k))", timeout: 30) {
                rig.takeoverTimes.dropFirst(events).contains { $0.event["data"]?["to"]?.stringValue == standby }
            }
            let event = rig.takeoverTimes.dropFirst(events).first { $0.event["data"]?["to"]?.stringValue == standby }!.event
            eventGaps.append(event["data"]?["gap_ms"]?.doubleValue ?? .nan)
            _ = try await dying.waitForExit(timeout: 10)
            // The killed instance comes back as the standby; the next kill waits until it stands by.
            let restartedAt = Date()
            try rig.start(active)
            try await waitUntil("\(active) stands by again (kill \(k))", timeout: 60) { rig.said(active, "standby", after: restartedAt) != nil }
            if ProcessInfo.processInfo.environment["SWITCHYARD_BENCH_VERBOSE"] != nil {
                print("failover kill \(k): \(active) killed; \(standby) active after \(Int(activeAfter.last! * 1000)) ms, first answer after \(Int(gaps.last! * 1000)) ms, event gap_ms \(Int(eventGaps.last!))")
            }
            try await Task.sleep(for: .seconds(1))
        }
        commands.cancel()
        _ = await commands.value
        let twice = try await rig.everyCommandAnswered(timeout: 60)
        let sent = rig.sent.count
        let answered = rig.results.count
        let notOK = rig.results.values.filter { $0.contains { $0 != "ok" } }.count
        if ProcessInfo.processInfo.environment["SWITCHYARD_BENCH_VERBOSE"] != nil {
            for f in rig.failures { print("failover: \(f.transaction) answered \(f.status): \(f.error ?? "")") }
        }
        let replayed = rig.logs.filter { $0.contains("the previous active instance took from the broker") }.count
        let n = "\(kills) kill\(kills == 1 ? "" : "s")"
        let goal = Double(FailoverRig.keepalive) * 1.5 + 2
        let gapMs = gaps.map { $0 * 1000 }
        let beyondWait = zip(gapMs, eventGaps).map { $0 - $1 }
        let restart = "restart without standby"
        let s = "failover"
        return [
            Figure(scenario: s, name: "baseline (\(broker)): kill -9 of a plain client → its Last Will at a subscriber, median of \(willMs.count)",
                   value: Self.median(willMs), unit: "ms"),
            Figure(scenario: s, name: "baseline: kill -9 of a bridge without standby, restarted at once → first answer, median of \(restartMs.count)",
                   value: Self.median(restartMs), unit: "ms"),
            Figure(scenario: s, name: "baseline: the same, worst", value: restartMs.max() ?? 0, unit: "ms"),
            Figure(scenario: s, name: "kill -9 → the other's first answered command, median of \(n)", value: Self.median(gapMs), unit: "ms",
                   ratio: Self.median(gapMs) / Self.median(restartMs), baseline: restart),
            Figure(scenario: s, name: "kill -9 → the other's first answered command, worst (goal ≤ \(Int(goal * 1000)))",
                   value: gapMs.max() ?? 0, unit: "ms", ratio: (gapMs.max() ?? 0) / (restartMs.max() ?? 1), baseline: restart),
            // Beyond the wait it chose (takeover_delay and its spread, from the Will it read): connecting with the
            // client id, starting the adapters, answering; against a cold start of the same bridge.
            Figure(scenario: s, name: "kill -9 → the other's first answer − its takeover wait (gap_ms), median",
                   value: Self.median(beyondWait), unit: "ms", ratio: Self.median(beyondWait) / Self.median(restartMs), baseline: restart),
            Figure(scenario: s, name: "kill -9 → the other says it is active, median", value: Self.median(activeAfter) * 1000, unit: "ms"),
            Figure(scenario: s, name: "takeover event gap_ms (Last Will read → client id held), median", value: Self.median(eventGaps), unit: "ms"),
            Figure(scenario: s, name: "takeover event gap_ms, worst", value: eventGaps.max() ?? 0, unit: "ms"),
            Figure(scenario: s, name: "commands sent (20 a second, with transactions)", value: Double(sent), unit: "cmds"),
            Figure(scenario: s, name: "commands answered", value: Double(answered), unit: "cmds"),
            Figure(scenario: s, name: "commands answered twice (at-least-once around a kill)", value: Double(twice.count), unit: "cmds"),
            Figure(scenario: s, name: "commands answered with an error", value: Double(notOK), unit: "cmds"),
            Figure(scenario: s, name: "takeovers that carried out commands the dead instance had taken", value: Double(replayed), unit: "kills"),
            Figure(scenario: s, name: "VmHWM of the active instance when killed, worst", value: activeHWM.max() ?? 0, unit: "MB"),
            Figure(scenario: s, name: "VmHWM of the standby before it takes over, worst", value: standbyHWM.max() ?? 0, unit: "MB",
                   ratio: (standbyHWM.max() ?? 0) / (activeHWM.max() ?? 1), baseline: "the active's VmHWM"),
            Figure(scenario: s, name: "VmRSS of the standby while it waits, median", value: Self.median(standbyRSS), unit: "MB"),
        ]
    }

    /// kill -9 of a bridge without standby (`rig` without `standby:`) under the rig's commands, and its
    /// restart at once, `count` times: from the kill to the first result of a command sent after it, which
    /// only the new process can give (milliseconds).
    func restartLatencies(_ rig: FailoverRig, count: Int) async throws -> [Double] {
        try rig.start("solo")
        let commands = rig.commander()
        var out: [Double] = []
        for i in 1...count {
            let readyFrom = Date()
            try await waitUntil("the bridge answers (restart \(i))", timeout: 60) { rig.firstAnswer(toCommandSentAfter: readyFrom) != nil }
            try await Task.sleep(for: .seconds(1))
            guard let dying = rig.process("solo") else { throw BenchError("failover: the plain bridge is missing") }
            let killedAt = Date()
            rig.signal("solo", SIGKILL)
            _ = try await dying.waitForExit(timeout: 10)
            try rig.start("solo")
            try await waitUntil("the restarted bridge answers (restart \(i))", timeout: 60) { rig.firstAnswer(toCommandSentAfter: killedAt) != nil }
            out.append(rig.firstAnswer(toCommandSentAfter: killedAt)!.at.timeIntervalSince(killedAt) * 1000)
        }
        commands.cancel()
        _ = await commands.value
        return out
    }

    /// kill -9 of a plain libmosquitto client (`mosquitto_sub` with a Last Will) → its Will at a subscriber
    /// connected before: what the broker takes to notice a dead client, `count` times (milliseconds).
    func willLatencies(port: Int, count: Int) async throws -> [Double] {
        guard let sub = TestEnvironment.which("mosquitto_sub") else { throw BenchError("failover: mosquitto_sub is not installed (mosquitto-clients)") }
        let reader = try await MQTTProbe.connect(port: port)
        defer { reader.close() }
        let topic = "willbench\(UUID().uuidString.prefix(6).lowercased())"
        try await reader.subscribe("\(topic)/#")
        let dir = TestEnvironment.makeTempDir("will-bench")
        var out: [Double] = []
        for i in 0..<count {
            let will = "\(topic)/\(i)"
            let child = try ChildProcess(path: sub, arguments: ["-h", "127.0.0.1", "-p", "\(port)", "-i", "willbench-\(i)-\(topic)", "-k", "5",
                                                                "--will-topic", will, "--will-payload", "gone", "-t", "\(topic)/nothing"],
                                         outputFile: dir.appendingPathComponent("sub.log").path)
            // Connected once the broker lists the subscription: publish to it and see it come back.
            try await waitUntil("the plain client connects", timeout: 30) {
                reader.publish("\(topic)/nothing", "x")
                try? await Task.sleep(for: .milliseconds(100))
                return (try? String(contentsOf: dir.appendingPathComponent("sub.log"), encoding: .utf8))?.contains("x") == true
            }
            let killedAt = Date()
            child.signal(SIGKILL)
            let m = try await reader.waitFor(topic: will, timeout: 30)
            out.append(m.at.timeIntervalSince(killedAt) * 1000)
            await child.wait(timeout: 5)
        }
        return out
    }

    /// A field of /proc/<pid>/status in MB (VmRSS, VmHWM).
    static func procMB(_ pid: pid_t, _ key: String) -> Double {
        let text = (try? FileHandle(forReadingAtPath: "/proc/\(pid)/status")?.readToEnd()).flatMap { $0 }.map { String(decoding: $0, as: UTF8.self) } ?? ""
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            return (Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) / 1024
        }
        return 0
    }
}
