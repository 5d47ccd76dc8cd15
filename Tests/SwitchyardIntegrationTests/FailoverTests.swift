import Foundation
import Glibc
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Two `switchyard run` processes of one standby group (design.md §18) against one broker, the virtual
/// adapter and the LIFX cloud simulator, under commands with transactions at 20 a second: what a client
/// sees through a kill -9, a pause, a SIGTERM and a broker restart, and what the upstream sees of each
/// instance (the simulator counts requests by the `X-Switchyard-Instance` header the HTTP client sends).
/// The same scenarios run over Mosquitto (`FailoverTests`) and RabbitMQ's MQTT plugin
/// (`FailoverRabbitMQTests`), each suite's tests in parallel.
final class FailoverHarness: @unchecked Sendable {
    static var keepalive: Double { Double(FailoverRig.keepalive) }
    let rig: FailoverRig
    let lifx: LIFXCloudSimulator
    var broker: any TestBroker { rig.broker }

    init(rig: FailoverRig, lifx: LIFXCloudSimulator) {
        self.rig = rig
        self.lifx = lifx
    }

    static func with(_ kind: BrokerKind, extra: String = "", _ body: (FailoverHarness) async throws -> Void) async throws {
        let broker = try await kind.start()
        defer { broker.stop() }
        let lifx = try await LIFXCloudSimulator.start(token: "t", lights: LIFXCloudSimulator.demoLights())
        try await withTeardown {
            try await FailoverRig.with(broker: broker, lifxURL: lifx.apiURL, more: extra) { rig in
                try await body(FailoverHarness(rig: rig, lifx: lifx))
            }
        } teardown: {
            await lifx.stop()
        }
    }

    /// Requests the cloud simulator got from an instance, in all or since `since` (its monotonic reading,
    /// `now()`).
    func upstreamRequests(from name: String, since: UInt64 = 0) -> Int {
        lifx.requests.filter { $0.headers["x-switchyard-instance"] == name && $0.at >= since }.count
    }

    /// The simulator's clock, for `upstreamRequests(since:)`.
    func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    /// The longest a standby can take to be active after the active instance went silent (paused, cut off):
    /// the broker's wait for a silent connection (`BrokerKind.keepaliveGrace`, from each broker's source),
    /// the takeover delay with the instance's spread (up to 1.5 × the delay), and 2 s to connect and say so.
    var takeoverAfterSilence: Double {
        broker.kind.keepaliveGrace(Self.keepalive) + FailoverRig.takeoverDelay * 1.5 + 2
    }
}

/// The scenarios, each over a broker of the given kind.
enum Failover {
    /// kill -9 of the active instance: the other serves within keepalive × 1.5 + 2 s; every command sent before,
    /// during and after the gap is answered, twice only for the few the dead one had in flight; the lamp's
    /// state is not lost.
    static func aKilledActiveIsReplaced(over kind: BrokerKind) async throws {
        try await FailoverHarness.with(kind) { h in
            let rig = h.rig
            try rig.start("a")
            try await rig.waitActive("a")
            try rig.start("b")
            try await rig.waitRole("b", "standby")
            let commands = rig.commander()
            try await Task.sleep(for: .seconds(2))
            // The cloud answers slowly from here: the LIFX commands of the last 1.5 s before the kill are in
            // flight at the dead instance, taken from the broker and never answered by it.
            h.lifx.setDelay(1.5)
            try await Task.sleep(for: .seconds(1))
            let killedAt = Date()
            rig.signal("a", SIGKILL)
            try await rig.waitActive("b", timeout: FailoverHarness.keepalive * 1.5 + 2)
            let servingAfter = Date().timeIntervalSince(killedAt)
            h.lifx.setDelay(0)
            try await Task.sleep(for: .seconds(3))
            commands.cancel()
            _ = await commands.value
            let twice = try await rig.everyCommandAnswered()
            let sent = rig.sent
            // Twice only around the kill: commands the dead instance had in flight (at-least-once, docs).
            let aroundKill = sent.filter { abs($0.at.timeIntervalSince(killedAt)) < 2 }.map(\.transaction)
            #expect(Set(twice.keys).isSubset(of: Set(aroundKill)), "answered twice away from the kill: \(twice)")
            #expect(twice.count <= 10, "\(twice.count) commands answered twice")
            let takeover = try #require(rig.takeovers.last)
            #expect(takeover["data"]?["from"] == "a" && takeover["data"]?["to"] == "b", "\(takeover)")
            // The lamp ends where its last command put it.
            let lastLamp = try #require(sent.last { $0.topic.hasSuffix("/virtual/lamp/set") })
            let n = Int(lastLamp.transaction.dropFirst())!
            try await waitUntil("the lamp's last state (brightness \(FailoverRig.brightness(n)))") {
                rig.lamp?["brightness"] == JSONValue(FailoverRig.brightness(n))
            }
            print("failover (\(kind)): kill -9 → b active after \(String(format: "%.2f", servingAfter)) s; \(sent.count) commands, \(twice.count) answered twice")
        }
    }

    /// SIGSTOP of the active for 20 s, then SIGCONT: the other took over; the paused one stands down, sends
    /// no upstream request after it resumes, and nobody takes over again for 30 s.
    static func aPausedActiveStandsDown(over kind: BrokerKind) async throws {
        try await FailoverHarness.with(kind) { h in
            let rig = h.rig
            try rig.start("a")
            try await rig.waitActive("a")
            try rig.start("b")
            try await rig.waitRole("b", "standby")
            // b believes the claim it read at its connect (retained) once a says it again, live, when b asks:
            // paused before that, a would be taken over as an instance gone quiet (`confirm_within`), while its
            // claim stood until the broker gave up on it.
            let bCame = try #require(rig.said("b", "standby", after: .distantPast))
            try await waitUntil("a says active again when b asks") { rig.said("a", "active", after: bCame) != nil }
            try await waitUntil("a polls the cloud") { h.upstreamRequests(from: "a") > 0 }
            let commands = rig.commander()
            let pausedAt = Date()
            rig.signal("a", SIGSTOP)
            try await rig.waitActive("b", timeout: h.takeoverAfterSilence)
            let left = 20 - Date().timeIntervalSince(pausedAt)
            if left > 0 { try await Task.sleep(for: .seconds(left)) }
            let resumedAt = h.now()
            rig.signal("a", SIGCONT)
            try await rig.waitRole("a", "standby")
            let takeoversBefore = rig.takeovers.count
            try await Task.sleep(for: .seconds(30))
            commands.cancel()
            _ = await commands.value
            #expect(h.upstreamRequests(from: "a", since: resumedAt) == 0, "a sent upstream after it resumed")
            // Never two claims of `active`: a, resumed, says `standby` on its watching connection's return, and
            // nothing it had said or had in flight before its pause goes out again.
            #expect(rig.doubleClaims().isEmpty, "\(rig.doubleClaims()); roles said: \(rig.roleChanges.map { "\($0.name) \($0.role)" })")
            #expect(rig.takeovers.count == takeoversBefore, "another takeover after a resumed: \(rig.takeovers)")
            #expect(rig.roles["b"] == "active" && rig.roles["a"] == "standby", "\(rig.roles)")
            try await rig.everyCommandAnswered()
        }
    }

    /// A group's command that the active instance holds (the LIFX cloud has not answered its listing, and a
    /// group waits for every adapter) when its connection ends in a broker restart: nobody heard the error it
    /// answered with, and no other instance saw the command while standing by (here there is none). It hands
    /// it back to its journal, and its next takeover carries it out: answered once (design.md §18).
    /// The journal keeps a command 30 s from its receipt. Alone this takes about 5 s; a run starved so badly
    /// that the instance is active again only 29 s or more after the command was sent (which overstates its
    /// age at the takeover) may have let it go, and is then held only to not answering it twice.
    static func aHeldGroupCommandOutlivesTheConnection(over kind: BrokerKind) async throws {
        try await FailoverHarness.with(kind, extra: "groups: {pair: {members: [virtual/lamp, lifx/kitchen]}}") { h in
            let rig = h.rig
            h.lifx.hold()
            defer { h.lifx.release() }
            try rig.start("a")
            try await rig.waitActive("a")
            try await rig.waitInfo()
            let sent = Date()
            rig.probe.publish("\(rig.base)/group/pair/set", #"{"state":"ON","brightness":42,"transaction":"g1"}"#)
            try await Task.sleep(for: .seconds(1.5))
            #expect(rig.results["g1"] == nil, "answered while the group waits for the cloud: \(rig.results)")
            await h.broker.stop()
            try await Task.sleep(for: .seconds(1))
            let restarted = Date()
            try await h.broker.start()
            func roles() -> String {
                rig.roleChanges.map { "\($0.name) \($0.role) at \(String(format: "%.1f", $0.at.timeIntervalSince(sent))) s" }.joined(separator: ", ")
            }
            // The cloud answers once the phase that held the command is over (the instance stands by again,
            // or is active in a new phase): only the next phase's listing is answered.
            try await waitUntil("a back after the restart", timeout: 60) {
                rig.said("a", "standby", after: restarted) != nil || rig.said("a", "active", after: restarted) != nil
            }
            h.lifx.release()
            // A whole hand-back: the watching connection came back (its reconnect backs off while the broker
            // starts), the instance takes over again, the LIFX cloud lists, the group acts.
            try await waitUntil("a active again after the restart", timeout: 60) { rig.said("a", "active", after: restarted) != nil }
            let back = rig.said("a", "active", after: restarted)!.timeIntervalSince(sent)
            guard back < 29 else {
                try await Task.sleep(for: .seconds(5))
                #expect(rig.results["g1"] == nil || rig.results["g1"] == ["ok"], "\(rig.results)")
                print("aHeldGroupCommandOutlivesTheConnection: active again \(String(format: "%.1f", back)) s after g1 was sent (a starved run), past what the journal is sure to keep; checked only that g1 was not answered twice; roles: \(roles())")
                return
            }
            do {
                try await waitUntil("g1 answered after the restart", timeout: 60) { rig.results["g1"] != nil }
            } catch {
                Issue.record("g1 never answered (active again \(String(format: "%.1f", back)) s after it was sent); results \(rig.results); roles: \(roles())")
                throw error
            }
            try await Task.sleep(for: .seconds(3))
            #expect(rig.results["g1"] == ["ok"], "\(rig.results)")
            #expect(rig.lamp?["brightness"] == 42)
        }
    }

    /// A rename that comes right after the instance took over, before its LIFX adapter has listed (the cloud
    /// holds its answers until the rename has had 2 s to arrive): it waits for the listing instead of
    /// refusing the light as unknown. The listing comes well inside the settle time (15 s from the adapter's
    /// start), after which a device not listed is unknown whatever the cause.
    static func aRenameBeforeTheFirstListingWaitsForIt(over kind: BrokerKind) async throws {
        try await FailoverHarness.with(kind) { h in
            let rig = h.rig
            let watch = try await MQTTProbe.connect(port: rig.broker.port)
            defer { watch.close() }
            try await watch.subscribe("\(rig.base)/bridge/response/#")
            h.lifx.hold()
            defer { h.lifx.release() }
            try rig.start("a")
            try await rig.waitActive("a")
            try await rig.waitInfo()
            let sent = ContinuousClock.now
            rig.probe.publish("\(rig.base)/bridge/request/device/rename", #"{"adapter": "lifx", "device": "kitchen", "to": "galley", "transaction": "r1"}"#)
            try await Task.sleep(for: .seconds(2))
            #expect(!watch.messages.contains { $0.payload.contains(#""r1""#) }, "answered before the LIFX adapter listed")
            h.lifx.release()
            let response = try await watch.waitFor("the rename's response", timeout: 40) { ms in ms.contains { $0.payload.contains(#""r1""#) } }
            let answer = response.last { $0.payload.contains(#""r1""#) }?.payload ?? ""
            let after = ContinuousClock.now - sent
            #expect(answer.contains(#""status":"ok""#), "the rename was answered \(answer), \(after) after it was sent")
        }
    }

    /// SIGTERM: the active hands over at once: it says `offline` as it stops and the standby takes over from
    /// that, never beside it; the standby cost no upstream request while it waited; a broker restart leaves one
    /// active instance. How long the hand-over takes is printed, not asserted (no timing assertions in `swift
    /// test`: beside two busy loops over RabbitMQ it once took 2.01 s). switchyard-bench's failover scenario
    /// measures the part after `offline`, the takeover a Last Will starts, after a kill -9 (docs/performance.md);
    /// a's graceful stop before it is measured nowhere.
    static func aStoppedActiveHandsOver(over kind: BrokerKind) async throws {
        try await FailoverHarness.with(kind) { h in
            let rig = h.rig
            try rig.start("a")
            try await rig.waitActive("a")
            try rig.start("b")
            try await rig.waitRole("b", "standby")
            // A standby that waits costs nothing upstream (counted over 15 s of a's polling).
            try await Task.sleep(for: .seconds(15))
            #expect(h.upstreamRequests(from: "b") == 0)
            #expect(h.upstreamRequests(from: "a") > 0)
            let stoppedAt = Date()
            rig.signal("a", SIGTERM)
            try await rig.waitActive("b", timeout: 10)
            let handover = Date().timeIntervalSince(stoppedAt)
            // b took over from a's own word that it went: a said `offline` before b said `active` (a stop that
            // never said it would leave a's claim standing and b waiting), and b's event names a.
            let offlineAt = rig.said("a", "offline", after: stoppedAt)
            let activeAt = try #require(rig.said("b", "active", after: stoppedAt))
            #expect(offlineAt != nil && offlineAt! <= activeAt, "a said offline at \(String(describing: offlineAt)), b active at \(activeAt)")
            // The event follows b's claim on another topic: wait for it.
            try await waitUntil("b's takeover event", timeout: 10) { rig.takeovers.contains { $0["data"]?["to"] == "b" } }
            let takeover = try #require(rig.takeovers.last { $0["data"]?["to"] == "b" })
            #expect(takeover["data"]?["from"] == "a", "\(takeover)")
            #expect(rig.doubleClaims().isEmpty, "\(rig.doubleClaims())")
            #expect(try await rig.process("a")!.waitForExit() == 0)
            // a comes back as a standby; then the broker restarts (Mosquitto without persistence forgets
            // every retained message; RabbitMQ keeps them, and the sessions).
            try rig.start("a")
            try await rig.waitRole("a", "standby")
            await h.broker.stop()
            try await Task.sleep(for: .seconds(1))
            rig.forgetRoles()
            try await h.broker.start()
            try await waitUntil("one instance active after the restart", timeout: 30) { rig.roles.values.filter { $0 == "active" }.count == 1 }
            try await Task.sleep(for: .seconds(5))
            #expect(rig.roles.values.filter { $0 == "active" }.count == 1, "\(rig.roles)")
            print("failover (\(kind)): SIGTERM handover \(String(format: "%.2f", handover)) s (gap_ms \(takeover["data"]?["gap_ms"]?.doubleValue.map { String(Int($0)) } ?? "?")); after the broker restart \(rig.roles)")
        }
    }
}

@Suite struct FailoverTests {
    @Test func aKilledActiveIsReplacedAndNoCommandIsLost() async throws { try await Failover.aKilledActiveIsReplaced(over: .mosquitto) }
    @Test func aPausedActiveStandsDownWhenItResumes() async throws { try await Failover.aPausedActiveStandsDown(over: .mosquitto) }
    @Test func aStoppedActiveHandsOverAndABrokerRestartKeepsOneActive() async throws { try await Failover.aStoppedActiveHandsOver(over: .mosquitto) }
    /// Not over RabbitMQ too: what it shows is the runtime's, not the broker's, and a RabbitMQ node takes 5-15 s
    /// (more beside other builds) to serve again, close to the 30 s for which a journal keeps a command.
    @Test func aHeldGroupCommandOutlivesTheConnection() async throws { try await Failover.aHeldGroupCommandOutlivesTheConnection(over: .mosquitto) }
    @Test func aRenameBeforeTheFirstListingWaitsForIt() async throws { try await Failover.aRenameBeforeTheFirstListingWaitsForIt(over: .mosquitto) }
}

/// The same over RabbitMQ's MQTT plugin (a private node per test: Tests/SwitchyardTestSupport/RabbitMQ.swift);
/// skipped, saying why, where RabbitMQ is not installed (`make test` installs it).
@Suite(.enabled(if: BrokerKind.rabbitmq.unavailable == nil, Comment(rawValue: BrokerKind.rabbitmq.unavailable ?? "")))
struct FailoverRabbitMQTests {
    @Test func aKilledActiveIsReplacedAndNoCommandIsLost() async throws { try await Failover.aKilledActiveIsReplaced(over: .rabbitmq) }
    @Test func aPausedActiveStandsDownWhenItResumes() async throws { try await Failover.aPausedActiveStandsDown(over: .rabbitmq) }
    @Test func aStoppedActiveHandsOverAndABrokerRestartKeepsOneActive() async throws { try await Failover.aStoppedActiveHandsOver(over: .rabbitmq) }
}
