import Foundation
@testable import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// A group's LIFX members handed over as one batch (`LIFXAdapter.acceptBatch`, design.md §20): one cloud
/// request for the lights the cloud reaches, one LAN hand-over for the others, and each device its own outcome.
@Suite struct LIFXBatchUnitTests {
    static let kitchen = LIFXCloudUnitTests.kitchen, left = LIFXCloudUnitTests.left, right = LIFXCloudUnitTests.right
    static let hall = LIFXCloudUnitTests.hall

    func batch(_ rig: LIFXRig, _ commands: [(String, [String: JSONValue])]) async throws -> [Result<Void, AdapterError>] {
        let pending = await rig.adapter.acceptBatch(commands.map { DeviceCommand(deviceID: $0.0, fields: $0.1) }, context: rig.host.context)
        #expect(pending.count == commands.count)
        var out: [Result<Void, AdapterError>] = []
        for p in pending { out.append(try await rig.outcome(p)) }
        return out
    }

    /// Four lights given the same command: one request naming the four, and the one light the cloud did not
    /// reach fails alone (the request succeeded for the other three).
    @Test func theCloudsLightsAreOneRequestAndEachHasItsOwnOutcome() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await LIFXCloudUnitTests.listed(rig)
            play.edit(Self.hall) { $0.reach = "offline" }
            let fields: [String: JSONValue] = ["state": "ON", "brightness": 30]
            let r = try await batch(rig, [(Self.kitchen, fields), (Self.left, fields), (Self.right, fields), (Self.hall, fields)])
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/id:d073d5000001,id:d073d5000002,id:d073d5000004,id:d073d5000003/state"])
            #expect(play.actions.first?.1 == ["power": "on", "brightness": 0.3, "duration": 0.5])
            #expect(r.map { (try? $0.get()) != nil } == [true, true, true, false])
            #expect(r[3].error == "Hall Lamp offline (LIFX did not reach the light)")
            #expect(rig.state(Self.kitchen)["brightness"] == 30 && rig.state(Self.hall)["brightness"] == 100,
                    "hall: \(rig.host.reports(of: Self.hall)), requests: \(play.twin.lines)")
        }
    }

    /// Lights given different fields (a group's colour lights and its white ones) still go in one request,
    /// `PUT /lights/states`; a device the plan refuses fails alone, and the others are still sent.
    @Test func differentFieldsAreOneRequestAndARefusalGoesAlone() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play) { rig in
            try await LIFXCloudUnitTests.listed(rig)
            let r = try await batch(rig, [(Self.kitchen, ["brightness": 20]), (Self.left, ["brightness": 20, "color_temp": 2700]),
                                          (Self.right, ["brightness": 20])])
            #expect(r.allSatisfy { (try? $0.get()) != nil })
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/states"])
            let states = play.actions.first?.1?["states"]?.arrayValue ?? []
            #expect(Set(states.compactMap { $0["selector"]?.stringValue }) == ["id:d073d5000001,id:d073d5000004", "id:d073d5000002"])

            let before = play.actions.count
            let refused = try await batch(rig, [(Self.kitchen, ["brightness": 60]), ("d073d5999999", ["brightness": 60])])
            #expect((try? refused[0].get()) != nil)
            #expect(refused[1].error == "LIFX device 'd073d5999999' is not known")
            #expect(play.actions.dropFirst(before).map(\.0) == ["PUT /v1/lights/id:d073d5000001/state"])
        }
    }

    /// A LAN light and a cloud light in one batch: the LAN light's order goes over the LAN, the cloud light's
    /// as one request, and both succeed.
    @Test func lanAndCloudLightsEachGoTheirWay() async throws {
        let play = CloudPlay.demo()
        var desk = LIFXHybridUnitTests.lanDevice(LIFXHybridUnitTests.desk, "Desk")
        desk.power = 0
        try await LIFXRig.with(cloud: play, lan: [desk]) { rig in
            try await LIFXHybridUnitTests.ready(rig, [LIFXHybridUnitTests.desk])
            rig.lan.clearSent()
            let r = try await batch(rig, [(LIFXHybridUnitTests.desk, ["state": "ON", "brightness": 45]), (Self.kitchen, ["state": "ON", "brightness": 45])])
            #expect(r.allSatisfy { (try? $0.get()) != nil })
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/id:d073d5000001/state"])
            #expect(rig.sim?.device(LIFXHybridUnitTests.desk)?.power == 65535)
            #expect(rig.sim?.device(LIFXHybridUnitTests.desk)?.color[2] == UInt16(Wire.level(45)))
        }
    }
}
