import Foundation
import Glibc
import ImpSimulators
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// A standby group (design.md §18) whose new active instance starts its adapters fresh while the commands
/// the broker kept for the session arrive at once: two `switchyard run --instance` processes over Mosquitto
/// with the virtual adapter, the LIFX cloud and LAN simulators and the Imp agent simulator. What the soak
/// found refused or broken right after a takeover, each in its own test: a LAN-only light's command
/// (unknown until the LAN found the light again), an Imp clock's (its app not detected yet), and a rename
/// (the old state emptied under the discovery config that still read it).
final class ReadinessHarness: @unchecked Sendable {
    static let clockAgent = "readyClock01"
    static let clockCode = "0A1B2C3D-READY-CLOCK"
    let rig: FailoverRig
    let lifx: LIFXCloudSimulator
    let imp: ImpAgentSimulator
    let lanPort: Int
    let lan = Locked<LIFXLANSimulator?>(nil)

    init(rig: FailoverRig, lifx: LIFXCloudSimulator, imp: ImpAgentSimulator, lanPort: Int, lan: LIFXLANSimulator) {
        self.rig = rig
        self.lifx = lifx
        self.imp = imp
        self.lanPort = lanPort
        self.lan.withLock { $0 = lan }
    }

    static func with(_ body: (ReadinessHarness) async throws -> Void) async throws {
        let broker = try await BrokerKind.mosquitto.start()
        defer { broker.stop() }
        let lifx = try await LIFXCloudSimulator.start(token: "t", lights: LIFXCloudSimulator.demoLights())
        let imp = try await ImpAgentSimulator.start(agents: [.init(id: clockAgent, app: .matrixClock, appcode: clockCode)])
        let lan = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices())
        let port = lan.port
        try await withTeardown {
            try await FailoverRig.with(
                broker: broker, lifxURL: lifx.apiURL,
                lifxMore: #"lan: {enabled: true, hosts: ["127.0.0.1:\#(port)"], broadcast: [], poll_interval: 2}"#,
                more: "imp: {base_url: \"\(imp.baseURL)\", poll_interval: 3600, apps: {\(clockCode): matrixclock}, devices: [{name: hall_clock, agent_id: \(clockAgent)}]}"
            ) { rig in
                let h = ReadinessHarness(rig: rig, lifx: lifx, imp: imp, lanPort: port, lan: lan)
                defer { h.lan.withLock { $0?.stop() } }
                try await body(h)
            }
        } teardown: {
            await lifx.stop()
            await imp.stop()
        }
    }

    /// `a` active with everything known (a LAN light, the clock's app, the virtual devices' discovery), `b`
    /// standing by and watching the group's retained tree.
    func activeAndStandby(_ probe: MQTTProbe? = nil) async throws {
        try rig.start("a")
        try await rig.waitActive("a")
        let base = rig.base
        let watch = try await MQTTProbe.connect(port: rig.broker.port)
        defer { watch.close() }
        try await watch.subscribe("\(base)/#")
        _ = try await watch.waitFor("a LAN light listed, the clock's app detected") { ms in
            ms.contains { $0.topic == "\(base)/lifx/desk" && !$0.payload.isEmpty }
                && ms.contains { $0.topic == "\(base)/imp/hall_clock" && $0.payload.contains(#""app":"matrixclock""#) }
                && ms.contains { $0.topic == "\(base)/bridge/devices" && $0.payload.contains(#""name":"desk""#) }
        }
        try rig.start("b")
        try await rig.waitRole("b", "standby")
        // b reads the retained tree (the device list, the states) on its watching connection's subscribe.
        try await Task.sleep(for: .seconds(1))
    }

    /// Kills the active `a` and sends `payload` to `topic` at once: the broker keeps it for the session until
    /// `b` holds it (or `b` has it the moment it does).
    func killAndSend(_ topic: String, _ payload: String) async throws {
        rig.signal("a", SIGKILL)
        try await rig.waitRole("a", "offline", timeout: Double(FailoverRig.keepalive) * 1.5 + 2)
        rig.probe.publish("\(rig.base)/\(topic)", payload)
        try await rig.waitActive("b", timeout: Double(FailoverRig.keepalive) * 1.5 + 5)
    }

    /// The one result of `transaction`, and its error if it failed.
    func answer(_ transaction: String, timeout: Double = 40) async throws -> (status: String, error: String?) {
        try await waitUntil("\(transaction) answered", timeout: timeout) { self.rig.results[transaction] != nil }
        try await Task.sleep(for: .milliseconds(500))
        let statuses = rig.results[transaction] ?? []
        #expect(statuses.count == 1, "\(transaction) answered \(statuses.count) times: \(statuses)")
        return (statuses.first ?? "?", rig.failures.first { $0.transaction == transaction }?.error)
    }
}

@Suite(.serialized) struct StandbyReadinessTests {
    /// A light only the LAN knows is not in the new instance's first listing (the cloud's), and its LAN
    /// finds it again only when the light answers: its command waits for it instead of being refused as an
    /// unknown device, and is carried out over the LAN.
    @Test func aLANLightsCommandWaitsUntilTheNewInstanceFindsTheLight() async throws {
        try await ReadinessHarness.with { h in
            try await h.activeAndStandby()
            // The LAN light is silent at the takeover: the new instance's cloud listing comes first.
            h.lan.withLock { $0?.stop(); $0 = nil }
            try await h.killAndSend("lifx/desk/set", #"{"state": "OFF", "transaction": "lan1"}"#)
            try await Task.sleep(for: .seconds(2))
            let lan = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices(), port: h.lanPort)
            h.lan.withLock { $0 = lan }
            let (status, error) = try await h.answer("lan1")
            #expect(status == "ok", "lan1: \(error ?? "")")
            #expect(lan.device("d073d5100001")?.power == 0, "the command did not reach the LAN light")
        }
    }

    /// The clock's agent answers slowly: the new instance cannot have detected its app when the command
    /// arrives. It is judged against the app the group's previous active instance detected, and sent once the
    /// agent has answered, instead of being refused (`unknown field 'brightness' (writable: )`, `agent
    /// unreachable`).
    @Test func anImpClocksCommandIsCarriedOutBeforeTheNewInstanceHasAskedItsAgent() async throws {
        try await ReadinessHarness.with { h in
            try await h.activeAndStandby()
            h.imp.server.setDelay(2)
            try await h.killAndSend("imp/hall_clock/set", #"{"brightness": 20, "transaction": "imp1"}"#)
            let (status, error) = try await h.answer("imp1")
            #expect(status == "ok", "imp1: \(error ?? "")")
            #expect(h.imp.agent(ReadinessHarness.clockAgent)?.bright == 3, "the brightness did not reach the agent")
        }
    }

    /// A rename right after a takeover, while the new instance's device configs wait for its discovery sweep
    /// (the LIFX cloud answers slowly, so not every adapter has listed): the previous instance's config
    /// still stands on the broker and reads the old state topic, which is emptied only after the new config
    /// has replaced it.
    @Test func aRenameRightAfterATakeoverNeverEmptiesATopicAStandingConfigReads() async throws {
        try await ReadinessHarness.with { h in
            let rig = h.rig, base = rig.base
            let watch = try await MQTTProbe.connect(port: rig.broker.port)
            defer { watch.close() }
            try await watch.subscribe("\(base)/#", "homeassistant/#")
            try await h.activeAndStandby()
            _ = try await watch.waitFor("virtual/spare's discovery config") { ms in
                ms.contains { $0.topic.hasPrefix("homeassistant/device/") && $0.payload.contains(#""\#(base)/virtual/spare""#) }
            }
            h.lifx.setDelay(8)
            try await h.killAndSend("virtual/lamp/set", #"{"state": "ON", "transaction": "v1"}"#)
            rig.probe.publish("\(base)/bridge/request/device/rename", #"{"adapter": "virtual", "device": "spare", "to": "spare_m", "transaction": "r1"}"#)
            let response = try await watch.waitFor("the rename's response") { ms in
                ms.contains { $0.topic == "\(base)/bridge/response/device/rename" && $0.payload.contains(#""r1""#) }
            }
            let answer = response.last { $0.topic == "\(base)/bridge/response/device/rename" }?.payload ?? ""
            #expect(answer.contains(#""status":"ok""#), "the rename was answered \(answer)")
            _ = try await watch.waitFor("the new config and the old state cleared", timeout: 40) { ms in
                ms.contains { $0.topic.hasPrefix("homeassistant/device/") && $0.payload.contains(#""\#(base)/virtual/spare_m""#) }
                    && ms.contains { $0.topic == "\(base)/virtual/spare" && $0.payload.isEmpty }
            }
            h.lifx.setDelay(0)
            var reads = DiscoveryReadWatch()
            var breaches: [String] = []
            for m in watch.messages {
                if let b = reads.see(topic: m.topic, payload: Array(m.payload.utf8), retain: m.retain) { breaches.append(b) }
            }
            #expect(breaches.isEmpty, "\(breaches)")
            #expect(watch.messages.last { $0.topic == "\(base)/virtual/spare_m" }.map { !$0.payload.isEmpty } == true)
        }
    }
}
