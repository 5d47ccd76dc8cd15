import Foundation
import LIFXSimulators
import SwitchyardTestSupport

extension SwitchyardBench {
    /// `lifx-lan`: a light on a loopback UDP peer (the LAN simulator). Without loss, `/set` published → the
    /// SetColor datagram read by the peer, commands spaced past the 20-a-second limit (so the pacing is not
    /// measured); then with 30 % of the requests lost on arrival, the SetColor datagrams each command took
    /// (at most 5: retries after 0.2, 0.3, 0.5, 1 s) and how many ended in a time-out. Baselines, in the same
    /// run: a bare UDP datagram from this process to the same peer, and one raw MQTT hop (publish → a
    /// subscriber's read), each command's ratio taken to the hop measured before it after the same idle gap.
    func lifxLANFigures(port: Int) async throws -> [Figure] {
        let serial = "d073d5ff0001"
        let sim = try LIFXLANSimulator.start(devices: [LIFXLANSimulator.Device(serial: serial, label: "Bench LAN", product: 27)])
        defer { sim.stop() }
        var arrivals = sim.arrivals.makeAsyncIterator()
        func nextArrival(_ type: UInt16) async throws -> LIFXLANSimulator.Arrival {
            while let a = await arrivals.next() { if a.type == type { return a } }
            throw BenchError("lifx-lan: the simulator stopped")
        }
        // Baseline: a raw datagram (an unknown type, answered with StateUnhandled) → the peer's read.
        let raw = try RawUDP(port: sim.port)
        defer { raw.close() }
        var baseline: [Double] = []
        for _ in 0..<200 {
            let t0 = DispatchTime.now().uptimeNanoseconds
            raw.send(type: 9999)
            baseline.append(Double(try await nextArrival(9999).nanos - t0) / 1e6)
        }
        let base = "lan\(UUID().uuidString.prefix(4).lowercased())"
        let lifx = try adapter("lifx: {min_interval: 0, lan: {enabled: true, hosts: [\"127.0.0.1:\(sim.port)\"], broadcast: [], poll_interval: 3600}}")
        let n = max(50, min(commands, 2_000)), lossy = max(20, min(commands / 10, 300))
        var mqttHop: [Double] = [], backToBack: [Double] = []
        let (samples, datagrams, timeouts) = try await withBridge(port: port, base: base, adapter: lifx) { _ -> ([Double], Int, Int) in
            let topic = "\(base)/lifx/bench_lan"
            let sub = try await CountingSubscriber(port: port, filters: [topic, "\(topic)/result"], trackTopics: true)
            defer { sub.close() }
            guard await sub.waitUntil(timeout: 30, { $0.topics[topic]?.contains(#""via":"lan""#) == true }) else {
                throw BenchError("lifx-lan: the light was not found on the LAN")
            }
            let pub = try await MQTTProbe.connect(port: port)
            defer { pub.close() }
            // Baseline for the bridge's share: one MQTT hop (publish → a subscriber's read, stamped on arrival),
            // back to back, and spaced as the commands are (below).
            let hop = try await CountingSubscriber(port: port, filters: ["\(base)/hop"], trackTopics: true)
            defer { hop.close() }
            func hopTime(_ tag: String) async throws -> Double {
                let arrived = await hop.expect(topic: "\(base)/hop", containing: "#\(tag)#", timeout: 5)
                let t0 = Date()
                pub.publish("\(base)/hop", "#\(tag)#")
                guard await arrived.value else { throw BenchError("lifx-lan: the MQTT hop lost message \(tag)") }
                return hop.lastArrival.timeIntervalSince(t0) * 1000
            }
            for i in 0..<200 { backToBack.append(try await hopTime("b\(i)")) }
            try await Task.sleep(for: .milliseconds(60))
            var samples: [Double] = []
            for i in 0..<n {
                // A hop after the same idle gap as each command: on this machine a message that wakes idle
                // threads takes several times as long as one that follows another at once.
                mqttHop.append(try await hopTime("s\(i)"))
                try await Task.sleep(for: .milliseconds(60))
                let t0 = DispatchTime.now().uptimeNanoseconds
                pub.publish("\(topic)/set", #"{"brightness": \#(1 + i % 99), "transition": 0}"#)
                samples.append(Double(try await nextArrival(102).nanos - t0) / 1e6)
                try await Task.sleep(for: .milliseconds(60))   // past the 50 ms spacing of 20 datagrams a second
            }
            sim.setLoss(0.3)
            let before = sim.received(102)
            var timeouts = 0
            for i in 0..<lossy {
                let done = await sub.expect(topic: "\(topic)/result", containing: #""transaction":"l\#(i)""#, timeout: 15)
                pub.publish("\(topic)/set", #"{"brightness": \#(1 + i % 99), "transition": 0, "transaction": "l\#(i)"}"#)
                guard await done.value else { throw BenchError("lifx-lan: command \(i) under loss got no result") }
                if sub.lastPayload("\(topic)/result")?.contains(#""status":"ok""#) != true { timeouts += 1 }
            }
            sim.setLoss(0)
            // Every SetColor datagram that reached the peer meanwhile, lost or answered.
            let datagrams = sim.received(102) - before
            return (samples, datagrams, timeouts)
        }
        func pct(_ s: [Double], _ p: Double) -> Double { let s = s.sorted(); return s[min(s.count - 1, Int(Double(s.count) * p))] }
        let hop50 = pct(mqttHop, 0.5), hop99 = pct(mqttHop, 0.99)
        return [
            Figure(scenario: "lifx-lan", name: "baseline: raw UDP datagram → peer p50", value: pct(baseline, 0.5), unit: "ms"),
            Figure(scenario: "lifx-lan", name: "raw MQTT publish → subscriber, back to back, p50", value: pct(backToBack, 0.5), unit: "ms"),
            Figure(scenario: "lifx-lan", name: "raw MQTT publish → subscriber, back to back, p99", value: pct(backToBack, 0.99), unit: "ms"),
            Figure(scenario: "lifx-lan", name: "baseline: raw MQTT publish → subscriber, spaced as the commands, p50", value: hop50, unit: "ms"),
            Figure(scenario: "lifx-lan", name: "baseline: raw MQTT publish → subscriber, spaced as the commands, p99", value: hop99, unit: "ms"),
            Figure(scenario: "lifx-lan", name: "/set → SetColor at the UDP peer p50", value: pct(samples, 0.5), unit: "ms", ratio: pct(samples, 0.5) / hop50),
            Figure(scenario: "lifx-lan", name: "/set → SetColor at the UDP peer p99", value: pct(samples, 0.99), unit: "ms", ratio: pct(samples, 0.99) / hop99),
            Figure(scenario: "lifx-lan", name: "/set → SetColor at the UDP peer max", value: samples.max() ?? 0, unit: "ms"),
            Figure(scenario: "lifx-lan", name: "SetColor datagrams per command, 30 % lost (\(lossy) commands)",
                   value: Double(datagrams) / Double(lossy), unit: "dgram"),
            Figure(scenario: "lifx-lan", name: "commands ok under 30 % loss (the rest timed out after 5)", value: 100 * Double(lossy - timeouts) / Double(lossy), unit: "%"),
        ]
    }
}

/// A bare UDP socket to the simulator: the baseline's sender.
final class RawUDP: @unchecked Sendable {
    let fd: Int32
    var addr = sockaddr_in()

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("no UDP socket") }
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    }

    /// A 36-byte LIFX header of `type`, as any client would send it.
    func send(type: UInt16) {
        var d = [UInt8](repeating: 0, count: 36)
        d[0] = 36; d[2] = 0x00; d[3] = 0x34; d[4] = 7; d[32] = UInt8(type & 0xFF); d[33] = UInt8(type >> 8)
        _ = d.withUnsafeBytes { b in
            withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, b.baseAddress, b.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
    }

    func close() { Glibc.close(fd) }
}
