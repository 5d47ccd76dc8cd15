import Foundation
@testable import LivecodingAdapter
import SwitchyardConfig
import SwitchyardCore
import SwitchyardHTTP
import LivecodingSimulators
import SwitchyardTestSupport
import Testing

let clientID = "sy-client-7f3a"
let clientSecret = "sy-secret-\(UUID().uuidString)"

func channels() -> [LivecodingSimulator.Channel] {
    [
        .init(slug: "alice", live: true, viewers: 12, title: "Swift on Linux"),
        .init(slug: "Bob", live: true, viewers: 3, title: "MQTT bridges"),
        .init(slug: "carol", live: false),
        .init(slug: "dave", live: false, title: "Later"),
        .init(slug: "erin", live: true, viewers: 1),
        .init(slug: "frank", live: true, viewers: 5),
        .init(slug: "gina", live: true, viewers: 8),
    ]
}

/// Plays the browser: GET the authorise URL (not following the redirect) → the Location it names.
func followAuthorise(_ url: String, http: HTTPClient) async throws -> String {
    let r = try await http.send(HTTPRequest(url: url))
    guard r.status == 302, let location = r.headers["location"] else { throw TestError("authorise answered \(r.status): \(r.text)") }
    return location
}

/// Tokens for the adapter tests, obtained through the simulator's real flow.
func authorise(_ sim: LivecodingSimulator, store: String, scope: String = "read") async throws -> LivecodingTokens {
    var s = LivecodingSettings()
    s.oauthURL = sim.oauthURL
    s.clientID = clientID
    s.clientSecret = clientSecret
    s.redirectURI = "http://localhost:1/oauth-callback"
    s.scopes = [scope]
    let t = try await HTTPClient.withClient { http in
        let oauth = LivecodingOAuth(settings: s, http: http)
        let location = try await followAuthorise(oauth.authorizeURL(state: "st"), http: http)
        let code = try #require(URLComponents(string: location)?.queryItems?.first { $0.name == "code" }?.value)
        return try await oauth.exchange(code: code)
    }
    try TokenStore(path: store).save(t)
    return t
}

func mode(_ path: String) -> mode_t {
    var st = stat()
    stat(path, &st)
    return st.st_mode & 0o777
}

@Suite struct LivecodingAuthCommandTests {
    func config(_ sim: LivecodingSimulator, port: Int, store: String, secretFile: String) -> String {
        """
        state_dir: /nonexistent
        livecoding:
          api_url: \(sim.apiURL)
          oauth_url: \(sim.oauthURL)
          client_id: \(clientID)
          client_secret_file: \(secretFile)
          token_store: \(store)
          redirect_port: \(port)
          channels: [alice]
        """
    }

    struct Command: Sendable {
        let sim: LivecodingSimulator
        let child: ChildProcess
        let out: String
        let store: String
    }

    /// `switchyard auth livecoding` as a child process against a simulator; both are gone when this returns.
    func withCommand<R: Sendable>(_ extra: [String] = [], stdinFile: String = "/dev/null", deny: Bool = false,
                                  _ body: (Command) async throws -> R) async throws -> R {
        let sim = try await LivecodingSimulator.start(clientID: clientID, clientSecret: clientSecret, channels: channels())
        return try await withTeardown {
            sim.setDeny(deny)
            let dir = TestEnvironment.makeTempDir("lcauth")
            let store = dir.appendingPathComponent("state/livecoding-token.json").path   // the directory does not exist yet
            let secretFile = dir.appendingPathComponent("secret").path
            try clientSecret.writeForTest(toFile: secretFile, replacing: true)
            let cfg = dir.appendingPathComponent("config.yaml").path
            try config(sim, port: TestEnvironment.freePort(), store: store, secretFile: secretFile).writeForTest(toFile: cfg, replacing: true)
            let out = dir.appendingPathComponent("out.txt").path
            let bin = try #require(TestEnvironment.switchyardBinary())
            let child = try ChildProcess(path: bin, arguments: ["auth", "livecoding", "-c", cfg, "--timeout", "30"] + extra, outputFile: out,
                                         stdinFile: stdinFile)
            return try await withTeardown { try await body(Command(sim: sim, child: child, out: out, store: store)) } teardown: {
                await child.stop()
            }
        } teardown: {
            await sim.stop()
        }
    }

    func authoriseURL(_ out: String) async throws -> String {
        @Sendable func find() -> String? {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            guard text.contains("Waiting for the redirect") else { return nil }
            return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.first { $0.hasPrefix("http") && $0.contains("/o/authorize/") }
        }
        try await waitUntil("the command prints the authorise URL") { find() != nil }
        return find()!
    }

    @Test func theWholeFlowSavesTheTokensPrivately() async throws {
        try await withCommand(["--no-stdin"]) { c in
            let url = try await authoriseURL(c.out)
            let q = URLComponents(string: url)?.queryItems ?? []
            #expect(q.first { $0.name == "response_type" }?.value == "code" && q.first { $0.name == "client_id" }?.value == clientID)
            #expect((q.first { $0.name == "state" }?.value?.count ?? 0) == 32)
            try await HTTPClient.withClient { http in
                let location = try await followAuthorise(url, http: http)
                #expect(location.hasPrefix("http://localhost:"))
                // The browser lands on the command's redirect listener (localhost: 127.0.0.1 or ::1).
                let landing = try await http.send(HTTPRequest(url: location.replacingOccurrences(of: "localhost", with: "127.0.0.1")))
                #expect(landing.status == 200 && landing.text.contains("authorised"))
            }
            #expect(await c.child.wait(timeout: 30) == 0)
            let text = try String(contentsOfFile: c.out, encoding: .utf8)
            #expect(text.contains("Tokens saved to \(c.store) (mode 0600)"))
            #expect(mode(c.store) == 0o600)
            let saved = try #require(try TokenStore(path: c.store).load())
            #expect(c.sim.liveRefreshTokens == [saved.refreshToken!])
            #expect(c.sim.tokenRequests == ["authorization_code"])
            // Neither the secret nor a token is printed.
            #expect(!text.contains(clientSecret) && !text.contains(saved.accessToken) && !text.contains(saved.refreshToken!))
        }
    }

    @Test func aForgedStateOrADenialIsRefusedAndNothingIsSaved() async throws {
        try await HTTPClient.withClient { http in
            try await withCommand(["--no-stdin"]) { c in
                let location = try await followAuthorise(try await authoriseURL(c.out), http: http)
                var forged = URLComponents(string: location.replacingOccurrences(of: "localhost", with: "127.0.0.1"))!
                forged.queryItems = forged.queryItems!.map { $0.name == "state" ? URLQueryItem(name: "state", value: "0000") : $0 }
                let landing = try await http.send(HTTPRequest(url: forged.url!.absoluteString))
                #expect(landing.status == 400)
                #expect(await c.child.wait(timeout: 30) == 1)
                #expect(try String(contentsOfFile: c.out, encoding: .utf8).contains("state does not match"))
                #expect(!FileManager.default.fileExists(atPath: c.store))
            }
            try await withCommand(["--no-stdin"], deny: true) { c in
                let location = try await followAuthorise(try await authoriseURL(c.out), http: http)
                _ = try await http.send(HTTPRequest(url: location.replacingOccurrences(of: "localhost", with: "127.0.0.1")))
                #expect(await c.child.wait(timeout: 30) == 1)
                #expect(try String(contentsOfFile: c.out, encoding: .utf8).contains("refused the authorisation: access_denied"))
                #expect(!FileManager.default.fileExists(atPath: c.store))
            }
        }
    }

    @Test func aRedirectURLPastedOnStdinWorksOnAHeadlessMachine() async throws {
        let fifo = TestEnvironment.makeTempDir("lcfifo").appendingPathComponent("stdin").path
        #expect(mkfifo(fifo, 0o600) == 0)
        let writer = open(fifo, O_RDWR | O_NONBLOCK)   // a writer exists before the child opens it
        defer { close(writer) }
        try await withCommand(stdinFile: fifo) { c in
            let url = try await authoriseURL(c.out)
            // The browser shows an error page there; the user copies the URL.
            let location = try await HTTPClient.withClient { http in try await followAuthorise(url, http: http) }
            let line = Array((location + "\n").utf8)
            _ = line.withUnsafeBytes { write(writer, $0.baseAddress, $0.count) }
            let status = await c.child.wait(timeout: 30)
            #expect(status == 0, "\((try? String(contentsOfFile: c.out, encoding: .utf8)) ?? "")")
            #expect(mode(c.store) == 0o600)
        }
    }
}

/// The adapter against the simulator and a real Mosquitto.
@Suite struct LivecodingBridgeTests {
    struct Setup {
        let broker: Broker
        let sim: LivecodingSimulator
        let probe: MQTTProbe
        let base: String
        let store: String
    }

    /// A broker, the simulator and a probe; all stopped when this returns.
    func withSetup<R: Sendable>(_ body: (Setup) async throws -> R) async throws -> R {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let sim = try await LivecodingSimulator.start(clientID: clientID, clientSecret: clientSecret, channels: channels())
        return try await withTeardown {
            let base = uniqueBase()
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            try await probe.subscribe("\(base)/#", "homeassistant/#")
            let store = TestEnvironment.makeTempDir("lc").appendingPathComponent("livecoding-token.json").path
            return try await body(Setup(broker: broker, sim: sim, probe: probe, base: base, store: store))
        } teardown: {
            await sim.stop()
        }
    }

    /// The bridge in-process with the Livecoding adapter read from YAML, running for `body`.
    func withBridge<R: Sendable>(_ s: Setup, pageSize: Int = 2, _ body: (InProcessBridge) async throws -> R) async throws -> R {
        try await withAdapter(s, pageSize: pageSize) { bridge, _ in try await body(bridge) }
    }

    /// The same, with the adapter at hand.
    func withAdapter<R: Sendable>(_ s: Setup, pageSize: Int = 2, _ body: (InProcessBridge, LivecodingAdapter) async throws -> R) async throws -> R {
        let c = try SwitchyardConfig.parse(yaml: """
        livecoding:
          api_url: \(s.sim.apiURL)
          oauth_url: \(s.sim.oauthURL)
          client_id: \(clientID)
          client_secret: ${LC_SECRET}
          token_store: \(s.store)
          poll_interval: 3600
          channels: [alice, bob, dave, carol]
        """, file: "t.yaml", upstreams: [LivecodingUpstream()], environment: ["LC_SECRET": clientSecret])
        var settings = try #require(c.settings(LivecodingUpstream()))
        settings.pageSize = pageSize
        var options = InProcessBridge.Options()
        options.info = ["config": c.redactedJSON]
        let adapter = LivecodingAdapter(settings: settings)
        return try await InProcessBridge.with(port: s.broker.port, base: s.base, adapters: [adapter], options: options) { bridge in
            try await body(bridge, adapter)
        }
    }

    @discardableResult
    func state(_ s: Setup, _ name: String, _ what: String, _ p: @escaping (JSONValue) -> Bool) async throws -> JSONValue {
        let t = "\(s.base)/livecoding/\(name)"
        let ms = try await s.probe.waitFor("\(t) \(what)") { ms in ms.contains { $0.topic == t && (try? JSONValue.parse($0.payload)).map(p) == true } }
        return try JSONValue.parse(ms.last { $0.topic == t && (try? JSONValue.parse($0.payload)).map(p) == true }!.payload)
    }

    @Test func liveStatusFromThreePagesWithTransitionsAndLiveSince() async throws {
        try await withSetup { s in
            let tokens = try await authorise(s.sim, store: s.store)
            try await withBridge(s) { _ in
                let alice = try await state(s, "alice", "live") { $0["live"] == true }
                #expect(alice["viewers"] == 12 && alice["title"] == "Swift on Linux" && alice["category"] == "Swift")
                #expect(alice["live_since"]?.stringValue.flatMap(Timestamp.parse) != nil)
                #expect(alice["url"] == .string(s.sim.server.baseURL + "/alice/"))
                let bob = try await state(s, "bob", "live, matched case-insensitively") { $0["live"] == true }
                #expect(bob["viewers"] == 3)
                let dave = try await state(s, "dave", "offline") { $0["live"] == false }
                #expect(dave["live_since"] == .null && dave["viewers"] == 0)
                // Five live channels, two per page: three pages, reached by following `next`.
                let onair = s.sim.requests.filter { $0.path.hasPrefix("/api/v1/livestreams/onair") }
                #expect(onair.map { $0.query["offset"] ?? "" } == ["0", "2", "4"])
                try await s.probe.waitFor(topic: "\(s.base)/livecoding/alice/availability", payload: "online")
                let auth = try await state(s, "auth", "ok") { $0["status"] == "ok" }
                #expect(auth["expires_at"] != .null)
                // Transitions: dave goes live (live_since set), alice goes offline (cleared).
                s.sim.setLive("dave", true, viewers: 2)
                s.sim.setLive("alice", false)
                s.probe.publish("\(s.base)/livecoding/dave/get", "")
                let daveLive = try await state(s, "dave", "went live") { $0["live"] == true }
                #expect(daveLive["viewers"] == 2 && daveLive["live_since"] != .null)
                let aliceOff = try await state(s, "alice", "went offline") { $0["live"] == false }
                #expect(aliceOff["live_since"] == .null)
                // Discovery: live as a binary_sensor, viewers as a sensor.
                let node = "switchyard_\(s.base)_livecoding_alice"
                try await s.probe.waitFor(topic: "homeassistant/binary_sensor/\(node)/live/config")
                try await s.probe.waitFor(topic: "homeassistant/sensor/\(node)/viewers/config")
                // No token or secret anywhere on MQTT (bridge/info shows ***).
                let info = try JSONValue.parse(try #require(s.probe.last("\(s.base)/bridge/info")))
                #expect(info["config"]?["livecoding"]?["client_secret"] == "***")
                #expect(!s.probe.messages.contains { $0.payload.contains(tokens.accessToken) || $0.payload.contains(tokens.refreshToken!)
                    || $0.payload.contains(clientSecret) })
            }
        }
    }

    @Test func tokensAreRefreshedBeforeExpiryAndOn401AndTheRotationSurvivesARestart() async throws {
        try await withSetup { s in
            s.sim.setExpiresIn(30)   // under the one-minute margin: every use refreshes first
            let first = try await authorise(s.sim, store: s.store)
            try await withBridge(s) { _ in
                try await state(s, "alice", "live") { $0["live"] == true }
                try await state(s, "carol", "the poll's last channel") { _ in true }   // the poll is over: no request in flight
                #expect(s.sim.tokenRequests.filter { $0 == "refresh_token" }.count >= 1)
                // The rotated refresh token is stored; the first one is dead.
                let stored = try #require(try TokenStore(path: s.store).load())
                #expect(stored.refreshToken != first.refreshToken && s.sim.liveRefreshTokens == [stored.refreshToken!])
                #expect(mode(s.store) == 0o600)
            }
            // A new process (same store): only the persisted token can work, and it does.
            s.sim.setExpiresIn(36_000)
            s.sim.setLive("carol", true, viewers: 4)
            try await withBridge(s) { _ in
                try await state(s, "carol", "after restart") { $0["live"] == true }
                let stored = try #require(try TokenStore(path: s.store).load())
                #expect(s.sim.liveRefreshTokens == [stored.refreshToken!])
                // A 401 (revoked access token) refreshes and retries.
                let before = s.sim.tokenRequests.count
                s.probe.clear()
                s.sim.revokeAccessTokens()
                s.sim.setLive("carol", false)
                s.probe.publish("\(s.base)/livecoding/carol/get", "")
                try await state(s, "carol", "after a 401") { $0["live"] == false }
                #expect(s.sim.tokenRequests.count == before + 1 && s.sim.tokenRequests.last == "refresh_token", "\(before) \(s.sim.tokenRequests)")
                #expect(s.sim.requests.contains { $0.path.hasPrefix("/api/v1") && $0.headers["authorization"] == "Bearer \(stored.accessToken)" })
            }
        }
    }

    /// Three uses at once of a token about to expire (a poll and `get`s meeting): one refresh at a time, each
    /// with the refresh token the last one left, and every caller gets a token. Refreshed side by side, the
    /// second refresh sent the refresh token the first had just used up: refused (`invalid_grant`), and the
    /// adapter said "refresh_failed".
    @Test func usesAtOnceRefreshTheTokenOneAtATime() async throws {
        try await withSetup { s in
            s.sim.setExpiresIn(30)   // under the one-minute margin: every use refreshes first
            _ = try await authorise(s.sim, store: s.store)
            try await withAdapter(s) { _, adapter in
                try await state(s, "carol", "the first poll's last channel") { _ in true }   // no request in flight
                async let a = adapter.accessToken()
                async let b = adapter.accessToken()
                async let c = adapter.accessToken()
                let tokens = await [a, b, c]
                #expect(tokens.allSatisfy { $0 != nil }, "\(tokens)")
                let auth = s.probe.messages.filter { $0.topic == "\(s.base)/livecoding/auth" }.map(\.payload)
                #expect(!auth.contains { $0.contains("refresh_failed") }, "\(auth)")
                let stored = try #require(try TokenStore(path: s.store).load())
                #expect(s.sim.liveRefreshTokens == [stored.refreshToken!])
            }
        }
    }

    @Test func aMissingTokenOrAMissingScopeIsSaidClearly() async throws {
        try await withSetup { s in
            try await withBridge(s) { _ in
                try await state(s, "auth", "missing") { $0["status"] == "missing" }
                try await s.probe.waitFor("bridge/info names the command") { ms in
                    ms.last { $0.topic == "\(s.base)/bridge/info" }?.payload.contains("run: switchyard auth livecoding") == true
                }
                try await s.probe.waitFor(topic: "\(s.base)/livecoding/alice/availability", payload: "offline")
            }
            // A token without the read scope: 403 is a scope problem, the auth itself is fine.
            _ = try await authorise(s.sim, store: s.store, scope: "chat")
            try await withBridge(s) { _ in
                try await state(s, "auth", "ok") { $0["status"] == "ok" }
                try await s.probe.waitFor("scope error") { ms in
                    ms.contains { $0.topic == "\(s.base)/bridge/log" && $0.payload.contains("HTTP 403") && $0.payload.contains("`read` is required") }
                }
            }
        }
    }
}
