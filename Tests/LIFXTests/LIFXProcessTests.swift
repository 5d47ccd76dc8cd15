import Foundation
import SwitchyardCore
import LIFXSimulators
import SwitchyardTestSupport
import Testing

/// `switchyard run -c config.yaml` with a `lifx:` section, as a user runs it, against the simulator.
@Suite struct LIFXProcessTests {
    @Test func theBinaryBridgesTheSimulatedCloudAndKeepsTheTokenSecret() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let token = "tok-\(UUID().uuidString)"
        let sim = try await LIFXCloudSimulator.start(token: token, lights: LIFXCloudSimulator.demoLights(),
                                                     scenes: LIFXCloudSimulator.demoScenes())
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#")
        let dir = TestEnvironment.makeTempDir("lifx")
        let tokenFile = dir.appendingPathComponent("lifx-token").path
        try "\(token)\n".writeForTest(toFile: tokenFile, replacing: true)
        let config = dir.appendingPathComponent("config.yaml").path
        try """
        log:
          level: debug
        mqtt:
          url: mqtt://127.0.0.1:\(broker.port)
          base_topic: \(base)
          reconnect: {min_delay: 0.1, max_delay: 1}
        lifx:
          token_file: \(tokenFile)
          api_url: \(sim.apiURL)
          min_interval: 0.1
          names:
            d073d5000001: kitchen/ceiling
        """.writeForTest(toFile: config, replacing: true)
        let bridge = try BridgeProcess(arguments: ["run", "-c", config])
        try await probe.waitFor(topic: "\(base)/lifx/kitchen/ceiling")
        try await probe.waitFor(topic: "\(base)/lifx/scene/movie")
        // The offline light is announced offline from the start, never flashing online.
        try await probe.waitFor(topic: "\(base)/lifx/garage/availability", payload: "offline")
        #expect(!probe.messages(on: "\(base)/lifx/garage/availability").contains { $0.payload == "online" })
        probe.publish("\(base)/lifx/kitchen/ceiling/set", #"{"state": "OFF", "transaction": "p1"}"#)
        let result = try await probe.waitFor(topic: "\(base)/lifx/kitchen/ceiling/result")
        #expect(result.payload == #"{"status":"ok","transaction":"p1"}"#)
        #expect(sim.light("d073d5000001")?.power == "off")
        let info = try JSONValue.parse(probe.last("\(base)/bridge/info")!)
        #expect(info["adapters"]?["lifx"] == "running")
        #expect(info["config"]?["lifx"]?["token"] == "***")
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
        // Published before the bridge exits; the probe hears it a moment later (bounded).
        try await waitUntil("the ceiling's last availability is offline", timeout: 10) {
            probe.last("\(base)/lifx/kitchen/ceiling/availability") == "offline"
        }
        #expect(!probe.messages.contains { $0.payload.contains(token) })
        #expect(!bridge.outputText.contains(token))
        await sim.stop()
    }
}
