import CBluetooth
import Foundation
import Glibc
import NovaAdapter

/// A simulated Nova on a kernel Bluetooth adapter (a second controller, e.g. a `btvirt` virtual one):
/// it advertises as TI's sample peripheral does (flags and the FFF0 UUID list in the advertisement,
/// the name "Nova" in the scan response, so the scanner must merge the two), listens on the ATT fixed
/// channel (L2CAP CID 4) and serves each connection with `NovaATTPeripheral`, advertising again when
/// the central goes away. Needs root (or CAP_NET_RAW) for the advertising commands.
public enum NovaHCIPeripheral {
    /// 31-byte advertising or scan-response payload command (`len`, data, zero padding).
    static func dataCommand(ocf: UInt8, _ data: [UInt8]) -> [UInt8] {
        [0x01, ocf, 0x20, 32, UInt8(data.count)] + data + [UInt8](repeating: 0, count: 31 - data.count)
    }

    static func advertise(_ s: HCISocket) throws {
        let commands: [(String, [UInt8])] = [
            // 100 ms ADV_IND, own public address, all three channels, no filter.
            ("LE Set Advertising Parameters", [0x01, 0x06, 0x20, 15] + HCIAdvertising.le16(0x00A0) + HCIAdvertising.le16(0x00A0) + [0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0x07, 0x00]),
            ("LE Set Advertising Data", dataCommand(ocf: 0x08, [0x02, 0x01, 0x06, 0x03, 0x03, 0xF0, 0xFF])),
            ("LE Set Scan Response Data", dataCommand(ocf: 0x09, [0x05, 0x09] + Array("Nova".utf8))),
            ("LE Set Advertising Enable", [0x01, 0x0A, 0x20, 0x01, 0x01]),
        ]
        for (name, bytes) in commands {
            let r = try s.command(bytes, name: name)
            // 0x0C on enable: already advertising.
            if r.status != 0 && !(r.status == 0x0C && bytes[1] == 0x0A) {
                throw BluetoothFailure(.other, "\(name) failed: HCI status 0x\(String(r.status, radix: 16))")
            }
        }
    }

    /// Serves until `duration` seconds have passed. `log` gets one line per event (`listening`,
    /// `connected`, `frame (00:L,FF,FF,2710)`, `disconnected`).
    public static func serve(adapter: String, ackDelay: Double, duration: Double, log: @escaping @Sendable (String) -> Void) throws {
        let hci = try HCISocket(adapter: adapter)
        let sk = socket(AF_BLUETOOTH, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), BTPROTO_L2CAP)
        guard sk >= 0 else { throw BluetoothFailure(.other, "L2CAP socket: \(String(cString: strerror(errno)))") }
        defer { close(sk) }
        var addr = sockaddr_l2()
        addr.l2_family = sa_family_t(AF_BLUETOOTH)
        addr.l2_cid = 4
        addr.l2_bdaddr = hci.address
        addr.l2_bdaddr_type = UInt8(BDADDR_LE_PUBLIC)
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sk, $0, socklen_t(MemoryLayout<sockaddr_l2>.size)) }
        }
        guard bound == 0, listen(sk, 1) == 0 else { throw BluetoothFailure(.other, "L2CAP bind/listen on \(adapter): \(String(cString: strerror(errno)))") }
        try advertise(hci)
        let own = HCIAdvertising.address(withUnsafeBytes(of: hci.address.b) { Array($0) })
        log("listening on \(adapter) \(own) as Nova")
        let deadline = Date().addingTimeInterval(duration)
        while deadline.timeIntervalSinceNow > 0 {
            var p = pollfd(fd: sk, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 500) > 0 else { continue }
            let fd = accept(sk, nil, nil)
            guard fd >= 0 else { continue }
            log("connected")
            let nova = NovaATTPeripheral(fd: fd, ackDelay: ackDelay, onFrame: { log("frame \($0)") })
            while nova.isOpen && deadline.timeIntervalSinceNow > 0 { usleep(100_000) }
            nova.close()
            log("disconnected")
            try advertise(hci)
        }
    }
}
