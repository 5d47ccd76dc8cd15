import Foundation
import SwitchyardCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on 127.0.0.1 between a client and the broker that counts the bytes of each direction: what
/// a client puts on the wire, measured outside it. It can hold back what the broker sends (so that nothing
/// the client published is acknowledged) and cut every connection (as a network that fails does).
/// One thread accepts; one thread per connection copies both ways with poll(2); each ends when its
/// connection does, and `close` ends them all and waits for them.
public final class CountingRelay: @unchecked Sendable {
    public let port: Int
    let target: Int
    let listener: Int32
    let upstream = Atomic<Int>(0)
    let downstream = Atomic<Int>(0)
    let holding = Atomic<Bool>(false)
    let connections = Locked<[(client: Int32, broker: Int32)]>([])
    let closing = Atomic<Bool>(false)
    let threads = Locked<Int>(0)

    /// Relays to `127.0.0.1:target`.
    public init(to target: Int) throws {
        self.target = target
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var addr = Self.loopback(port: TestEnvironment.freePort())
        let len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        guard bound == 0, listen(fd, 16) == 0 else { Glibc.close(fd); throw TestError("relay: cannot listen") }
        listener = fd
        port = Int(UInt16(bigEndian: addr.sin_port))
        threads.withLock { $0 += 1 }
        Thread { [self] in acceptLoop(); threads.withLock { $0 -= 1 } }.start()
    }

    static func loopback(port: Int) -> sockaddr_in {
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        return addr
    }

    /// Bytes the clients sent towards the broker, and the broker towards the clients, so far.
    public var bytesUp: Int { upstream.load(ordering: .relaxed) }
    public var bytesDown: Int { downstream.load(ordering: .relaxed) }

    /// While on, nothing the broker sends is passed on (PUBACKs included).
    public func hold(_ on: Bool) { holding.store(on, ordering: .relaxed) }

    /// Closes every connection (the relay still accepts new ones).
    public func cutAll() {
        connections.withLock { cs in
            for c in cs { shutdown(c.client, Int32(SHUT_RDWR)); shutdown(c.broker, Int32(SHUT_RDWR)) }
        }
    }

    public func close() {
        guard !closing.exchange(true, ordering: .relaxed) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        cutAll()
        for _ in 0..<500 where threads.withLock({ $0 }) > 0 { usleep(10_000) }
        Glibc.close(listener)
    }

    deinit { close() }

    func acceptLoop() {
        while !closing.load(ordering: .relaxed) {
            let client = accept(listener, nil, nil)
            if client < 0 { return }
            let broker = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = Self.loopback(port: target)
            let ok = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(broker, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard ok == 0 else { Glibc.close(client); Glibc.close(broker); continue }
            connections.withLock { $0.append((client, broker)) }
            threads.withLock { $0 += 1 }
            Thread { [self] in copy(client, broker); threads.withLock { $0 -= 1 } }.start()
        }
    }

    func copy(_ client: Int32, _ broker: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        defer {
            connections.withLock { $0.removeAll { $0.client == client } }
            Glibc.close(client)
            Glibc.close(broker)
        }
        while !closing.load(ordering: .relaxed) {
            let held = holding.load(ordering: .relaxed)
            var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: broker, events: held ? 0 : Int16(POLLIN), revents: 0)]
            _ = poll(&fds, 2, 100)
            for (i, from, to) in [(0, client, broker), (1, broker, client)] where fds[i].revents != 0 {
                if fds[i].revents & Int16(POLLIN) == 0 { return }   // hang-up or error
                let n = read(from, &buffer, buffer.count)
                if n <= 0 { return }
                if i == 0 { upstream.add(n, ordering: .relaxed) } else { downstream.add(n, ordering: .relaxed) }
                var sent = 0
                while sent < n {
                    let w = buffer.withUnsafeBytes { write(to, $0.baseAddress! + sent, n - sent) }
                    if w <= 0 { return }
                    sent += w
                }
            }
        }
    }
}
