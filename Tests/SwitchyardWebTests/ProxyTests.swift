import Foundation
import Glibc
import Testing
import SwitchyardCore
import SwitchyardTestSupport
import SwitchyardWebTesting

/// The console behind a real reverse proxy (Debian's nginx on loopback), under a path prefix it serves
/// itself (`web.base_path`) or one a proxy takes off (Home Assistant's ingress, through the add-on's
/// own gate): every link, asset, form, redirect, cookie and the WebSocket stay under the prefix
/// (docs/console.md "Behind a reverse proxy"). BrowserTests drives the page itself through the ingress.
@Suite(.serialized, .enabled(if: ReverseProxy.unavailable == nil, Comment(rawValue: ReverseProxy.unavailable ?? "")))
struct ProxyTests {
    static let token = "proxy-test-token-0123456789"

    /// A bridge process with this `web:` section (and the test's virtual lights) on `brokerPort`.
    static func bridge(brokerPort: Int, web: String) throws -> (BridgeProcess, String) {
        let dir = TestEnvironment.makeTempDir("proxy")
        let path = dir.appendingPathComponent("config.yaml").path
        try ConsoleProcess.config(brokerPort: brokerPort, base: uniqueBase(), web: web).write(toFile: path, atomically: true, encoding: .utf8)
        return (try BridgeProcess(arguments: ["run", "-c", path]), path)
    }

    /// No reference in an HTML page leaves the folder it was served from.
    static func absoluteReferences(_ html: String) -> [String] {
        let r = try! NSRegularExpression(pattern: #"(href|src|action)="(/[^"]*|https?:[^"]*)""#)
        return r.matches(in: html, range: NSRange(html.startIndex..., in: html)).map { (html as NSString).substring(with: $0.range) }
    }

    /// The WebSocket handshake for `path` through `port`, then its first frame's text (the server's frames
    /// are not masked); nil for the text when the handshake was refused.
    static func webSocket(port: Int, path: String, headers: [(String, String)]) throws -> (HTTPProbe.Answer, String?) {
        let fd = try HTTPProbe.connect(port: port)
        defer { close(fd) }
        var head = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        try HTTPProbe.write(fd, Array((head + "\r\n").utf8))
        var bytes: [UInt8] = []
        let answer = HTTPProbe.parse(HTTPProbe.read(fd) { b in
            bytes = b
            guard let end = Self.headEnd(b) else { return b.count > 8192 }
            // The head, and a whole first frame after it when the upgrade went through.
            let rest = Array(b[end...])
            return !String(decoding: b.prefix(16), as: UTF8.self).contains(" 101 ") || Self.frameText(rest) != nil
        })
        guard answer.status == 101, let end = headEnd(bytes) else { return (answer, nil) }
        return (answer, frameText(Array(bytes[end...])))
    }

    static func headEnd(_ b: [UInt8]) -> Int? {
        guard b.count >= 4 else { return nil }
        for i in 0...(b.count - 4) where b[i] == 13 && b[i + 1] == 10 && b[i + 2] == 13 && b[i + 3] == 10 { return i + 4 }
        return nil
    }

    /// A whole unmasked text frame at the start of `b`: its text.
    static func frameText(_ b: [UInt8]) -> String? {
        guard b.count >= 2 else { return nil }
        var length = Int(b[1] & 0x7F), at = 2
        if length == 126 {
            guard b.count >= 4 else { return nil }
            length = Int(b[2]) << 8 | Int(b[3]); at = 4
        } else if length == 127 {
            guard b.count >= 10 else { return nil }
            length = b[2..<10].reduce(0) { $0 << 8 | Int($1) }; at = 10
        }
        guard b.count >= at + length else { return nil }
        return String(decoding: b[at..<(at + length)], as: UTF8.self)
    }

    /// `promtool check metrics` on `text`: its exit status and what it said.
    static func promtool(_ text: String) async throws -> (Int32?, String) {
        let dir = TestEnvironment.makeTempDir("promtool")
        let input = dir.appendingPathComponent("metrics.txt").path, log = dir.appendingPathComponent("promtool.log").path
        try text.write(toFile: input, atomically: true, encoding: .utf8)
        let child = try ChildProcess(path: "/bin/sh", arguments: ["-c", "promtool check metrics < \"$0\"", input], outputFile: log)
        let status = await child.wait(timeout: 60)
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    @Test func underItsBasePathBehindAProxyThatPassesThePathOn() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let web = TestEnvironment.freePort()
        let (bridge, config) = try Self.bridge(brokerPort: broker.port,
                                               web: "{listen: \"127.0.0.1:\(web)\", base_path: /switchyard/, auth_token: \(Self.token)}")
        defer { bridge.signal(SIGTERM); _ = bridge.child.exitStatus }
        try await waitUntil("the console answers under /switchyard", timeout: 30) {
            !bridge.child.isRunning || (try? HTTPProbe.request(port: web, "/switchyard/readyz", timeout: 2))?.status == 200
        }
        #expect(bridge.child.isRunning, "\(bridge.outputText)")

        // Direct: nothing outside the prefix but a way in.
        #expect(try HTTPProbe.request(port: web, "/livez").status == 404)
        let root = try HTTPProbe.request(port: web, "/")
        #expect(root.status == 303 && root.header("Location") == "/switchyard/", "\(root.status) \(root.headers)")
        // The page's address without its slash: sent to the one with it, relative to where it was asked.
        let bare = try HTTPProbe.request(port: web, "/switchyard")
        #expect(bare.status == 303 && bare.header("Location") == "switchyard/", "\(bare.status) \(bare.headers)")

        let proxy = try await ReverseProxy.passing(prefix: "/switchyard", to: web)
        defer { proxy.stop() }
        let p = proxy.port

        // The login form, its stylesheet and the form's target, all relative.
        let login = try HTTPProbe.request(port: p, "/switchyard/")
        #expect(login.status == 401 && login.body.contains(#"action="login""#) && login.body.contains(#"href="console.css""#), "\(login.body)")
        #expect(Self.absoluteReferences(login.body).isEmpty, "\(Self.absoluteReferences(login.body))")
        #expect(try HTTPProbe.request(port: p, "/switchyard/console.css").header("Content-Type")?.hasPrefix("text/css") == true)
        let form = [("Content-Type", "application/x-www-form-urlencoded")]
        let wrong = try HTTPProbe.request(port: p, "/switchyard/login", method: "POST", headers: form, body: Array("token=nope".utf8))
        #expect(wrong.status == 401)
        let good = try HTTPProbe.request(port: p, "/switchyard/login", method: "POST", headers: form, body: Array("token=\(Self.token)".utf8))
        let setCookie = good.header("Set-Cookie") ?? ""
        #expect(good.status == 303 && good.header("Location") == "./", "\(good.status) \(good.headers)")
        #expect(setCookie.contains("; Path=/switchyard/;") && setCookie.contains("HttpOnly"), "\(setCookie)")
        let cookie = [("Cookie", String(setCookie.split(separator: ";")[0]))]

        // The page and its script, through the proxy, with the session.
        let page = try HTTPProbe.request(port: p, "/switchyard/", headers: cookie)
        #expect(page.status == 200 && page.body.contains(#"src="console.js""#) && page.body.contains(#"action="logout""#))
        #expect(Self.absoluteReferences(page.body).isEmpty, "\(Self.absoluteReferences(page.body))")
        let script = try HTTPProbe.request(port: p, "/switchyard/console.js", headers: cookie)
        #expect(script.status == 200 && script.body.contains("new URL('ws', location.href)"))

        // The WebSocket under the prefix, as the page opens it (its Origin the proxy's).
        let (upgrade, hello) = try Self.webSocket(port: p, path: "/switchyard/ws", headers: cookie + [("Origin", "http://127.0.0.1:\(p)")])
        #expect(upgrade.status == 101, "\(upgrade.status) \(upgrade.body)")
        #expect(hello?.contains(#""t":"hello""#) == true, "\(hello ?? "no frame")")
        let (foreign, _) = try Self.webSocket(port: p, path: "/switchyard/ws", headers: cookie + [("Origin", "http://evil.example")])
        #expect(foreign.status != 101)

        // /metrics for a scraper through the proxy, and promtool has nothing to say about it.
        let metrics = try HTTPProbe.request(port: p, "/switchyard/metrics", headers: [("Authorization", "Bearer \(Self.token)")])
        #expect(metrics.status == 200 && metrics.body.contains("# HELP switchyard_mqtt_connected "))
        let (status, said) = try await Self.promtool(metrics.body)
        #expect(status == 0 && said.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "promtool check metrics: \(said)")

        let out = try HTTPProbe.request(port: p, "/switchyard/logout", method: "POST", headers: cookie)
        #expect(out.status == 303 && out.header("Set-Cookie")?.contains("Path=/switchyard/; HttpOnly; SameSite=Strict; Max-Age=0") == true)

        // The health check reads the same config and asks under the prefix.
        let check = try BridgeProcess(arguments: ["healthcheck", "-c", config])
        #expect(try await check.waitForExit() == 0, "\(check.outputText)")
        #expect(check.outputText.contains("http://127.0.0.1:\(web)/switchyard/livez: 200 alive"), "\(check.outputText)")
    }

    /// Home Assistant's ingress: the Supervisor's proxy takes `/api/hassio_ingress/<token>` off and passes
    /// the browser's Host and Origin; the add-on's gate hands the console (loopback, no token) its own.
    @Test func throughTheAddonsIngressGateOnlyThePagesOwnOriginIsTaken() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let console = try await ConsoleProcess(brokerPort: broker.port)
        defer { console.stop() }
        let gate = try await ReverseProxy.addonGate(console: "127.0.0.1:\(console.webPort)")
        defer { gate.stop() }
        let supervisor = try await ReverseProxy.supervisor(token: "abc123", addon: gate.port)
        defer { supervisor.stop() }
        let s = supervisor.port, prefix = "/api/hassio_ingress/abc123"

        let page = try HTTPProbe.request(port: s, prefix + "/")
        #expect(page.status == 200 && page.body.contains(#"src="console.js""#), "\(page.status) \(gate.errorLog) \(supervisor.errorLog)")
        #expect(try HTTPProbe.request(port: s, prefix + "/console.js").status == 200)
        let (upgrade, hello) = try Self.webSocket(port: s, path: prefix + "/ws", headers: [("Origin", "http://127.0.0.1:\(s)")])
        #expect(upgrade.status == 101 && hello?.contains(#""t":"hello""#) == true, "\(upgrade.status) \(hello ?? "")")
        // Another site's page in the same browser: the gate passes its Origin on, and the console refuses it.
        let (foreign, _) = try Self.webSocket(port: s, path: prefix + "/ws", headers: [("Origin", "http://evil.example")])
        #expect(foreign.status == 400, "\(foreign.status)")
        let post = try HTTPProbe.request(port: s, prefix + "/logout", method: "POST", headers: [("Origin", "http://evil.example")])
        #expect(post.status == 403)
        // The Supervisor's watchdog asks the gate directly.
        #expect(try HTTPProbe.request(port: gate.port, "/livez").body == "alive\n")
    }
}

/// `switchyard healthcheck` against a running bridge (no broker needed: the core answers without one):
/// it follows `web.listen` and TLS from the config, and fails when nothing answers.
@Suite(.serialized) struct HealthcheckTests {
    static func config(web: String) throws -> String {
        let path = TestEnvironment.makeTempDir("healthcheck").appendingPathComponent("config.yaml").path
        try "mqtt: {url: \"mqtt://127.0.0.1:\(TestEnvironment.freePort())\"}\nweb: \(web)\nvirtual: {devices: [{name: lamp, type: light}]}\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    static func healthcheck(_ arguments: [String]) async throws -> (Int32, String) {
        let check = try BridgeProcess(arguments: ["healthcheck"] + arguments)
        return (try await check.waitForExit(), check.outputText)
    }

    @Test func followsTheListenAddressAndFailsWhenNothingAnswers() async throws {
        let port = TestEnvironment.freePort()
        let config = try Self.config(web: "{listen: \"0.0.0.0:\(port)\", auth_token: \"healthcheck-token-0123456789\"}")
        // Nothing listens yet.
        let (down, said) = try await Self.healthcheck(["-c", config, "--timeout", "3"])
        #expect(down == 1 && said.contains("http://127.0.0.1:\(port)/livez"), "\(said)")

        let bridge = try BridgeProcess(arguments: ["run", "-c", config])
        defer { bridge.signal(SIGTERM); _ = bridge.child.exitStatus }
        try await waitUntil("the console listens", timeout: 30) { !bridge.child.isRunning || TestEnvironment.canConnect(port: port) }
        let (up, answer) = try await Self.healthcheck(["-c", config])
        #expect(up == 0 && answer.contains("http://127.0.0.1:\(port)/livez: 200 alive"), "\(answer)\n\(bridge.outputText)")
        // Ready needs the broker, which is not there: /readyz says so, and so does the check.
        let (notReady, reasons) = try await Self.healthcheck(["-c", config, "--ready"])
        #expect(notReady == 1 && reasons.contains("503") && reasons.contains("broker: not connected"), "\(reasons)")
    }

    @Test func speaksTLSWhenTheConsoleDoes() async throws {
        let dir = TestEnvironment.makeTempDir("healthcheck-tls")
        let make = try ChildProcess(path: "/bin/sh", arguments: ["-c", "cd \"$0\" && openssl req -x509 -newkey rsa:2048 -nodes -keyout console.key "
                                                                  + "-out console.crt -days 2 -subj /CN=switchyard.example 2>&1", dir.path],
                                    outputFile: dir.appendingPathComponent("openssl.log").path)
        #expect(await make.wait(timeout: 60) == 0)
        let port = TestEnvironment.freePort()
        let config = try Self.config(web: "{listen: \"127.0.0.1:\(port)\", tls_cert: \(dir.path)/console.crt, tls_key: \(dir.path)/console.key}")
        let bridge = try BridgeProcess(arguments: ["run", "-c", config])
        defer { bridge.signal(SIGTERM); _ = bridge.child.exitStatus }
        try await waitUntil("the console listens", timeout: 30) { !bridge.child.isRunning || TestEnvironment.canConnect(port: port) }
        let (status, answer) = try await Self.healthcheck(["-c", config])
        #expect(status == 0 && answer.contains("https://127.0.0.1:\(port)/livez: 200 alive"), "\(answer)\n\(bridge.outputText)")
    }

    @Test func saysWhenTheConsoleIsOff() async throws {
        let config = try Self.config(web: "{enabled: false}")
        let (status, said) = try await Self.healthcheck(["-c", config])
        #expect(status == 1 && said.contains("web.enabled: false"), "\(said)")
    }
}
