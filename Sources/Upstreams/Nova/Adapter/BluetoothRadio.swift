import CBluetooth
import SwitchyardCore
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// What the flash service needs from Bluetooth: bounded scan windows, one LE ATT connection at a time
/// and the connection RSSI. `HCIRadio` does it with libbluetooth on a kernel adapter; tests and the
/// demo use a simulated radio whose connections are socketpairs to a simulated Nova.
public protocol NovaRadio: Sendable {
    /// Scans for `duration` seconds (active, duplicates kept for RSSI samples) and returns what was heard.
    func scan(duration: Double, intervalMs: Double, windowMs: Double) async throws -> ScanResult
    /// An ATT bearer to the peer: a connected SOCK_SEQPACKET descriptor the caller owns.
    func connect(address: String, addressType: UInt8, timeout: Double) async throws -> Int32
    /// The RSSI of the connection `link` runs on, in dBm; nil when the controller does not know (127),
    /// cannot say, or the link has closed.
    func connectionRSSI(of link: ATTClient) async -> Int?
}

public struct ScanResult: Sendable {
    public var reports: [AdvertisingReport]
    /// Something the user should know that did not stop the scan (another scanner holds the controller).
    public var note: String?
    public init(reports: [AdvertisingReport], note: String? = nil) {
        self.reports = reports
        self.note = note
    }
}

/// A Bluetooth problem in words a user can act on. `kind` tells the flash service whether waiting
/// can help (an adapter that is down or gone comes back; a kernel without Bluetooth does not).
public struct BluetoothFailure: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable { case unsupported, permission, noAdapter, adapterDown, other }
    public var kind: Kind
    public var message: String
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
    public var description: String { message }

    /// The failure an errno stands for, with the fix.
    static func errno(_ e: Int32, adapter: String, doing what: String) -> BluetoothFailure {
        switch e {
        case EAFNOSUPPORT:
            return BluetoothFailure(.unsupported, "the kernel has no Bluetooth support (\(what): EAFNOSUPPORT); load the bluetooth "
                + "module, and in a container use the host's network (--network host): Bluetooth sockets exist only there")
        case ENODEV:
            return BluetoothFailure(.noAdapter, "no Bluetooth adapter \(adapter) (see `hciconfig -a`; set nova.adapter); retrying")
        case ENETDOWN:
            return BluetoothFailure(.adapterDown, "Bluetooth adapter \(adapter) is down (`bluetoothctl power on` or `hciconfig \(adapter) up`); retrying")
        case EPERM, EACCES:
            return BluetoothFailure(.permission, "no permission for LE commands on \(adapter) (\(what)): grant CAP_NET_RAW, e.g. "
                + "`setcap cap_net_raw+eip $(which switchyard)` or AmbientCapabilities=CAP_NET_RAW in the systemd unit")
        default:
            return BluetoothFailure(.other, "\(what) on \(adapter) failed: \(String(cString: strerror(e)))")
        }
    }
}

/// Runs blocking socket work on its own thread, off the concurrency pool.
package func onThread<T: Sendable>(_ name: String, _ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
        OSThread.start(name) { c.resume(with: Result { try body() }) }
    }
}

/// A raw HCI socket on one adapter that sends commands and reads their status itself (never
/// `hci_send_req`, which turns every HCI status into EIO and swallows advertising reports,
/// docs/upstreams/nova.md §3.3): one loop reads Command Complete/Status by opcode and LE meta events alike.
package final class HCISocket {
    package let dd: Int32
    let devID: Int32
    let adapter: String

    package init(adapter: String) throws(BluetoothFailure) {
        self.adapter = adapter
        errno = 0
        let id = hci_devid(adapter)
        if id < 0 { throw BluetoothFailure.errno(errno == 0 ? ENODEV : errno, adapter: adapter, doing: "opening the adapter") }
        let dd = hci_open_dev(id)
        if dd < 0 { throw BluetoothFailure.errno(errno, adapter: adapter, doing: "opening the adapter") }
        self.dd = dd
        self.devID = id
        var f = hci_filter()
        hci_filter_clear(&f)
        hci_filter_set_ptype(Int32(HCI_EVENT_PKT), &f)
        hci_filter_set_event(Int32(EVT_CMD_COMPLETE), &f)
        hci_filter_set_event(Int32(EVT_CMD_STATUS), &f)
        hci_filter_set_event(Int32(EVT_LE_META_EVENT), &f)
        if setsockopt(dd, Int32(SOL_HCI), Int32(HCI_FILTER), &f, socklen_t(MemoryLayout<hci_filter>.size)) < 0 {
            let e = errno
            hci_close_dev(dd)
            throw BluetoothFailure.errno(e, adapter: adapter, doing: "setting the HCI filter")
        }
    }

    deinit { hci_close_dev(dd) }

    /// The adapter's own address.
    package var address: bdaddr_t {
        var a = bdaddr_t()
        _ = hci_devba(devID, &a)
        return a
    }

    /// Sends an H:4 command packet and waits (bounded) for its Command Complete or Command Status;
    /// other events read meanwhile go to `onEvent`. Returns the HCI status and return parameters.
    package func command(_ packet: [UInt8], timeout: Double = 2, name: String, onEvent: ([UInt8]) -> Void = { _ in }) throws(BluetoothFailure) -> (status: UInt8, parameters: [UInt8]) {
        let opcode = UInt16(packet[1]) | UInt16(packet[2]) << 8
        let written = packet.withUnsafeBytes { write(dd, $0.baseAddress, $0.count) }
        if written != packet.count { throw BluetoothFailure.errno(errno, adapter: adapter, doing: name) }
        let clock = SystemClock()
        let deadline = clock.now().adding(seconds: timeout)
        while true {
            let left = (deadline - clock.now()).seconds
            if left <= 0 { throw BluetoothFailure(.other, "\(name) on \(adapter): no answer from the controller within \(timeout) s") }
            guard let e = try readEvent(timeoutMs: Int32(left * 1000)) else { continue }
            if let cc = HCIAdvertising.commandComplete(e), cc.opcode == opcode { return (cc.status, Array(e.dropFirst(7))) }
            if e.count >= 7, e[1] == 0x0F, UInt16(e[5]) | UInt16(e[6]) << 8 == opcode, e[3] != 0 { return (e[3], []) }
            onEvent(e)
        }
    }

    /// One event (`04 code len …`), or nil when nothing came in time.
    package func readEvent(timeoutMs: Int32) throws(BluetoothFailure) -> [UInt8]? {
        var p = pollfd(fd: dd, events: Int16(POLLIN), revents: 0)
        let r = poll(&p, 1, max(0, timeoutMs))
        if r == 0 { return nil }
        if r < 0 {
            if errno == EINTR { return nil }
            throw BluetoothFailure.errno(errno, adapter: adapter, doing: "reading events")
        }
        var buf = [UInt8](repeating: 0, count: Int(HCI_MAX_EVENT_SIZE))
        let n = read(dd, &buf, buf.count)
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { return nil }
            throw BluetoothFailure.errno(errno, adapter: adapter, doing: "reading events")
        }
        return Array(buf[0..<n])
    }

    /// Read Local Supported Commands: whether LE Set Extended Scan Parameters/Enable exist
    /// (octet 37 bits 5 and 6), so scanning speaks the same flavour as the kernel.
    func supportsExtendedScan() -> Bool {
        guard let r = try? command([0x01, 0x02, 0x10, 0x00], name: "Read Local Supported Commands"), r.status == 0,
              r.parameters.count > 37 else { return false }
        return r.parameters[37] & 0x60 == 0x60
    }
}

/// Nova scanning and connecting on a kernel adapter through libbluetooth (docs/upstreams/nova.md §3.3–3.7).
/// A scan opens the adapter, sets active scanning with duplicates kept, reads reports for the window
/// and disables scanning again, so the kernel has the controller to itself for connections; opening
/// per scan is also what recovers an adapter that was reset, unplugged or powered down meanwhile.
public struct HCIRadio: NovaRadio {
    public let adapter: String
    public init(adapter: String) { self.adapter = adapter }

    static let commandDisallowed: UInt8 = 0x0C

    public func scan(duration: Double, intervalMs: Double, windowMs: Double) async throws -> ScanResult {
        let adapter = self.adapter
        return try await onThread("nova-scan") { () throws(BluetoothFailure) -> ScanResult in
            let s = try HCISocket(adapter: adapter)
            var reports: [AdvertisingReport] = []
            let collect = { (e: [UInt8]) in reports += HCIAdvertising.reports(e) }
            let interval = UInt16(max(4, min(0x4000, (intervalMs / 0.625).rounded())))
            let window = min(interval, UInt16(max(4, min(0x4000, (windowMs / 0.625).rounded()))))
            let extended = s.supportsExtendedScan()
            let params = extended ? HCIAdvertising.setExtendedScanParameters(active: true, interval: interval, window: window)
                : HCIAdvertising.setScanParameters(active: true, interval: interval, window: window)
            let enable = extended ? HCIAdvertising.setExtendedScanEnable(true) : HCIAdvertising.setScanEnable(true)
            let disable = extended ? HCIAdvertising.setExtendedScanEnable(false) : HCIAdvertising.setScanEnable(false)
            var note: String?
            let p = try s.command(params, name: "LE Set Scan Parameters", onEvent: collect)
            var enabled = false
            if p.status == Self.commandDisallowed {
                note = "the controller refused our scan settings (Command Disallowed: another scanner such as bluetoothd is active); listening to its reports and retrying every scan period"
            } else if p.status != 0 {
                throw BluetoothFailure(.other, "LE Set Scan Parameters on \(adapter) failed: HCI status 0x\(NovaCodec.hex(Int(p.status), 2))")
            } else {
                let e = try s.command(enable, name: "LE Set Scan Enable", onEvent: collect)
                if e.status == Self.commandDisallowed {
                    note = "the controller refused to start our scan (Command Disallowed: another scanner is active); listening to its reports and retrying every scan period"
                } else if e.status != 0 {
                    throw BluetoothFailure(.other, "LE Set Scan Enable on \(adapter) failed: HCI status 0x\(NovaCodec.hex(Int(e.status), 2))")
                } else {
                    enabled = true
                }
            }
            let clock = SystemClock()
            let deadline = clock.now().adding(seconds: duration)
            while clock.now() < deadline {
                if let e = try s.readEvent(timeoutMs: Int32((deadline - clock.now()).seconds * 1000) + 1) { collect(e) }
            }
            // Command Disallowed on disable means it is already off (BCM43455 and others): fine.
            if enabled { _ = try? s.command(disable, name: "LE Set Scan Enable (off)", onEvent: collect) }
            return ScanResult(reports: reports, note: note)
        }
    }

    public func connect(address: String, addressType: UInt8, timeout: Double) async throws -> Int32 {
        let adapter = self.adapter
        return try await onThread("nova-connect") { () throws(BluetoothFailure) -> Int32 in
            let local: bdaddr_t
            do {
                local = try HCISocket(adapter: adapter).address
            }
            let sk = socket(AF_BLUETOOTH, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_L2CAP)
            if sk < 0 { throw BluetoothFailure.errno(errno, adapter: adapter, doing: "creating an L2CAP socket") }
            func fail(_ what: String) -> BluetoothFailure {
                let e = errno
                close(sk)
                return e == EHOSTDOWN || e == ETIMEDOUT || e == ECONNREFUSED || e == EBUSY || e == ECONNRESET
                    ? BluetoothFailure(.other, "\(what) \(address) failed: \(String(cString: strerror(e)))")
                    : BluetoothFailure.errno(e, adapter: adapter, doing: "\(what) \(address)")
            }
            var src = sockaddr_l2()
            src.l2_family = sa_family_t(AF_BLUETOOTH)
            src.l2_cid = 4                              // ATT fixed channel (little-endian host: htobs is a no-op)
            src.l2_bdaddr = local
            src.l2_bdaddr_type = UInt8(BDADDR_LE_PUBLIC)
            let bound = withUnsafePointer(to: &src) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sk, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
            }
            if bound < 0 { throw fail("binding for") }
            var sec = bt_security(level: UInt8(BT_SECURITY_LOW), key_size: 0)
            _ = setsockopt(sk, Int32(SOL_BLUETOOTH), Int32(BT_SECURITY), &sec, socklen_t(MemoryLayout<bt_security>.size))
            var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1_000_000))
            _ = setsockopt(sk, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
            var dst = sockaddr_l2()
            dst.l2_family = sa_family_t(AF_BLUETOOTH)
            dst.l2_cid = 4
            _ = str2ba(address, &dst.l2_bdaddr)
            // The advertising report says 0 public / 1 random; L2CAP wants BDADDR_LE_PUBLIC (1) / BDADDR_LE_RANDOM (2).
            dst.l2_bdaddr_type = addressType == 0 ? UInt8(BDADDR_LE_PUBLIC) : UInt8(BDADDR_LE_RANDOM)
            let connected = withUnsafePointer(to: &dst) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(sk, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
            }
            if connected < 0 { throw fail("connecting to") }
            return sk
        }
    }

    public func connectionRSSI(of link: ATTClient) async -> Int? {
        let adapter = self.adapter
        // The connection's HCI handle, read while the link's descriptor is certainly open.
        let handle = link.withOpenDescriptor { fd -> UInt16? in
            var ci = l2cap_conninfo()
            var len = socklen_t(MemoryLayout<l2cap_conninfo>.size)
            guard getsockopt(fd, Int32(SOL_L2CAP), Int32(L2CAP_CONNINFO), &ci, &len) == 0 else { return nil }
            return ci.hci_handle
        } ?? nil
        guard let handle else { return nil }
        return try? await onThread("nova-rssi") { () -> Int? in
            let id = hci_devid(adapter)
            guard id >= 0 else { return nil }
            let dd = hci_open_dev(id)
            guard dd >= 0 else { return nil }
            defer { hci_close_dev(dd) }
            var rssi: Int8 = 127
            guard hci_read_rssi(dd, handle, &rssi, 1000) == 0, rssi != 127 else { return nil }
            return Int(rssi)
        }
    }
}
