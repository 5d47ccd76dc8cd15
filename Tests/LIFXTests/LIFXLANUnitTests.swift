import Foundation
@testable import LIFXAdapter
import LIFXSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// The adapter with its LAN transport, in the unit tier: the LAN a `LIFXLANTwin` whose peer is the LAN
/// simulator's own byte handling (written from the protocol's layouts apart from the bridge's codec), in
/// memory; the engine a `RecordingAdapterHost`; time a manual clock moved by the test.
@Suite struct LIFXLANUnitTests {
    static let desk = "d073d5100001", strip = "d073d5100002", candle = "d073d5100003", porch = "d073d5100004",
               clean = "d073d5100005", ceiling = "d073d5100006"
    static let lights = [desk, strip, candle, porch, clean, ceiling]

    /// Message types, as the protocol numbers them.
    static let setColor: UInt16 = 102, setPower: UInt16 = 117, getService: UInt16 = 2, lightGet: UInt16 = 101

    static func found(_ rig: LIFXRig, _ ids: [String] = lights) async throws {
        try await rig.pump("the LAN's lights found") { r in ids.allSatisfy { r.declared($0) && r.state($0)["via"] == "lan" } }
    }

    @Test func discoveryFindsTheDevicesAndDeclaresWhatEachIs() async throws {
        let devices = LIFXLANSimulator.demoDevices() + [LIFXLANSimulator.Device(serial: "d073d5100009", label: "Wall", product: 70)]
        try await LIFXRig.with(lan: devices) { rig in
            try await Self.found(rig)
            #expect(rig.host.status == .running)
            #expect(rig.host.devices[Self.strip]?.model == "LIFX Z" && rig.host.devices[Self.desk]?.model == "LIFX A19")
            #expect(rig.state(Self.strip)["zone_count"] == 16 && rig.state(Self.strip)["group"] == "Study")
            #expect(rig.state(Self.porch)["infrared"] == 0 && rig.state(Self.clean)["clean_cycle"] == "OFF")
            #expect(rig.declared("\(Self.ceiling)_uplight") && rig.declared("\(Self.ceiling)_downlight"))
            #expect(rig.host.devices.keys.filter { $0.hasPrefix("group_") }.count == 2)
            #expect(rig.host.devices.keys.filter { $0.hasPrefix("location_") }.count == 1)
            // A LIFX Switch answers discovery but is no light.
            #expect(!rig.declared("d073d5100009"))
            #expect(rig.lan.ports == [0] && rig.lanTypes().first == Self.getService)
            try await rig.pump("the LAN's figures") { r in r.lanMetrics["devices"] == 6 }
        }
    }

    /// A command reaches the device, and only what differs from what the device last said goes: a brightness
    /// on a light that is on is one SetColor; off is one SetPower.
    @Test func aCommandReachesTheDeviceWithOnlyWhatDiffers() async throws {
        try await LIFXRig.with(lan: LIFXLANSimulator.demoDevices()) { rig in
            try await Self.found(rig)
            rig.lan.clearSent()
            #expect(try await rig.command(Self.desk, ["brightness": 40, "transition": 0]).ok)
            #expect(rig.sim?.device(Self.desk)?.color == [0, 0, UInt16(Wire.level(40)), 3500])
            #expect(rig.lanTypes() == [Self.setColor])
            #expect(rig.state(Self.desk)["brightness"] == 40 && rig.state(Self.desk)["via"] == "lan")
            rig.lan.clearSent()
            #expect(try await rig.command(Self.desk, ["state": "OFF"]).ok)
            #expect(rig.lanTypes() == [Self.setPower] && rig.sim?.device(Self.desk)?.power == 0)
            rig.lan.clearSent()
            #expect(try await rig.command(Self.desk, ["state": "OFF"]).ok)
            #expect(rig.lanTypes().isEmpty)
        }
    }

    /// A device that answers nothing: the command's datagram goes five times (the retries' gaps on the
    /// clock), then the command fails and the light shows again what the device last reported.
    @Test func aDeviceThatDoesNotAnswerFailsTheCommandAndTheStateReverts() async throws {
        try await LIFXRig.with(lan: LIFXLANSimulator.demoDevices()) { rig in
            try await Self.found(rig)
            rig.sim?.setLoss(1)
            rig.lan.clearSent()
            let start = rig.clock.now()
            let r = try await rig.command(Self.desk, ["brightness": 10])
            #expect(r.error == "Desk did not answer over the LAN (timeout)")
            #expect(rig.lanTypes() == Array(repeating: Self.setColor, count: 5))
            // 0.2 + 0.3 + 0.5 + 1 + 2 s of waiting.
            #expect(rig.clock.now() - start >= .seconds(4))
            #expect(rig.state(Self.desk)["brightness"] == 100)
            try await rig.pump("the time-out counted") { r in r.lanMetrics["timeouts"]?.intValue ?? 0 >= 1 }
        }
    }

    /// A device that falls silent stays available for `offline_after` on the clock, then is unavailable (not
    /// removed), and comes back when it answers again.
    @Test func aSilentDeviceGoesOfflineAfterItsGraceAndComesBack() async throws {
        try await LIFXRig.with(lan: [LIFXLANSimulator.Device(serial: Self.desk, label: "Desk", product: 27)], configure: {
            $0.lan.offlineAfter = 5
            $0.lan.pollInterval = 1
        }) { rig in
            try await Self.found(rig, [Self.desk])
            rig.sim?.setLoss(1)
            // Heard last within a poll interval before this; silent from now on.
            let silent = rig.clock.now()
            await rig.advance(.seconds(3))
            #expect(rig.host.available(Self.desk) == true)
            try await rig.pump("offline") { r in r.host.available(Self.desk) == false }
            #expect(rig.clock.now() - silent >= .seconds(3) && rig.declared(Self.desk))
            rig.sim?.setLoss(0)
            try await rig.pump("online again") { r in r.host.available(Self.desk) == true }
        }
    }

    /// Datagrams that are no LIFX packet, or answer a request of another client, are counted and change nothing.
    @Test func strayAndMalformedDatagramsAreCountedAndChangeNothing() async throws {
        try await LIFXRig.with(lan: [LIFXLANSimulator.Device(serial: Self.desk, label: "Desk", product: 27)]) { rig in
            try await Self.found(rig, [Self.desk])
            let before = rig.state(Self.desk)
            let stranger = LIFXLANPacket(type: 107, source: 7, target: try #require(LIFXSerial.target(Self.desk)), sequence: 1,
                                         payload: Array(repeating: 0, count: 52))
            #expect(rig.lan.deliver([1, 2, 3], from: LIFXRig.lanAt) && rig.lan.deliver(stranger.bytes, from: LIFXRig.lanAt))
            try await rig.pump("counted") { r in r.lanMetrics["malformed"] == 1 && r.lanMetrics["foreign"] == 1 }
            #expect(rig.state(Self.desk) == before)
        }
    }

    /// A device that moved to another address (a new DHCP lease) is found there by discovery, and its
    /// commands follow it.
    @Test func aDeviceThatMovedIsFollowedToItsNewAddress() async throws {
        try await LIFXRig.with(lan: [LIFXLANSimulator.Device(serial: Self.desk, label: "Desk", product: 27)]) { rig in
            try await Self.found(rig, [Self.desk])
            let sim = try #require(rig.sim)
            // Discovery still reaches it; it answers from its new address, and only there.
            rig.lan.answer { bytes, to in
                let discovery = LIFXLANPacket.decode(bytes)?.header.type == 2
                guard to == LIFXRig.movedTo || (discovery && to == LIFXRig.lanAt) else { return [] }
                return sim.answer(bytes).map { LIFXLANDatagram(bytes: $0, from: LIFXRig.movedTo) }
            }
            // A refresh: the poll at the old address goes unanswered, the discovery round after it finds the new one.
            let done = Locked(false)
            let context = rig.host.context
            let refreshed = Task {
                try await rig.adapter.refreshAll(context: context)
                done.withLock { $0 = true }
            }
            try await rig.pump("rediscovered") { _ in done.withLock { $0 } }
            try await refreshed.value
            await rig.settle()
            rig.lan.clearSent()
            #expect(try await rig.command(Self.desk, ["brightness": 60, "transition": 0]).ok)
            #expect(rig.lanTypes(to: LIFXRig.movedTo) == [Self.setColor] && rig.lanTypes(to: LIFXRig.lanAt).isEmpty)
            #expect(sim.device(Self.desk)?.color[2] == UInt16(Wire.level(60)))
        }
    }

    /// At most 20 datagrams a second to one device: each datagram takes the device's next slot, 50 ms after
    /// the one before; one that would go at once (a command's first) goes only if its slot is free now.
    @Test func eachDeviceHasASlotEveryFiftyMilliseconds() {
        var r = LIFXLANRequests()
        let t0 = MonotonicInstant.origin + .seconds(10)
        let a: UInt64 = 1, b: UInt64 = 2
        let first = r.slotNow(a, now: t0), tooSoon = r.slotNow(a, now: t0 + .milliseconds(49)), other = r.slotNow(b, now: t0)
        #expect(first && !tooSoon && other)
        // Slots asked for at once are handed out 50 ms apart; a later ask starts from its own time.
        func near(_ x: MonotonicInstant, _ ms: Int) -> Bool { abs((x - (t0 + .milliseconds(ms))).seconds) < 1e-9 }
        let slots = (0..<4).map { _ in r.slot(a, now: t0 + .milliseconds(10)) }
        #expect(zip(slots, [50, 100, 150, 200]).allSatisfy { near($0, $1) }, "\(slots)")
        let busy = r.slotNow(a, now: t0 + .milliseconds(249)), free = r.slotNow(a, now: t0 + .milliseconds(251))
        #expect(!busy && free)
        let later = r.slot(a, now: t0 + .seconds(5))
        #expect(near(later, 5000))
        // Twenty a second at most: the 21st slot from t0 is a second after the first.
        var c = LIFXLANRequests()
        let times = (0..<21).map { _ in c.slot(a, now: t0) }
        #expect(near(times[0], 0) && near(times[20], 1000))
    }

    @Test func zonesInfraredCleanCyclesAndEffectsReachTheDevices() async throws {
        try await LIFXRig.with(lan: LIFXLANSimulator.demoDevices()) { rig in
            try await Self.found(rig)
            let sim = try #require(rig.sim)
            #expect(try await rig.command(Self.strip, ["zones": [["start": 0, "end": 7, "color": ["h": 240, "s": 100]]], "transition": 0]).ok)
            let zones = try #require(sim.device(Self.strip)?.zones)
            #expect(zones[0..<8].allSatisfy { $0[0] == UInt16(Wire.hue(240)) && $0[1] == 65535 } && zones[8][0] != UInt16(Wire.hue(240)))
            #expect(rig.state(Self.strip)["zones"]?.arrayValue?.first?["end"] == 7)
            #expect(try await rig.command(Self.porch, ["infrared": 50]).ok)
            #expect(sim.device(Self.porch)?.infrared == UInt16(Wire.level(50)))
            #expect(try await rig.command(Self.clean, ["clean_cycle": "ON", "clean_duration": 600]).ok)
            #expect(sim.device(Self.clean)?.hevRemaining == 600 && rig.state(Self.clean)["clean_cycle"] == "ON")
            #expect(try await rig.command(Self.candle, ["effect": "flame"]).ok)
            #expect(sim.device(Self.candle)?.effect == 3 && rig.state(Self.candle)["effect"] == "flame")
            #expect(try await rig.command("\(Self.ceiling)_uplight", ["color": ["h": 120, "s": 100], "transition": 0]).ok)
            #expect(sim.device(Self.ceiling)?.matrix[63][0] == UInt16(Wire.hue(120)) && sim.device(Self.ceiling)?.matrix[0][1] == 0)
        }
    }

    /// A reload's new instance has the old one's devices: a command right after it starts goes over the LAN
    /// at once, before any discovery.
    @Test func aReloadsNewInstanceCommandsOverTheLANAtOnce() async throws {
        let devices = [LIFXLANSimulator.Device(serial: Self.desk, label: "Desk", product: 27)]
        let old = try await LIFXRig.with(lan: devices) { rig in
            try await Self.found(rig, [Self.desk])
            return rig.adapter
        }
        try await LIFXRig.with(lan: devices, inherit: old) { rig in
            try await rig.pump("the socket open") { r in r.lan.isOpen }
            #expect(try await rig.command(Self.desk, ["brightness": 30, "transition": 0]).ok)
            // Over the LAN, to where the old instance found it: nothing had to identify it again (no GetVersion).
            let types = rig.lanTypes()
            #expect(types.contains(Self.setColor) && !types.contains(32))
            #expect(rig.sim?.device(Self.desk)?.color[2] == UInt16(Wire.level(30)))
        }
    }

    /// The twin itself: datagrams both ways in memory, bounded as the kernel's socket is, only while a run has it.
    @Test func theLANTwinCarriesDatagramsBothWaysWhileOpen() async throws {
        let at = LIFXLANEndpoint("10.0.0.9:56700")!
        let twin = LIFXLANTwin(bound: 4) { bytes, to in [LIFXLANDatagram(bytes: bytes.reversed(), from: to)] }
        #expect(!twin.deliver([1], from: at) && !twin.isOpen)
        try await twin.withSocket(localPort: 56700, isolation: #isolation) { socket in
            #expect(twin.isOpen)
            socket.send([1, 2, 3], to: at)
            for i in 0..<10 { twin.deliver([UInt8(i)], from: at) }
            #expect(socket.dropped == 7 && twin.dropped == 7)
            var received: [[UInt8]] = []
            for await d in socket.datagrams {
                received.append(d.bytes)
                if received.count == 4 { break }
            }
            #expect(received == [[3, 2, 1], [0], [1], [2]])
        }
        #expect(!twin.isOpen && twin.ports == [56700] && twin.sent.map(\.bytes) == [[1, 2, 3]] && twin.sent.first?.to == at)
        #expect(twin.quiet)
    }
}
