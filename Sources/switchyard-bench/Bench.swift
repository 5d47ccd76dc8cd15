import ArgumentParser
import Foundation
import HomeAssistantSimulators
import LIFXSimulators
import Logging
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardSoak
import SwitchyardTestSupport
import UnixSignals

/// Devices whose state the benchmark drives directly through the core.
actor BenchAdapter: Adapter {
    nonisolated let id = "bench"
    let count: Int
    var context: AdapterContext?
    init(count: Int) { self.count = count }

    func run(context: AdapterContext) async throws {
        self.context = context
        let devices = (0..<count).map {
            DeviceDescriptor(id: "d\($0)", label: "Bench \($0)", configuredName: "d\($0)", category: .light,
                             capabilities: [.state(), .brightness()])
        }
        await context.setDevices(devices, authoritative: true)
        for d in devices { await context.update(d.id, ["state": "ON", "brightness": 0]) }
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws { await context.update(command.deviceID, command.fields) }
    func refresh(deviceID: String, context: AdapterContext) async throws {}
    func push(_ i: Int, brightness: Int) async { await context?.update("d\(i % count)", ["brightness": .number(Double(brightness))]) }
    var ready: Bool { context != nil }
}

struct Figure: Encodable {
    var scenario: String
    var name: String
    var value: Double
    var unit: String
    var ratio: Double?
    /// What `ratio` divides by, measured in the same run (raw libmosquitto unless said).
    var baseline: String?
}

@main
struct SwitchyardBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchyard-bench",
        abstract: "Measures the bridge against raw libmosquitto on a broker it starts itself (loopback).")

    @Option(help: "Scenarios to run: publish, ha-mirror, command-latency, startup, memory, console, lifx-budget, lifx-lan, groups, hostile, reconnect, scale, failover (default: all); soak (alone, --minutes); ha-scale (alone or named: a real Home Assistant, the venv of make test-ha).")
    var scenario: [String] = []
    @Flag(help: "Print the figures as JSON.") var json = false
    @Option(help: "State updates for the publish scenario.") var messages = 20_000
    @Option(help: "Simulated devices for publish, startup and memory.") var devices = 1_000
    @Option(help: "Commands for command-latency (each path).") var commands = 10_000
    @Option(help: "Seconds of command churn before reading memory.") var churnSeconds = 60.0
    @Option(help: "Commands a second to other lights while the console scenario measures (its churn).") var consoleChurn = 1000
    @Option(help: "Home Assistant entities mirrored during the memory scenario.") var haEntities = 5_000
    @Option(help: "Hostile payloads for the hostile scenario.") var hostilePayloads = 100_000
    @Option(help: "Broker restarts for the reconnect scenario.") var restarts = 20
    @Flag(help: "Measure a switchyard binary from before the console (SWITCHYARD_BIN): no web: section, memory measured once.")
    var preConsole = false
    @Option(help: "Minutes of the soak scenario (docs/testing.md \"The soak run\").") var minutes = 60.0
    @Option(help: "Device counts of the scale scenario, each with 5× as many HA entities (comma-separated).",
            transform: { s in try s.split(separator: ",").map { guard let n = Int($0.trimmingCharacters(in: .whitespaces)), n > 0 else { throw ValidationError("bad device count '\($0)'") }; return n } })
    var scaleDevices: [Int] = [1_000, 10_000, 20_000]
    @Option(help: "Seconds of command and HA churn in each process of the scale scenario before reading memory.") var scaleChurnSeconds = 20.0
    @Option(help: "Start-ups (and raw publishing runs) per size in the scale scenario; their medians make the ratio.") var scaleRepeats = 3
    @Option(name: [.customLong("ha-devices"), .customLong("ha-lights")],
            help: "Virtual devices (of --ha-device-kind) announced to Home Assistant in the ha-scale scenario.")
    var haDevices = 1_000
    @Option(help: "The ha-scale scenario's devices: light (one entity each) or multisensor (four: temperature, humidity, pressure, battery).",
            transform: { s in
                guard ["light", "multisensor"].contains(s) else { throw ValidationError("bad device kind '\(s)' (light or multisensor)") }
                return s
            })
    var haDeviceKind = "light"
    @Option(help: "Kills of the active instance in the failover scenario.") var kills = 10
    @Option(help: "Lights in the group of the groups scenario, a third each on the LIFX cloud and LAN simulators, the rest virtual.")
    var groupMembers = 20
    @Option(help: "Commands of each kind (group, one by one, scene recall) in the groups scenario.") var groupCommands = 300
    @Option(help: "The broker of the failover scenario: mosquitto or rabbitmq (RabbitMQ's MQTT plugin, a private node).")
    var failoverBroker = "mosquitto"

    /// `soak`: the demo's home under commands and a schedule of faults for `minutes`, invariants checked
    /// all along; exits non-zero on any breach. Stopped by SIGTERM or Ctrl-C, the run is cancelled: its
    /// bridge process and broker are stopped on the way out, and the bench exits 130.
    func soak() async throws {
        let options = SoakOptions.long(minutes: minutes).with(say: { line in print(line) })
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let finished = try await withThrowingTaskGroup(of: SoakReport?.self) { g in
            g.addTask { try await SoakRun.run(options) }
            g.addTask {
                for await signal in signals {
                    print("soak: \(signal), stopping")
                    break
                }
                return nil
            }
            defer { g.cancelAll() }
            return try await g.next() ?? nil
        }
        guard let report = finished else { throw ExitCode(130) }
        print("")
        for f in report.figures { print(f.line) }
        print(report.breaches.isEmpty ? "soak: no breach" : "soak: \(report.breaches.count) breaches:")
        for b in report.breaches { print("  \(b)") }
        if !report.breaches.isEmpty { throw ExitCode(1) }
    }

    static let brokerConfig = "max_inflight_messages 100\nset_tcp_nodelay true"

    func run() async throws {
        let all = ["publish", "ha-mirror", "command-latency", "startup", "memory", "console", "lifx-budget", "lifx-lan", "groups", "hostile", "reconnect",
                   "scale", "failover"]
        if scenario == ["soak"] { return try await soak() }
        // Only when named: it needs Home Assistant installed and runs for about ten minutes.
        if scenario == ["ha-scale"] { return report(try await haScaleFigures()) }
        let chosen = scenario.isEmpty ? all : scenario
        for s in chosen where !all.contains(s) && s != "ha-scale" {
            throw ValidationError("unknown scenario '\(s)' (known: \(all.joined(separator: ", ")), ha-scale)")
        }
        let broker = try await Broker.start(extraConfig: Self.brokerConfig)
        defer { broker.stop() }
        var figures: [Figure] = []
        let payload = #"{"brightness":42,"state":"ON"}"#

        // Baseline: raw libmosquitto, same payload size, QoS 1, retained, same topic count, same broker.
        let rawRate = try await rawPublishRate(port: broker.port, count: messages, topics: devices, payload: payload)
        figures.append(Figure(scenario: "baseline", name: "raw libmosquitto QoS1 retained publish→subscriber", value: rawRate, unit: "msg/s"))

        if chosen.contains("publish") {
            var delivered = 0
            let rate = try await bridgePublishRate(port: broker.port, delivered: &delivered)
            figures.append(Figure(scenario: "publish", name: "bridge state updates→subscriber (final values)", value: rate, unit: "upd/s",
                                  ratio: rate / rawRate))
            figures.append(Figure(scenario: "publish", name: "messages delivered for \(messages) updates (coalesced)", value: Double(delivered), unit: "msgs"))
        }
        if chosen.contains("ha-mirror") {
            let rate = try await haMirrorRate(port: broker.port)
            figures.append(Figure(scenario: "ha-mirror", name: "HA state changes→subscriber (mirrored topics)", value: rate, unit: "chg/s",
                                  ratio: rate / rawRate))
        }
        if chosen.contains("command-latency") {
            let (p50, p99, max) = try await commandLatency(port: broker.port)
            figures.append(Figure(scenario: "command-latency", name: "virtual /set → state p50", value: p50, unit: "ms"))
            figures.append(Figure(scenario: "command-latency", name: "virtual /set → state p99", value: p99, unit: "ms"))
            figures.append(Figure(scenario: "command-latency", name: "virtual /set → state max", value: max, unit: "ms"))
            let (l50, l99, lmax) = try await lifxCommandLatency(port: broker.port)
            figures.append(Figure(scenario: "command-latency", name: "lifx /set → request at the LIFX simulator p50", value: l50, unit: "ms"))
            figures.append(Figure(scenario: "command-latency", name: "lifx /set → request at the LIFX simulator p99", value: l99, unit: "ms"))
            figures.append(Figure(scenario: "command-latency", name: "lifx /set → request at the LIFX simulator max", value: lmax, unit: "ms"))
        }
        if chosen.contains("lifx-budget") {
            let (slider, fanout) = try await lifxBudget(port: broker.port)
            figures.append(Figure(scenario: "lifx-budget", name: "requests for 50 brightness commands in 1 s, one light", value: Double(slider),
                                  unit: "req"))
            figures.append(Figure(scenario: "lifx-budget", name: "requests for 50 lights given one command each at once", value: Double(fanout),
                                  unit: "req"))
        }
        if chosen.contains("lifx-lan") { figures += try await lifxLANFigures(port: broker.port) }
        if chosen.contains("groups") { figures += try await groupsFigures(port: broker.port) }
        if chosen.contains("startup") || chosen.contains("memory") {
            figures += try await processFigures(port: broker.port, startup: chosen.contains("startup"), memory: chosen.contains("memory"), rawRate: rawRate)
        }
        if chosen.contains("console") { figures += try await consoleFigures(port: broker.port) }
        if chosen.contains("hostile") { figures += try await hostileFigures(port: broker.port) }
        if chosen.contains("scale") { figures += try await scaleFigures(port: broker.port) }
        if chosen.contains("reconnect") { figures += try await reconnectFigures() }
        if chosen.contains("failover") { figures += try await failoverFigures() }
        if chosen.contains("ha-scale") { figures += try await haScaleFigures() }
        report(figures)
    }

    func report(_ figures: [Figure]) {
        if json {
            let enc = JSONEncoder()
            enc.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]   // one line: easy to pick out of a log, to append to a file, to jq
            print(String(decoding: try! enc.encode(figures), as: UTF8.self))
            // Out whole now: what the process writes at its exit straight to stderr (a sanitizer's report)
            // would otherwise land between two blocks of a line still in stdout's buffer.
            fflush(nil)
            return
        }
        for f in figures {
            let ratio = f.ratio.map { "   ratio to \(f.baseline ?? "raw"): " + String(format: "%.2f", $0) } ?? ""
            func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
            let value = String(format: "%.2f", f.value)
            print(pad(f.scenario, 16) + pad(f.name, 56) + String(repeating: " ", count: max(0, 12 - value.count)) + value + " " + pad(f.unit, 6) + ratio)
        }
    }

    func rawPublishRate(port: Int, count: Int, topics: Int, payload: String) async throws -> Double {
        Double(count) / (try await rawPublishMs(port: port, count: count, topics: topics, payload: payload) / 1000)
    }

    /// The bridge in-process over the benchmark's broker (the tests' helper: real transport and engine).
    func withBridge<R: Sendable>(port: Int, base: String, adapter: any Adapter, _ body: (InProcessBridge) async throws -> R) async throws -> R {
        var options = InProcessBridge.Options()
        options.clientID = "bench-\(base)"
        options.discovery = false
        options.maxEvents = 100_000
        options.minDelay = 1
        options.maxDelay = 30
        return try await InProcessBridge.with(port: port, base: base, adapters: [adapter], options: options, body)
    }

    /// An upstream's adapter built as the daemon builds it: its YAML section read through the registration list.
    func adapter(_ yaml: String) throws -> any Adapter {
        do {
            let c = try SwitchyardConfig.parse(yaml: yaml, file: "(bench)", upstreams: upstreams)
            guard let u = c.upstreams.first else { throw BenchError("no upstream section in \(yaml)") }
            return u.makeAdapter()
        } catch let e as ConfigErrors {
            throw BenchError("bench config: \(e.description)")
        }
    }

    func bridgePublishRate(port: Int, delivered: inout Int) async throws -> Double {
        let base = "bench\(UUID().uuidString.prefix(4).lowercased())"
        let adapter = BenchAdapter(count: devices)
        let sub = try await CountingSubscriber(port: port, filters: ["\(base)/bench/+"], trackTopics: true)
        defer { sub.close() }
        let (messages, devices) = (self.messages, self.devices)
        let (rate, count) = try await withBridge(port: port, base: base, adapter: adapter) { _ in
            guard await sub.waitForTopics(devices, timeout: 60) else { throw BenchError("publish: initial states missing") }
            let before = sub.count
            var final: [String: String] = [:]
            let start = Date()
            for i in 0..<messages {
                let value = 1 + (i / devices) % 99
                await adapter.push(i, brightness: value)
                final["\(base)/bench/d\(i % devices)"] = "\"brightness\":\(value),"
            }
            // The retained outbox keeps only the latest value per topic, so a burst may deliver fewer
            // messages than updates; the figure is updates per second until every final value arrived.
            guard await sub.waitForFinal(final, timeout: 120) else { throw BenchError("publish: final states did not all arrive") }
            return (Double(messages) / Date().timeIntervalSince(start), sub.count - before)
        }
        delivered = count
        return rate
    }

    func commandLatency(port: Int) async throws -> (Double, Double, Double) {
        let base = "lat\(UUID().uuidString.prefix(4).lowercased())"
        let adapter = BenchAdapter(count: 1)
        let commands = self.commands
        var samples = try await withBridge(port: port, base: base, adapter: adapter) { _ in
            let sub = try await CountingSubscriber(port: port, filters: ["\(base)/bench/d0"])
            defer { sub.close() }
            let pub = try await MQTTProbe.connect(port: port)
            defer { pub.close() }
            var samples: [Double] = []
            for i in 0..<commands {
                let value = 1 + i % 99
                let waiter = await sub.expect(topic: "\(base)/bench/d0", containing: "\"brightness\":\(value),", timeout: 5)
                let t0 = DispatchTime.now().uptimeNanoseconds
                pub.publish("\(base)/bench/d0/set", #"{"brightness": \#(value)}"#)
                guard await waiter.value else { throw BenchError("command \(i) got no state") }
                samples.append(Double(DispatchTime.now().uptimeNanoseconds - t0) / 1e6)
                try await Task.sleep(for: .milliseconds(1))   // spaced out: no coalescing
            }
            return samples
        }
        samples.sort()
        func pct(_ p: Double) -> Double { samples[min(samples.count - 1, Int(Double(samples.count) * p))] }
        return (pct(0.5), pct(0.99), samples.last ?? 0)
    }

    /// The real `switchyard` process with `devices` virtual lights: start-up time (also as a ratio to raw
    /// libmosquitto publishing as many retained messages, at the baseline's rate of this run) and memory
    /// (with a Home Assistant mirror of `haEntities` entities changing under churn): the same run twice,
    /// the console off, then on with one page open all along (docs/console.md).
    func processFigures(port: Int, startup: Bool, memory: Bool, rawRate: Double) async throws -> [Figure] {
        guard memory else { return startupFigures(try await measureProcess(port: port, devices: devices, entities: 0, churn: 0), rawRate: rawRate) }
        let sim = try await HomeAssistantSimulator.start(token: "bench", entities: Self.memoryEntities(haEntities))
        return try await withTeardown {
            let off = try await measureProcess(port: port, devices: devices, ha: (sim, haEntities), churn: churnSeconds)
            var out = (startup ? startupFigures(off, rawRate: rawRate) : []) + memoryFigures(off, console: false)
            if preConsole { return out }
            let on = try await measureProcess(port: port, devices: devices, ha: (sim, haEntities), churn: churnSeconds, console: true)
            out += memoryFigures(on, console: true)
            out.append(Figure(scenario: "memory", name: "console enabled + one page open − disabled (VmHWM; goal ≤ 8 MB)", value: on.hwm - off.hwm, unit: "MB"))
            return out
        } teardown: { await sim.stop() }
    }

    func startupFigures(_ run: ProcessRun, rawRate: Double) -> [Figure] {
        let rawMs = Double(devices) / rawRate * 1000
        return [Figure(scenario: "startup", name: "process start → \(devices) retained states", value: run.statesMs, unit: "ms", ratio: run.statesMs / rawMs)]
    }

    func memoryFigures(_ run: ProcessRun, console: Bool) -> [Figure] {
        let with = console ? ", console + one page open" : ", console off"
        return [
            Figure(scenario: "memory", name: "VmHWM, \(devices) devices + HA mirror of \(haEntities) entities, after \(Int(churnSeconds)) s churn (\(run.churned) commands and HA changes; \(run.linkage)\(with))",
                   value: run.hwm, unit: "MB"),
            Figure(scenario: "memory", name: "VmRSS steady", value: run.rss, unit: "MB"),
            // Where the resident pages are: heap and stacks (RssAnon) against mapped code and data of the binary and shared libraries (RssFile).
            Figure(scenario: "memory", name: "  of which RssAnon (heap, stacks)", value: run.anon, unit: "MB"),
            Figure(scenario: "memory", name: "  of which RssFile (binary, shared libraries)", value: run.file, unit: "MB"),
        ]
    }

    /// The LIFX adapter with a simulated cloud (loopback HTTP) in-process, over the benchmark's broker.
    func withLIFXBridge<R: Sendable>(port: Int, base: String, lights: [LIFXCloudSimulator.Light], minInterval: Double?, rateLimit: Int,
                                     _ body: (LIFXCloudSimulator) async throws -> R) async throws -> R {
        let token = "bench-token"
        let sim = try await LIFXCloudSimulator.start(token: token, lights: lights)
        sim.setRateLimit(rateLimit, window: 60)
        let lifx = try adapter("lifx: {token: \(token), api_url: \"\(sim.apiURL)\", poll_interval: 3600\(minInterval.map { ", min_interval: \($0)" } ?? "")}")
        return try await withTeardown {
            try await withBridge(port: port, base: base, adapter: lifx) { _ in try await body(sim) }
        } teardown: {
            await sim.stop()
        }
    }

    static func benchLights(_ n: Int) -> [LIFXCloudSimulator.Light] {
        (0..<n).map { i in
            LIFXCloudSimulator.Light(id: String(format: "d073d5%06x", i), label: "Bench \(i)", group: ("g", "Bench"), location: ("l", "Home"),
                                     power: "on", brightness: 0.5)
        }
    }

    /// `/set` published → the request read by the LIFX simulator, spaced out (no merging), with
    /// `min_interval: 0` and the simulator's budget raised so that the budget does not dominate.
    func lifxCommandLatency(port: Int) async throws -> (Double, Double, Double) {
        let base = "lfx\(UUID().uuidString.prefix(4).lowercased())"
        let commands = self.commands
        var samples = try await withLIFXBridge(port: port, base: base, lights: Self.benchLights(1), minInterval: 0,
                                               rateLimit: 10_000_000) { sim in
            let sub = try await CountingSubscriber(port: port, filters: ["\(base)/lifx/bench_0"])
            defer { sub.close() }
            guard await sub.waitForCount(1, timeout: 30) else { throw BenchError("lifx: the light was not listed") }
            let pub = try await MQTTProbe.connect(port: port)
            defer { pub.close() }
            var samples: [Double] = []
            for i in 0..<commands {
                let before = sim.server.receivedCount
                let t0 = DispatchTime.now().uptimeNanoseconds
                pub.publish("\(base)/lifx/bench_0/set", #"{"brightness": \#(1 + i % 99)}"#)
                let deadline = Date().addingTimeInterval(5)
                while sim.server.receivedCount == before {
                    if Date() > deadline { throw BenchError("lifx command \(i) never reached the simulator") }
                    try await Task.sleep(for: .microseconds(100))
                }
                let at = sim.server.received[before].at
                samples.append(Double(at &- t0) / 1e6)
                try await Task.sleep(for: .milliseconds(2))   // the answer is back; spaced out: no merging
            }
            return samples
        }
        samples.sort()
        func pct(_ p: Double) -> Double { samples[min(samples.count - 1, Int(Double(samples.count) * p))] }
        return (pct(0.5), pct(0.99), samples.last ?? 0)
    }

    /// Requests the LIFX cloud receives, with default settings, for a slider (50 values over one
    /// second on one light) and for 50 lights each given one command at once.
    func lifxBudget(port: Int) async throws -> (Int, Int) {
        let base = "lfb\(UUID().uuidString.prefix(4).lowercased())"
        // Default settings: min_interval as a user gets it.
        return try await withLIFXBridge(port: port, base: base, lights: Self.benchLights(50), minInterval: nil, rateLimit: 120) { sim in
            let sub = try await CountingSubscriber(port: port, filters: ["\(base)/lifx/+"], trackTopics: true)
            defer { sub.close() }
            guard await sub.waitForTopics(50, timeout: 30) else { throw BenchError("lifx-budget: lights not listed") }
            let pub = try await MQTTProbe.connect(port: port)
            defer { pub.close() }
            func actions() -> Int { sim.requests.filter { $0.method != "GET" }.count }
            func settle(_ check: () -> Bool) async throws {
                let deadline = Date().addingTimeInterval(30)
                while !check() {
                    if Date() > deadline { throw BenchError("lifx-budget: commands did not all reach the simulator") }
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await Task.sleep(for: .seconds(1))   // anything still queued would have gone
            }
            let start = Date()
            for i in 1...50 {
                let due = start.addingTimeInterval(Double(i - 1) * 0.9 / 49)
                if due > Date() { try await Task.sleep(for: .seconds(due.timeIntervalSinceNow)) }
                pub.publish("\(base)/lifx/bench_0/set", #"{"brightness": \#(i)}"#)
            }
            try await settle { sim.light("d073d5000000")?.brightness == LIFXCloudSimulator.Light.q(0.5) }
            let slider = actions()
            for i in 0..<50 { pub.publish("\(base)/lifx/bench_\(i)/set", "OFF") }
            try await settle { sim.lights.allSatisfy { $0.power == "off" } }
            let fanout = actions() - slider
            return (slider, fanout)
        }
    }

    /// State changes made inside the simulated Home Assistant (`subscribe_entities` diffs over a real
    /// WebSocket) until every entity's final state has reached a subscriber as `<base>/ha/.../state`.
    func haMirrorRate(port: Int) async throws -> Double {
        let base = "ha\(UUID().uuidString.prefix(4).lowercased())"
        let entities = (0..<devices).map { HomeAssistantSimulator.Entity("input_number.n\($0)", "0", ["friendly_name": .string("N \($0)")]) }
        let sim = try await HomeAssistantSimulator.start(token: "bench", entities: entities)
        let sub = try await CountingSubscriber(port: port, filters: ["\(base)/ha/input_number/+/state"], trackTopics: true)
        defer { sub.close() }
        let mirror = try adapter("ha: {url: \"\(sim.url)\", token: bench, publish_attributes: false}")
        let (messages, devices) = (self.messages, self.devices)
        let rate = try await withBridge(port: port, base: base, adapter: mirror) { _ in
            guard await sub.waitForTopics(devices, timeout: 60) else { throw BenchError("ha-mirror: the snapshot did not arrive") }
            var final: [String: String] = [:]
            let start = Date()
            for i in 1...messages {
                let k = i % devices
                sim.set("input_number.n\(k)", state: "\(i)")
                final["\(base)/ha/input_number/n\(k)/state"] = "\(i)"
            }
            guard await sub.waitForFinal(final, timeout: 120) else { throw BenchError("ha-mirror: final states did not all arrive") }
            return Double(messages) / Date().timeIntervalSince(start)
        }
        await sim.stop()
        return rate
    }
}
