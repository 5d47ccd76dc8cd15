import Foundation
import ImpSimulators
import LIFXSimulators
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport

/// A home over several upstreams for groups and scenes: three LIFX lights in the cloud simulator, two on the
/// LAN played by lifx-emulator (one LIFX adapter with both), an Imp clock (the agent simulator: no `state`,
/// a `power`, a brightness of 0–15 raw), three virtual devices; and the groups of `GroupHome.groups`.
final class GroupHome: Sendable {
    static let token = "group-token"
    static let cloudIDs = ["d073d5c00001", "d073d5c00002", "d073d5c00003"]
    static let lanIDs = ["d073d5aa0101", "d073d5aa0102"]
    static let clock = "mAtr1x-Clk_9"
    static let clockCode = "E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA"

    let cloud: LIFXCloudSimulator
    let emulator: LIFXEmulator
    let imp: ImpAgentSimulator

    private init(cloud: LIFXCloudSimulator, emulator: LIFXEmulator, imp: ImpAgentSimulator) {
        self.cloud = cloud
        self.emulator = emulator
        self.imp = imp
    }

    static var emulatorDevices: String {
        """
          - product_id: 27
            serial: \(lanIDs[0])
            label: LAN One
            power_level: 0
            color: [0, 0, 65535, 3500]
          - product_id: 27
            serial: \(lanIDs[1])
            label: LAN Two
            power_level: 0
            color: [0, 0, 65535, 3500]
        """
    }

    static func with<R: Sendable>(_ body: (GroupHome) async throws -> R) async throws -> R {
        let lights = cloudIDs.enumerated().map { i, id in
            LIFXCloudSimulator.Light(id: id, label: ["Cloud One", "Cloud Two", "Cloud Three"][i], group: ("c0ffee00000000000000000000000001", "Cloud"),
                                     location: ("c0ffee00000000000000000000000002", "Home"))
        }
        let cloud = try await LIFXCloudSimulator.start(token: token, lights: lights)
        var clock = ImpAgentSimulator.Agent(id: clock, app: .matrixClock, appcode: clockCode)
        clock.on = false
        let imp = try await ImpAgentSimulator.start(agents: [clock])
        return try await withTeardown {
            try await LIFXEmulator.with(devices: emulatorDevices) { e in
                try await body(GroupHome(cloud: cloud, emulator: e, imp: imp))
            }
        } teardown: {
            await cloud.stop()
            await imp.stop()
        }
    }

    static let groups = """
    groups:
      house:
        members: [virtual/hall, virtual/plug, lifx/cloud_one, lifx/cloud_two, lifx/cloud_three, lifx/lan_one, imp/clock, group/porch]
      porch:
        members: [lifx/lan_two, virtual/porch_lamp]
        state_mode: all

    """

    /// The upstreams' sections (and `groups`), pointed at this home's simulators.
    func upstreams(virtual: String = "    - {name: hall, type: light}\n    - {name: plug, type: switch}\n    - {name: porch_lamp, type: light}\n") -> String {
        """
        virtual:
          devices:
        \(virtual)lifx:
          token: \(Self.token)
          api_url: "\(cloud.apiURL)"
          poll_interval: 3600
          lan: {enabled: true, hosts: ["127.0.0.1:\(emulator.port)"], broadcast: [], poll_interval: 3600}
        imp:
          base_url: \(imp.baseURL)
          poll_interval: 3600
          apps: {\(Self.clockCode): matrixclock}
          devices:
            - {name: clock, agent_id: \(Self.clock)}

        """
    }

    /// The cloud's actions (not its listings) from the `from`-th request on.
    func cloudActions(from: Int = 0) -> [LoopbackHTTPServerReceived] {
        cloud.requests.dropFirst(from).filter { $0.method != "GET" }.map { LoopbackHTTPServerReceived(method: $0.method, path: $0.path, body: $0.text) }
    }
}

/// What a test reads of a request the cloud simulator received.
struct LoopbackHTTPServerReceived: Equatable, CustomStringConvertible {
    var method: String
    var path: String
    var body: String
    var description: String { "\(method) \(path) \(body)" }
}

extension MQTTProbe {
    /// The last state published on `topic`, parsed.
    func state(_ topic: String) -> JSONValue? { last(topic).flatMap { try? JSONValue.parse($0) } }

    /// Waits until the last state on `topic` satisfies `predicate`; returns it.
    @discardableResult
    func waitState(_ topic: String, _ what: String = "", timeout: Double = 30, _ predicate: @escaping @Sendable (JSONValue) -> Bool) async throws -> JSONValue {
        let ms = try await waitFor("\(topic) \(what)", timeout: timeout) { ms in
            ms.last { $0.topic == topic }.flatMap { try? JSONValue.parse($0.payload) }.map(predicate) ?? false
        }
        return try JSONValue.parse(ms.last { $0.topic == topic }!.payload)
    }

    /// The one result with `transaction` on `topic` (waits for it, then for any second one a moment).
    func result(_ topic: String, _ transaction: String, timeout: Double = 30) async throws -> JSONValue {
        let ms = try await waitFor("the result \(transaction) on \(topic)", timeout: timeout) { ms in
            ms.contains { $0.topic == topic && $0.payload.contains("\"transaction\":\"\(transaction)\"") }
        }
        return try JSONValue.parse(ms.last { $0.topic == topic && $0.payload.contains("\"transaction\":\"\(transaction)\"") }!.payload)
    }

    func results(_ topic: String, _ transaction: String) -> Int {
        messages.filter { $0.topic == topic && $0.payload.contains("\"transaction\":\"\(transaction)\"") }.count
    }
}

extension LIFXEmulator {
    /// A LAN light's power and brightness (0–65535) and kelvin, as the emulator holds them.
    func light(_ serial: String) async throws -> (power: Int, brightness: Int, kelvin: Int) {
        let d = try await device(serial)
        return (d["power_level"]?.intValue ?? -1, d["color"]?["brightness"]?.intValue ?? -1, d["color"]?["kelvin"]?.intValue ?? -1)
    }
}

/// A 0–100 % level as the LAN protocol carries it.
func wireLevel(_ percent: Int) -> Int { Int((Double(percent) * 65535 / 100).rounded()) }
