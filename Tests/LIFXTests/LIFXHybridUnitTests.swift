import Foundation
@testable import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Both transports in the unit tier: which one a command takes, as the model's plan decides it, seen from what
/// each twin was sent. The cloud is `CloudPlay` over the HTTP twin, the LAN the simulator's devices in memory.
@Suite struct LIFXHybridUnitTests {
    static let kitchen = "d073d5000001", hall = "d073d5000003", desk = "d073d5100001"
    static let kitchenGroup = "group_\(CloudPlay.kitchenGroup.0)"
    static let setColor: UInt16 = 102

    static func lanDevice(_ serial: String, _ label: String) -> LIFXLANSimulator.Device {
        var d = LIFXLANSimulator.Device(serial: serial, label: label, product: 27)
        d.group = CloudPlay.kitchenGroup.1
        d.groupID = CloudPlay.kitchenGroup.0
        d.location = CloudPlay.home.1
        d.locationID = CloudPlay.home.0
        return d
    }

    /// The cloud's kitchen light on the LAN too, and a desk lamp only the LAN has, both in the kitchen group.
    static let both = [lanDevice(kitchen, "Kitchen"), lanDevice(desk, "Desk")]

    static func ready(_ rig: LIFXRig, _ lanLights: [String]) async throws {
        try await rig.pump("both transports' lights") { r in
            r.declared(hall) && lanLights.allSatisfy { r.declared($0) && r.state($0)["via"] == "lan" }
        }
    }

    @Test func aLightBothSeeIsCommandedOverTheLANAndTheCloudHearsNothing() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, lan: Self.both) { rig in
            try await Self.ready(rig, [Self.kitchen, Self.desk])
            rig.lan.clearSent()
            #expect(try await rig.command(Self.kitchen, ["brightness": 30, "transition": 0]).ok)
            #expect(rig.lanTypes() == [Self.setColor] && play.actions.isEmpty)
            #expect(rig.sim?.device(Self.kitchen)?.color[2] == UInt16(Wire.level(30)))
            // Listed once, under one name, the cloud's light and the LAN's the same device.
            #expect(rig.host.devices.keys.filter { $0.hasPrefix(Self.kitchen) }.count == 1)
            #expect(rig.state(Self.kitchenGroup)["lights"] == 2 && rig.state(Self.kitchenGroup)["via"] == "lan")
        }
    }

    /// The LAN loses the light both know: past `offline_after` its commands go to the cloud, and once the LAN
    /// hears it again, back over the LAN. It stays available throughout (the cloud reaches it).
    @Test func whenTheLANLosesALightItsCommandsGoToTheCloudUntilItIsBack() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, lan: Self.both, configure: {
            $0.lan.offlineAfter = 5
            $0.lan.pollInterval = 1
        }) { rig in
            try await Self.ready(rig, [Self.kitchen, Self.desk])
            rig.sim?.setLoss(1)
            try await rig.pump("over the cloud") { r in r.state(Self.kitchen)["via"] == "cloud" }
            #expect(rig.host.available(Self.kitchen) == true && rig.host.available(Self.desk) == false)
            #expect(try await rig.command(Self.kitchen, ["brightness": 70]).ok)
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/id:d073d5000001/state"])
            rig.sim?.setLoss(0)
            try await rig.pump("over the LAN again") { r in r.state(Self.kitchen)["via"] == "lan" }
            rig.lan.clearSent()
            #expect(try await rig.command(Self.kitchen, ["brightness": 20, "transition": 0]).ok)
            #expect(rig.lanTypes().contains(Self.setColor) && play.actions.count == 1)
        }
    }

    /// A group across both: the LAN's light over the LAN, the rest in one cloud request that names them (not the
    /// group, which would reach the LAN's light twice); a cloud-only light goes to the cloud.
    @Test func aGroupAcrossBothIsLANDatagramsAndOneCloudRequestForTheRest() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, lan: [Self.lanDevice(Self.desk, "Desk")]) { rig in
            try await Self.ready(rig, [Self.desk])
            #expect(rig.state(Self.kitchenGroup)["via"] == "mixed")
            rig.lan.clearSent()
            #expect(try await rig.command(Self.kitchenGroup, ["brightness": 60, "transition": 0]).ok)
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/id:d073d5000001/state"])
            #expect(rig.lanTypes() == [Self.setColor] && rig.sim?.device(Self.desk)?.color[2] == UInt16(Wire.level(60)))
            #expect(try await rig.command(Self.hall, ["state": "ON"]).ok)
            #expect(play.actions.map(\.0).last == "PUT /v1/lights/id:d073d5000003/state" && rig.lanTypes() == [Self.setColor])
        }
    }

    /// Several lights in one hand-over (what a cross-upstream group will give the adapter): one cloud request
    /// for the cloud's, the LAN's over the LAN, one outcome for all.
    @Test func severalLightsAcrossBothAreOneCloudRequestAndOneLANHandOver() async throws {
        let play = CloudPlay.demo()
        try await LIFXRig.with(cloud: play, lan: [Self.lanDevice(Self.desk, "Desk")]) { rig in
            try await Self.ready(rig, [Self.desk])
            rig.lan.clearSent()
            let r = try await rig.carryOut([LIFXCommand(.lights([Self.kitchen, Self.desk, Self.hall]), ["state": "OFF"])])
            #expect(r.ok)
            #expect(play.actions.map(\.0) == ["PUT /v1/lights/id:d073d5000001,id:d073d5000003/state"])
            #expect(play.light(Self.kitchen)?.power == "off" && play.light(Self.hall)?.power == "off")
            #expect(rig.lanTypes() == [117] && rig.sim?.device(Self.desk)?.power == 0)
            #expect([Self.kitchen, Self.desk, Self.hall].allSatisfy { rig.state($0)["state"] == "OFF" })
        }
    }

    /// The LAN finds its lights before the cloud's first listing: nothing is declared until the listing, which
    /// then declares them with the cloud's.
    @Test func nothingIsDeclaredBeforeTheCloudsFirstListing() async throws {
        let play = CloudPlay.demo()
        play.hold(listings: true)
        try await LIFXRig.with(cloud: play, lan: [Self.lanDevice(Self.desk, "Desk")]) { rig in
            try await rig.pump("the LAN's light found") { r in r.state(Self.desk)["via"] == "lan" }
            #expect(!rig.host.calls.contains { if case .setDevices = $0 { return true }; return false })
            play.release()
            try await rig.pump("listed") { r in r.declared(Self.desk) && r.declared(Self.hall) }
            #expect(rig.state(Self.desk)["group"] == "Kitchen")
        }
    }

    /// A light the cloud says is offline but the LAN hears is available, and goes over the LAN.
    @Test func aLightTheCloudCannotReachButTheLANHearsIsAvailableOverTheLAN() async throws {
        let play = CloudPlay.demo()
        play.edit(Self.kitchen) { $0.connected = false }
        try await LIFXRig.with(cloud: play, lan: Self.both) { rig in
            try await Self.ready(rig, [Self.kitchen])
            #expect(rig.host.available(Self.kitchen) == true && rig.state(Self.kitchen)["connected"] == true)
            #expect(try await rig.command(Self.kitchen, ["state": "OFF"]).ok)
            #expect(play.actions.isEmpty)
        }
    }
}
