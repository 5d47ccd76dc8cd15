import Foundation
import SwitchyardCore

/// A Nova flash at the ATT level (docs/upstreams/nova.md §2.2, §3.5), on one end of a SOCK_SEQPACKET socket: a
/// GATT database laid out as in the spec's recorded exchange (GAP 0x0001–0x0003; FFF0 0x000C–0x0011
/// with FFF3 write at 0x000E, FFF4 notify at 0x0010 and its CCCD at 0x0011), MTU 23, Error Responses
/// for what it does not have, and the firmware: it acks `(ID:P|O|L,ww,cc,tttt)` written to FFF3 with
/// `(ID:A)` on FFF4 (if notifications are on), after `ackDelay`. It keeps what it was told, so tests
/// can check that the light is on. Knobs: drop acks, a malformed ack, close the link.
public final class NovaATTPeripheral: Sendable {
    public struct Light: Sendable, Equatable {
        public var warm: Int
        public var cool: Int
        public var timeoutMs: Int
        public init(warm: Int, cool: Int, timeoutMs: Int) {
            self.warm = warm
            self.cool = cool
            self.timeoutMs = timeoutMs
        }
    }

    struct State: Sendable {
        var notifications = false
        var light: Light?
        var received: [[UInt8]] = []
        var frames: [String] = []
        var dropAcks = false
        var badAck = false
        var closed = false
        var fdOpen = true
    }

    let fd: Int32
    let state = Locked(State())
    let ackDelay: Double

    let onFrame: (@Sendable (String) -> Void)?

    public init(fd: Int32, ackDelay: Double = 0.02, onFrame: (@Sendable (String) -> Void)? = nil) {
        self.fd = fd
        self.ackDelay = ackDelay
        self.onFrame = onFrame
        let t = Thread { [self] in loop() }
        t.name = "nova-att-peripheral"
        t.start()
    }

    /// Every PDU received from the central, in order.
    public var received: [[UInt8]] { state.withLock { $0.received } }
    public var frames: [String] { state.withLock { $0.frames } }
    public var light: Light? { state.withLock { $0.light } }
    public var notificationsOn: Bool { state.withLock { $0.notifications } }
    /// False once either side ended the link.
    public var isOpen: Bool { !state.withLock { $0.closed } }
    public func setDropAcks(_ drop: Bool) { state.withLock { $0.dropAcks = drop } }
    public func setBadAck(_ bad: Bool) { state.withLock { $0.badAck = bad } }
    /// Ends the link. The descriptor is used only while the loop has not closed it (checked under the
    /// lock): its number may belong to another socket of the process afterwards.
    public func close() {
        state.withLock { s in
            s.closed = true
            if s.fdOpen { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    func send(_ pdu: [UInt8]) {
        state.withLock { s in
            guard !s.closed, s.fdOpen else { return }
            _ = pdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
        }
    }

    func loop() {
        var buf = [UInt8](repeating: 0, count: 1024)
        while !state.withLock({ $0.closed }) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 200) == 0 { continue }
            let n = read(fd, &buf, buf.count)
            if n <= 0 { break }
            let pdu = Array(buf[0..<n])
            state.withLock { $0.received.append(pdu) }
            handle(pdu)
        }
        state.withLock { s in
            s.closed = true
            s.fdOpen = false
            Glibc.close(fd)
        }
    }

    static func h(_ b: [UInt8], _ i: Int) -> Int { Int(b[i]) | Int(b[i + 1]) << 8 }
    func error(_ op: UInt8, _ handle: Int, _ code: UInt8) { send([0x01, op, UInt8(handle & 0xFF), UInt8(handle >> 8), code]) }

    func handle(_ p: [UInt8]) {
        switch p[0] {
        case 0x02:
            send([0x03, 0x17, 0x00])
        case 0x10 where p.count == 7:
            let start = Self.h(p, 1)
            if start <= 0x0001 {
                send([0x11, 0x06, 0x01, 0x00, 0x03, 0x00, 0x00, 0x18, 0x0C, 0x00, 0x11, 0x00, 0xF0, 0xFF])
            } else if start <= 0x000C {
                send([0x11, 0x06, 0x0C, 0x00, 0x11, 0x00, 0xF0, 0xFF])
            } else {
                error(0x10, start, 0x0A)
            }
        case 0x08 where p.count == 7 && Self.h(p, 5) == 0x2803:
            let start = Self.h(p, 1)
            if start <= 0x000D {
                send([0x09, 0x07, 0x0D, 0x00, 0x08, 0x0E, 0x00, 0xF3, 0xFF, 0x0F, 0x00, 0x10, 0x10, 0x00, 0xF4, 0xFF])
            } else if start <= 0x000F {
                send([0x09, 0x07, 0x0F, 0x00, 0x10, 0x10, 0x00, 0xF4, 0xFF])
            } else {
                error(0x08, start, 0x0A)
            }
        case 0x04 where p.count == 5:
            let start = Self.h(p, 1), end = Self.h(p, 3)
            if start <= 0x0011 && end >= 0x0011 { send([0x05, 0x01, 0x11, 0x00, 0x02, 0x29]) } else { error(0x04, start, 0x0A) }
        case 0x12 where p.count >= 3:
            let handle = Self.h(p, 1)
            let value = Array(p[3...])
            switch handle {
            case 0x0011:
                state.withLock { $0.notifications = value == [0x01, 0x00] }
                send([0x13])
            case 0x000E:
                send([0x13])
                firmware(value)
            default:
                error(0x12, handle, 0x01)
            }
        case 0x52:
            if p.count >= 3, Self.h(p, 1) == 0x000E { firmware(Array(p[3...])) }
        default:
            error(p[0], 0, 0x06)
        }
    }

    /// The firmware: parse the frame its own way and ack it.
    func firmware(_ value: [UInt8]) {
        let text = String(decoding: value, as: UTF8.self)
        state.withLock { $0.frames.append(text) }
        onFrame?(text)
        guard text.count >= 6, text.first == "(", text.last == ")" else { return }
        let inner = text.dropFirst().dropLast()
        let parts = inner.split(separator: ":", maxSplits: 1)
        guard parts.count == 2, parts[0].count == 2, UInt8(parts[0], radix: 16) != nil else { return }
        let body = parts[1]
        if body == "O" {
            state.withLock { $0.light = nil }
        } else if body.hasPrefix("L,") {
            let f = body.dropFirst(2).split(separator: ",")
            guard f.count == 3, let w = Int(f[0], radix: 16), let c = Int(f[1], radix: 16), let t = Int(f[2], radix: 16) else { return }
            state.withLock { $0.light = Light(warm: w, cool: c, timeoutMs: t) }
        } else if body != "P" {
            return
        }
        let (on, drop, bad) = state.withLock { ($0.notifications, $0.dropAcks, $0.badAck) }
        guard on, !drop else { return }
        let ack = bad ? "(\(parts[0]):X)" : "(\(parts[0]):A)"
        let delay = ackDelay
        DispatchQueue.global().asyncAfter(deadline: .now() + delay) { [self] in
            send([0x1B, 0x10, 0x00] + Array(ack.utf8))
        }
    }
}
