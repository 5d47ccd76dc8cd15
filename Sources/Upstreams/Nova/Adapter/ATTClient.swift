#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
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
    let state = Locked(State())
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
        switch ATTPDU.classify(pdu) {
        case .ignored: return
        case .notification(let handle, let value, let confirm):
            if confirm { _ = send([0x1E]) }
            onNotification(handle, value)
        case .mtuRequest:
            _ = send([0x03, 23, 0])
        case .peerRequest(let op):
            _ = send([0x01, op, 0x00, 0x00, 0x06])
        case .response(let op, let error):
            let c = state.withLock { s -> CheckedContinuation<[UInt8], any Error>? in
                guard let p = s.pending else { return nil }
                guard op == p.opcode + 1 || error?.request == p.opcode else { return nil }
                s.pending = nil
                return p.continuation
            }
            guard let continuation = c else { return }   // unsolicited response: ignored
            if let error { continuation.resume(throwing: error) } else { continuation.resume(returning: pdu) }
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


    func isNotFound(_ error: any Error) -> Bool { (error as? ATTError)?.code == 0x0A }

    public func discoverNova(service: UInt16 = 0xFFF0, request: UInt16 = 0xFFF3, response: UInt16 = 0xFFF4) async throws -> NovaHandles {
        var mtu = 23
        do {
            let r = try await self.request([0x02] + Self.le(185))
            if r.count >= 3 { mtu = max(23, min(185, Int(ATTPDU.u16(r, 1)))) }
        } catch let e as ATTError where e.code == 0x06 {}   // MTU exchange is optional
        // Primary services.
        var range: (UInt16, UInt16)?
        var start: UInt16 = 1
        search: while true {
            let r: [UInt8]
            do { r = try await self.request([0x10] + Self.le(start) + Self.le(0xFFFF) + Self.le(0x2800)) } catch where isNotFound(error) { break }
            let groups = try ATTPDU.groups(r)
            for g in groups where g.uuid == service { range = (g.start, g.end); break search }
            // A peer that does not move forward would keep us asking forever.
            guard let last = groups.last?.end, last >= start else { throw AdapterError("malformed Read By Group Type response") }
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
            let declarations = try ATTPDU.characteristics(r)
            for d in declarations {
                switch d.uuid {
                case request?: req = d.value
                case response?: resp = d.value
                default: break
                }
            }
            guard let lastDecl = declarations.last?.handle, lastDecl >= cursor else { throw AdapterError("malformed Read By Type response") }
            if lastDecl >= sEnd { break }
            cursor = lastDecl + 1
        }
        guard let req, let resp else { throw AdapterError("the Nova service lacks its request or response characteristic") }
        // The response characteristic's CCCD.
        var cccd: UInt16?
        if resp < sEnd {
            let r = try await self.request([0x04] + Self.le(resp + 1) + Self.le(sEnd))
            cccd = try ATTPDU.descriptors(r).first { $0.uuid == 0x2902 }?.handle
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

/// What an ATT peer sends us, read without trusting a byte of it (fuzzed: switchyard-fuzz att).
public enum ATTPDU {
    public enum Inbound: Equatable {
        case ignored
        /// Handle Value Notification (0x1B), or Indication (0x1D) which wants a confirmation.
        case notification(handle: UInt16, value: [UInt8], confirm: Bool)
        case mtuRequest
        /// A request from the peer that we do not serve: answered "request not supported".
        case peerRequest(UInt8)
        /// A response to our request, or an Error Response (0x01) naming it.
        case response(opcode: UInt8, error: ATTClient.ATTError?)
    }

    static let peerRequests: Set<UInt8> = [0x04, 0x06, 0x08, 0x0A, 0x0C, 0x0E, 0x10, 0x12, 0x16, 0x18, 0x20]

    static func u16(_ b: [UInt8], _ i: Int) -> UInt16 { UInt16(b[i]) | UInt16(b[i + 1]) << 8 }

    public static func classify(_ pdu: [UInt8]) -> Inbound {
        guard let op = pdu.first else { return .ignored }
        switch op {
        case 0x1B, 0x1D:
            guard pdu.count >= 3 else { return .ignored }
            return .notification(handle: u16(pdu, 1), value: Array(pdu[3...]), confirm: op == 0x1D)
        case 0x02: return .mtuRequest
        case _ where peerRequests.contains(op): return .peerRequest(op)
        case 0x01:
            guard pdu.count >= 5 else { return .ignored }
            return .response(opcode: op, error: ATTClient.ATTError(request: pdu[1], handle: u16(pdu, 2), code: pdu[4]))
        default: return .response(opcode: op, error: nil)
        }
    }

    /// Read By Group Type Response (0x11): handle ranges with their 16-bit (or base-128) type.
    public static func groups(_ r: [UInt8]) throws(AdapterError) -> [(start: UInt16, end: UInt16, uuid: UInt16?)] {
        guard r.count >= 2, r[0] == 0x11, r[1] == 6 || r[1] == 20 else { throw AdapterError("malformed Read By Group Type response") }
        return stride(from: 2, through: r.count - Int(r[1]), by: Int(r[1])).map { i in
            (u16(r, i), u16(r, i + 2), BluetoothUUID.short(r[(i + 4)..<(i + Int(r[1]))]))
        }
    }

    /// Read By Type Response (0x09) for characteristic declarations: declaration handle, value handle, type.
    public static func characteristics(_ r: [UInt8]) throws(AdapterError) -> [(handle: UInt16, value: UInt16, uuid: UInt16?)] {
        guard r.count >= 2, r[0] == 0x09, r[1] == 7 || r[1] == 21 else { throw AdapterError("malformed Read By Type response") }
        return stride(from: 2, through: r.count - Int(r[1]), by: Int(r[1])).map { i in
            (u16(r, i), u16(r, i + 3), BluetoothUUID.short(r[(i + 5)..<(i + Int(r[1]))]))
        }
    }

    /// Find Information Response (0x05): handles with their 16-bit (format 1) or 128-bit (format 2) type.
    public static func descriptors(_ r: [UInt8]) throws(AdapterError) -> [(handle: UInt16, uuid: UInt16?)] {
        guard r.count >= 2, r[0] == 0x05, r[1] == 1 || r[1] == 2 else { throw AdapterError("malformed Find Information response") }
        let step = r[1] == 1 ? 4 : 18
        return stride(from: 2, through: r.count - step, by: step).map { i in (u16(r, i), BluetoothUUID.short(r[(i + 2)..<(i + step)])) }
    }
}
