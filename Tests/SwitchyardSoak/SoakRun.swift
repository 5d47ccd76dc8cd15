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
    public var lanOfflineAfter: Int
    /// Management requests (docs/topics.md "Management"): a sensor renamed and back, a light's label set and
    /// removed, each checked on the broker, nothing else disturbed.
    public var manageEvery: Double = 60
    public var sampleEvery = 2.0
    /// A command unanswered this long is a breach.
    public var answerWithin = 60.0
    /// Progress lines (breaches and schedule events), as they happen.
    public var say: @Sendable (String) -> Void = { _ in }

    /// The schedule of a long run (an hour: 120 reloads, 40 broker restarts, 60 outages, 30 LAN departures).
    public static func long(minutes: Double) -> SoakOptions {
        SoakOptions(minutes: minutes, reloadEvery: 30, brokerRestartEvery: 90, outageEvery: 60, outageLength: 10, lanLeaveEvery: 120,
                    lanOfflineAfter: 20, manageEvery: 75)
    }

    public func with(say: @escaping @Sendable (String) -> Void) -> SoakOptions {
        var o = self
        o.say = say
        return o
    }

    /// The same, compressed into about three minutes for `make test`: every kind of event at least twice.
    public static func short(minutes: Double = 3) -> SoakOptions {
        SoakOptions(minutes: minutes, reloadEvery: 15, brokerRestartEvery: 55, outageEvery: 20, outageLength: 5, lanLeaveEvery: 75,
                    lanOfflineAfter: 8, manageEvery: 40)
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

/// The demo's whole home (every adapter against its simulator, the LAN peer included, the bridge as its
/// own process) under steady commands with transactions and a schedule of faults; a checker subscribed
/// to `#` holds the invariants all along and reports every breach with its time.
public enum SoakRun {
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
        var tuning = SimulatedHome.Tuning()
        tuning.lanOfflineAfter = o.lanOfflineAfter
        tuning.healthInterval = 10
        tuning.lifxPoll = 5
        tuning.lanPoll = 2
        // The console, with a token: probed and read by a page all along (the console's invariants).
        let webPort = TestEnvironment.freePort()
        let webToken = "soak-console-\(UUID().uuidString)"
        tuning.web = "{listen: \"127.0.0.1:\(webPort)\", auth_token: \"\(webToken)\"}"
        func writeConfig() throws {
            try home.yaml(host: "127.0.0.1", port: broker.port, base: base, stateDir: stateDir, tuning: tuning, log: "warning")
                .writeForTest(toFile: configPath, replacing: true)
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

        let checker = SoakChecker(base: base, started: Date(), say: o.say)
        let probe = try await MQTTProbe.connect(port: broker.port)
        let (messages, feed) = AsyncStream.makeStream(of: MQTTProbe.Message.self)
        probe.stream { feed.yield($0) }
        try await probe.subscribe("#")
        let bridge = try ChildProcess(path: sim, arguments: ["bridge", "-c", configPath], outputFile: dir.appendingPathComponent("bridge.log").path)
        defer { bridge.terminate() }
        o.say("soak: broker 127.0.0.1:\(broker.port), bridge pid \(bridge.pid), files in \(dir.path)")

        let end = Date().addingTimeInterval(o.minutes * 60)
        let checking = Task { for await m in messages { await checker.see(m) } }
        try await waitUntil("the bridge's first states", timeout: 60) { await checker.hasState("lifx/desk") }

        // The schedule, run on this task; commands and samples beside it until `end`.
        let commands = Task { await Self.commands(o, probe: probe, base: base, checker: checker, until: end) }
        let samples = Task { await Self.samples(o, pid: bridge.pid, checker: checker, until: end) }
        // The page opens once; the first states on MQTT do not say the console is listening yet.
        try await PageClient.waitForListener(port: webPort)
        let console = Task { await Self.console(port: webPort, token: webToken, checker: checker, until: end) }
        var next = (reload: o.reloadEvery, broker: o.brokerRestartEvery, outage: o.outageEvery, lan: o.lanLeaveEvery, manage: o.manageEvery)
        var counts = (reload: 0, broker: 0, outage: 0, lan: 0, manage: 0)
        let t0 = Date()
        func now() -> Double { Date().timeIntervalSince(t0) }
        while Date() < end, bridge.isRunning {
            let t = now()
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
                bridge.signal(SIGHUP)
                await checker.faultEnds("nova", grace: 15)
                await checker.faultEnds("reload", grace: 20)
            } else if t >= next.broker {
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
                switch which {
                case "lifx": home.lifx = try await home.lifx.restarted()
                case "imp": home.imp = try await home.imp.restarted()
                case "livecoding": home.livecoding = try await home.livecoding.restarted()
                default: home.ha = try await home.ha.restarted()
                }
                // An adapter retries on its own back-off (up to a poll interval and more): its errors are
                // the outage's until it has had time to recover.
                await checker.faultEnds(which, grace: 45)
            } else if t >= next.manage {
                next.manage += o.manageEvery
                counts.manage += 1
                await checker.event("management \(counts.manage): virtual/outside renamed and back, virtual/kitchen's label set and removed")
                await Self.manage(probe: probe, base: base, checker: checker, round: counts.manage)
            } else if t >= next.lan {
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
        if !bridge.isRunning { await checker.breach("the bridge exited with status \(bridge.exitStatus ?? -1)") }
        await commands.value
        await samples.value
        await console.value
        // Time for the last commands' results (a LIFX request retries for up to ~30 s).
        try? await waitUntil("the last results", timeout: o.answerWithin) { await checker.openCommands == 0 }
        await checker.checkOverdue(olderThan: 0)
        await checker.checkAvailabilityExpectations(final: true)
        await checker.checkManagement()
        await checker.checkGroups()
        bridge.signal(SIGTERM)
        _ = await bridge.wait(timeout: 20)
        feed.finish()
        probe.close()
        checking.cancel()
        await home.stop()
        var report = await checker.report()
        report.figures.insert(contentsOf: [
            .init(name: "minutes", value: o.minutes, unit: "min"),
            .init(name: "config reloads", value: Double(counts.reload), unit: ""),
            .init(name: "broker restarts (half kill -9)", value: Double(counts.broker), unit: ""),
            .init(name: "upstream outages", value: Double(counts.outage), unit: ""),
            .init(name: "LAN departures", value: Double(counts.lan), unit: ""),
            .init(name: "management rounds (4 changes each)", value: Double(counts.manage), unit: ""),
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
    static func commands(_ o: SoakOptions, probe: MQTTProbe, base: String, checker: SoakChecker, until end: Date) async {
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
            await checker.sent(transaction, topic: "\(base)/\(device)/set")
            probe.publish("\(base)/\(device)/set", body)
            i += 1
            try? await Task.sleep(for: .seconds(gap))
        }
    }

    /// The console (docs/console.md), every 5 s: `/readyz` and `/metrics` with the token, and one page open
    /// all along (docs/testing.md, invariants 9–11).
    static func console(port: Int, token: String, checker: SoakChecker, until end: Date) async {
        var headers = HTTPFields()
        headers[.authorization] = "Bearer \(token)"
        let page = PageClient(port: port, headers: headers, keepFrames: false)
        defer { page.close() }
        let auth = [("Authorization", "Bearer \(token)")]
        while Date() < end {
            try? await Task.sleep(for: .seconds(5))
            let ready = try? HTTPProbe.request(port: port, "/readyz", timeout: 5)
            let metrics = try? HTTPProbe.request(port: port, "/metrics", headers: auth, timeout: 5)
            let ended = await page.ended(within: 0)
            await checker.console(readyz: ready.map { ($0.status, $0.body) }, metrics: metrics?.status == 200 ? metrics?.body : nil,
                                  pageEnded: ended.map { "\($0)" }, largestFrame: page.largestFrame)
        }
    }

    /// The bridge process's threads, open files and resident memory, every `sampleEvery` seconds.
    static func samples(_ o: SoakOptions, pid: pid_t, checker: SoakChecker, until end: Date) async {
        while Date() < end {
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
                await checker.sample(threads: threads, fds: fds, rssMB: rssKB / 1024)
            }
            try? await Task.sleep(for: .seconds(o.sampleEvery))
        }
    }
}
