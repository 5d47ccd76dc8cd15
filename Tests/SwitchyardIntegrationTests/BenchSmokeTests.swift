import Foundation
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// Runs every benchmark scenario at a tiny size: proves the command works. No timing is asserted.
@Suite struct BenchSmokeTests {
    @Test func everyScenarioRunsAndPrintsItsFigures() async throws {
        guard let sy = TestEnvironment.switchyardBinary() else { throw TestError("switchyard executable not found") }
        let bench = URL(fileURLWithPath: sy).deletingLastPathComponent().appendingPathComponent("switchyard-bench").path
        let out = TestEnvironment.makeTempDir("bench-smoke").appendingPathComponent("out.json").path
        let child = try ChildProcess(path: bench, arguments: ["--json", "--messages", "300", "--devices", "20", "--commands", "20",
                                                              "--churn-seconds", "0.5", "--ha-entities", "30",
                                                              "--hostile-payloads", "300", "--restarts", "2",
                                                              "--scale-devices", "20,40", "--scale-churn-seconds", "0.5", "--kills", "1",
                                                              "--group-members", "6", "--group-commands", "5", "--console-churn", "100"], outputFile: out)
        // About a minute here; the bound is for a loaded machine.
        let status = await child.wait(timeout: 180)
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(text)")
        // The figures are the one line of JSON on stdout; stderr may carry log lines (a loaded machine
        // gets keepalive or retry warnings from the in-process bridges), so the line is picked out.
        let line = try #require(text.split(separator: "\n").last { $0.hasPrefix("[") && $0.hasSuffix("]") }, "\(text)")
        let json = try JSONValue.parse(String(line))
        guard case .array(let figures) = json else { Issue.record("not a list: \(text)"); return }
        let scenarios = Set(figures.compactMap { $0["scenario"]?.stringValue })
        #expect(scenarios == ["baseline", "publish", "ha-mirror", "command-latency", "startup", "memory", "console", "lifx-budget", "lifx-lan", "groups", "hostile", "reconnect", "scale", "failover"])
        for f in figures {
            // A difference against idle memory may be zero or below, and so may a count of commands (answered
            // twice, with an error); every other figure is a positive measurement.
            let difference = f["name"]?.stringValue?.contains("−") == true
            let count = f["unit"] == "cmds" || f["unit"] == "kills"
            #expect(difference || count ? f["value"]?.doubleValue.map { $0.isFinite && (difference || $0 >= 0) } == true
                                        : (f["value"]?.doubleValue ?? 0) > 0, "\(f.serialized)")
        }
        // The failover scenario's one kill: commands were sent, and every one was answered.
        func failover(_ name: String) -> Double? {
            figures.first { f in
                f["scenario"] == "failover" && f["name"]?.stringValue.map { $0 == name || $0.hasPrefix(name + " (") } == true
            }?["value"]?.doubleValue
        }
        #expect((failover("commands sent") ?? 0) > 0)
        #expect(failover("commands answered") == failover("commands sent"), "\(figures.filter { $0["scenario"] == "failover" })")
        // A group's and a scene's cloud members cost one request per command (design.md §20).
        func groups(_ name: String) -> Double? {
            figures.first { $0["scenario"] == "groups" && $0["name"]?.stringValue == name }?["value"]?.doubleValue
        }
        #expect(groups("LIFX cloud HTTP requests per command: group /set") == 1, "\(figures.filter { $0["scenario"] == "groups" })")
        #expect(groups("LIFX cloud HTTP requests per command: scene recall") == 1)
        #expect(figures.contains { $0["scenario"] == "publish" && ($0["ratio"]?.doubleValue ?? 0) > 0 })
        #expect(figures.contains { $0["scenario"] == "ha-mirror" && ($0["ratio"]?.doubleValue ?? 0) > 0 })
    }
}
