import Foundation
@testable import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardHTTP
import SwitchyardTestSupport
import Testing

/// The adapter with its cloud transport, in the unit tier: the LIFX cloud played in memory through the HTTP
/// twin (`CloudPlay`), the engine by `RecordingAdapterHost`, time by a manual clock. What the adapter sends is
/// read from the twin's record, what it reports from the host's.
@Suite struct LIFXCloudUnitTests {
    static let kitchen = "d073d5000001", left = "d073d5000002", right = "d073d5000004", hall = "d073d5000003"
    static let lounge = "group_06e3ec50395511e9a0757200055bf1c1"
    static let scene = "scene_1d52671c-99ba-4631-a563-2c31809b700d"
    static let everything: Set<String> = [kitchen, left, right, hall, lounge, "group_06e3ec50395511e9a0757200055bf1c0",
                                          "location_f2c1aa82395411e9a0757200055bf1c0", scene]

    static func listed(_ rig: LIFXRig) async throws {
        try await rig.host.wait("the first listing") { $0.devices.count == everything.count && $0.status == .running }
    }

    @Test func theFirstListingDeclaresLightsGroupsLocationsAndScenes() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            #expect(Set(rig.host.devices.keys) == Self.everything)
            #expect(rig.state(Self.kitchen)["brightness"] == 50 && rig.state(Self.kitchen)["via"] == "cloud")
            #expect(rig.state(Self.lounge)["lights"] == 2 && rig.state(Self.lounge)["state"] == "ON")
            #expect(rig.host.available(Self.kitchen) == true && rig.state(Self.scene)["name"] == "Night time")
            #expect(play.twin.lines == ["GET /v1/lights/all", "GET /v1/scenes"])
            // The token goes in the Authorization header only; TLS is verified.
            let r = try #require(play.twin.requests.first)
            #expect(r.headers.contains { $0 == ("Authorization", "Bearer \(CloudPlay.token)") } && !r.url.contains(CloudPlay.token))
            #expect(play.twin.options.map(\.verifyTLS) == [true] && play.twin.openRuns == 1)
            #expect(rig.host.requests.ok == 2 && rig.host.requests.failed == 0)
        }
    }

    /// The state is published when the command is accepted, before the cloud answers; the request carries
    /// exactly what the command asked; its outcome is the cloud's answer.
    @Test func aCommandIsPublishedAtOnceAndSentWithItsExactBody() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.hold()
            let p = try await rig.accept(Self.hall, ["brightness": 40, "transition": 2])
            #expect(rig.state(Self.hall)["brightness"] == 40 && rig.state(Self.hall)["state"] == "ON")
            try await waitUntil("the request is on the wire", timeout: 10) { play.actions.count == 1 }
            #expect(play.actions[0].0 == "PUT /v1/lights/id:d073d5000003/state")
            #expect(play.actions[0].1 == ["power": "on", "brightness": 0.4, "duration": 2])
            play.release()
            #expect(try await rig.outcome(p).ok)
            #expect(play.light(Self.hall)?.brightness == 0.4 && play.light(Self.hall)?.power == "on")
        }
    }

    @Test func aLightTheCloudCannotReachIsRevertedAndUnavailable() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.edit(Self.hall) { $0.reach = "offline" }
            let r = try await rig.command(Self.hall, ["brightness": 40])
            #expect(r.error == "Hall Lamp: Hall Lamp offline (LIFX did not reach the light)")
            #expect(rig.state(Self.hall)["brightness"] == 100 && rig.state(Self.hall)["state"] == "OFF")
            #expect(rig.host.available(Self.hall) == false)
            // Its reports went brightness 40 (at once), then back.
            #expect(rig.host.reports(of: Self.hall).compactMap { $0["brightness"] }.suffix(2) == [40, 100])
        }
    }

    /// A group whose lights the cloud reaches but one: the command stands, the one is reverted, and the user
    /// is told which.
    @Test func aGroupWithOneLightUnreachedSucceedsWithAWarning() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.edit(Self.right) { $0.reach = "timed_out" }
            #expect(try await rig.command(Self.lounge, ["brightness": 80]).ok)
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/group_id:06e3ec50395511e9a0757200055bf1c1/state"])
            #expect(rig.state(Self.left)["brightness"] == 80 && rig.state(Self.right)["brightness"] == 100)
            #expect(rig.host.available(Self.right) == false && rig.host.available(Self.left) == true)
            #expect(rig.host.logs.contains { $0.0 == .warning && $0.1 == "Lounge: Lounge Right timed_out; the other lights accepted the command" })
        }
    }

    /// A 5xx: an absolute set is tried three times, one second and then two after the first, on the adapter's
    /// clock; then the command fails and the light shows its own value again.
    @Test func serverErrorsAreRetriedOnTheClockThenTheCommandFailsAndReverts() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.answerNext([.init(status: 500), .init(status: 500), .init(status: 500)])
            let p = try await rig.accept(Self.kitchen, ["brightness": 90])
            try await waitUntil("the first attempt", timeout: 10) { play.actions.count == 1 }
            await rig.advance(.milliseconds(900))
            #expect(play.actions.count == 1)
            await rig.advance(.milliseconds(100))
            try await waitUntil("the second attempt", timeout: 10) { play.actions.count == 2 }
            await rig.advance(.milliseconds(1900))
            #expect(play.actions.count == 2)
            let r = try await rig.outcome(p)
            #expect(play.actions.count == 3)
            #expect(r.error == "Kitchen: LIFX cloud error (HTTP 500); gave up after 3 attempts")
            #expect(rig.state(Self.kitchen)["brightness"] == 50)
            #expect(rig.host.requests.failed == 3)
        }
    }

    @Test func onlyAbsoluteSetsAreRetried() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.answerNext([.init(status: 503)])
            let r = try await rig.command(Self.lounge, ["brightness_step": -10])
            #expect(r.error == "Lounge: LIFX cloud error (HTTP 503); not retried (not an absolute set)")
            #expect(play.actions.map(\.0) == ["POST /v1/lights/group_id:06e3ec50395511e9a0757200055bf1c1/state/delta"])
            // Each light back at its own value.
            #expect(rig.state(Self.left)["brightness"] == 30 && rig.state(Self.right)["brightness"] == 100,
                    "left: \(rig.host.reports(of: Self.left)), right: \(rig.host.reports(of: Self.right)), requests: \(play.twin.lines)")
        }
    }

    /// A 429 names when the budget resets: the adapter says so, sends nothing until then on its clock, and
    /// then sends the command again, which is carried out.
    @Test func aSpentBudgetWaitsForTheResetOnTheClock() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            // The reset is on the wall clock, read when the 429 comes: a minute ahead leaves a loaded machine
            // tens of seconds between this line and that one without changing what is checked.
            let reset = Int(Date().timeIntervalSince1970) + 60
            play.answerNext([.init(status: 429, headers: ["X-RateLimit-Limit": "120", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "\(reset)"],
                                   body: #"{"error":"Rate limit exceeded"}"#)])
            let p = try await rig.accept(Self.kitchen, ["state": "OFF"])
            try await waitUntil("the warning", timeout: 10) { rig.host.logs.contains { $0.1.hasPrefix("LIFX rate limit reached (HTTP 429); waiting") } }
            await rig.advance(.seconds(25))
            #expect(play.actions.count == 1)
            let r = try await rig.outcome(p)
            #expect(r.ok && play.actions.count == 2 && play.light(Self.kitchen)?.power == "off")
            #expect(rig.clock.now() >= MonotonicInstant.origin + .seconds(45))
        }
    }

    /// Polls keep a reserve of the budget for commands: with 10 requests left before the reset, the poll due
    /// waits for the reset while a command goes at once.
    @Test func pollsLeaveTheLastOfTheBudgetToCommands() async throws {
        let play = CloudPlay.demo()
        play.setBudget(limit: 120, remaining: 10, resetIn: 60)
        try await LIFXRig.with(cloud: play, configure: { $0.pollInterval = 10 }) { rig in
            try await Self.listed(rig)
            await rig.advance(.seconds(15))
            #expect(play.listings == 1)
            #expect(try await rig.command(Self.kitchen, ["brightness": 20]).ok)
            #expect(play.actions.count == 1 && play.listings == 1)
            try await rig.pump("the poll after the reset", step: .milliseconds(500)) { _ in play.listings == 2 }
            #expect(rig.clock.now() >= MonotonicInstant.origin + .seconds(55))
        }
    }

    /// Commands for one light that come while the previous request is still within `min_interval` merge into
    /// one request with the last value; every command is answered.
    @Test func commandsWithinMinIntervalMergeIntoOneRequest() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, configure: { $0.minInterval = 0.5 }) { rig in
            try await Self.listed(rig)
            let first = try await rig.accept(Self.kitchen, ["brightness": 10])
            try await waitUntil("the first request", timeout: 10) { play.actions.count == 1 }
            let second = try await rig.accept(Self.kitchen, ["brightness": 20])
            let third = try await rig.accept(Self.kitchen, ["brightness": 30, "transition": 1])
            await rig.advance(.milliseconds(400))
            #expect(play.actions.count == 1)
            for p in [first, second, third] { #expect(try await rig.outcome(p).ok) }
            #expect(play.actions.map { $0.1?["brightness"] } == [0.1, 0.3] && play.actions[1].1?["duration"] == 1)
            #expect(rig.state(Self.kitchen)["brightness"] == 30)
        }
    }

    /// A listing while a command is on the wire shows the light as it was: the command's value stays until
    /// the cloud has answered it.
    @Test func aListingDoesNotUndoACommandOnItsWay() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.hold()
            let p = try await rig.accept(Self.kitchen, ["brightness": 75])
            try await waitUntil("the request is on the wire", timeout: 10) { play.actions.count == 1 }
            try await rig.adapter.refreshAll(context: rig.host.context)
            #expect(play.listings == 2 && rig.state(Self.kitchen)["brightness"] == 75)
            play.release()
            #expect(try await rig.outcome(p).ok)
            try await rig.adapter.refreshAll(context: rig.host.context)
            #expect(rig.state(Self.kitchen)["brightness"] == 75)
        }
    }

    /// A refused token: the adapter's status says what to fix, and neither it nor the log shows the token.
    @Test func aRefusedTokenIsTheAdaptersStatusWithoutTheToken() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.answerNext([.init(status: 401, body: #"{"error":"Invalid credentials"}"#)])
            let r = try await rig.command(Self.kitchen, ["state": "OFF"])
            #expect(r.error == "Kitchen: LIFX refused the token (HTTP 401 Unauthorized): check lifx.token")
            guard case .error(let why) = rig.host.status else { Issue.record("status \(rig.host.status)"); return }
            #expect(why == "LIFX refused the token (HTTP 401 Unauthorized): check lifx.token")
            #expect(!rig.host.calls.contains { "\($0)".contains(CloudPlay.token) })
        }
    }

    /// Listings that keep failing (backing off on the clock) make what only the cloud reaches unavailable after
    /// the third; the next listing that works brings it back.
    @Test func listingsThatKeepFailingMakeTheCloudsLightsUnavailable() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, configure: { $0.pollInterval = 10 }) { rig in
            try await Self.listed(rig)
            play.answerNext([.init(status: 500), .init(status: 502), .init(status: 500)])
            try await rig.pump("two failed listings", step: .milliseconds(250)) { r in
                r.host.status == .error("LIFX listing failed: LIFX answered HTTP 502")
            }
            #expect(play.listings == 3 && rig.host.available(Self.kitchen) == true)
            try await rig.pump("a third", step: .milliseconds(250)) { r in r.host.available(Self.kitchen) == false }
            #expect(play.listings == 4 && rig.host.available(Self.hall) == false && rig.host.available(Self.lounge) == false)
            try await rig.pump("a listing that works", step: .milliseconds(250)) { r in
                r.host.available(Self.kitchen) == true && r.host.status == .running
            }
            #expect(play.listings == 5)
        }
    }

    /// A light the cloud stops listing is removed only once three listings in a row have left it out.
    @Test func aLightIsRemovedAfterThreeListingsWithoutIt() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.remove(Self.hall)
            func lastListing() -> Set<String> {
                for c in rig.host.calls.reversed() { if case .setDevices(let d, _, _) = c { return Set(d.map(\.id)) } }
                return []
            }
            for n in 1...3 {
                try await rig.adapter.refreshAll(context: rig.host.context)
                #expect(lastListing().contains(Self.hall) == (n < 3), "listing \(n)")
            }
            #expect(lastListing().contains(Self.kitchen))
        }
    }

    @Test func getReadsTheDeviceFromTheCloud() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.edit(Self.hall) { $0.brightness = 0.2; $0.power = "on" }
            try await rig.adapter.refresh(deviceID: Self.hall, context: rig.host.context)
            #expect(play.twin.lines.last == "GET /v1/lights/id:d073d5000003")
            #expect(rig.state(Self.hall)["brightness"] == 20 && rig.state(Self.hall)["state"] == "ON")
            try await rig.adapter.refresh(deviceID: Self.lounge, context: rig.host.context)
            #expect(play.twin.lines.last == "GET /v1/lights/group_id:06e3ec50395511e9a0757200055bf1c1")
        }
    }

    @Test func aSceneIsActivatedAndItsLightsShowItsStates() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            #expect(try await rig.command(Self.scene, ["activate": true, "transition": 2]).ok)
            #expect(play.actions.map(\.0) == ["PUT /v1/scenes/scene_id:1d52671c-99ba-4631-a563-2c31809b700d/activate"])
            #expect(play.actions[0].1 == ["duration": 2])
            #expect(rig.state(Self.kitchen)["brightness"] == 10 && rig.state(Self.hall)["state"] == "ON")
            #expect(rig.state(Self.scene)["last_activated"]?.stringValue != nil)
            let list = try await rig.adapter.request(path: "scenes", payload: [:], context: rig.host.context)
            let first = list?["scenes"]?.arrayValue?.first
            #expect(first?["lights"] == 2 && first?["last_activated"] == rig.state(Self.scene)["last_activated"])
        }
    }

    /// When the run ends, the command on the wire and the one queued behind it are answered, the client is
    /// closed, and a command after that is refused.
    @Test func whenTheRunEndsEveryCommandIsAnsweredAndTheClientClosed() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            play.hold()
            let onTheWire = try await rig.accept(Self.kitchen, ["brightness": 10])
            try await waitUntil("the request is on the wire", timeout: 10) { play.actions.count == 1 }
            let queued = try await rig.accept(Self.hall, ["brightness": 10])
            await rig.stop()
            for p in [onTheWire, queued] {
                await #expect(throws: AdapterError.self) { try await p.wait() }
            }
            #expect(play.twin.openRuns == 0)
            await #expect(throws: AdapterError.self) { _ = try await rig.accept(Self.kitchen, ["state": "ON"]) }
        }
    }

    /// bridge/health's LIFX figures: the budget, the queue, the requests sent.
    @Test func healthFiguresFollowTheRequests() async throws {
        let play = CloudPlay.demo()
        play.setHeaders(["X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "97"])
        try await LIFXRig.with(cloud: play) { rig in
            try await Self.listed(rig)
            #expect(try await rig.command(Self.kitchen, ["state": "OFF"]).ok)
            @Sendable func latest() -> [String: JSONValue] {
                var metrics: [String: JSONValue] = [:]
                for c in rig.host.calls { if case .metrics(let m) = c { metrics = m } }
                return metrics
            }
            try await waitUntil("the figures after the command", timeout: 10) { latest()["http_requests"] == 3 }
            let metrics = latest()
            #expect(metrics["http_requests"] == 3 && metrics["queue"] == 0 && metrics["in_flight"] == 0)
            #expect(metrics["rate_limit"]?["limit"] == 100 && metrics["rate_limit"]?["remaining"] == 97)
            #expect(metrics["outcomes"] != nil && metrics["lan"] == nil)
        }
    }

    /// The LIFX cloud simulator itself in memory (no socket) as the adapter's cloud: the handler, rate budget,
    /// quantised values and knobs the integration tests meet on loopback, here through the HTTP twin. A
    /// server error is retried; the light ends at what the simulator stored.
    @Test func theCloudSimulatorInMemoryPlaysTheCloud() async throws {
        let sim = LIFXCloudSimulator.inMemory(token: CloudPlay.token, lights: LIFXCloudSimulator.demoLights(), scenes: LIFXCloudSimulator.demoScenes())
        let garage = "d073d5000005"
        try await LIFXRig.with(http: HTTPTwin(sim.server.twinResponder)) { rig in
            try await rig.host.wait("the first listing") { h in h.status == .running && sim.lights.allSatisfy { h.devices[$0.id] != nil } }
            #expect(sim.requests.map { "\($0.method) \($0.path)" } == ["GET /v1/lights/all", "GET /v1/scenes"])
            #expect(sim.requests[0].headers["authorization"] == "Bearer \(CloudPlay.token)")
            #expect(rig.state(Self.hall)["brightness"] == 60 && rig.host.available(garage) == false)
            sim.injectFailures([503])
            #expect(try await rig.command(Self.hall, ["brightness": 40]).ok)
            let puts = sim.requests.filter { $0.method == "PUT" }
            #expect(puts.map(\.path) == ["/v1/lights/id:\(Self.hall)/state", "/v1/lights/id:\(Self.hall)/state"])
            #expect(sim.light(Self.hall)?.brightness == LIFXCloudSimulator.Light.q(0.4) && sim.light(Self.hall)?.power == "on")
            #expect(rig.state(Self.hall)["brightness"] == 40 && rig.state(Self.hall)["state"] == "ON")
        }
    }
}
