import Foundation
import LIFXAdapter
import Logging
import SwitchyardCore
import SwitchyardMQTT
import LIFXSimulators
import SwitchyardTestSupport

/// The bridge in-process with the real LIFX adapter, a real Mosquitto and the LIFX cloud simulator
/// over real HTTP. A probe subscribed to `<base>/#` and the discovery prefix reads what users see.
final class LIFXHarness: Sendable {
    let sim: LIFXCloudSimulator
    let under: BridgeUnderTest
    var broker: Broker { under.broker }
    var probe: MQTTProbe { under.probe }
    var base: String { under.base }
    var engine: BridgeEngine { under.bridge.engine }

    static let token = "c87c0b4d7a9e4ad6a2c1-test-token"
    static let kitchen = "d073d5000001"
    static let loungeLeft = "d073d5000002"
    static let loungeRight = "d073d5000004"
    static let hall = "d073d5000003"
    static let lounge = "group_06e3ec50395511e9a0757200055bf1c1"

    private init(sim: LIFXCloudSimulator, under: BridgeUnderTest) {
        self.sim = sim
        self.under = under
    }

    static func with<R: Sendable>(configure: (inout LIFXSettings) -> Void = { _ in }, simToken: String = token,
                                  lights: [LIFXCloudSimulator.Light] = LIFXCloudSimulator.demoLights(), clock: any BridgeClock = SystemClock(),
                                  _ body: (LIFXHarness) async throws -> R) async throws -> R {
        let sim = try await LIFXCloudSimulator.start(token: simToken, lights: lights, scenes: LIFXCloudSimulator.demoScenes())
        var settings = LIFXSettings()
        settings.token = token
        settings.apiURL = sim.apiURL
        settings.pollInterval = 3600
        settings.minInterval = 0.05
        settings.retryDelay = 0.05
        configure(&settings)
        return try await withTeardown {
            try await BridgeUnderTest.with(subscribe: { ["\($0)/#", "homeassistant/#"] },
                                           adapter: LIFXAdapter(settings: settings, clock: clock)) { under in
                try await body(LIFXHarness(sim: sim, under: under))
            }
        } teardown: {
            await sim.stop()
        }
    }

    func topic(_ name: String) -> String { "\(base)/lifx/\(name)" }

    /// The latest state published for a device, parsed.
    func state(_ name: String) -> JSONValue? { probe.last(topic(name)).flatMap { try? JSONValue.parse($0) } }

    @discardableResult
    func waitState(_ name: String, timeout: Double = 30, _ what: String = "", _ predicate: @escaping (JSONValue) -> Bool) async throws -> JSONValue {
        let t = topic(name)
        let ms = try await probe.waitFor("\(t) \(what)", timeout: timeout) { ms in
            ms.contains { $0.topic == t && (try? JSONValue.parse($0.payload)).map(predicate) == true }
        }
        return try JSONValue.parse(ms.last { $0.topic == t && (try? JSONValue.parse($0.payload)).map(predicate) == true }!.payload)
    }

    /// Waits until every light, group, location and scene has been listed and published.
    func waitListed() async throws {
        try await waitState("scene/movie") { _ in true }
        try await waitState("location/home") { _ in true }
    }

    func send(_ name: String, _ payload: String) {
        probe.publish("\(topic(name))/set", payload)
    }

    /// Requests that change something (everything but GET), with their bodies parsed.
    var actions: [(String, JSONValue?)] {
        sim.requests.filter { $0.method != "GET" }.map { ("\($0.method) \($0.path)", $0.body.isEmpty ? nil : try? JSONValue.parse($0.body)) }
    }

    func waitActions(_ n: Int, timeout: Double = 30) async throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if actions.count >= n { return }
            await TestEnvironment.sleep(0.02)
        }
        throw TestError("timed out waiting for \(n) action requests; got \(actions.map(\.0))")
    }

    var polls: Int { sim.requests.filter { $0.method == "GET" && $0.path.hasSuffix("/lights/all") }.count }

    func errors() -> [String] {
        probe.messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }
            .filter { $0["level"] == "error" }.compactMap { $0["message"]?.stringValue }
    }
}
