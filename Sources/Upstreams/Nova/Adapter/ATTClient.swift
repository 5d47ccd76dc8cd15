#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SwitchyardCore

/// An ATT client on a connected SOCK_SEQPACKET socket (an L2CAP LE socket on CID 4 in production, a
/// socketpair in tests): one PDU per read/write, little-endian fields, one outstanding request
/// (30 s transaction timeout), notifications at any time, indications confirmed, and requests from
/// the peer answered (MTU with 23, anything else with "Request Not Supported") so it never stalls
/// (docs/upstreams/nova.md "ATT"). A reader thread, started by `start`, owns the socket's reads and
/// enforces the transaction timeout.
public final class ATTClient: Sendable {
    public struct ATTError: Error, Sendable, Equatable, CustomStringConvertible {
        public var request: UInt8
        public var handle: UInt16
        public var code: UInt8
        public var description: String { "ATT error 0x\(String(code, radix: 16)) for request 0x\(String(request, radix: 16)) at handle 0x\(String(handle, radix: 16))" }
    }

    struct State: ~Copyable {
        var pending: (opcode: UInt8, serial: Int, deadline: MonotonicInstant, continuation: CheckedContinuation<[UInt8], any Error>)?
        var serial = 0
        var closed = false
        var reason = ""
        /// The descriptor is open: only while this is true (checked under the lock) may any thread use
        /// it. The reader thread closes it, under the lock, as its last act; a number used after that may
        /// already belong to another socket of the process (an MQTT or HTTP connection).
        var fdOpen = true
    }

    /// Use it only through `withOpenDescriptor` (or on the reader thread): see `State.fdOpen`.
    let fd: Int32
    let state = Mutex(State())
    let onNotification: @Sendable (UInt16, [UInt8]) -> Void
    let onClose: @Sendable (String) -> Void
    public let transactionTimeout: Double
    let clock = SystemClock()

    public init(fd: Int32, transactionTimeout: Double = 30, onNotification: @escaping @Sendable (UInt16, [UInt8]) -> Void,
                onClose: @escaping @Sendable (String) -> Void) {
        self.fd = fd
        self.transactionTimeout = transactionTimeout
        self.onNotification = onNotification
        self.onClose = onClose
    }

    /// Starts the reader thread. It runs until the link closes (either side), then calls `onClose` and
    /// closes the socket.
    public func start() {
        OSThread.start("att-client") { [self] in readLoop() }
    }

    public func close() { shutdown("closed by the bridge") }

    func shutdown(_ reason: String) {
        let pending = state.withLock { s -> CheckedContinuation<[UInt8], any Error>? in
            guard !s.closed else { return nil }
            s.closed = true
            s.reason = reason
            defer { s.pending = nil }
            return s.pending?.continuation
        }
        pending?.resume(throwing: AdapterError("ATT link closed: \(reason)"))
        // Wakes the reader (which then closes the descriptor), unless it has already.
        _ = withOpenDescriptor { Glibc.shutdown($0, Int32(SHUT_RDWR)) }
    }

    /// Runs `body` with the descriptor while it is open (nil once the reader has closed it).
    public func withOpenDescriptor<T>(_ body: (Int32) -> T) -> T? {
        state.withLock { s in s.fdOpen ? body(fd) : nil }
    }

    func send(_ pdu: [UInt8]) -> Bool {
        withOpenDescriptor { fd in pdu.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) } } == pdu.count
    }

    /// Sends a request and waits for its response (opcode + 1) or an Error Response.
    public func request(_ pdu: [UInt8]) async throws -> [UInt8] {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<[UInt8], any Error>) in
            let deadline = clock.now().adding(seconds: transactionTimeout)
            let accepted = state.withLock { s -> Bool in
                guard !s.closed, s.pending == nil else { return false }
                s.serial += 1
                s.pending = (pdu[0], s.serial, deadline, c)
                return true
            }
            guard accepted else {
                c.resume(throwing: AdapterError(state.withLock { $0.closed } ? "ATT link closed" : "an ATT request is already outstanding"))
                return
            }
            guard send(pdu) else {
                state.withLock { $0.pending = nil }
                c.resume(throwing: AdapterError("ATT write failed: \(String(cString: strerror(errno)))"))
                return
            }
        }
    }

    static let peerRequests: Set<UInt8> = [0x02, 0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20]

    func readLoop() {
        var buf = [UInt8](repeating: 0, count: 1024)
        while !state.withLock({ $0.closed }) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, 200)
            let expired = state.withLock { s in s.pending.map { clock.now() >= $0.deadline } ?? false }
            if expired {
                shutdown("ATT transaction timeout (\(Int(transactionTimeout)) s)")
                continue
            }
            if r == 0 { continue }
            let n = read(fd, &buf, buf.count)
            if n <= 0 {
                shutdown(n == 0 ? "the peer disconnected" : String(cString: strerror(errno)))
                break
            }
            dispatch(Array(buf[0..<n]))
        }
        let reason = state.withLock { s -> String in
            s.fdOpen = false
            Glibc.close(fd)
            return s.reason
        }
        onClose(reason)
    }

    func dispatch(_ pdu: [UInt8]) {
        guard let op = pdu.first else { return }
        switch op {
        case 0x1B where pdu.count >= 3:
            onNotification(UInt16(pdu[1]) | UInt16(pdu[2]) << 8, Array(pdu[3...]))
        case 0x1D where pdu.count >= 3:
            _ = send([0x1E])
            onNotification(UInt16(pdu[1]) | UInt16(pdu[2]) << 8, Array(pdu[3...]))
        case 0x02:
            _ = send([0x03, 23, 0])
        case _ where Self.peerRequests.contains(op):
            _ = send([0x01, op, 0x00, 0x00, 0x06])
        default:
            let c = state.withLock { s -> (CheckedContinuation<[UInt8], any Error>, UInt8)? in
                guard let p = s.pending else { return nil }
                let matches = op == p.opcode + 1 || (op == 0x01 && pdu.count >= 5 && pdu[1] == p.opcode)
                guard matches else { return nil }
                s.pending = nil
                return (p.continuation, p.opcode)
            }
            guard let (continuation, _) = c else { return }   // unsolicited response: ignored
            if op == 0x01 {
                continuation.resume(throwing: ATTError(request: pdu[1], handle: UInt16(pdu[2]) | UInt16(pdu[3]) << 8, code: pdu[4]))
            } else {
                continuation.resume(returning: pdu)
            }
        }
    }

    // MARK: GATT discovery for a Nova (FFF0 with FFF3 write and FFF4 notify)

    public struct NovaHandles: Sendable, Equatable {
        public var request: UInt16      // FFF3 value
        public var response: UInt16     // FFF4 value
        public var cccd: UInt16         // FFF4's 0x2902
        public var mtu: Int
    }

    static func le(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    static func u16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }


    func isNotFound(_ error: any Error) -> Bool { (error as? ATTError)?.code == 0x0A }

    public func discoverNova(service: UInt16 = 0xFFF0, request: UInt16 = 0xFFF3, response: UInt16 = 0xFFF4) async throws -> NovaHandles {
        var mtu = 23
        do {
            let r = try await self.request([0x02] + Self.le(185))
            if r.count >= 3 { mtu = max(23, min(185, Int(Self.u16(r, 1)))) }
        } catch let e as ATTError where e.code == 0x06 {}   // MTU exchange is optional
        // Primary services.
        var range: (UInt16, UInt16)?
        var start: UInt16 = 1
        search: while true {
            let r: [UInt8]
            do { r = try await self.request([0x10] + Self.le(start) + Self.le(0xFFFF) + Self.le(0x2800)) } catch where isNotFound(error) { break }
            let len = Int(r[1])
            guard len >= 6 else { throw AdapterError("malformed Read By Group Type response") }
            var i = 2
            var last: UInt16 = start
            while i + len <= r.count {
                let s = Self.u16(r, i), e = Self.u16(r, i + 2)
                if BluetoothUUID.short(r[(i + 4)..<(i + len)]) == service { range = (s, e); break search }
                last = e
                i += len
            }
            if last == 0xFFFF { break }
            start = last + 1
        }
        guard let (sStart, sEnd) = range else { throw AdapterError("no Nova service (0x\(String(service, radix: 16, uppercase: true))) on this device") }
        // Characteristics in it.
        var req: UInt16?, resp: UInt16?
        var cursor = sStart
        while cursor <= sEnd {
            let r: [UInt8]
            do { r = try await self.request([0x08] + Self.le(cursor) + Self.le(sEnd) + Self.le(0x2803)) } catch where isNotFound(error) { break }
            let len = Int(r[1])
            guard len == 7 || len == 21 else { throw AdapterError("malformed Read By Type response") }
            var i = 2
            var lastDecl = cursor
            while i + len <= r.count {
                lastDecl = Self.u16(r, i)
                let value = Self.u16(r, i + 3)
                switch BluetoothUUID.short(r[(i + 5)..<(i + len)]) {
                case request?: req = value
                case response?: resp = value
                default: break
                }
                i += len
            }
            if lastDecl >= sEnd { break }
            cursor = lastDecl + 1
        }
        guard let req, let resp else { throw AdapterError("the Nova service lacks its request or response characteristic") }
        // The response characteristic's CCCD.
        var cccd: UInt16?
        if resp < sEnd {
            let r = try await self.request([0x04] + Self.le(resp + 1) + Self.le(sEnd))
            let step = r[1] == 1 ? 4 : 18
            var i = 2
            while i + step <= r.count {
                if BluetoothUUID.short(r[(i + 2)..<(i + step)]) == 0x2902 { cccd = Self.u16(r, i); break }
                i += step
            }
        }
        guard let cccd else { throw AdapterError("the Nova response characteristic has no CCCD") }
        _ = try await self.request([0x12] + Self.le(cccd) + [0x01, 0x00])   // notifications on
        return NovaHandles(request: req, response: resp, cccd: cccd, mtu: mtu)
    }

    /// ATT Write Request (the SDKs write Nova frames with response).
    public func write(_ handle: UInt16, _ value: [UInt8]) async throws {
        _ = try await request([0x12] + Self.le(handle) + value)
    }
}
