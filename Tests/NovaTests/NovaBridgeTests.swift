import Foundation
import Glibc
import Testing
import NovaAdapter
import SwitchyardConfig
import SwitchyardCore
import NovaSimulators
import SwitchyardTestSupport

/// The bridge in-process with the Nova adapter on a simulated radio (real HCI report bytes, ATT over
/// socketpairs to simulated flashes) and a real Mosquitto, read by a real subscriber.
final class NovaHarness: Sendable {
    static let key = "D0:39:72:AA:BB:01"      // strong (−50 dBm → 80 %)
    static let fill = "D0:39:72:AA:BB:02"     // weak (−80 dBm → 20 %)
    let radio: SimulatedNovaRadio
    let under: BridgeUnderTest
    var probe: MQTTProbe { under.probe }
    var base: String { under.base }

    private init(radio: SimulatedNovaRadio, under: BridgeUnderTest) {
        self.radio = radio
        self.under = under
    }

    static func with<R: Sendable>(yaml: String = "", flashes: [String: Int?] = [key: -50, fill: -80], ackTimeout: Double = 2,
                                  _ body: (NovaHarness) async throws -> R) async throws -> R {
        let radio = SimulatedNovaRadio(flashes: flashes)
        let config = try SwitchyardConfig.parse(yaml: """
        nova:
          scan: {duration: 0.05, period: 0.25}
          names:
            "\(key)": key_light
        \(yaml)
        """, file: "t.yaml", upstreams: [NovaUpstream()])
        var settings = try #require(config.settings(NovaUpstream()))
        settings.ackTimeout = ackTimeout
        var options = InProcessBridge.Options()
        options.info = ["config": config.redactedJSON]
        return try await BridgeUnderTest.with(subscribe: { ["\($0)/#", "homeassistant/#"] },
                                              adapter: NovaAdapter(settings: settings, radio: radio), options: options) { under in
            try await body(NovaHarness(radio: radio, under: under))
        }
    }

    func topic(_ name: String) -> String { "\(base)/nova/\(name)" }

    @discardableResult
    func waitState(_ name: String, _ what: String = "", timeout: Double = 30, _ predicate: @escaping (JSONValue) -> Bool) async throws -> JSONValue {
        let t = topic(name)
        let match = { (m: MQTTProbe.Message) in m.topic == t && (try? JSONValue.parse(m.payload)).map(predicate) == true }
        let ms = try await probe.waitFor("\(t) \(what)", timeout: timeout) { $0.contains(where: match) }
        return try JSONValue.parse(ms.last(where: match)!.payload)
    }

    func result(_ name: String, _ transaction: String) async throws -> JSONValue {
        let t = "\(topic(name))/result"
        let ms = try await probe.waitFor("result \(transaction)") { $0.contains { $0.topic == t && $0.payload.contains("\"\(transaction)\"") } }
        return try JSONValue.parse(ms.last { $0.topic == t && $0.payload.contains("\"\(transaction)\"") }!.payload)
    }

    func expectResult(_ name: String, _ transaction: String, _ status: JSONValue, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let r = try await result(name, transaction)
        #expect(r["status"] == status, "\(r)", sourceLocation: sourceLocation)
    }

    func frames(_ address: String) -> [String] { radio.peripheral(address)?.frames ?? [] }
}

@Suite struct NovaBridgeTests {
    @Test func discoversAutoConnectsTheStrongestLightsWithAckAndTurnsOff() async throws {
        try await NovaHarness.with { h in
            // max_flashes 1: the strongest flash is connected, the weaker one stays available.
            let ready = try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            #expect(ready["lit"] == false && ready["state"] == "OFF")
            let weak = try await h.waitState("nova_d03972aabb02", "heard") { $0["status"] == "available" }
            #expect(weak["signal"] == 20 && weak["rssi"] == -80)
            try await h.probe.waitFor(topic: "\(h.topic("key_light"))/availability", payload: "online")
            // HA discovery: a light with brightness and colour temperature (warm/cool mix).
            let node = "switchyard_\(h.base)_nova_d03972aabb01"
            let disc = try await h.probe.waitFor(topic: "homeassistant/light/\(node)/light/config")
            let d = try JSONValue.parse(disc.payload)
            #expect(d["brightness"] == true && d["min_kelvin"] == 2700 && d["max_kelvin"] == 6500)
            #expect(d["supported_color_modes"] == ["color_temp"])

            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","preset":"bright","timeout_ms":10000,"transaction":"on1"}"#)
            try await h.expectResult("key_light", "on1", "ok")
            let lit = try await h.waitState("key_light", "lit") { $0["lit"] == true }
            #expect(lit["state"] == "ON" && lit["warm"] == 255 && lit["cool"] == 255 && lit["brightness"] == 100 && lit["timeout_ms"] == 10000)
            #expect(h.frames(NovaHarness.key) == ["(00:L,FF,FF,2710)"])
            #expect(h.radio.peripheral(NovaHarness.key)?.light == .init(warm: 255, cool: 255, timeoutMs: 10_000))

            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"OFF","transaction":"off1"}"#)
            try await h.expectResult("key_light", "off1", "ok")
            try await h.waitState("key_light", "off") { $0["lit"] == false && $0["status"] == "ready" }
            #expect(h.frames(NovaHarness.key) == ["(00:L,FF,FF,2710)", "(01:O)"])
            #expect(h.radio.peripheral(NovaHarness.key)?.light == nil)
            // The weak flash was never connected.
            #expect(h.radio.connects == 1)
            // A command to a flash that is not connected is refused with the reason.
            h.probe.publish("\(h.topic("nova_d03972aabb02"))/set", #"{"state":"ON","transaction":"w1"}"#)
            let refused = try await h.result("nova_d03972aabb02", "w1")
            #expect(refused["status"] == "error" && refused["error"]?.stringValue?.contains("not connected") == true)
        }
    }

    @Test func litFollowsTheFlashTimeoutAndBareONReusesTheLastSettings() async throws {
        try await NovaHarness.with { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","preset":"warm","timeout_ms":300,"transaction":"w"}"#)
            try await h.expectResult("key_light", "w", "ok")
            try await h.waitState("key_light", "lit") { $0["lit"] == true && $0["warm"] == 255 && $0["cool"] == 127 }
            // The hardware turns itself off after timeout_ms; lit follows without any command.
            try await h.waitState("key_light", "unlit by its timeout", timeout: 10) { $0["lit"] == false }
            #expect(h.frames(NovaHarness.key) == ["(00:L,FF,7F,012C)"])
            // Bare ON: the last warm/cool with default_timeout_ms.
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","transaction":"bare"}"#)
            try await h.expectResult("key_light", "bare", "ok")
            #expect(h.frames(NovaHarness.key).last == "(01:L,FF,7F,2710)")
            // brightness + color_temp → channels (the stronger carries the brightness).
            h.probe.publish("\(h.topic("key_light"))/set", "ON")   // bare ON, once more
            try await h.waitState("key_light", "lit by bare ON") { $0["lit"] == true }
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","brightness":50,"color_temp":6500,"transaction":"mix"}"#)
            try await h.expectResult("key_light", "mix", "ok")
            try await h.waitState("key_light", "cool half") { $0["warm"] == 0 && $0["cool"] == 128 && $0["brightness"] == 50 && $0["color_temp"] == 6500 }
            #expect(h.frames(NovaHarness.key).suffix(2) == ["(02:L,FF,7F,2710)", "(03:L,00,80,2710)"])
        }
    }

    @Test func lowPWMIsRaisedUnlessAllowed() async throws {
        try await NovaHarness.with { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","preset":"gentle","transaction":"g"}"#)
            try await h.expectResult("key_light", "g", "ok")
            #expect(h.frames(NovaHarness.key) == ["(00:L,40,40,2710)"])
            try await h.probe.waitFor("a log line about the raised PWM") { ms in
                ms.contains { $0.topic == "\(h.base)/bridge/log" && $0.payload.contains("raised to 64") }
            }

            try await NovaHarness.with(yaml: "  allow_low_pwm: true") { allowed in
                try await allowed.waitState("key_light", "ready") { $0["status"] == "ready" }
                allowed.probe.publish("\(allowed.topic("key_light"))/set", #"{"state":"ON","warm":31,"cool":31,"transaction":"g"}"#)
                try await allowed.expectResult("key_light", "g", "ok")
                #expect(allowed.frames(NovaHarness.key) == ["(00:L,1F,1F,2710)"])
            }
        }
    }

    @Test func aMissingAckFailsTheCommandWithoutDroppingTheLink() async throws {
        try await NovaHarness.with(ackTimeout: 0.4) { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            h.radio.peripheral(NovaHarness.key)?.setDropAcks(true)
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","transaction":"lost"}"#)
            let r = try await h.result("key_light", "lost")
            #expect(r["status"] == "error" && r["error"]?.stringValue?.contains("no ack") == true)
            try await h.waitState("key_light", "unlit, still ready") { $0["lit"] == false && $0["status"] == "ready" }
            // The link carries on: the next command is acked.
            h.radio.peripheral(NovaHarness.key)?.setDropAcks(false)
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"OFF","transaction":"next"}"#)
            try await h.expectResult("key_light", "next", "ok")
            #expect(h.radio.connects == 1)
        }
    }

    @Test func aBadAckOrALostLinkDisconnectsAndAutoConnectComesBack() async throws {
        // One flash: with a second one in range, auto-connect may rightly take that one while this
        // one has not advertised again yet.
        try await NovaHarness.with(flashes: [NovaHarness.key: -50]) { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            // The flash drops the link: warning, status available, then auto-connect reconnects.
            h.probe.clear()
            h.radio.dropLink(NovaHarness.key)
            try await h.probe.waitFor("link lost on bridge/log") { ms in
                ms.contains { $0.topic == "\(h.base)/bridge/log" && $0.payload.contains("link to key_light lost") }
            }
            try await h.waitState("key_light", "available after the loss") { $0["status"] == "available" }
            // A state said "ready" before the loss was noticed may come after the clear (an RSSI update):
            // the reconnect is read from the radio, then from the latest state (as after the bad ack below).
            try await waitUntil("auto-connect connects again") { h.radio.connects == 2 }
            try await h.probe.waitFor("ready again") { ms in
                ms.last { $0.topic == h.topic("key_light") }.flatMap { try? JSONValue.parse($0.payload) }?["status"] == "ready"
            }
            #expect(h.radio.connects == 2)
            // A malformed ack: disconnected as the SDK does.
            h.probe.clear()
            h.radio.peripheral(NovaHarness.key)?.setBadAck(true)
            h.probe.publish("\(h.topic("key_light"))/set", #"{"state":"ON","transaction":"bad"}"#)
            try await h.expectResult("key_light", "bad", "error")
            try await h.probe.waitFor("malformed ack on bridge/log") { ms in
                ms.contains { $0.topic == "\(h.base)/bridge/log" && $0.payload.contains("malformed ack") }
            }
            // The command's own state updates also say "ready" (before the disconnect), so the reconnect
            // is read from the radio and then from the latest state.
            try await h.waitState("key_light", "available after the bad ack") { $0["status"] == "available" }
            try await waitUntil("auto-connect connects again") { h.radio.connects == 3 }
            try await h.probe.waitFor("ready again after the bad ack") { ms in
                ms.last { $0.topic == h.topic("key_light") }.flatMap { try? JSONValue.parse($0.payload) }?["status"] == "ready"
            }
            #expect(h.radio.connects == 3)
        }
    }

    @Test func unknownRSSIStillConnectsAndAnUnheardFlashBecomesUnavailable() async throws {
        // Virtual controllers report 127: signal null, ranked after known signals, not held back by min_signal.
        try await NovaHarness.with(yaml: "  auto_connect: {min_signal: 90, max_flashes: 2}",
                                            flashes: [NovaHarness.key: nil, NovaHarness.fill: -80]) { h in
            let s = try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            #expect(s["signal"] == .null && s["rssi"] == .null)
            // −80 dBm is 20 %, under min_signal 90: not connected.
            let weak = try await h.waitState("nova_d03972aabb02", "heard") { $0["status"] == "available" }
            #expect(weak["signal"] == 20)
            h.radio.setInRange(NovaHarness.fill, false)
            try await h.waitState("nova_d03972aabb02", "unavailable after 3 periods") { $0["status"] == "unavailable" && $0["signal"] == .null }
            try await h.probe.waitFor(topic: "\(h.topic("nova_d03972aabb02"))/availability", payload: "offline")
            // The connected flash does not advertise, and is never aged out: more than 3 scan periods later
            // (counted in the radio's scans) it is still ready.
            let scans = h.radio.scans
            try await waitUntil("4 more scans") { h.radio.scans >= scans + 4 }
            #expect(h.probe.last(h.topic("key_light")).map { $0.contains("\"ready\"") } == true)
            #expect(h.radio.connects == 1, "\(h.probe.messages(on: "\(h.base)/bridge/log").map(\.payload))")
        }
    }

    @Test func manualDisconnectAndConnectAndPausingTheScan() async throws {
        try await NovaHarness.with { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            h.probe.publish("\(h.topic("key_light"))/set", #"{"connect":false,"transaction":"d"}"#)
            try await h.expectResult("key_light", "d", "ok")
            try await h.waitState("key_light", "disconnected") { $0["status"] == "available" }
            // With the stronger flash held off, auto-connect takes the next one.
            try await h.waitState("nova_d03972aabb02", "auto-connected instead") { $0["status"] == "ready" }
            h.probe.publish("\(h.topic("key_light"))/set", #"{"connect":true,"transaction":"c"}"#)
            try await h.expectResult("key_light", "c", "ok")
            try await h.waitState("key_light", "connected by hand") { $0["status"] == "ready" }

            h.probe.publish("\(h.base)/bridge/request/nova/scan", #"{"enabled":false,"transaction":"p"}"#)
            let resp = try await h.probe.waitFor("scan paused") { ms in
                ms.contains { $0.topic == "\(h.base)/bridge/response/nova/scan" && $0.payload.contains("\"p\"") }
            }
            let body = try JSONValue.parse(resp.last { $0.topic == "\(h.base)/bridge/response/nova/scan" }!.payload)
            #expect(body["status"] == "ok" && body["data"]?["scanning"] == false)
            let scans = h.radio.scans
            // Several scan periods (0.25 s) pass while the RSSI of the two links is read twice (every second).
            let reads = h.radio.rssiReads
            try await waitUntil("two rounds of RSSI reads") { h.radio.rssiReads >= reads + 4 }
            #expect(h.radio.scans <= scans + 1)   // at most the window already under way
        }
    }

    @Test func anAdapterFailureIsReportedAndRecoveredWithoutARestart() async throws {
        try await NovaHarness.with { h in
            try await h.waitState("key_light", "ready") { $0["status"] == "ready" }
            h.radio.setFailure(BluetoothFailure(.noAdapter, "no Bluetooth adapter hci0 (see `hciconfig -a`; set nova.adapter); retrying"))
            let info = "\(h.base)/bridge/info"
            try await h.probe.waitFor("error in bridge/info") { ms in
                ms.contains { $0.topic == info && $0.payload.contains("error: no Bluetooth adapter hci0") }
            }
            h.radio.setFailure(nil)
            try await h.probe.waitFor("running again") { ms in
                ms.last { $0.topic == info }.map { $0.payload.contains(#""nova":"running""#) || $0.payload.contains(#""nova" : "running""#) } == true
            }
        }
    }
}
