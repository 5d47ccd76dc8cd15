import Foundation
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport

extension SwitchyardBench {
    /// `groups`: the `switchyard` process with a group of `groupMembers` lights over three upstreams (virtual
    /// lights; LIFX lights in the cloud simulator; LIFX lights on the LAN simulator, a loopback UDP peer; one
    /// LIFX adapter for both) and two scenes that set every member. Each round, in turn: the group's `/set`,
    /// the same change as one `/set` per member published back to back by a client (the baseline, in the same
    /// run), and a scene's recall (`/set` `ACTIVATE`), each with transactions, `groupCommands` rounds spaced
    /// past the LAN's 20 datagrams a second to a light. Per command: `/set` → its result (the baseline: the
    /// last member's result), `/set` → the last member's upstream request (the cloud simulator's read of the
    /// HTTP request, the LAN peer's read of the datagram, a virtual light's new state at a subscriber), the
    /// requests each upstream received, and how often the group's state was published; then the process's
    /// memory. `min_interval: 0` and the simulated cloud's budget raised, as in `command-latency`.
    func groupsFigures(port: Int) async throws -> [Figure] {
        let n = max(3, groupMembers)
        let cloudN = n / 3, lanN = n / 3, virtualN = n - 2 * (n / 3)
        let rounds = max(1, groupCommands)
        let token = "bench-token"
        let cloud = try await LIFXCloudSimulator.start(token: token, lights: (0..<cloudN).map { i in
            LIFXCloudSimulator.Light(id: String(format: "d073d5c1%04x", i), label: "Cloud \(i)", group: ("g", "Bench"), location: ("l", "Home"),
                                     power: "on", brightness: 0.5)
        })
        cloud.setRateLimit(10_000_000, window: 60)
        return try await withTeardown {
            let lan = try LIFXLANSimulator.start(devices: (0..<lanN).map {
                LIFXLANSimulator.Device(serial: String(format: "d073d5e1%04x", $0), label: "LAN \($0)", product: 27)
            })
            defer { lan.stop() }
            let run = GroupsRun(n: n, virtualN: virtualN, cloudN: cloudN, lanN: lanN)
            // The LAN peer's Set datagrams (SetColor, SetLightPower), stamped when it read them.
            let lanTask = Task {
                for await a in lan.arrivals where !a.dropped && (a.type == 102 || a.type == 117) { run.lanSets.withLock { $0.append(a.nanos) } }
            }
            defer { lanTask.cancel() }
            let base = "grp\(UUID().uuidString.prefix(4).lowercased())"
            let bridge = try BridgeUnderFault.start(port: port, devices: virtualN, base: base, extraYAML: run.yaml(cloudURL: "\(cloud.apiURL)", token: token, lanPort: lan.port))
            defer { bridge.child.terminateAndReap() }
            let watch = try await MQTTProbe.connect(port: port)
            defer { watch.close() }
            watch.stream { m in run.saw(m.topic, m.payload) }
            try await watch.subscribe(["\(base)/+/+/result", "\(base)/virtual/+", "\(base)/group/bench"])
            do {
                try await waitUntil("every member of the group online", timeout: 90) { run.everyMemberOnline("\(base)/group/bench") }
            } catch {
                throw BenchError("groups: the group's members did not all come online: \(run.latest("\(base)/group/bench") ?? "no state"); see \(bridge.dir.path)/out.log")
            }
            let pub = try await MQTTProbe.connect(port: port)
            defer { pub.close() }
            var samples: [GroupsRun.Kind: [GroupsRun.Sample]] = [:]
            var hwmStarted = 0.0
            // Two rounds to warm up (first requests, connections), not counted.
            for i in -2..<rounds {
                if i == 0 { hwmStarted = bridge.mb("VmHWM") }
                for kind in GroupsRun.Kind.allCases {
                    let s = try await run.round(kind, i, base: base, pub: pub, cloud: cloud)
                    if i >= 0 { samples[kind, default: []].append(s) }
                }
            }
            guard bridge.child.isRunning else { throw BenchError("groups: the bridge died") }
            let status = bridge.proc("status")
            return run.figures(samples, rounds: rounds, hwmStarted: hwmStarted, hwm: bridge.mb("VmHWM", in: status), rss: bridge.mb("VmRSS", in: status))
        } teardown: {
            await cloud.stop()
        }
    }
}

/// One run of the `groups` scenario: its members, what the watcher saw (stamped on arrival), and one round
/// of each kind of command.
final class GroupsRun: Sendable {
    enum Kind: String, CaseIterable, Sendable {
        case group, separate, scene
    }

    struct Sample {
        /// `/set` → the result (the last of the members' results, one by one), ms.
        var result: Double
        /// `/set` → the last member's upstream request, ms.
        var upstream: Double
        /// The same per upstream: the last virtual light's state, the last cloud request, the last LAN datagram.
        var byUpstream: [Double]
        var cloudRequests: Int
        var lanDatagrams: Int
        var groupStates: Int
    }

    struct Seen {
        var topic: String
        var payload: String
        var nanos: UInt64
    }

    let n: Int, virtualN: Int, cloudN: Int, lanN: Int
    let members: [String]
    let seen = Locked<[Seen]>([])
    let lanSets = Locked<[UInt64]>([])

    init(n: Int, virtualN: Int, cloudN: Int, lanN: Int) {
        self.n = n
        self.virtualN = virtualN
        self.cloudN = cloudN
        self.lanN = lanN
        members = (0..<virtualN).map { "virtual/l\($0)" } + (0..<cloudN).map { "lifx/cloud_\($0)" } + (0..<lanN).map { "lifx/lan_\($0)" }
    }

    /// The LIFX adapter (cloud and LAN), the group and the two scenes, for the process's config.
    func yaml(cloudURL: String, token: String, lanPort: Int) -> String {
        var y = """
        lifx:
          token: \(token)
          api_url: "\(cloudURL)"
          poll_interval: 3600
          min_interval: 0
          lan: {enabled: true, hosts: ["127.0.0.1:\(lanPort)"], broadcast: [], poll_interval: 3600}
        groups:
          bench:
            members: [\(members.joined(separator: ", "))]
        scenes:

        """
        for (name, level) in [("low", 25), ("high", 75)] {
            y += "  bench_\(name):\n    transition: 0\n    states:\n"
            for m in members { y += "      \(m): {state: ON, brightness: \(level)}\n" }
        }
        return y
    }

    func saw(_ topic: String, _ payload: String) {
        let nanos = DispatchTime.now().uptimeNanoseconds
        seen.withLock { $0.append(Seen(topic: topic, payload: payload, nanos: nanos)) }
    }

    func latest(_ topic: String) -> String? { seen.withLock { $0.last { $0.topic == topic }?.payload } }

    func everyMemberOnline(_ topic: String) -> Bool {
        guard let p = latest(topic), let members = (try? JSONValue.parse(p))?["members"]?.objectValue else { return false }
        return members.count == n && members.values.allSatisfy { $0 == "online" }
    }

    /// One command of `kind` (round `i`), waited for until every member has it; then 60 ms of quiet, past
    /// the 50 ms between two datagrams to one LAN light, and during which the group's state settles.
    func round(_ kind: Kind, _ i: Int, base: String, pub: MQTTProbe, cloud: LIFXCloudSimulator) async throws -> Sample {
        // Every kind sets a brightness the one before did not, so that every member changes.
        let r = i + 2
        let level: Int
        switch kind {
        case .group: level = 10 + r % 10
        case .separate: level = 40 + r % 10
        case .scene: level = r % 2 == 0 ? 25 : 75
        }
        let tx = "\(kind.rawValue)\(r)"
        let fields = #""state": "ON", "brightness": \#(level), "transition": 0, "transaction": "\#(tx)""#
        let (cloudBefore, lanBefore, seenBefore) = (cloud.server.receivedCount, lanSets.withLock { $0.count }, seen.withLock { $0.count })
        let scene = "\(base)/scene/bench_\(level == 25 ? "low" : "high")"
        let resultTopics: Set<String>
        let t0 = DispatchTime.now().uptimeNanoseconds
        switch kind {
        case .group:
            pub.publish("\(base)/group/bench/set", "{\(fields)}")
            resultTopics = ["\(base)/group/bench/result"]
        case .separate:
            for m in members { pub.publish("\(base)/\(m)/set", "{\(fields)}") }
            resultTopics = Set(members.map { "\(base)/\($0)/result" })
        case .scene:
            pub.publish("\(scene)/set", #"{"activate": true, "transaction": "\#(tx)"}"#)
            resultTopics = ["\(scene)/result"]
        }
        let virtualPrefix = "\(base)/virtual/"
        let needle = #""transaction":"\#(tx)""#
        // Every result and every virtual light's new state seen, every LAN light's datagram read (the results
        // come after the upstreams answered, so the requests have arrived by then). Read every millisecond,
        // only what is new: the arrival times are stamped when the messages come, and the bench's own work
        // shares the machine's two cores with the bridge.
        let deadline = Date().addingTimeInterval(20)
        var results: [String: Seen] = [:], states: [String: UInt64] = [:]
        var scanned = seenBefore
        while true {
            let fresh = seen.withLock { Array($0.dropFirst(scanned)) }
            scanned += fresh.count
            for s in fresh {
                if resultTopics.contains(s.topic) {
                    if results[s.topic] == nil && s.payload.contains(needle) { results[s.topic] = s }
                } else if s.topic.hasPrefix(virtualPrefix), states[s.topic] == nil,
                          (try? JSONValue.parse(s.payload))?["brightness"]?.doubleValue == Double(level) {
                    states[s.topic] = s.nanos
                }
            }
            let lanSeen = lanSets.withLock { $0.count } - lanBefore
            if results.count == resultTopics.count && states.count == virtualN && lanSeen >= lanN { break }
            if Date() > deadline {
                throw BenchError("groups: \(kind) \(tx): \(results.count) of \(resultTopics.count) results, \(states.count) of \(virtualN) virtual states, \(lanSeen) of \(lanN) LAN datagrams after 20 s")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
        if let bad = results.values.first(where: { !$0.payload.contains(#""status":"ok""#) }) {
            throw BenchError("groups: \(kind) \(tx) answered \(bad.topic) \(bad.payload)")
        }
        let resultAt = results.values.map(\.nanos).max()!, virtualAt = states.values.max() ?? 0
        try await Task.sleep(for: .milliseconds(60))
        let requests = cloud.server.received.dropFirst(cloudBefore).filter { $0.method != "GET" && $0.at >= t0 }
        let lan = lanSets.withLock { Array($0.dropFirst(lanBefore)) }
        let groupStates = seen.withLock { $0.dropFirst(seenBefore).filter { $0.topic == "\(base)/group/bench" }.count }
        let lastUpstream = max(virtualAt, requests.map(\.at).max() ?? 0, lan.max() ?? 0)
        func ms(_ at: UInt64) -> Double { at > t0 ? Double(at - t0) / 1e6 : 0 }
        return Sample(result: ms(resultAt), upstream: ms(lastUpstream),
                      byUpstream: [ms(virtualAt), ms(requests.map(\.at).max() ?? 0), ms(lan.max() ?? 0)],
                      cloudRequests: requests.count, lanDatagrams: lan.count, groupStates: groupStates)
    }

    func figures(_ samples: [Kind: [Sample]], rounds: Int, hwmStarted: Double, hwm: Double, rss: Double) -> [Figure] {
        func pct(_ xs: [Double], _ p: Double) -> Double {
            let s = xs.sorted()
            return s.isEmpty ? 0 : s[min(s.count - 1, Int(Double(s.count) * p))]
        }
        func mean(_ xs: [Int]) -> Double { xs.isEmpty ? 0 : Double(xs.reduce(0, +)) / Double(xs.count) }
        let what = "\(n) lights (\(virtualN) virtual, \(cloudN) LIFX cloud, \(lanN) LIFX LAN)"
        let label: [Kind: String] = [.separate: "one by one (\(n) /set back to back)", .group: "group /set", .scene: "scene recall"]
        var out = [Figure(scenario: "groups", name: "members: \(what), \(rounds) commands of each kind", value: Double(n), unit: "lights")]
        for (result, key) in [(true, \Sample.result), (false, \Sample.upstream)] {
            let baseline = (samples[.separate] ?? []).map { $0[keyPath: key] }
            for kind in [Kind.separate, .group, .scene] {
                let xs = (samples[kind] ?? []).map { $0[keyPath: key] }
                let path = !result ? "→ the last member's upstream request" : kind == .separate ? "→ the last member's result" : "→ its result"
                for (p, name) in [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")] {
                    let v = pct(xs, p)
                    out.append(Figure(scenario: "groups", name: "\(kind == .separate ? "baseline: " : "")\(label[kind]!) \(path) \(name)", value: v, unit: "ms",
                                      ratio: kind == .separate ? nil : v / pct(baseline, p), baseline: kind == .separate ? nil : "one by one"))
                }
            }
        }
        // Which upstream is last: the median of each one's last request (a virtual light's: its new state).
        for kind in [Kind.separate, .group, .scene] {
            for (u, upstream) in ["virtual state", "LIFX cloud request", "LIFX LAN datagram"].enumerated() {
                let xs = (samples[kind] ?? []).map { $0.byUpstream[u] }
                out.append(Figure(scenario: "groups", name: "\(label[kind]!) → the last \(upstream) p50", value: pct(xs, 0.5), unit: "ms"))
            }
        }
        for kind in [Kind.separate, .group, .scene] {
            let s = samples[kind] ?? []
            out.append(Figure(scenario: "groups", name: "LIFX cloud HTTP requests per command: \(label[kind]!)", value: mean(s.map(\.cloudRequests)), unit: "req"))
            out.append(Figure(scenario: "groups", name: "LIFX LAN Set datagrams per command: \(label[kind]!)", value: mean(s.map(\.lanDatagrams)), unit: "dgram"))
            out.append(Figure(scenario: "groups", name: "group state publishes per command: \(label[kind]!), mean", value: mean(s.map(\.groupStates)), unit: "msgs"))
            out.append(Figure(scenario: "groups", name: "group state publishes per command: \(label[kind]!), max", value: Double(s.map(\.groupStates).max() ?? 0), unit: "msgs"))
        }
        out += [
            Figure(scenario: "groups", name: "bridge VmHWM after start and warm-up", value: hwmStarted, unit: "MB"),
            Figure(scenario: "groups", name: "bridge VmHWM after the run", value: hwm, unit: "MB"),
            Figure(scenario: "groups", name: "bridge VmRSS after the run", value: rss, unit: "MB"),
        ]
        return out
    }
}
