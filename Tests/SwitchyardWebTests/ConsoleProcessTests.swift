import Foundation
import Glibc
import HTTPTypes
import Testing
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// The console of the real `switchyard` process against a real Mosquitto: what a page, a script, a probe
/// and a hostile peer see (docs/console.md).
@Suite(.serialized) struct ConsoleProcessTests {
    static func state(_ probe: MQTTProbe, _ topic: String, has words: String) async throws {
        _ = try await probe.waitFor("\(topic) has \(words)") { ms in ms.last { $0.topic == topic }?.payload.contains(words) == true }
    }

    /// A page gets everything, then changes as they happen; its commands take the MQTT path (the same
    /// validation, the same retained state a MQTT client reads) and are answered with their result.
    @Test func aPageSeesTheBridgeAndItsCommandsTakeTheMQTTPath() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let console = try await ConsoleProcess(brokerPort: broker.port)
        defer { console.stop() }
        let base = console.base
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#")
        try await Self.state(probe, "\(base)/virtual/kitchen", has: "brightness")

        let page = PageClient(port: console.webPort)
        defer { page.close() }
        let hello = try await page.waitFor("hello") { $0["t"] == "hello" }
        #expect(hello["base"] == .string(base) && hello["auth"] == false)
        _ = try await page.waitFor("synced") { $0["t"] == "synced" }
        let devices = try #require(page.payload("\(base)/bridge/devices"))
        #expect(devices.contains("\"hall/lamp\"") && devices.contains("\"kitchen\"") && devices.contains("\"fan\""))
        #expect(page.payload("\(base)/virtual/kitchen")?.contains("brightness") == true)
        #expect(page.payload("\(base)/virtual/kitchen/availability") == "online")
        #expect(page.payload("\(base)/bridge/devices/virtual/kitchen")?.contains("\"capabilities\"") == true)

        // A command from the page: answered ok, and the retained state a MQTT client reads changed.
        let ok = try await page.command(1, topic: "\(base)/virtual/kitchen/set", payload: ["brightness": 40, "state": "ON"])
        #expect(ok["status"] == "ok", "\(ok.serialized)")
        try await Self.state(probe, "\(base)/virtual/kitchen", has: #""brightness":40,"#)
        // A refused value: the bridge's own words, on the page and on bridge/log as for MQTT.
        let refused = try await page.command(2, topic: "\(base)/virtual/kitchen/set", payload: ["brightness": 150])
        #expect(refused["status"] == "error")
        #expect(refused["error"]?.stringValue?.contains("brightness: 150 is out of range 0–100") == true, "\(refused.serialized)")
        try await Self.state(probe, "\(base)/bridge/log", has: "150 is out of range")
        let unknown = try await page.command(3, topic: "\(base)/virtual/nosuch/set", payload: ["state": "ON"])
        #expect(unknown["error"]?.stringValue?.contains("unknown device 'nosuch'") == true)
        // Only what the engine takes from MQTT: no publishing of state or anything else through the console.
        let notACommand = try await page.command(4, topic: "\(base)/virtual/kitchen", payload: ["state": "ON"])
        #expect(notACommand["status"] == "error")
        // A bridge request, answered with its response.
        let health = try await page.command(5, topic: "\(base)/bridge/request/health_check", payload: [:])
        #expect(health["status"] == "ok" && health["data"]?["healthy"] == true)

        // A change made over MQTT reaches the open page without asking.
        let before = page.all.count
        probe.publish("\(base)/virtual/hall/lamp/set", #"{"brightness": 75}"#)
        _ = try await page.waitFor("hall/lamp at 75", after: before) { f in
            f["t"] == "m" && (f["m"]?.arrayValue ?? []).contains { $0.arrayValue?.first == .string("\(base)/virtual/hall/lamp")
                && $0.arrayValue?.last?.stringValue?.contains(#""brightness":75"#) == true }
        }
        // The device page's discovery entities.
        page.send(["t": "disc", "id": 9, "adapter": "virtual", "device_id": "kitchen"])
        let disc = try await page.waitFor("discovery configs") { $0["t"] == "disc" }
        #expect((disc["configs"]?.arrayValue ?? []).contains { $0.arrayValue?.first?.stringValue?.hasSuffix("/config") == true })
        // Live status: ready, the broker connected.
        let status = try await page.waitFor("status") { $0["t"] == "status" }
        #expect(status["ready"] == true && status["mqtt"]?["connected"] == true)
    }

    /// `/readyz` is not ready while the broker is down and ready again after; `/livez` stays alive.
    @Test func readinessFollowsTheBroker() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let console = try await ConsoleProcess(brokerPort: broker.port)
        defer { console.stop() }
        try await waitUntil("ready", timeout: 20) { (try? console.get("/readyz"))?.status == 200 }
        #expect(try console.get("/readyz").body.contains(#"{"ready":true}"#))
        await broker.stop()
        try await waitUntil("not ready with the broker down", timeout: 20) { (try? console.get("/readyz"))?.status == 503 }
        let down = try console.get("/readyz")
        #expect(down.body.contains("broker: not connected"), "\(down.body)")
        #expect(try console.get("/livez").status == 200)
        try await broker.start()
        try await waitUntil("ready again", timeout: 30) { (try? console.get("/readyz"))?.status == 200 }
        // /metrics says the same.
        let metrics = PrometheusText.samples(try console.get("/metrics").body)
        #expect(metrics["switchyard_mqtt_connected"] == 1)
        #expect((metrics["switchyard_mqtt_connects_total"] ?? 0) >= 2)
    }

    /// With a token: the page, the WebSocket and /metrics refuse a request without it; a script sends it as
    /// a bearer token, a person logs in once (an HttpOnly, SameSite=Strict cookie). Probes need none.
    @Test func theTokenGuardsThePageTheWebSocketAndMetrics() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let token = "tok-\(UUID().uuidString)"
        let port = TestEnvironment.freePort()
        let console = try await ConsoleProcess(brokerPort: broker.port, web: "{listen: \"127.0.0.1:\(port)\", auth_token: \"\(token)\"}", webPort: port)
        defer { console.stop() }
        let page = try console.get("/")
        #expect(page.status == 401 && page.body.contains("<form method=\"post\" action=\"login\">"))
        #expect(!page.body.contains("console.js"))
        #expect(try console.get("/console.js").status == 401)
        #expect(try console.get("/metrics").status == 401)
        #expect(try console.get("/metrics", headers: [("Authorization", "Bearer wrong-\(token)")]).status == 401)
        #expect(try console.get("/metrics", headers: [("Authorization", "Bearer \(token)")]).status == 200)
        #expect(try console.get("/livez").status == 200)
        #expect(try console.get("/readyz").status != 401)

        // The WebSocket: no upgrade without the token (the handshake fails: 400), and a plain GET says why.
        let (fd, refused) = try HTTPProbe.webSocket(port: port)
        close(fd)
        #expect(refused.status == 400, "\(refused.status) \(refused.body)")
        #expect(try console.get("/ws").status == 401)
        let (fd2, upgraded) = try HTTPProbe.webSocket(port: port, headers: [("Authorization", "Bearer \(token)")])
        close(fd2)
        #expect(upgraded.status == 101)

        // Logging in: a wrong token is refused (and counted), the right one gets the session cookie.
        let form = { (t: String) in Array("token=\(t.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? t)".utf8) }
        let wrong = try HTTPProbe.request(port: port, "/login", method: "POST",
                                          headers: [("Content-Type", "application/x-www-form-urlencoded")], body: form("nope"))
        #expect(wrong.status == 401 && wrong.body.contains("not the console's token"))
        let good = try HTTPProbe.request(port: port, "/login", method: "POST",
                                         headers: [("Content-Type", "application/x-www-form-urlencoded")], body: form(token))
        #expect(good.status == 303)
        let cookie = try #require(good.header("Set-Cookie"))
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && !cookie.contains(token))
        let session = String(cookie.split(separator: ";")[0])
        let inside = try console.get("/", headers: [("Cookie", session)])
        #expect(inside.status == 200 && inside.body.contains("console.js"))
        #expect(inside.header("Content-Security-Policy")?.contains("script-src 'self'") == true)
        let (fd3, withCookie) = try HTTPProbe.webSocket(port: port, headers: [("Cookie", session)])
        close(fd3)
        #expect(withCookie.status == 101)
        // Another site in the same browser cannot use the session.
        let (fd4, crossSite) = try HTTPProbe.webSocket(port: port, headers: [("Cookie", session), ("Origin", "http://evil.example")])
        close(fd4)
        #expect(crossSite.status == 400)
        #expect(try console.get("/ws", headers: [("Cookie", session), ("Origin", "http://evil.example")]).status == 403)
        let metrics = PrometheusText.samples(try console.get("/metrics", headers: [("Cookie", session)]).body)
        #expect(metrics["switchyard_web_login_failures_total"] == 1)
        // Logged out: the cookie is dead.
        _ = try HTTPProbe.request(port: port, "/logout", method: "POST", headers: [("Cookie", session)])
        #expect(try console.get("/metrics", headers: [("Cookie", session)]).status == 401)
    }

    /// Listening beyond loopback without a token: the config is refused, with its position, nothing starts.
    /// Without a token, a name that is not loopback (DNS rebinding) gets nothing either.
    @Test func offLoopbackWithoutATokenRefusesToStart() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let dir = TestEnvironment.makeTempDir("console")
        let path = dir.appendingPathComponent("config.yaml").path
        let port = TestEnvironment.freePort()
        try ConsoleProcess.config(brokerPort: broker.port, base: uniqueBase(), web: "{listen: \"0.0.0.0:\(port)\"}")
            .writeForTest(toFile: path, replacing: true)
        let bridge = try BridgeProcess(arguments: ["run", "-c", path])
        let status = try await bridge.waitForExit(timeout: 30)
        #expect(status == 2)
        #expect(bridge.outputText.contains("\(path):3:15: web.listen: listening on 0.0.0.0 (not loopback) needs web.auth_token"), "\(bridge.outputText)")
        #expect(bridge.outputText.contains("nothing started"))
        #expect(!TestEnvironment.canConnect(port: port))

        let console = try await ConsoleProcess(brokerPort: broker.port)
        defer { console.stop() }
        let rebound = try HTTPProbe.request(port: console.webPort, "/", headers: [("Host", "evil.example:\(console.webPort)")])
        #expect(rebound.status == 403 || rebound.status == 400)
    }

    /// A page that stops reading is cut off (its connection closed, nothing kept for it) while another page
    /// keeps up. `client_timeout` is 5 s, not lower: the page that keeps up is read by this test process,
    /// which a loaded machine can starve for seconds, and a page that stops for `client_timeout` is cut.
    @Test func aPageThatStopsReadingIsCutOffAndOneThatReadsStays() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let port = TestEnvironment.freePort()
        let console = try await ConsoleProcess(brokerPort: broker.port, web: "{listen: \"127.0.0.1:\(port)\", client_timeout: 5}",
                                               webPort: port, lights: 200)
        defer { console.stop() }
        let base = console.base
        let reader = PageClient(port: port, keepFrames: false)
        defer { reader.close() }
        // The stalled page: upgraded, a tiny receive window, never reads.
        let (stalled, answer) = try HTTPProbe.webSocket(port: port, receiveBuffer: 2048)
        defer { close(stalled) }
        #expect(answer.status == 101)
        let pub = try await MQTTProbe.connect(port: broker.port)
        defer { pub.close() }
        // Churn: every light, many times, with big enough states to fill any buffer in a few seconds.
        var cut = false
        for round in 0..<300 where !cut {
            for i in 0..<200 { pub.publish("\(base)/virtual/l\(i)/set", #"{"brightness": \#(1 + (round * 7 + i) % 99), "state": "ON"}"#) }
            try await Task.sleep(for: .milliseconds(100))
            if round % 10 == 9 {
                cut = (PrometheusText.samples(try console.get("/metrics").body)[#"switchyard_web_clients_cut_total{reason="slow"}"#] ?? 0) >= 1
            }
        }
        #expect(cut, "the stalled page was not cut off")
        // Its socket is closed by the bridge: reading it ends (after whatever the kernel had buffered).
        let rest = HTTPProbe.read(stalled)
        #expect(rest.count < 4 << 20)
        // The page that reads is still there, and up to date.
        let last = PrometheusText.samples(try console.get("/metrics").body)
        #expect(last["switchyard_web_clients"] == 1)
        #expect(last[#"switchyard_web_clients_cut_total{reason="slow"}"#] == 1, "the page that reads was cut too")
        try await waitUntil("the reading page has the last state", timeout: 10) {
            reader.payload("\(base)/virtual/l0")?.contains("\"state\":\"ON\"") == true
        }
        #expect(await reader.ended(within: 0) == nil)
    }

    /// More pages than `max_clients` are refused (1013) and the others stay; request bodies and headers are
    /// bounded. A long `client_timeout`: no page here may end for being slow.
    @Test func surplusPagesAreRefusedAndRequestsAreBounded() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let port = TestEnvironment.freePort()
        let console = try await ConsoleProcess(brokerPort: broker.port, web: "{listen: \"127.0.0.1:\(port)\", max_clients: 3, client_timeout: 120}",
                                               webPort: port, lights: 20)
        defer { console.stop() }
        let first = PageClient(port: port)   // every frame kept: `synced` is looked for among them
        defer { first.close() }
        _ = try await first.waitFor("synced", timeout: 30) { $0["t"] == "synced" }

        // Pages up to max_clients (3) are admitted.
        let more = (0..<2).map { _ in PageClient(port: port, keepFrames: false) }
        defer { for p in more { p.close() } }
        try await waitUntil("three pages open", timeout: 30) {
            PrometheusText.samples((try? console.get("/metrics").body) ?? "")["switchyard_web_clients"] == 3
        }
        // The fourth is upgraded, then closed with 1013 and its reason, and its connection ends. Read off the
        // wire: the test's WebSocket client library does not always see a close that follows its upgrade at once.
        let (status, bytes, eof) = try await HTTPProbe.offPool { () throws -> (Int, [UInt8], Bool) in
            let fd = try HTTPProbe.connect(port: port, timeout: 20)
            defer { close(fd) }
            try HTTPProbe.write(fd, Array(("GET /ws HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").utf8))
            var out: [UInt8] = [], buf = [UInt8](repeating: 0, count: 4096), n = 0
            repeat {
                n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n > 0 { out += buf[0..<n] }
            } while n > 0 && out.count < 65_536
            return (HTTPProbe.parse(out).status, out, n == 0)
        }
        #expect(status == 101)
        let head = bytes.indices.first { bytes[$0...].starts(with: [13, 10, 13, 10]) }.map { $0 + 4 } ?? bytes.count
        let frame = Array(bytes[head...])
        // A server's close frame: FIN + opcode 8, unmasked, a length under 126, the code (1013), the reason.
        #expect(frame.count >= 4 && frame[0] == 0x88 && Int(frame[1]) == frame.count - 2, "\(frame)")
        if frame.count >= 4 {
            #expect(Int(frame[2]) << 8 | Int(frame[3]) == 1013)
            #expect(String(decoding: frame[4...], as: UTF8.self).contains("max_clients"))
        }
        #expect(eof, "the refused connection was not closed")
        let after = PrometheusText.samples(try console.get("/metrics").body)
        #expect(after[#"switchyard_bounds_hit_total{bound="web_clients"}"#] == 1)
        #expect(after["switchyard_web_clients"] == 3)
        for p in [first] + more { #expect(await p.ended(within: 0) == nil) }

        // Bounded requests: a body over 4 KiB, a header over 16 KiB.
        let body = try HTTPProbe.request(port: port, "/login", method: "POST", body: Array(repeating: UInt8(ascii: "a"), count: 10_000))
        #expect(body.status == 413)
        let header = try HTTPProbe.request(port: port, "/livez", headers: [("X-Big", String(repeating: "b", count: 20_000))])
        #expect(header.status != 200)
    }

    /// A reload with a changed `web:` section moves the console (alone); the bridge keeps running.
    @Test func aReloadAppliesAChangedWebSection() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let console = try await ConsoleProcess(brokerPort: broker.port)
        defer { console.stop() }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(console.base)/bridge/response/config/reload")
        let moved = TestEnvironment.freePort()
        try ConsoleProcess.config(brokerPort: broker.port, base: console.base, web: "{listen: \"127.0.0.1:\(moved)\"}")
            .writeForTest(toFile: console.configPath, replacing: true)
        console.bridge.signal(SIGHUP)
        let response = try await probe.waitFor(topic: "\(console.base)/bridge/response/config/reload")
        #expect(response.payload.contains(#""status":"ok""#) && !response.payload.contains("\"web\""), "\(response.payload)")
        try await waitUntil("the console on its new port", timeout: 15) { (try? HTTPProbe.request(port: moved, "/livez", timeout: 2))?.status == 200 }
        try await waitUntil("the old port closed", timeout: 15) { !TestEnvironment.canConnect(port: console.webPort) }
        // Off, and on again.
        try ConsoleProcess.config(brokerPort: broker.port, base: console.base, web: "{enabled: false, listen: \"127.0.0.1:\(moved)\"}")
            .writeForTest(toFile: console.configPath, replacing: true)
        console.bridge.signal(SIGHUP)
        try await waitUntil("the console off", timeout: 15) { !TestEnvironment.canConnect(port: moved) }
        #expect(console.bridge.child.isRunning)
    }

    /// No secret of the config reaches the page: not in its files, its WebSocket, /metrics or /readyz.
    @Test func noSecretReachesThePage() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let secrets = ["lifx-\(UUID().uuidString)", "ha-\(UUID().uuidString)", "web-\(UUID().uuidString)"]
        let port = TestEnvironment.freePort()
        // Upstreams that cannot be reached (a closed loopback port): their errors are shown, their tokens are not.
        let dead = TestEnvironment.freePort()
        let console = try await ConsoleProcess(
            brokerPort: broker.port, web: "{listen: \"127.0.0.1:\(port)\", auth_token: \"\(secrets[2])\"}", webPort: port,
            extra: "lifx: {token: \"\(secrets[0])\", api_url: \"http://127.0.0.1:\(dead)\", poll_interval: 2}\nha: {url: \"ws://127.0.0.1:\(dead)\", token: \"\(secrets[1])\"}\n")
        defer { console.stop() }
        let auth = [("Authorization", "Bearer \(secrets[2])")]
        var fields = HTTPFields()
        fields[.authorization] = "Bearer \(secrets[2])"
        let page = PageClient(port: port, headers: fields)
        defer { page.close() }
        _ = try await page.waitFor("synced") { $0["t"] == "synced" }
        _ = try await page.command(1, topic: "\(console.base)/bridge/request/health_check", payload: [:])
        // The adapters' errors, as the page's status frames show them.
        _ = try await page.waitFor("lifx and ha failing", timeout: 60) { f in
            f["t"] == "status" && ["lifx", "ha"].allSatisfy { f["adapters"]?[$0]?["status"]?.stringValue?.hasPrefix("error") == true }
        }
        var seen = page.all.map(\.json.serialized).joined(separator: "\n")
        #expect(seen.contains("auth_token"), "the page got no bridge/info")
        for path in ["/", "/console.js", "/console.css", "/metrics", "/readyz", "/livez"] { seen += try console.get(path, headers: auth).body }
        for s in secrets { #expect(!seen.contains(s), "a secret reached the page") }
        #expect(seen.contains("***"))
    }

    /// `tls_cert` and `tls_key`: the console over https (a self-signed certificate made by openssl), and the
    /// session cookie marked Secure.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") && FileManager.default.isExecutableFile(atPath: "/usr/bin/curl")))
    func tlsServesHTTPS() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let dir = TestEnvironment.makeTempDir("tls")
        let cert = dir.appendingPathComponent("cert.pem").path, key = dir.appendingPathComponent("key.pem").path
        let gen = try ChildProcess(path: "/usr/bin/openssl", arguments: ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                                                                      "-days", "1", "-subj", "/CN=127.0.0.1"],
                                   outputFile: dir.appendingPathComponent("openssl.log").path)
        #expect(await gen.wait(timeout: 60) == 0)
        let port = TestEnvironment.freePort()
        let token = "tls-\(UUID().uuidString)"
        let bridge = try ChildProcess(path: try #require(TestEnvironment.switchyardBinary()), arguments: ["run", "-c", {
            let path = dir.appendingPathComponent("config.yaml").path
            try? ConsoleProcess.config(brokerPort: broker.port, base: uniqueBase(),
                                       web: "{listen: \"127.0.0.1:\(port)\", auth_token: \"\(token)\", tls_cert: \"\(cert)\", tls_key: \"\(key)\"}")
                .writeForTest(toFile: path, replacing: true)
            return path
        }()], outputFile: dir.appendingPathComponent("bridge.log").path)
        defer { bridge.terminate() }
        @Sendable func curl(_ args: [String]) async throws -> String {
            let out = dir.appendingPathComponent("curl-\(UUID().uuidString.prefix(4)).log").path
            let c = try ChildProcess(path: "/usr/bin/curl", arguments: ["-ksS", "--max-time", "5"] + args, outputFile: out)
            _ = await c.wait(timeout: 20)
            return (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        }
        try await waitUntil("https answers", timeout: 30) { (try? await curl(["https://127.0.0.1:\(port)/livez"])) == "alive\n" }
        let login = try await curl(["-i", "--data-urlencode", "token=\(token)", "https://127.0.0.1:\(port)/login"])
        #expect(login.contains("303") && login.contains("; Secure"), "\(login)")
        // Plain http on the TLS port gets nothing.
        #expect((try? HTTPProbe.request(port: port, "/livez", timeout: 3))?.status != 200)
    }

    /// A peer that sends a request head over the bounds is answered 431 and closed; one that never finishes
    /// its head, or a page that reads nothing, cannot hold the bridge's shutdown up.
    @Test func aStuckOrOversizeRequestHeadHoldsNothingUp() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let console = try await ConsoleProcess(brokerPort: broker.port)
        // A head over 16 KiB: answered 431, and the connection closed (reading it ends).
        let big = try HTTPProbe.connect(port: console.webPort, timeout: 30)
        defer { close(big) }
        try HTTPProbe.write(big, Array("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: \(String(repeating: "b", count: 20_000))\r\n\r\n".utf8))
        #expect(HTTPProbe.parse(HTTPProbe.read(big)).status == 431)
        #expect(HTTPProbe.isClosed(big, waiting: 30), "the oversize head's connection stayed open")
        // A head that never ends and a page that reads nothing (neither has a deadline that would end it
        // soon: a page's is the 60 s idle timer), then SIGTERM: the bridge still stops (closing them).
        let stuck = try HTTPProbe.connect(port: console.webPort, timeout: 30)
        defer { close(stuck) }
        try HTTPProbe.write(stuck, Array("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half".utf8))
        let (page, upgraded) = try HTTPProbe.webSocket(port: console.webPort, receiveBuffer: 2048)
        defer { close(page) }
        #expect(upgraded.status == 101)
        console.bridge.signal(SIGTERM)
        let status = try await console.bridge.waitForExit(timeout: 15)
        #expect(status == 0, "\(console.bridge.outputText)")
    }
}

extension Array {
    /// How many elements `predicate` accepts, asked one at a time.
    func asyncCount(_ predicate: (Element) async -> Bool) async -> Int {
        var n = 0
        for e in self where await predicate(e) { n += 1 }
        return n
    }
}
