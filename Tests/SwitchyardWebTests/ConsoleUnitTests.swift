import Foundation
import Testing
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
@testable import SwitchyardWeb
import SwitchyardWebTesting

@Suite struct ConsoleAuthTests {
    @Test func tokensAreComparedWhole() {
        #expect(ConsoleAuth.constantTimeEqual(Array("abcdef0123456789".utf8), Array("abcdef0123456789".utf8)))
        #expect(!ConsoleAuth.constantTimeEqual(Array("abcdef0123456789".utf8), Array("abcdef012345678".utf8)))
        #expect(!ConsoleAuth.constantTimeEqual(Array("abcdef0123456789".utf8), Array("abcdef0123456789x".utf8)))
        #expect(!ConsoleAuth.constantTimeEqual(Array("abcdef0123456789".utf8), Array("bbcdef0123456789".utf8)))
        #expect(!ConsoleAuth.constantTimeEqual([], Array("a".utf8)))
    }

    @Test func bearerOrSessionCookieWhenATokenIsSet() {
        let auth = ConsoleAuth(token: "s3cret-token-0123456789", secure: false)
        #expect(!auth.allows(authorization: nil, cookie: nil))
        #expect(auth.allows(authorization: "Bearer s3cret-token-0123456789", cookie: nil))
        #expect(auth.allows(authorization: "bearer  s3cret-token-0123456789 ", cookie: nil))
        #expect(!auth.allows(authorization: "Bearer s3cret-token-012345678", cookie: nil))
        #expect(!auth.allows(authorization: "Basic czNjcmV0", cookie: nil))
        #expect(!auth.allows(authorization: nil, cookie: "switchyard_console=s3cret-token-0123456789"))
        let cookie = auth.newSession()
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains("Secure"))
        let value = String(cookie.split(separator: ";")[0])
        #expect(auth.allows(authorization: nil, cookie: "other=1; \(value)"))
        _ = auth.endSession(cookie: value)
        #expect(!auth.allows(authorization: nil, cookie: value))
        #expect(ConsoleAuth(token: "x", secure: true).newSession().hasSuffix("; Secure"))
    }

    @Test func sessionsAreBounded() {
        let auth = ConsoleAuth(token: "s3cret-token-0123456789", secure: false)
        let first = String(auth.newSession().split(separator: ";")[0])
        for _ in 0..<ConsoleAuth.maxSessions { _ = auth.newSession() }
        #expect(auth.sessions.withLock { $0.count } == ConsoleAuth.maxSessions)
        #expect(!auth.allows(authorization: nil, cookie: first))
    }

    @Test func withoutATokenOnlyLoopbackHostsAndTheConsolesOwnOrigin() {
        let open = ConsoleAuth(token: nil, secure: false)
        #expect(open.allows(authorization: nil, cookie: nil))
        #expect(open.sameOrigin(host: "127.0.0.1:9180", origin: nil))
        #expect(open.sameOrigin(host: "localhost:9180", origin: "http://localhost:9180"))
        #expect(open.sameOrigin(host: "[::1]:9180", origin: nil))
        // DNS rebinding: a name of the attacker's that resolves to 127.0.0.1.
        #expect(!open.sameOrigin(host: "evil.example:9180", origin: nil))
        // Another site open in the same browser.
        #expect(!open.sameOrigin(host: "127.0.0.1:9180", origin: "http://evil.example"))
        #expect(!open.sameOrigin(host: nil, origin: nil))
        // A WebSocket library's own Origin (no browser sends a ws: one).
        #expect(open.sameOrigin(host: "127.0.0.1:9180", origin: "ws://127.0.0.1"))
        let guarded = ConsoleAuth(token: "s3cret-token-0123456789", secure: false)
        #expect(guarded.sameOrigin(host: "bridge.lan:9180", origin: "http://bridge.lan:9180"))
        #expect(!guarded.sameOrigin(host: "bridge.lan:9180", origin: "http://evil.example"))
    }

    @Test func formAndCookieParsing() {
        #expect(ConsoleAuth.formField("a=1&token=ab%2Bc+d%3D", "token") == "ab+c d=")
        #expect(ConsoleAuth.formField("tokenx=1", "token") == nil)
        #expect(ConsoleAuth.cookieValue("a=1; switchyard_console=xyz; b=2", name: "switchyard_console") == "xyz")
        #expect(ConsoleAuth.percentDecoded("%zz%4") == "%zz%4")
    }

    @Test func hostHeadersAreReadLikeTheListenAddress() {
        #expect(ConsoleAuth.hostName("127.0.0.1:9180") == "127.0.0.1")
        #expect(ConsoleAuth.hostName("localhost") == "localhost")
        #expect(ConsoleAuth.hostName("[::1]:9180") == "::1")
        #expect(ConsoleAuth.hostName("[::1]") == "::1")
        // An IPv6 address without brackets, or text after them that is no port: not a host.
        #expect(ConsoleAuth.hostName("::1") == nil)
        #expect(ConsoleAuth.hostName("[::1]evil.example") == nil)
        #expect(ConsoleAuth.hostName("[::1") == nil)
    }
}

@Suite struct WebConfigTests {
    func parse(_ web: String, env: [String: String] = [:]) -> Result<SwitchyardConfig, ConfigErrors> {
        Result { () throws(ConfigErrors) in try SwitchyardConfig.parse(yaml: "log: {level: info}\nweb:\n\(web)", file: "c.yaml", upstreams: upstreams, environment: env) }
    }

    @Test func defaultsAreOnAndLoopback() throws {
        let c = try SwitchyardConfig.parse(yaml: "", file: "c.yaml", upstreams: upstreams)
        #expect(c.web.enabled && c.web.host == "127.0.0.1" && c.web.port == 9180 && c.web.authToken == nil)
        #expect(c.web.url == "http://127.0.0.1:9180")
        #expect(c.redactedJSON["web"]?["listen"] == "127.0.0.1:9180")
    }

    @Test func listeningOffLoopbackWithoutATokenIsAProblemAtItsPosition() throws {
        guard case .failure(let e) = parse("  listen: 0.0.0.0:9180\n") else { Issue.record("accepted"); return }
        #expect(e.problems.count == 1)
        #expect(e.problems[0].description.hasPrefix("c.yaml:3:11: web.listen: listening on 0.0.0.0 (not loopback) needs web.auth_token"))
        // With a token (also from a file), or disabled, it is fine; so is any loopback address.
        let ok = try parse("  listen: 0.0.0.0:9180\n  auth_token: ${T}\n", env: ["T": "0123456789abcdef0123"]).get()
        #expect(ok.web.authToken == "0123456789abcdef0123" && ok.redactedJSON["web"]?["auth_token"] == "***")
        #expect(ok.secretValues.contains("0123456789abcdef0123"))
        _ = try parse("  listen: 0.0.0.0:9180\n  enabled: false\n").get()
        _ = try parse("  listen: 127.9.9.9:1\n").get()
        _ = try parse("  listen: \"[::1]:9180\"\n").get()
        guard case .failure = parse("  listen: \"[::]:9180\"\n") else { Issue.record("[::] accepted without a token"); return }
    }

    /// Pages can never take every connection: probes, scrapes and logins keep room.
    @Test func maxClientsStaysWellBelowTheConnectionLimit() throws {
        #expect(SwitchyardConfig.Web.maxClientsLimit * 2 <= ConsoleService.Bound.connections)
        #expect(try parse("  max_clients: \(SwitchyardConfig.Web.maxClientsLimit)\n").get().web.maxClients == SwitchyardConfig.Web.maxClientsLimit)
    }

    @Test func malformedValuesAreProblems() {
        for (yaml, words) in [("  listen: 9180\n", "expected host:port"), ("  listen: ::1:9180\n", "expected host:port"),
                              ("  listen: a:70000\n", "expected host:port"), ("  auth_token: short\n", "shorter than 16"),
                              ("  tls_cert: /nonexistent.pem\n", "cannot be read"), ("  max_clients: 0\n", "out of range"),
                              ("  max_clients: 33\n", "out of range"),
                              ("  colour: blue\n", "unknown key")] {
            guard case .failure(let e) = parse(yaml) else { Issue.record("accepted: \(yaml)"); continue }
            #expect(e.problems.contains { $0.message.contains(words) }, "\(yaml): \(e.description)")
        }
    }
}

@Suite struct ConsoleFeedTests {
    let scheme = TopicScheme(base: "sy")

    /// A feed as the bridge runs it: each message goes to the transport, whose ledger is the feed's store,
    /// then to the feed (ObservedTransport).
    struct Fed {
        let transport = InMemoryTransport()
        let feed: ConsoleFeed
        let observed: ObservedTransport
        init(_ scheme: TopicScheme, limits: ConsoleFeed.Limits = ConsoleFeed.Limits()) {
            feed = ConsoleFeed(scheme: scheme, store: transport, limits: limits)
            observed = ObservedTransport(transport, observer: feed)
        }
        func published(topic: String, payload: [UInt8], retain: Bool) { observed.publish(topic, payload, qos: 1, retain: retain) }
    }

    func drain(_ feed: ConsoleFeed, from cursor: UInt64) -> ([ConsoleFeed.Item], UInt64) {
        guard case .changes(let items, let next, _) = feed.read(from: cursor, budget: 1 << 20, excluded: []) else { return ([], cursor) }
        return (items, next)
    }

    @Test func aRetainedTopicChangedManyTimesIsSentOnceWithItsLatestPayload() {
        let fed = Fed(scheme), feed = fed.feed
        let (_, cursor) = feed.snapshot(excluded: [])
        for i in 0..<10 { fed.published(topic: "sy/virtual/kitchen", payload: Array("{\"brightness\":\(i)}".utf8), retain: true) }
        fed.published(topic: "sy/bridge/log", payload: Array(#"{"level":"error","message":"x"}"#.utf8), retain: false)
        fed.published(topic: "sy/bridge/log", payload: Array(#"{"level":"error","message":"y"}"#.utf8), retain: false)
        let (items, next) = drain(feed, from: cursor)
        #expect(items.map(\.topic) == ["sy/virtual/kitchen", "sy/bridge/log", "sy/bridge/log"])
        #expect(items.first.flatMap { $0.payload.map { String(decoding: $0, as: UTF8.self) } } == #"{"brightness":9}"#)
        #expect(drain(feed, from: next).0.isEmpty)
        // A cleared retained topic is sent as cleared (nil), and is gone from the snapshot.
        fed.published(topic: "sy/virtual/kitchen", payload: [], retain: true)
        let (cleared, _) = drain(feed, from: next)
        #expect(cleared.count == 1 && cleared[0].payload == nil)
        #expect(!feed.snapshot(excluded: []).items.contains { $0.topic == "sy/virtual/kitchen" })
        // Other bases and the broker's own topics are not the console's.
        fed.published(topic: "sy2/virtual/kitchen", payload: Array("{}".utf8), retain: true)
        fed.published(topic: "other/x", payload: Array("{}".utf8), retain: true)
        #expect(feed.retainedCount == 0)
    }

    /// A payload the engine hands over as a source (a device's details, its discovery configs) is kept as
    /// that source, as the transport's ledger keeps it: written when a page reads it, never held as bytes.
    @Test func aSourcedPayloadIsWrittenOnlyWhenAPageReadsIt() {
        final class Counting: PayloadSource, @unchecked Sendable {
            let lock = NSLock()
            var writes = 0
            func payload() -> [UInt8] {
                lock.withLock { writes += 1 }
                return Array(#"{"name":"kitchen"}"#.utf8)
            }
        }
        let fed = Fed(scheme)
        let feed = fed.feed, transport = fed.observed
        let details = Counting(), config = Counting()
        let (_, cursor) = feed.snapshot(excluded: [])
        transport.publish([Publication("sy/bridge/devices/virtual/kitchen", body: .source(details), retain: true),
                           Publication("homeassistant/light/switchyard_sy_virtual_kitchen/light/config", body: .source(config), retain: true)])
        // The in-memory transport writes each once, as the network thread does when it sends them.
        let sent = (details.writes, config.writes)
        let (items, _) = drain(feed, from: cursor)
        #expect(details.writes == sent.0, "a page's items carry the source until their frame is written")
        #expect(PageProtocol.frame(items).contains(#"{\"name\":\"kitchen\"}"#))
        #expect(details.writes == sent.0 + 1)
        #expect(feed.discoveryConfigs(adapter: "virtual", deviceID: "kitchen").map { String(decoding: $0.1, as: UTF8.self) } == [#"{"name":"kitchen"}"#])
        #expect(config.writes == sent.1 + 1)
    }

    /// Frames hold about a budget's bytes; a payload larger than the budget (a source such as `bridge/devices`
    /// for thousands of devices, whose size is known only once written) goes in a frame of its own.
    @Test func aPayloadLargerThanTheBudgetGoesAlone() async {
        final class Big: PayloadSource {
            func payload() -> [UInt8] { Array(repeating: UInt8(ascii: "x"), count: 200_000) }
        }
        let small = { (i: Int) in ConsoleFeed.Item(topic: "sy/virtual/l\(i)", payload: Array(repeating: UInt8(ascii: "s"), count: 10_000)) }
        let items = [small(0), small(1), ConsoleFeed.Item(topic: "sy/bridge/devices", body: .source(Big())), small(2), small(3)]
        var frames: [[String]] = []
        await PageProtocol.inFrames(items, budget: 64 * 1024) { frames.append($0.map(\.topic)) }
        #expect(frames == [["sy/virtual/l0", "sy/virtual/l1"], ["sy/bridge/devices"], ["sy/virtual/l2", "sy/virtual/l3"]])
        var sizes: [Int] = []
        await PageProtocol.inFrames((0..<20).map(small), budget: 64 * 1024) { sizes.append($0.count) }
        #expect(sizes == [7, 7, 6])
    }

    @Test func aPageBehindTheRingIsToldToStartAgain() {
        var limits = ConsoleFeed.Limits()
        limits.ringEntries = 8
        let fed = Fed(scheme, limits: limits), feed = fed.feed
        let (_, cursor) = feed.snapshot(excluded: [])
        for i in 0..<8 { fed.published(topic: "sy/virtual/l\(i)", payload: Array("{}".utf8), retain: true) }
        guard case .changes(let items, _, _) = feed.read(from: cursor, budget: 1 << 20, excluded: []) else { Issue.record("behind too early"); return }
        #expect(items.count == 8)
        fed.published(topic: "sy/virtual/l9", payload: Array("{}".utf8), retain: true)
        guard case .behind = feed.read(from: cursor, budget: 1 << 20, excluded: []) else { Issue.record("not behind"); return }
        // The snapshot has everything, bridge/info first.
        fed.published(topic: "sy/bridge/info", payload: Array("{}".utf8), retain: true)
        let snap = feed.snapshot(excluded: [])
        #expect(snap.items.first?.topic == "sy/bridge/info" && snap.items.count == 10)
    }

    @Test func logAndEventBytesInTheRingAreBounded() {
        var limits = ConsoleFeed.Limits()
        limits.ringEventBytes = 1000
        limits.recentLogs = 3
        let fed = Fed(scheme, limits: limits), feed = fed.feed
        let line = Array(String(repeating: "x", count: 300).utf8)
        for _ in 0..<10 { fed.published(topic: "sy/bridge/log", payload: line, retain: false) }
        #expect(feed.state.withLock { $0.eventBytes } <= 1000)
        #expect(feed.state.withLock { $0.recentLogs.count } == 3)
        #expect(feed.snapshot(excluded: []).items.count == 3)
    }

    @Test func aBatchStopsAtItsBudgetAndMirrorsCanBeLeftOut() {
        let fed = Fed(scheme), feed = fed.feed
        let (_, cursor) = feed.snapshot(excluded: [])
        let big = Array(repeating: UInt8(ascii: "a"), count: 600)
        for i in 0..<5 { fed.published(topic: "sy/ha/sensor/s\(i)/state", payload: big, retain: true) }
        fed.published(topic: "sy/virtual/kitchen", payload: big, retain: true)
        guard case .changes(let first, let next, let more) = feed.read(from: cursor, budget: 1000, excluded: []) else { Issue.record("behind"); return }
        #expect(first.count == 2 && more)
        guard case .changes(let rest, _, _) = feed.read(from: next, budget: 1 << 20, excluded: ["sy/ha/"]) else { Issue.record("behind"); return }
        #expect(rest.map(\.topic) == ["sy/virtual/kitchen"])
        #expect(feed.snapshot(excluded: ["sy/ha/"]).items.map(\.topic) == ["sy/virtual/kitchen"])
    }

    @Test func discoveryConfigsAreKeptByDeviceAndNeverPushed() {
        let fed = Fed(scheme), feed = fed.feed
        let node = DiscoveryBuilder(scheme: scheme, version: "").nodeID(adapter: "virtual", deviceID: "kitchen")
        fed.published(topic: "homeassistant/light/\(node)/light/config", payload: Array(#"{"name":null}"#.utf8), retain: true)
        fed.published(topic: "homeassistant/sensor/\(node)/rssi/config", payload: Array(#"{"name":"RSSI"}"#.utf8), retain: true)
        fed.published(topic: "homeassistant/light/someone_else_1/light/config", payload: Array("{}".utf8), retain: true)
        #expect(feed.discoveryConfigs(adapter: "virtual", deviceID: "kitchen").map(\.0)
                == ["homeassistant/light/\(node)/light/config", "homeassistant/sensor/\(node)/rssi/config"])
        #expect(feed.snapshot(excluded: []).items.isEmpty)
        fed.published(topic: "homeassistant/sensor/\(node)/rssi/config", payload: [], retain: true)
        #expect(feed.discoveryConfigs(adapter: "virtual", deviceID: "kitchen").count == 1)
    }

    /// Discovery configs are never pushed, also when their prefix lies under the base topic (a config may
    /// say `homeassistant.prefix: sy/discovery`); the bridge's state, which the transport writes to its
    /// ledger without the engine, is not sent either: a page would never get a change of it.
    @Test func discoveryUnderTheBaseAndTheBirthTopicAreNotPushed() {
        let scheme = TopicScheme(base: "sy", discoveryPrefix: "sy/discovery")
        let fed = Fed(scheme), feed = fed.feed
        let (_, cursor) = feed.snapshot(excluded: [])
        let node = DiscoveryBuilder(scheme: scheme, version: "").nodeID(adapter: "virtual", deviceID: "kitchen")
        fed.published(topic: "sy/discovery/light/\(node)/light/config", payload: Array(#"{"name":null}"#.utf8), retain: true)
        fed.published(topic: "sy/virtual/kitchen", payload: Array(#"{"state":"ON"}"#.utf8), retain: true)
        fed.transport.publish("sy/bridge/state", Array("online".utf8), qos: 1, retain: true)
        #expect(drain(feed, from: cursor).0.map(\.topic) == ["sy/virtual/kitchen"])
        #expect(feed.snapshot(excluded: []).items.map(\.topic) == ["sy/virtual/kitchen"])
        #expect(feed.retainedCount == 2)
        #expect(feed.discoveryConfigs(adapter: "virtual", deviceID: "kitchen").map(\.0) == ["sy/discovery/light/\(node)/light/config"])
    }

    @Test func aCommandIsAnsweredByTheResultWithItsTransaction() async {
        let fed = Fed(scheme), feed = fed.feed
        let answer = await feed.awaitAnswer("console-t-1", timeout: 10) {
            // Someone else's result first, then ours.
            fed.published(topic: "sy/virtual/kitchen/result", payload: Array(#"{"transaction":"other","status":"ok"}"#.utf8), retain: false)
            fed.published(topic: "sy/virtual/kitchen/result",
                           payload: Array(#"{"transaction":"console-t-1","status":"error","error":"brightness: 150 is out of range 0–100"}"#.utf8),
                           retain: false)
        }
        #expect(answer?["status"] == "error" && answer?["error"] == "brightness: 150 is out of range 0–100")
        let none = await feed.awaitAnswer("console-t-2", timeout: 0.2) {}
        #expect(none == nil)
        #expect(feed.state.withLock { $0.awaiting.isEmpty })
    }

    @Test func commandOutcomesAndRefusalsAreCounted() {
        let fed = Fed(scheme), feed = fed.feed
        feed.commandFinished(adapter: "virtual", ok: true, seconds: 0.003)
        feed.commandFinished(adapter: "virtual", ok: false, seconds: 0.2)
        feed.commandRefused(topic: "sy/virtual/kitchen/set")
        feed.commandRefused(topic: "sy/bridge/request/x")   // not a command
        fed.published(topic: "sy/bridge/log", payload: Array(#"{"level":"error","message":"x"}"#.utf8), retain: false)
        let text = String(decoding: feed.metrics.exposition(), as: UTF8.self)
        let samples = PrometheusText.samples(text)
        #expect(samples[#"switchyard_commands_total{adapter="virtual",result="ok"}"#] == 1)
        #expect(samples[#"switchyard_commands_total{adapter="virtual",result="error"}"#] == 1)
        #expect(samples["switchyard_commands_refused_total"] == 1)
        #expect(samples[#"switchyard_command_duration_seconds_count{adapter="virtual"}"#] == 2)
        #expect(samples[#"switchyard_command_duration_seconds_bucket{adapter="virtual",le="0.005"}"#] == 1)
        #expect(samples[#"switchyard_log_messages_total{level="error"}"#] == 1)
    }

    @Test func totalsBecomeCountersOfTheirGrowth() {
        let m = ConsoleMetrics()
        for total in [10, 15, 15, 21] { m.total("switchyard_upstream_requests_total", [("adapter", "lifx")], total) }
        let samples = PrometheusText.samples(String(decoding: m.exposition(), as: UTF8.self))
        #expect(samples[#"switchyard_upstream_requests_total{adapter="lifx"}"#] == 21)
    }

    @Test func framesAreValidJSONWhateverThePayload() throws {
        let items = [ConsoleFeed.Item(topic: "sy/a \"b\"", payload: [0xFF, 0x41, 0x0A, 0x00, 0x22, 0x5C]),
                     ConsoleFeed.Item(topic: "sy/c", payload: nil)]
        let frame = PageProtocol.frame(items)
        let json = try JSONValue.parse(frame)
        #expect(json["t"] == "m")
        #expect(json["m"]?.arrayValue?.first?.arrayValue?[0] == "sy/a \"b\"")
        #expect(json["m"]?.arrayValue?.first?.arrayValue?[1] == "\u{FFFD}A\n\u{0}\"\\")
        #expect(json["m"]?.arrayValue?[1].arrayValue?[1] == .null)
    }
}


/// The soak's console invariants catch what they are for (docs/testing.md 8–10).
@Suite struct ConsoleWatchTests {
    @Test func notReadyOutsideTheScheduleACounterGoingBackAndALostPageAreBreaches() {
        var w = ConsoleWatch()
        let notReady = (503, #"{"ready":false,"reasons":["broker: not connected","lifx: error"]}"#)
        let m1 = "switchyard_mqtt_connected 1\nswitchyard_mqtt_connects_total 3\nswitchyard_web_clients 1\n"
        #expect(w.see(readyz: (200, #"{"ready":true}"#), metrics: m1, pageEnded: nil, largestFrame: 10, inWindow: { _ in false }).isEmpty)
        // Inside the broker's and lifx's windows: explained.
        #expect(w.see(readyz: notReady, metrics: m1, pageEnded: nil, largestFrame: 10, inWindow: { $0 == "broker" || $0 == "lifx" }).isEmpty)
        // The broker's window over, lifx still failing: a breach naming lifx only.
        let b = w.see(readyz: notReady, metrics: m1, pageEnded: nil, largestFrame: 10, inWindow: { $0 == "broker" })
        #expect(b == ["/readyz not ready outside the schedule's faults: lifx: error"])
        // A counter lower than at the last scrape (a gauge may go down).
        let m2 = "switchyard_mqtt_connected 1\nswitchyard_mqtt_connects_total 2\nswitchyard_web_clients 0\n"
        #expect(w.see(readyz: (200, ""), metrics: m2, pageEnded: nil, largestFrame: 10, inWindow: { _ in false })
                == ["/metrics: switchyard_mqtt_connects_total went from 3.0 to 2.0"])
        // The page cut off: once.
        #expect(w.see(readyz: (200, ""), metrics: m2, pageEnded: "closed", largestFrame: 10, inWindow: { _ in false }).count == 1)
        #expect(w.see(readyz: (200, ""), metrics: m2, pageEnded: "closed", largestFrame: 10, inWindow: { _ in false }).isEmpty)
        #expect(w.see(readyz: nil, metrics: nil, pageEnded: nil, largestFrame: 10, inWindow: { _ in false }).count == 2)
    }

    /// Under hot standby: ready on the active instance only, outside a takeover; silence only from a process
    /// the schedule stopped.
    @Test func underHotStandbyOnlyTheActiveInstanceIsReady() {
        var w = ConsoleWatch()
        let m = "switchyard_mqtt_connected 1\n"
        let standing = (503, #"{"ready":false,"reasons":["standby: not the active instance (active: east)"]}"#)
        let none = { (_: String) in false }
        #expect(w.see(readyz: standing, metrics: m, pageEnded: nil, largestFrame: 10, standby: true, inWindow: none).isEmpty)
        #expect(w.notReadyStandby == 1)
        // Ready while another is active: a breach, unless who is active is changing.
        #expect(w.see(readyz: (200, ""), metrics: m, pageEnded: nil, largestFrame: 10, standby: true, inWindow: none).count == 1)
        #expect(w.see(readyz: (200, ""), metrics: m, pageEnded: nil, largestFrame: 10, standby: true, inWindow: { $0 == "takeover" }).isEmpty)
        // The active instance saying it stands by: the same.
        #expect(w.see(readyz: standing, metrics: m, pageEnded: nil, largestFrame: 10, standby: false, inWindow: none).count == 1)
        #expect(w.see(readyz: standing, metrics: m, pageEnded: nil, largestFrame: 10, standby: false, inWindow: { $0 == "takeover" }).isEmpty)
        // Stopped (killed, paused): no answer and the page gone are its own; otherwise breaches.
        #expect(w.see(readyz: nil, metrics: nil, pageEnded: "closed", largestFrame: 10, standby: false, inWindow: { $0 == "down" }).isEmpty)
        #expect(w.unreachable == 1)
        let resumed = (503, #"{"ready":false,"reasons":["broker: not connected","lifx: starting"]}"#)
        #expect(w.see(readyz: resumed, metrics: m, pageEnded: nil, largestFrame: 10, standby: false, inWindow: { $0 == "down" }).isEmpty)
        #expect(w.see(readyz: resumed, metrics: m, pageEnded: nil, largestFrame: 10, standby: false, inWindow: none).count == 1)
        #expect(w.see(readyz: nil, metrics: nil, pageEnded: nil, largestFrame: 10, standby: false, inWindow: none).count == 2)
    }
}
