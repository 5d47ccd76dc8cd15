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

/// The LAN transport's one UDP socket and the thread that reads it. Lives inside `with { }`: the socket
/// opens and the thread starts there, and both are gone when it returns. Datagrams are at most 1 500
/// bytes, and at most 1 024 wait for the client (past that they are dropped and counted): a flood of
/// packets costs bounded memory.
final class LIFXLANSocket: Sendable {
    struct Datagram: Sendable {
        var bytes: [UInt8]
        var from: LIFXLANEndpoint
    }

    let fd: Int32
    let datagrams: AsyncStream<Datagram>
    let continuation: AsyncStream<Datagram>.Continuation
    let stopping = Atomic<Bool>(false)
    let ended = Latch()
    let dropped = Atomic<Int>(0)

    private init(fd: Int32) {
        self.fd = fd
        (datagrams, continuation) = AsyncStream.makeStream(of: Datagram.self, bufferingPolicy: .bufferingOldest(1024))
    }

    static func with<R>(localPort: UInt16, isolation: isolated (any Actor)? = #isolation,
                        _ body: (LIFXLANSocket) async throws -> R) async throws -> R {
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
        let s = LIFXLANSocket(fd: fd)
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
            let d = Datagram(bytes: Array(buf[0..<n]), from: LIFXLANEndpoint(host: from.sin_addr.s_addr, port: UInt16(bigEndian: from.sin_port)))
            if case .dropped = continuation.yield(d) { dropped.add(1, ordering: .relaxed) }
        }
    }

    @discardableResult
    func send(_ bytes: [UInt8], to e: LIFXLANEndpoint) -> Bool {
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

/// Requests to LAN devices with the protocol's rules (docs/upstreams/lifx-lan.md): one random source ≥ 2,
/// a sequence per device, replies matched on (source, sequence, target) and never on the sender's
/// address, at most 20 datagrams a second to one device, retries with growing gaps and a new sequence
/// each, at most `gaps.count` datagrams per request. Counts what it refuses.
actor LIFXLANClient {
    /// A request waiting under one sequence: the replies so far, until `complete` says they are all there
    /// (one for most requests; a zone read takes as many as the zone count needs).
    struct Pending {
        let expect: Set<UInt16>
        var replies: [LIFXLANPacket] = []
        let complete: @Sendable ([LIFXLANPacket]) -> Bool
        let continuation: CheckedContinuation<[LIFXLANPacket], Never>
    }

    static let one: @Sendable ([LIFXLANPacket]) -> Bool = { !$0.isEmpty }

    let socket: LIFXLANSocket
    let clock: any BridgeClock
    let source: UInt32
    /// Waits before each retry (the first datagram goes at once): 5 datagrams at most.
    let gaps: [Double]
    var sequences: [UInt64: UInt8] = [:]
    var nextSend: [UInt64: MonotonicInstant] = [:]
    var pending: [UInt64: [UInt8: Pending]] = [:]
    /// Where each device answers now (discovery moves it): every attempt of a request goes there.
    var endpoints: [UInt64: LIFXLANEndpoint] = [:]
    /// Every reply that was not matched to a request goes here (discovery, unsolicited states).
    let unsolicited: @Sendable (LIFXLANPacket, LIFXLANEndpoint) async -> Void
    var counts = (sent: 0, received: 0, malformed: 0, foreign: 0, unmatched: 0, retries: 0, timeouts: 0)
    static let minSpacing = 0.05

    init(socket: LIFXLANSocket, clock: any BridgeClock, gaps: [Double] = [0.2, 0.3, 0.5, 1, 2],
         unsolicited: @escaping @Sendable (LIFXLANPacket, LIFXLANEndpoint) async -> Void) {
        self.socket = socket
        self.clock = clock
        self.gaps = gaps
        self.unsolicited = unsolicited
        source = UInt32.random(in: 2...UInt32.max)
    }

    /// Reads the socket until it closes: matches replies, hands the rest on.
    func receiveLoop() async {
        for await d in socket.datagrams {
            counts.received += 1
            guard let p = LIFXLANPacket.decode(d.bytes) else { counts.malformed += 1; continue }
            guard p.header.source == source else { counts.foreign += 1; continue }
            // A reply to a waiting request (or the device saying it does not know the request's type).
            if var waiting = pending[p.header.target], var w = waiting[p.header.sequence],
               w.expect.contains(p.header.type) || p.header.type == LIFXLANMessage.stateUnhandled {
                if p.header.type == LIFXLANMessage.stateUnhandled {
                    w.replies = [p]
                } else {
                    // Replies held per request are bounded: more than a zone read can need is not taken.
                    guard w.replies.count < Self.maxReplies else { counts.unmatched += 1; continue }
                    w.replies.append(p)
                }
                if p.header.type == LIFXLANMessage.stateUnhandled || w.complete(w.replies) {
                    waiting[p.header.sequence] = nil
                    w.continuation.resume(returning: w.replies)
                } else {
                    waiting[p.header.sequence] = w
                }
                pending[p.header.target] = waiting.isEmpty ? nil : waiting
                continue
            }
            if p.header.type == LIFXLANMessage.stateService || p.header.type == LIFXLANMessage.lightState {
                await unsolicited(p, d.from)
            } else {
                counts.unmatched += 1
            }
        }
    }

    func nextSequence(_ serial: UInt64) -> UInt8 {
        let s = sequences[serial, default: UInt8.random(in: 0...255)] &+ 1
        sequences[serial] = s
        return s
    }

    /// At most 20 datagrams a second to one device.
    func pace(_ serial: UInt64) async {
        let now = clock.now()
        let at = max(now, nextSend[serial] ?? now)
        nextSend[serial] = at.adding(seconds: Self.minSpacing)
        if at > now { try? await clock.sleep(until: at) }
    }

    /// Sends a request until a reply of one of `expect` types arrives or the retries are spent; nil on
    /// time-out. A Set goes with ack_required and expects the Acknowledgement. A device that does not know
    /// the type answers StateUnhandled: that reply is returned at once (not retried).
    func request(_ type: UInt16, payload: [UInt8] = [], serial: UInt64, to endpoint: LIFXLANEndpoint,
                 expect: Set<UInt16>, ack: Bool = false) async -> LIFXLANPacket? {
        await request(type, payload: payload, serial: serial, to: endpoint, expect: expect, ack: ack, complete: Self.one)?.first
    }

    /// As `request`, for a read answered by several packets under one sequence: replies are collected (over
    /// the retries too, each with its own sequence) until `complete` holds; nil when the retries are spent first.
    func request(_ type: UInt16, payload: [UInt8] = [], serial: UInt64, to endpoint: LIFXLANEndpoint, expect: Set<UInt16>,
                 ack: Bool = false, complete: @escaping @Sendable ([LIFXLANPacket]) -> Bool) async -> [LIFXLANPacket]? {
        var collected: [LIFXLANPacket] = []
        for (attempt, gap) in gaps.enumerated() {
            if Task.isCancelled { return nil }
            if attempt > 0 { counts.retries += 1 }
            await pace(serial)
            let seq = nextSequence(serial)
            let packet = LIFXLANPacket(type: type, source: source, target: serial, sequence: seq, ackRequired: ack, payload: payload)
            let deadline = clock.now().adding(seconds: gap)
            // The time-out is a child of this request and ends with it: cut short once the reply is in (the
            // expiry then finds nothing waiting), or when the request's task is cancelled (the expiry then
            // answers the waiting request at once, so that nothing waits for a reply forever).
            let replies = await withTaskGroup(of: Void.self) { timer -> [LIFXLANPacket] in
                timer.addTask { [clock] in
                    try? await clock.sleep(until: deadline)
                    await self.expire(serial, seq)
                }
                let r = await withCheckedContinuation { (c: CheckedContinuation<[LIFXLANPacket], Never>) in
                    // A request still waiting under this sequence (256 requests ago) is answered: time-out.
                    if let old = pending[serial]?[seq] { old.continuation.resume(returning: old.replies) }
                    pending[serial, default: [:]][seq] = Pending(expect: expect, complete: complete, continuation: c)
                    counts.sent += 1
                    socket.send(packet.bytes, to: endpoints[serial] ?? endpoint)
                }
                timer.cancelAll()
                return r
            }
            if replies.first?.header.type == LIFXLANMessage.stateUnhandled { return replies }
            collected += replies
            if complete(collected) { return collected }
            if collected.count > Self.maxReplies { break }
        }
        counts.timeouts += 1
        return nil
    }

    /// Replies one request may collect: a zone read of the most zones taken, in single-zone replies, twice over.
    static let maxReplies = 2 * LIFXLANMessage.maxZones

    /// The request's time is up: it is answered with what it has (nothing, or part of a zone read).
    func expire(_ serial: UInt64, _ seq: UInt8) {
        guard let w = pending[serial]?[seq] else { return }
        pending[serial]?[seq] = nil
        w.continuation.resume(returning: w.replies)
    }

    /// Tagged GetService to each address: the answers come through `unsolicited`.
    func discover(_ targets: [LIFXLANEndpoint]) {
        for t in targets {
            let p = LIFXLANPacket(type: LIFXLANMessage.getService, source: source, target: 0, sequence: 0, tagged: true)
            counts.sent += 1
            socket.send(p.bytes, to: t)
        }
    }

    /// A device answered discovery from this address: its requests go there from now on, retries included.
    func moved(_ serial: UInt64, to e: LIFXLANEndpoint) { endpoints[serial] = e }

    func finishAll() {
        for (_, w) in pending { for (_, p) in w { p.continuation.resume(returning: p.replies) } }
        pending = [:]
    }

    var metrics: [String: JSONValue] {
        ["sent": JSONValue(counts.sent), "received": JSONValue(counts.received), "malformed": JSONValue(counts.malformed),
         "foreign": JSONValue(counts.foreign), "unmatched": JSONValue(counts.unmatched), "retries": JSONValue(counts.retries),
         "timeouts": JSONValue(counts.timeouts), "dropped": JSONValue(socket.dropped.load(ordering: .relaxed))]
    }
}
