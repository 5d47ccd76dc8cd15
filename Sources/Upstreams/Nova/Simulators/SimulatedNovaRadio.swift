import CBluetooth
import Foundation
import Glibc
import NovaAdapter
import SwitchyardCore

/// A radio with simulated Nova flashes in range, for tests and `switchyard demo`. A scan window
/// yields real HCI LE Advertising Report events (ADV_IND with flags, the FFF0 UUID list and the name
/// "Nova", RSSI byte; 3 samples per flash), decoded by the same parser as a kernel adapter's; a
/// connection is a SOCK_SEQPACKET socketpair with a `NovaATTPeripheral` on the far end. Knobs: a flash
/// in or out of range, its RSSI, refusing connections, dropping a link, and an adapter failure.
public final class SimulatedNovaRadio: NovaRadio {
    struct Flash {
        var addressType: UInt8 = 0
        var rssi: Int?
        var inRange = true
        var refuse = false
        var peripheral: NovaATTPeripheral?
        var centralFD: Int32 = -1
        /// Connected now (the simulated flash stops advertising while connected).
        var linked: Bool { peripheral?.isOpen == true }
    }

    struct State {
        var flashes: [String: Flash] = [:]
        var failure: BluetoothFailure?
        var scans = 0
        var connects = 0
        var rssiReads = 0
    }

    let state = Locked(State())
    let ackDelay: Double

    /// `flashes`: address → advertised RSSI (nil = 127, as virtual controllers report).
    public init(flashes: [String: Int?], ackDelay: Double = 0.02) {
        self.ackDelay = ackDelay
        state.withLock { s in for (a, r) in flashes { s.flashes[a.uppercased()] = Flash(rssi: r) } }
    }

    public var scans: Int { state.withLock { $0.scans } }
    public var connects: Int { state.withLock { $0.connects } }
    /// Connection RSSI reads so far (the flash service reads each link's every second).
    public var rssiReads: Int { state.withLock { $0.rssiReads } }
    /// The simulated flash on the current (or last) link.
    public func peripheral(_ address: String) -> NovaATTPeripheral? { state.withLock { $0.flashes[address.uppercased()]?.peripheral } }
    public func setInRange(_ address: String, _ inRange: Bool) { state.withLock { $0.flashes[address.uppercased()]?.inRange = inRange } }
    public func setRSSI(_ address: String, _ rssi: Int?) { state.withLock { $0.flashes[address.uppercased()]?.rssi = rssi } }
    public func setRefuse(_ address: String, _ refuse: Bool) { state.withLock { $0.flashes[address.uppercased()]?.refuse = refuse } }
    public func setFailure(_ f: BluetoothFailure?) { state.withLock { $0.failure = f } }
    /// The flash ends the link (as when it is switched off).
    public func dropLink(_ address: String) {
        state.withLock { $0.flashes[address.uppercased()]?.peripheral }?.close()
    }

    /// `04 3E len 02 01 | ADV_IND | addr type | addr (LE) | len | AD… | rssi`.
    public static func advertisingReport(address: String, addressType: UInt8, rssi: Int?, name: String = "Nova") -> [UInt8] {
        let addr = address.split(separator: ":").reversed().map { UInt8($0, radix: 16) ?? 0 }
        let nameBytes = Array(name.utf8)
        let ad: [UInt8] = [0x02, 0x01, 0x06, 0x03, 0x03, 0xF0, 0xFF, UInt8(nameBytes.count + 1), 0x09] + nameBytes
        let body: [UInt8] = [0x02, 0x01, 0x00, addressType] + addr + [UInt8(ad.count)] + ad + [UInt8(bitPattern: Int8(clamping: rssi ?? 127))]
        return [0x04, 0x3E, UInt8(body.count)] + body
    }

    public func scan(duration: Double, intervalMs: Double, windowMs: Double) async throws -> ScanResult {
        if let f = state.withLock({ $0.failure }) { throw f }
        try await Task.sleep(for: .seconds(duration))
        let events = state.withLock { s -> [[UInt8]] in
            s.scans += 1
            return s.flashes.sorted { $0.key < $1.key }.filter { $0.value.inRange && !$0.value.linked }.flatMap { a, f in
                (0..<3).map { _ in Self.advertisingReport(address: a, addressType: f.addressType, rssi: f.rssi) }
            }
        }
        return ScanResult(reports: events.flatMap(HCIAdvertising.reports))
    }

    public func connect(address: String, addressType: UInt8, timeout: Double) async throws -> Int32 {
        if let f = state.withLock({ $0.failure }) { throw f }
        let a = address.uppercased()
        let ok = state.withLock { s -> Bool in
            guard let f = s.flashes[a], f.inRange, !f.refuse, !f.linked else { return false }
            return true
        }
        guard ok else {
            try await Task.sleep(for: .milliseconds(50))
            throw BluetoothFailure(.other, "connecting to \(a) failed: Host is down")
        }
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else {
            throw BluetoothFailure(.other, "socketpair: \(String(cString: strerror(errno)))")
        }
        let p = NovaATTPeripheral(fd: fds[1], ackDelay: ackDelay)
        state.withLock { s in
            s.flashes[a]?.peripheral = p
            s.flashes[a]?.centralFD = fds[0]
            s.connects += 1
        }
        return fds[0]
    }

    public func connectionRSSI(of link: ATTClient) async -> Int? {
        guard let fd = link.withOpenDescriptor({ $0 }) else { return nil }
        // The simulated link reports what the flash advertises.
        return state.withLock { s in
            s.rssiReads += 1
            return s.flashes.values.first { $0.linked && $0.centralFD == fd }?.rssi
        }
    }
}
