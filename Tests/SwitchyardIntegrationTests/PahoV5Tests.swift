import Foundation
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// An MQTT 5 client written as users write one, paho-mqtt 2.x (from PyPI, in the venv `make test` makes under
/// .build/mqtt-venv), against the bridge speaking MQTT 5 over a real Mosquitto: every answer on its Response
/// Topic with its Correlation Data (Tests/mqtt5/paho_v5_client.py says what it checks).
@Suite(.enabled(if: PahoEnvironment.unavailable == nil, Comment(rawValue: PahoEnvironment.unavailable ?? "")))
struct PahoV5Tests {
    @Test func pahoGetsEveryAnswerOnItsResponseTopicWithItsCorrelationData() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        var options = InProcessBridge.Options()
        options.protocolVersion = 5
        options.discovery = false
        try await InProcessBridge.with(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()]),
                                       options: options) { _ in
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            try await probe.subscribe("\(base)/test/lamp/availability")
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            let log = TestEnvironment.makeTempDir("paho").appendingPathComponent("paho.log").path
            let client = try ChildProcess(path: PahoEnvironment.python,
                                          arguments: [PahoEnvironment.repo.appendingPathComponent("Tests/mqtt5/paho_v5_client.py").path,
                                                      "--port", "\(broker.port)", "--base", base],
                                          outputFile: log)
            let status = await client.wait(timeout: 150)
            if status == nil { await client.stop() }
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(status == 0, "the paho client failed:\n\(output)")
            #expect(output.contains("all checks passed"), "\(output)")
        }
    }
}

enum PahoEnvironment {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let python = ProcessInfo.processInfo.environment["SWITCHYARD_MQTT_PYTHON"]
        ?? repo.appendingPathComponent(".build/mqtt-venv/bin/python").path

    static var unavailable: String? {
        FileManager.default.isExecutableFile(atPath: python) ? nil
            : "no paho-mqtt venv at \(python) (make test makes it: make .build/mqtt-venv/bin/python)"
    }
}
