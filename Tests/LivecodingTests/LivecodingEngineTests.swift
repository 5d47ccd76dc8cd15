import Foundation
import LivecodingAdapter
import LivecodingSimulators
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The Livecoding adapter against the simulated API over real HTTP on loopback, through the engine over the
/// in-memory transport (the unit tier). LivecodingBridgeTests runs it over a real broker.
@Suite struct LivecodingEngineTests {
    func with<R: Sendable>(authorised: Bool = true, _ body: (InMemoryBridge, LivecodingSimulator) async throws -> R) async throws -> R {
        let sim = try await LivecodingSimulator.start(clientID: clientID, clientSecret: clientSecret, channels: channels())
        return try await withTeardown {
            let store = TestEnvironment.makeTempDir("lc").appendingPathComponent("livecoding-token.json").path
            if authorised { _ = try await authorise(sim, store: store) }
            var s = LivecodingSettings()
            s.apiURL = sim.apiURL
            s.oauthURL = sim.oauthURL
            s.clientID = clientID
            s.clientSecret = clientSecret
            s.tokenStore = store
            s.pollInterval = 3600
            s.channels = ["alice", "bob", "dave"]
            s.pageSize = 2
            return try await InMemoryBridge.with(adapters: [LivecodingAdapter(settings: s)]) { b in try await body(b, sim) }
        } teardown: {
            await sim.stop()
        }
    }

    @Test func channelsAreLiveOrNotAndOnline() async throws {
        try await with { b, sim in
            let alice = try await b.waitForState("livecoding", "alice") { $0["live"] == true }
            #expect(alice["viewers"] == 12 && alice["title"] == "Swift on Linux" && alice["url"] == .string(sim.server.baseURL + "/alice/"))
            #expect(try await b.waitForState("livecoding", "bob") { $0["live"] == true }["viewers"] == 3)
            #expect(try await b.waitForState("livecoding", "dave") { $0["live"] == false }["live_since"] == .null)
            for name in ["alice", "bob", "dave", "auth"] { try await b.waitFor("b/livecoding/\(name)/availability", "online") }
            #expect(try await b.waitForState("livecoding", "auth") { $0["status"] == "ok" }["expires_at"] != .null)
        }
    }

    /// A poll the API refuses takes every channel offline at once; the authorisation itself stays fine.
    @Test func aRefusedPollTakesEveryChannelOffline() async throws {
        try await with { b, sim in
            for name in ["alice", "bob", "dave"] { try await b.waitFor("b/livecoding/\(name)/availability", "online") }
            sim.server.injectFailures([503])
            b.send("b/livecoding/alice/get", "")
            for name in ["alice", "bob", "dave"] { try await b.waitFor("b/livecoding/\(name)/availability", "offline") }
            #expect(b.last("b/livecoding/auth/availability") == "online")
            #expect(b.state("livecoding", "auth")?["status"] == "ok")
        }
    }

    @Test func withoutATokenTheAuthDeviceSaysMissing() async throws {
        try await with(authorised: false) { b, _ in
            #expect(try await b.waitForState("livecoding", "auth") { $0["status"] == "missing" }["expires_at"] == .null)
            try await b.waitFor("b/livecoding/auth/availability", "online")
            // A channel's first availability is part of its announcement, which goes out after the states
            // (design.md §16): it comes, and it is offline, never online.
            try await b.waitFor("b/livecoding/alice/availability", "offline")
            #expect(!b.transport.published.contains { $0.topic == "b/livecoding/alice/availability" && $0.payload == "online" })
        }
    }
}
