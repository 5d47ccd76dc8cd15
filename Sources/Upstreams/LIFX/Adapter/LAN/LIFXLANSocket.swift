#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SwitchyardCore

/// An IPv4 UDP endpoint.
public struct LIFXLANEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var host: UInt32   // network byte order, as in sockaddr_in
    public var port: UInt16

    /// "192.168.1.40" or "10.0.0.7:56700" (the port defaults to 56700).
    public init?(_ text: String, defaultPort: UInt16 = 56700) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count <= 2 else { return nil }
        var a = in_addr()
        guard inet_pton(AF_INET, String(parts[0]), &a) == 1 else { return nil }
        host = a.s_addr
        if parts.count == 2 {
            guard let p = UInt16(parts[1]), p > 0 else { return nil }
            port = p
        } else {
            port = defaultPort
        }
    }

    init(host: UInt32, port: UInt16) { self.host = host; self.port = port }

    public var description: String {
        var a = in_addr(s_addr: host)
        var buf = [CChar](repeating: 0, count: 16)
        inet_ntop(AF_INET, &a, &buf, 16)
        let text = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return "\(text):\(port)"
    }

    /// The directed broadcast address of every interface that is up and has one.
    public static func interfaceBroadcasts(port: UInt16 = 56700) -> [LIFXLANEndpoint] {
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return [] }
        defer { freeifaddrs(list) }
        var out: [LIFXLANEndpoint] = []
        var p = list
        while let i = p {
            let flags = Int32(i.pointee.ifa_flags)
            if flags & Int32(IFF_UP) != 0, flags & Int32(IFF_BROADCAST) != 0,
               let addr = i.pointee.ifa_addr, addr.pointee.sa_family == sa_family_t(AF_INET),
               let b = i.pointee.ifa_ifu.ifu_broadaddr {
                let host = b.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }
                let e = LIFXLANEndpoint(host: host, port: port)
                if !out.contains(e) { out.append(e) }
            }
            p = i.pointee.ifa_next
        }
        return out
    }
}

/// A datagram the LAN transport's socket received, and where from.
public struct LIFXLANDatagram: Sendable {
    public var bytes: [UInt8]
    public var from: LIFXLANEndpoint
    public init(bytes: [UInt8], from: LIFXLANEndpoint) {
        self.bytes = bytes
        self.from = from
    }
}

/// The LAN transport's socket as the transport uses it: datagrams out to an endpoint, the datagrams that
/// arrive as a stream (bounded: past the bound they are dropped and counted). `LIFXUDPSocket` is the
/// kernel's; `LIFXLANTwin` is an in-memory one, for the unit tier.
public protocol LIFXLANSocket: Sendable {
    var datagrams: AsyncStream<LIFXLANDatagram> { get }
    /// Sends one datagram now (it never blocks); false when it did not go.
    @discardableResult func send(_ bytes: [UInt8], to e: LIFXLANEndpoint) -> Bool
    /// Datagrams that arrived while too many were waiting to be read, and were dropped.
    var dropped: Int { get }
}

/// Where the LAN transport's run gets its socket: it exists only inside `withSocket`, opened there and closed
/// (its reader ended, its stream finished) when that returns.
public protocol LIFXLANNetwork: Sendable {
    /// Runs `body` with a socket bound to `localPort` (0: any). `isolation` is the caller's (`#isolation`).
    func withSocket<R>(localPort: UInt16, isolation: isolated (any Actor)?,
                       _ body: (any LIFXLANSocket) async throws -> R) async throws -> R
}

/// The bridge's LAN: a UDP socket of the kernel's (`LIFXUDPSocket`) for each run.
public struct LIFXUDPNetwork: LIFXLANNetwork {
    public init() {}
    public func withSocket<R>(localPort: UInt16, isolation: isolated (any Actor)?,
                              _ body: (any LIFXLANSocket) async throws -> R) async throws -> R {
        try await LIFXUDPSocket.with(localPort: localPort, isolation: isolation) { try await body($0) }
    }
}

/// The LAN transport's one UDP socket and the thread that reads it. Lives inside `with { }`: the socket
/// opens and the thread starts there, and both are gone when it returns. Datagrams are at most 1 500
/// bytes, and at most 1 024 wait for the client (past that they are dropped and counted): a flood of
/// packets costs bounded memory.
final class LIFXUDPSocket: LIFXLANSocket {
    let fd: Int32
    let datagrams: AsyncStream<LIFXLANDatagram>
    let continuation: AsyncStream<LIFXLANDatagram>.Continuation
    let stopping = Atomic<Bool>(false)
    let ended = Latch()
    let droppedCount = Atomic<Int>(0)

    private init(fd: Int32) {
        self.fd = fd
        (datagrams, continuation) = AsyncStream.makeStream(of: LIFXLANDatagram.self, bufferingPolicy: .bufferingOldest(1024))
    }

    static func with<R>(localPort: UInt16, isolation: isolated (any Actor)? = #isolation,
                        _ body: (LIFXUDPSocket) async throws -> R) async throws -> R {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw AdapterError("LIFX LAN: cannot open a UDP socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = localPort.bigEndian
        addr.sin_addr.s_addr = INADDR_ANY
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw AdapterError("LIFX LAN: cannot bind UDP port \(localPort): \(why)")
        }
        let s = LIFXUDPSocket(fd: fd)
        OSThread.start("lifx-lan") { s.readLoop() }
        return try await withTeardown { try await body(s) } teardown: {
            s.stopping.store(true, ordering: .relaxed)
            await s.ended.waitUncancellable()
            close(fd)
        }
    }

    func readLoop() {
        defer {
            continuation.finish()
            ended.signal()
        }
        var buf = [UInt8](repeating: 0, count: 1500)
        while !stopping.load(ordering: .relaxed) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 100) <= 0 { continue }
            var from = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let n = buf.withUnsafeMutableBytes { b in
                withUnsafeMutablePointer(to: &from) { f in
                    f.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, b.baseAddress, b.count, 0, $0, &len) }
                }
            }
            if n <= 0 { continue }
            let d = LIFXLANDatagram(bytes: Array(buf[0..<n]), from: LIFXLANEndpoint(host: from.sin_addr.s_addr, port: UInt16(bigEndian: from.sin_port)))
            if case .dropped = continuation.yield(d) { droppedCount.add(1, ordering: .relaxed) }
        }
    }

    var dropped: Int { droppedCount.load(ordering: .relaxed) }

    @discardableResult
    func send(_ bytes: [UInt8], to e: LIFXLANEndpoint) -> Bool {
        // Under hot standby, nothing leaves an instance that may have been replaced (design.md §18).
        guard UpstreamLease.current?.valid ?? true else { return false }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = e.port.bigEndian
        addr.sin_addr.s_addr = e.host
        let n = bytes.withUnsafeBytes { b in
            withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, b.baseAddress, b.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        return n == bytes.count
    }

    /// The local port the socket got (the configured one, or the kernel's choice for 0).
    var localPort: UInt16 {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return UInt16(bigEndian: addr.sin_port)
    }
}
