import Foundation
import Testing
import SwitchyardTestSupport
import SwitchyardWebTesting

/// The page in a real browser (Debian's chromium through chromedriver, driven by selenium from the venv
/// `make test` makes), against the demo on a real Mosquitto: Tests/browser/console_test.py says what it
/// checks. The browser reaches the console as Home Assistant's ingress serves it: under a prefix the
/// console never hears of (`/api/hassio_ingress/<token>/`, taken off by a proxy playing the Supervisor),
/// through the add-on's own gate, both real nginx on loopback (ReverseProxy); nothing but that prefix is
/// proxied, so a link, asset, form or WebSocket outside it fails the test.
/// `SWITCHYARD_CONSOLE_SCREENSHOTS=DIR` keeps a PNG of each view (docs/images/ has them).
@Suite(.serialized, .enabled(if: BrowserEnvironment.unavailable == nil, Comment(rawValue: BrowserEnvironment.unavailable ?? "")))
struct BrowserTests {
    static let repo = BrowserEnvironment.repo
    static let python = BrowserEnvironment.python

    @Test func theConsoleInABrowserAgainstTheDemo() async throws {
        let sim = try #require(TestEnvironment.simulatorBinary(), "switchyard-sim is not built next to the tests")
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let web = TestEnvironment.freePort()
        let dir = TestEnvironment.makeTempDir("browser")
        let demo = try ChildProcess(path: sim, arguments: ["demo", "--port", "\(broker.port)", "--base-topic", base, "--web", "127.0.0.1:\(web)",
                                                           "--log-level", "warning"],
                                    outputFile: dir.appendingPathComponent("demo.log").path)
        defer { demo.terminate() }
        try await waitUntil("the demo's console is ready", timeout: 60) {
            (try? HTTPProbe.request(port: web, "/readyz", timeout: 2))?.status == 200
        }
        // The banner names the demo's config file (a directory of its own each run).
        let banner = (try? String(contentsOf: dir.appendingPathComponent("demo.log"), encoding: .utf8)) ?? ""
        let configLine = try #require(banner.split(separator: "\n").first { $0.hasPrefix("The demo's config is /") }, "no config path in:\n\(banner)")
        let path = configLine.dropFirst("The demo's config is ".count)
        let config = String(path[..<(path.range(of: " (removed when")?.lowerBound ?? path.endIndex)])
        let gate = try await ReverseProxy.addonGate(console: "127.0.0.1:\(web)")
        defer { gate.stop() }
        let token = String(UUID().uuidString.prefix(8)).lowercased()
        let supervisor = try await ReverseProxy.supervisor(token: token, addon: gate.port)
        defer { supervisor.stop() }
        let url = "http://127.0.0.1:\(supervisor.port)/api/hassio_ingress/\(token)"
        var arguments = [Self.repo.appendingPathComponent("Tests/browser/console_test.py").path, "--url", url,
                         "--mqtt-port", "\(broker.port)", "--base", base, "--demo-config", config,
                         "--docs", Self.repo.appendingPathComponent("docs/console.md").path]
        if let shots = ProcessInfo.processInfo.environment["SWITCHYARD_CONSOLE_SCREENSHOTS"] { arguments += ["--screenshots", shots] }
        let log = dir.appendingPathComponent("browser.log").path
        let browser = try ChildProcess(path: Self.python, arguments: arguments, outputFile: log)
        let status = await browser.wait(timeout: 240)
        if status == nil { await browser.stop() }
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        print(output)
        #expect(status == 0, "the browser test failed:\n\(output)")
        #expect(output.contains("all checks passed"))
    }
}

enum BrowserEnvironment {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = ProcessInfo.processInfo.environment["SWITCHYARD_WEB_PYTHON"] ?? repo.appendingPathComponent(".build/web-venv/bin/python").path

    static var unavailable: String? {
        if !FileManager.default.isExecutableFile(atPath: python) {
            return "no selenium venv at \(python) (make test makes it: make .build/web-venv/bin/python)"
        }
        if !FileManager.default.isExecutableFile(atPath: "/usr/bin/chromedriver") { return "chromium-driver is not installed (make test installs it)" }
        if let nginx = ReverseProxy.unavailable { return nginx }
        return nil
    }
}
