import Foundation
import LIFXSimulators
import LivecodingAdapter
import SwitchyardCore
import SwitchyardDemo
import SwitchyardTestSupport
import HTTPTypes
import SwitchyardWebTesting

/// How long a soak runs and how often its schedule strikes (docs/testing.md "The soak run").
public struct SoakOptions: Sendable {
    public var minutes: Double
    public var commandsPerSecond = 4.0
    /// A config reload that changes a setting of every adapter (and adds or removes a virtual light).
    public var reloadEvery: Double
    /// A broker restart, graceful and `kill -9` in turn.
    public var brokerRestartEvery: Double
    /// One HTTP/WebSocket simulator stopped for `outageLength`, then started again (LIFX cloud, Imp,
    /// Livecoding, Home Assistant in turn).
    public var outageEvery: Double
    public var outageLength: Double
    /// The LAN lights leave (the LAN peer stops) for `offline_after` + 10 s, then come back.
    public var lanLeaveEvery: Double
    /// When the first departure is due (nil: after `lanLeaveEvery`).
    public var lanLeaveFirst: Double?
    public var lanOfflineAfter: Int
    /// Management requests (docs/topics.md "Management"): a sensor renamed and back, a light's label set and
    /// removed, each checked on the broker, nothing else disturbed.
    public var manageEvery: Double = 60
    /// The active instance of the standby group stopped: `kill -9` (then started again, to stand by) and a
    /// pause (SIGSTOP past the broker's keepalive grace, then SIGCONT) in turn.
    public var takeoverEvery: Double = 120
    /// When the first stop is due (nil: after `takeoverEvery`).
    public var takeoverFirst: Double?
    public var sampleEvery = 2.0
    /// A command unanswered this long is a breach.
    public var answerWithin = 60.0
    /// Progress lines (breaches and schedule events), as they happen.
    public var say: @Sendable (String) -> Void = { _ in }

    /// The schedule of a long run (an hour: 120 reloads, 40 broker restarts, 60 outages, 30 LAN departures, 30
    /// stops of the active instance; fewer of the last three where one waits for another's window to close).
    public static func long(minutes: Double) -> SoakOptions {
        SoakOptions(minutes: minutes, reloadEvery: 30, brokerRestartEvery: 90, outageEvery: 60, outageLength: 10, lanLeaveEvery: 120,
                    lanOfflineAfter: 20, manageEvery: 75, takeoverEvery: 120)
    }

    public func with(say: @escaping @Sendable (String) -> Void) -> SoakOptions {
        var o = self
        o.say = say
        return o
    }

    /// The same, compressed into about three minutes for `make test`: every kind of event at least twice (a
    /// pause of the active instance once: kill -9, pause, kill -9).
    public static func short(minutes: Double = 3) -> SoakOptions {
        SoakOptions(minutes: minutes, reloadEvery: 15, brokerRestartEvery: 55, outageEvery: 20, outageLength: 5, lanLeaveEvery: 75,
                    lanLeaveFirst: 40, lanOfflineAfter: 8, manageEvery: 40, takeoverEvery: 45, takeoverFirst: 30)
    }
}

public struct SoakReport: Sendable {
    public struct Breach: Sendable, CustomStringConvertible {
        public var at: Double
        public var what: String
        public var description: String { String(format: "%7.1f s  ", at) + what }
    }
    public struct Figure: Sendable {
        public var name: String
        public var value: Double
        public var unit: String
        /// "soak  <name, padded>  <value> <unit>".
        public var line: String {
            let v = String(format: "%.2f", value)
            return "soak  " + name.padding(toLength: max(name.count, 64), withPad: " ", startingAt: 0)
                + String(repeating: " ", count: max(0, 12 - v.count)) + v + " " + unit
        }
    }
    public var breaches: [Breach] = []
    public var figures: [Figure] = []
}

/// The demo's whole home (every adapter against its simulator, the LAN peer included) served by a standby
/// group of two bridge processes, and its Nova flashes by a bridge of their own, under steady commands with
/// transactions and a schedule of faults; a checker subscribed to `#` holds the invariants all along and
/// reports every breach with its time.
public enum SoakRun {
    /// The group's MQTT keepalive (s): a paused instance is given up by the broker within its grace.
    static let keepalive = 5
    /// `standby.takeover_delay` (s); each instance adds up to half of it again.
    static let takeoverDelay = 1.0
    /// How long after a takeover the schedule lets the new active instance be (the engine's settle time:
    /// groups wait for every adapter's listing that long at most).
    static let settle = 15.0

    public static func run(_ o: SoakOptions) async throws -> SoakReport {
        guard let sim = TestEnvironment.simulatorBinary() else { throw TestError("switchyard-sim is not built next to this program") }
        let broker = try await Broker.start()
        defer { broker.stop() }
        let home = try await SimulatedHome.start()
        let dir = TestEnvironment.makeTempDir("soak")
        let stateDir = dir.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
        let configPath = dir.appendingPathComponent("config.yaml").path
        let base = "soak"
        let novaBase = "soak-nova"
        let novaConfigPath = dir.appendingPathComponent("nova.yaml").path
        var tuning = SimulatedHome.Tuning()
        tuning.lanOfflineAfter = o.lanOfflineAfter
        tuning.healthInterval = 10
        tuning.lifxPoll = 5
        tuning.lanPoll = 2
        // Hot standby: every instance reads the same file; the Nova flashes are served by a bridge of their
        // own (a radio is per host: design.md §18 "What is carried over"), with its own state directory.
        tuning.keepalive = Self.keepalive
        tuning.standby = "{enabled: true, takeover_delay: \(Self.takeoverDelay)}"
        tuning.nova = false
        // The console, with a token: each instance's probed and read by a page all along (the console's
        // invariants), on the port its process is given.
        let webToken = "soak-console-\(UUID().uuidString)"
        tuning.web = "{listen: \"127.0.0.1:${SOAK_WEB_PORT}\", auth_token: \"\(webToken)\"}"
        let novaState = dir.appendingPathComponent("nova-state").path
        try FileManager.default.createDirectory(atPath: novaState, withIntermediateDirectories: true)
        func writeConfig() throws {
            try home.yaml(host: "127.0.0.1", port: broker.port, base: base, stateDir: stateDir, tuning: tuning, log: "warning")
                .writeForTest(toFile: configPath, replacing: true)
            try home.novaYAML(host: "127.0.0.1", port: broker.port, base: novaBase, stateDir: novaState, tuning: tuning, log: "warning")
                .writeForTest(toFile: novaConfigPath, replacing: true)
        }
        try writeConfig()
        // The config's Livecoding section as the adapter reads it (token_store defaults into state_dir).
        var lc = LivecodingSettings()
        lc.apiURL = home.livecoding.apiURL
        lc.oauthURL = home.livecoding.oauthURL
        lc.clientID = "demo-client"
        lc.clientSecret = "demo-secret"
        lc.tokenStore = stateDir + "/livecoding-token.json"
        try await SimulatedHome.authorise(lc)

        let started = Date()
        let checker = SoakChecker(base: base, novaBase: novaBase, started: started, say: o.say)
        let probe = try await MQTTProbe.connect(port: broker.port)
        let (messages, feed) = AsyncStream.makeStream(of: MQTTProbe.Message.self)
        probe.stream { feed.yield($0) }
        try await probe.subscribe("#")
        let checking = Task { for await m in messages { await checker.see(m) } }
        let tap = RequestTap(started: started, since: Date().timeIntervalSince(started))
        let novaBridge = try ChildProcess(path: sim, arguments: ["bridge", "-c", novaConfigPath], outputFile: dir.appendingPathComponent("nova-bridge.log").path)
        defer { novaBridge.terminate() }
        // The first instance takes over (nobody is active), the second stands by.
        let group = ["east", "west"].map { SoakInstance(name: $0, sim: sim, configPath: configPath, dir: dir) }
        defer {
            for i in group {
                i.signal(SIGCONT)
                i.process?.terminate()
            }
        }
        try group[0].start()
        try await waitUntil("east active", timeout: 60) { await checker.claim("east") == "active" }
        try group[1].start()
        try await waitUntil("west standing by", timeout: 60) { await checker.claim("west") == "standby" }
        o.say("soak: broker 127.0.0.1:\(broker.port), instances \(group.map { "\($0.name) pid \($0.process?.pid ?? 0)" }.joined(separator: ", ")), "
              + "Nova bridge pid \(novaBridge.pid), files in \(dir.path)")

        let end = Date().addingTimeInterval(o.minutes * 60)
        try await waitUntil("the bridge's first states", timeout: 60) { await checker.hasState("lifx/desk") }

        // The schedule, run on this task; commands and samples beside it until `end`.
        let commands = Task { await Self.commands(o, probe: probe, base: base, novaBase: novaBase, checker: checker, until: end) }
        let samples = Task { await Self.samples(o, group: group, nova: novaBridge.pid, checker: checker, until: end) }
        // Each page opens once per process; the first states on MQTT do not say a console is listening yet.
        for i in group { try await PageClient.waitForListener(port: i.webPort) }
        let consoles = group.map { i in Task { await Self.console(i, token: webToken, checker: checker, until: end) } }
        var next = (reload: o.reloadEvery, broker: o.brokerRestartEvery, outage: o.outageEvery, lan: o.lanLeaveFirst ?? o.lanLeaveEvery, manage: o.manageEvery,
                    takeover: o.takeoverFirst ?? o.takeoverEvery)
        var counts = (reload: 0, broker: 0, outage: 0, lan: 0, manage: 0, kill: 0, pause: 0)
        let t0 = Date()
        func now() -> Double { Date().timeIntervalSince(t0) }
        var looked = 0.0
        /// The upstreams' requests so far; judged up to a minute back (what a step of the schedule held up).
        func lookAtRequests(final: Bool = false) async {
            let rs = tap.take(home)
            let horizon = final ? Double.infinity : Date().timeIntervalSince(started) - 60
            await checker.requests(rs, judgeBefore: horizon)
        }
        let grace = broker.kind.keepaliveGrace(Double(Self.keepalive))
        while Date() < end, novaBridge.isRunning, group.allSatisfy(\.isRunning) {
            let t = now()
            if t - looked >= 2 {
                looked = t
                await lookAtRequests()
            }
            // A stop of the active instance and a broker restart (after which the group picks an active
            // instance again) are faults of the whole bridge: neither begins, nor does a LAN departure, until
            // the last takeover is `settle` seconds old (the new active instance lists its devices meanwhile,
            // and would never see LAN lights that left before it looked).
            let settling = await checker.secondsSinceLastTakeover < Self.settle
            if t >= next.reload {
                next.reload += o.reloadEvery
                counts.reload += 1
                tuning.virtualSensorInterval = tuning.virtualSensorInterval == 10 ? 11 : 10
                tuning.lifxPoll = tuning.lifxPoll == 5 ? 6 : 5
                tuning.impPoll = tuning.impPoll == 15 ? 16 : 15
                tuning.livecodingPoll = tuning.livecodingPoll == 15 ? 16 : 15
                tuning.novaTimeoutMs = tuning.novaTimeoutMs == 10000 ? 11000 : 10000
                tuning.extraVirtual.toggle()
                await checker.expectRemoval(of: "virtual/extra", allowed: !tuning.extraVirtual)
                try writeConfig()
                await checker.event("reload \(counts.reload) (extra light \(tuning.extraVirtual ? "added" : "removed"))")
                // A changed Nova section restarts its adapter, which connects its flash again (scan, then
                // connect): commands meanwhile are refused as "not connected".
                await checker.faultBegins("nova", "")
                await checker.faultBegins("reload", "")
                // Every instance is told, as on every host: the active one reloads, a standby reads the file
                // when it takes over.
                for i in group { i.signal(SIGHUP) }
                novaBridge.signal(SIGHUP)
                await checker.faultEnds("nova", grace: 15)
                await checker.faultEnds("reload", grace: 20)
            } else if t >= next.broker && !settling {
                next.broker += o.brokerRestartEvery
                counts.broker += 1
                let hard = counts.broker % 2 == 0
                await checker.faultBegins("broker", hard ? "broker kill -9" : "broker restart")
                if hard { await broker.kill() } else { await broker.stop() }
                try await Task.sleep(for: .seconds(2))
                try await broker.start()
                await checker.brokerRestarted()
                try await Task.sleep(for: .seconds(5))
                await checker.faultEnds("broker", grace: 15)
            } else if t >= next.outage {
                next.outage += o.outageEvery
                counts.outage += 1
                let which = ["lifx", "imp", "livecoding", "ha"][(counts.outage - 1) % 4]
                await checker.faultBegins(which, "\(which) simulator stopped for \(Int(o.outageLength)) s")
                switch which {
                case "lifx": await home.lifx.stop()
                case "imp": await home.imp.stop()
                case "livecoding": await home.livecoding.stop()
                default: await home.ha.stop()
                }
                try await Task.sleep(for: .seconds(o.outageLength))
                await lookAtRequests()   // the stopped simulator's to its end
                switch which {
                case "lifx": home.lifx = try await home.lifx.restarted()
                case "imp": home.imp = try await home.imp.restarted()
                case "livecoding": home.livecoding = try await home.livecoding.restarted()
                default: home.ha = try await home.ha.restarted()
                }
                // An adapter retries on its own back-off (up to a poll interval and more): its errors are
                // the outage's until it has had time to recover.
                await checker.faultEnds(which, grace: 45)
            } else if t >= next.takeover && !settling {
                next.takeover += o.takeoverEvery
                let pause = (counts.kill + counts.pause) % 2 == 1
                if pause { counts.pause += 1 } else { counts.kill += 1 }
                guard let name = await checker.activeInstance, let active = group.first(where: { $0.name == name }) else {
                    await checker.breach("no instance of the group is active to be stopped")
                    continue
                }
                if pause {
                    // Past the broker's grace for a silent connection (its Last Will), then the takeover.
                    let within = grace + Self.takeoverDelay * 1.5 + 3
                    await checker.handOverBegins(name, what: "SIGSTOP", within: within)
                    active.signal(SIGSTOP)
                    try await Task.sleep(for: .seconds(within + 1))
                    active.signal(SIGCONT)
                    // It finds its connection gone and stands by, never taking the id back.
                    if (try? await waitUntil("\(name) standing by after its pause", timeout: 30) { await checker.claim(name) == "standby" }) == nil {
                        let says = await checker.claim(name) ?? "nothing"
                        await checker.breach("\(name) did not stand by within 30 s of its pause's end (it says \(says))")
                    }
                } else {
                    let within = Self.takeoverDelay * 1.5 + 3
                    let at = await checker.handOverBegins(name, what: "kill -9", within: within)
                    active.signal(SIGKILL)
                    _ = await active.process?.wait(timeout: 5)
                    try? await waitUntil("a takeover from \(name)", timeout: within + 5) { await checker.takeoversSeen(from: name, after: at) }
                    try active.start()
                    if (try? await waitUntil("\(name) started again, standing by", timeout: 60) { await checker.claim(name) == "standby" }) == nil {
                        let says = await checker.claim(name) ?? "nothing"
                        await checker.breach("\(name), started again, did not stand by within 60 s (it says \(says))")
                    }
                }
                await checker.handOverEnds(name, grace: 20)
            } else if t >= next.manage {
                next.manage += o.manageEvery
                counts.manage += 1
                await checker.event("management \(counts.manage): virtual/outside renamed and back, virtual/kitchen's label set and removed")
                await Self.manage(probe: probe, base: base, checker: checker, round: counts.manage)
            } else if t >= next.lan && !settling {
                next.lan += o.lanLeaveEvery
                counts.lan += 1
                let away = Double(o.lanOfflineAfter) + 10
                await checker.faultBegins("lifx", "the LAN lights leave for \(Int(away)) s")
                let port = home.lan.port
                home.lan.stop()
                try await Task.sleep(for: .seconds(away))
                // Gone past offline_after: unavailable, not removed (the LAN has no listing).
                // The Ceiling's two lights go and come back with it.
                for light in ["lifx/desk", "lifx/living_ceiling_uplight", "lifx/living_ceiling_downlight"] {
                    await checker.expectAvailability(light, "offline", because: "the LAN light left \(Int(away)) s ago")
                }
                home.lan = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices(), port: port)
                await checker.faultEnds("lifx", grace: 30)
                for light in ["lifx/desk", "lifx/living_ceiling_uplight", "lifx/living_ceiling_downlight"] {
                    await checker.expectAvailabilityLater(light, "online", within: 30, because: "the LAN light came back")
                }
            }
            try await Task.sleep(for: .milliseconds(250))
        }
        for i in group where !i.isRunning { await checker.breach("instance \(i.name) exited with status \(i.process?.exitStatus ?? -1)") }
        if !novaBridge.isRunning { await checker.breach("the Nova bridge exited with status \(novaBridge.exitStatus ?? -1)") }
        await commands.value
        await samples.value
        for c in consoles { await c.value }
        // Time for the last commands' results (a LIFX request retries for up to ~30 s).
        try? await waitUntil("the last results", timeout: o.answerWithin) { await checker.openCommands == 0 }
        await checker.checkOverdue(olderThan: 0)
        // A light that came back near the end has until its expectation's time.
        if let due = await checker.lastExpectationDue {
            try? await waitUntil("the last availability expectations", timeout: max(0, due - Date().timeIntervalSince(started)) + 0.5) {
                await checker.checkAvailabilityExpectations()
                return await checker.lastExpectationDue == nil
            }
        }
        await checker.checkAvailabilityExpectations(final: true)
        await checker.checkManagement()
        await checker.checkGroups()
        await lookAtRequests(final: true)
        for i in group { i.signal(SIGTERM) }
        novaBridge.signal(SIGTERM)
        for i in group { _ = await i.process?.wait(timeout: 20) }
        _ = await novaBridge.wait(timeout: 20)
        feed.finish()
        probe.close()
        checking.cancel()
        await home.stop()
        try? await checker.samplesCSV().writeForTest(toFile: dir.appendingPathComponent("samples.csv").path)
        var report = await checker.report()
        report.figures.insert(contentsOf: [
            .init(name: "minutes", value: o.minutes, unit: "min"),
            .init(name: "config reloads", value: Double(counts.reload), unit: ""),
            .init(name: "broker restarts (half kill -9)", value: Double(counts.broker), unit: ""),
            .init(name: "upstream outages", value: Double(counts.outage), unit: ""),
            .init(name: "LAN departures", value: Double(counts.lan), unit: ""),
            .init(name: "management rounds (4 changes each)", value: Double(counts.manage), unit: ""),
            .init(name: "kill -9 of the active instance", value: Double(counts.kill), unit: ""),
            .init(name: "pauses of the active instance (SIGSTOP past the keepalive grace)", value: Double(counts.pause), unit: ""),
        ], at: 0)
        return report
    }

    /// One round of management: `virtual/outside` (a sensor no command targets) renamed and back, and
    /// `virtual/kitchen`'s label set and removed, each asked for over MQTT and checked on the broker (the new
    /// topic's state, the old one cleared, the details' label), with the checker expecting exactly those
    /// renames and changes and no device coming or going meanwhile. A change refused as a conflict (the soak
    /// rewrote the file for a reload the bridge has not read yet) is asked again a second later.
    static func manage(probe: MQTTProbe, base: String, checker: SoakChecker, round: Int) async {
        var k = 0
        func ask(_ path: String, _ body: String) async -> Bool {
            for _ in 0..<5 {
                k += 1
                let transaction = "m\(round)-\(k)"
                var b = body
                b.removeLast()
                b += #", "transaction": "\#(transaction)"}"#
                probe.publish("\(base)/bridge/request/\(path)", b)
                // The checker reads the probe's stream: the response is taken from it.
                guard (try? await waitUntil("\(path)'s response", timeout: 30, { await checker.response(transaction) != nil })) != nil,
                      let payload = await checker.response(transaction) else {
                    await checker.breach("management: no answer to \(path) \(body)")
                    return false
                }
                if payload.contains(#""status":"ok""#) { return true }
                if payload.contains(#""kind":"conflict""#) {
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
                await checker.breach("management: \(path) \(body) refused: \(payload)")
                return false
            }
            await checker.breach("management: \(path) \(body) refused as a conflict five times")
            return false
        }
        func until(_ what: String, _ condition: @escaping @Sendable () async -> Bool) async {
            do { try await waitUntil(what, timeout: 15, condition) } catch { await checker.breach("management: \(what) did not happen") }
        }
        await checker.watching(["virtual/outside", "virtual/outside_m", "virtual/kitchen"])
        await managementRound(ask: ask, until: until, checker: checker, round: round)
        await checker.watching([])
    }

    static func managementRound(ask: (String, String) async -> Bool, until: (String, @escaping @Sendable () async -> Bool) async -> Void,
                                checker: SoakChecker, round: Int) async {
        for (from, to) in [("outside", "outside_m"), ("outside_m", "outside")] {
            await checker.expectRename(adapter: "virtual", from: from, to: to)
            await checker.expectChange()
            guard await ask("device/rename", #"{"adapter": "virtual", "device": "\#(from)", "to": "\#(to)"}"#) else { return }
            await until("virtual/\(to)'s state and virtual/\(from)'s cleared") {
                let there = await checker.hasState("virtual/\(to)")
                let gone = await checker.isCleared("virtual/\(from)")
                return there && gone
            }
        }
        for label in ["Soak kitchen \(round)", nil] {
            await checker.expectChange()
            let value = label.map { #""\#($0)""# } ?? "null"
            guard await ask("device/options", #"{"adapter": "virtual", "device": "kitchen", "options": {"label": \#(value)}}"#) else { return }
            let want = label ?? "Kitchen"
            await until("virtual/kitchen's label '\(want)'") { await checker.label("virtual/kitchen") == want }
        }
    }

    /// The demo's groups and its scene (Sources/SwitchyardDemo/SimulatedHome.swift), as `GroupWatch` judges
    /// them: what each reaches.
    static let groups: [String: GroupWatch.Group] = {
        let porch = ["lifx/porch", "virtual/hall/lamp"]
        let downstairs = ["virtual/kitchen", "virtual/fan", "lifx/kitchen", "lifx/lounge_left", "lifx/lounge_right", "lifx/desk", "imp/hall_clock"] + porch
        return ["group/downstairs": .init(leaves: downstairs), "group/porch": .init(leaves: porch, mode: "all"),
                "scene/movie": .init(leaves: downstairs)]
    }()

    /// Steady commands, each with a transaction, over every adapter that takes commands (and one unknown
    /// device, which must be answered too). Paused around broker restarts (a publisher offline cannot send).
    static func commands(_ o: SoakOptions, probe: MQTTProbe, base: String, novaBase: String, checker: SoakChecker, until end: Date) async {
        let targets: [(String, (Int) -> String)] = [
            ("virtual/kitchen", { #"{"brightness": \#($0)}"# }),
            ("lifx/kitchen", { #"{"brightness": \#($0)}"# }),
            ("lifx/desk", { #"{"brightness": \#($0)}"# }),
            ("lifx/group/lounge", { #"{"brightness": \#($0)}"# }),
            ("lifx/shelf_strip", { #"{"brightness": \#($0)}"# }),
            ("lifx/living_ceiling_uplight", { $0 % 2 == 0 ? #"{"state": "ON", "brightness": \#($0)}"# : #"{"state": "OFF"}"# }),
            ("imp/hall_clock", { #"{"brightness": \#(1 + $0 % 15)}"# }),
            ("nova/key_light", { $0 % 2 == 0 ? #"{"state": "ON"}"# : #"{"state": "OFF"}"# }),
            ("virtual/fan", { $0 % 2 == 0 ? #"{"state": "ON"}"# : #"{"state": "OFF"}"# }),
            ("lifx/nosuch", { _ in #"{"state": "ON"}"# }),
            ("group/downstairs", { $0 % 2 == 0 ? #"{"state": "ON", "brightness": \#($0)}"# : #"{"state": "OFF"}"# }),
            ("scene/movie", { _ in #"{"activate": true, "transition": 0}"# }),
        ]
        var i = 0
        let gap = 1 / max(0.1, o.commandsPerSecond)
        while Date() < end {
            if await checker.brokerDown {
                try? await Task.sleep(for: .milliseconds(200))
                continue
            }
            let (device, payload) = targets[i % targets.count]
            let n = 1 + (i / targets.count) % 99
            var body = payload(n)
            let transaction = "s\(i)"
            body.removeLast()
            body += #", "transaction": "\#(transaction)"}"#
            let topic = "\(device.hasPrefix("nova/") ? novaBase : base)/\(device)/set"
            await checker.sent(transaction, topic: topic)
            probe.publish(topic, body)
            i += 1
            try? await Task.sleep(for: .seconds(gap))
        }
    }

    /// An instance's console (docs/console.md), every 5 s: `/readyz` and `/metrics` with the token, and one
    /// page open all along, opened again for each new process of the instance (docs/testing.md, invariants 9–11).
    static func console(_ instance: SoakInstance, token: String, checker: SoakChecker, until end: Date) async {
        var headers = HTTPFields()
        headers[.authorization] = "Bearer \(token)"
        let port = instance.webPort
        var page: PageClient?
        var process = ""
        defer { page?.close() }
        let auth = [("Authorization", "Bearer \(token)")]
        while Date() < end {
            try? await Task.sleep(for: .seconds(5))
            if instance.label != process {
                page?.close()
                page = nil
                process = instance.label
            }
            if page == nil, (try? await PageClient.waitForListener(port: port, timeout: 2)) != nil {
                page = PageClient(port: port, headers: headers, keepFrames: false)
            }
            let ready = try? HTTPProbe.request(port: port, "/readyz", timeout: 5)
            let metrics = try? HTTPProbe.request(port: port, "/metrics", headers: auth, timeout: 5)
            let ended = await page?.ended(within: 0)
            // A probe that began before a restart is the old process's.
            guard instance.label == process else { continue }
            await checker.console(instance: instance.name, process: process, readyz: ready.map { ($0.status, $0.body) },
                                  metrics: metrics?.status == 200 ? metrics?.body : nil, pageEnded: ended.map { "\($0)" },
                                  largestFrame: page?.largestFrame ?? 0)
            // An ended page (a breach, or the end of a process the schedule stopped) is opened again.
            if ended != nil {
                page?.close()
                page = nil
            }
        }
    }

    /// The bridge processes' threads, open files and resident memory, every `sampleEvery` seconds.
    static func samples(_ o: SoakOptions, group: [SoakInstance], nova: pid_t, checker: SoakChecker, until end: Date) async {
        while Date() < end {
            for i in group {
                guard let p = i.process, p.isRunning else { continue }
                await sample(pid: p.pid, process: i.label, instance: i.name, checker: checker)
            }
            await sample(pid: nova, process: "nova", instance: nil, checker: checker)
            try? await Task.sleep(for: .seconds(o.sampleEvery))
        }
    }

    static func sample(pid: pid_t, process: String, instance: String?, checker: SoakChecker) async {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        func field(_ key: String) -> Double? {
            for line in status.split(separator: "\n") where line.hasPrefix(key + ":") {
                return Double(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.map(String.init)
                    ?? line.split(separator: "\t").dropFirst().first.map { String($0).trimmingCharacters(in: .whitespaces) } ?? "")
            }
            return nil
        }
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count).map(Double.init)
        if let threads = field("Threads"), let rssKB = field("VmRSS"), let fds {
            await checker.sample(process: process, instance: instance, threads: threads, fds: fds, rssMB: rssKB / 1024)
        }
    }
}
