import Foundation
import SwitchyardTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// Plain HTTP/1.1 over a socket, with nothing added: what a script, a probe or a hostile peer sends
/// (headers as given, bodies of any size). Blocking, with a receive timeout; one request per connection.
public enum HTTPProbe {
    public struct Answer: Sendable {
        public var status: Int
        public var headers: [(String, String)]
        public var body: String
        public func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    }

    /// A connected TCP socket to 127.0.0.1:`port`, with receive and send timeouts and, when given, a small
    /// receive buffer (set before connecting, so that the window stays small).
    public static func connect(port: Int, timeout: Double = 10, receiveBuffer: Int? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestError("socket failed") }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        if var size = receiveBuffer.map(Int32.init) { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        let rc = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { close(fd); throw TestError("cannot connect to 127.0.0.1:\(port)") }
        return fd
    }

    public static func write(_ fd: Int32, _ bytes: [UInt8]) throws {
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw TestError("send failed (\(errno))") }
            off += n
        }
    }

    /// Reads until the peer closes, the timeout passes, or `enough` says the bytes so far are a whole answer.
    public static func read(_ fd: Int32, enough: ([UInt8]) -> Bool = { _ in false }) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            out += buf[0..<n]
            if enough(out) { break }
        }
        return out
    }

    /// One request; the answer as far as it came (status 0 when none did).
    public static func request(port: Int, _ path: String, method: String = "GET", headers: [(String, String)] = [],
                               body: [UInt8] = [], timeout: Double = 10) throws -> Answer {
        let fd = try connect(port: port, timeout: timeout)
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nConnection: close\r\n"
        if !headers.contains(where: { $0.0.lowercased() == "host" }) { head += "Host: 127.0.0.1:\(port)\r\n" }
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        if !body.isEmpty || method == "POST" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        try? write(fd, Array(head.utf8) + body)
        return parse(read(fd))
    }

    public static func parse(_ bytes: [UInt8]) -> Answer {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return Answer(status: 0, headers: [], body: text) }
        let lines = text[..<split.lowerBound].components(separatedBy: "\r\n")
        let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        let headers = lines.dropFirst().compactMap { line -> (String, String)? in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
        }
        return Answer(status: status, headers: headers, body: String(text[split.upperBound...]))
    }

    /// A WebSocket handshake on a socket of its own; returns the socket (open, upgraded) and the answer's head.
    public static func webSocket(port: Int, headers: [(String, String)] = [], receiveBuffer: Int? = nil) throws -> (Int32, Answer) {
        let fd = try connect(port: port, receiveBuffer: receiveBuffer)
        var head = "GET /ws HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        for (k, v) in headers { head += "\(k): \(v)\r\n" }
        head += "\r\n"
        try write(fd, Array(head.utf8))
        let answer = parse(read(fd) { bytes in bytes.count >= 4 && bytes.suffix(4) == [13, 10, 13, 10] || bytes.count > 8192 })
        return (fd, answer)
    }
}

extension HTTPProbe {
    /// Runs blocking socket calls on a thread of their own, off Swift's cooperative pool (two threads on a
    /// two-core machine): a test that blocks there starves a console running in the same process.
    public static func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { c in
            let t = Thread { c.resume(with: Result { try body() }) }
            t.start()
        }
    }

    /// A `/livez` answer by `ask`, asked again (at most three times in all) while it is a 503 that came only
    /// after the console's 5 s for the engine to answer: the engine's actor runs on a cooperative pool that a
    /// loaded test process can hold for longer, and a core that does not answer in time is then what the
    /// bridge rightly reports. A 503 that comes sooner is returned as it is. The last answer.
    public static func alive(_ ask: @Sendable () async throws -> Answer) async throws -> Answer {
        var answer = Answer(status: 0, headers: [], body: "")
        for attempt in 1...3 {
            let started = ContinuousClock.now
            answer = try await ask()
            guard answer.status == 503, ContinuousClock.now - started >= .seconds(4.5) else { return answer }
            print("/livez: 503 after \(ContinuousClock.now - started) (attempt \(attempt)): \(answer.body.prefix(100))")
        }
        return answer
    }

    /// A client's WebSocket text frame (masked, as a client must send it).
    public static func webSocketFrame(text: String) -> [UInt8] {
        let payload = Array(text.utf8)
        var out: [UInt8] = [0x81]
        switch payload.count {
        case ..<126: out.append(0x80 | UInt8(payload.count))
        case ..<65_536: out += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default: out += [0x80 | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        let mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        out += mask
        out += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return out
    }

    /// Sends `unit` again and again without blocking, up to `limit` bytes, until the peer stops taking
    /// them: nothing can be sent for `stall` seconds. Returns the bytes it took, and whether the
    /// connection ended instead (an error, or the peer closed it).
    public static func sendUntilStalled(_ fd: Int32, _ unit: [UInt8], limit: Int, stall: Double) -> (sent: Int, ended: Bool) {
        var sent = 0
        while sent < limit {
            let offset = sent % unit.count
            let n = unit[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            if n > 0 {
                sent += n
                continue
            }
            guard n < 0, errno == EAGAIN || errno == EWOULDBLOCK else { return (sent, true) }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let ready = poll(&p, 1, Int32(stall * 1000))
            if ready == 0 { return (sent, false) }
            guard ready == 1, p.revents & Int16(POLLOUT) != 0, p.revents & Int16(POLLERR | POLLHUP) == 0 else { return (sent, true) }
        }
        return (sent, false)
    }
}

extension HTTPProbe {
    /// Whether the peer has closed the connection (read to its end, or reset it), waiting at most
    /// `seconds` for it to say so; what it sent before is read and dropped.
    public static func isClosed(_ fd: Int32, waiting seconds: Double) -> Bool {
        var buf = [UInt8](repeating: 0, count: 4096)
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while poll(&p, 1, Int32(seconds * 1000)) == 1 {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) { return true }
        }
        return false
    }
}

/// The Prometheus text format as far as the soak and the tests need it: sample lines (`name{labels} value`)
/// by series. The real parser (prometheus_client) checks the format itself in Tests/browser.
public enum PrometheusText {
    public static func samples(_ text: String) -> [String: Double] {
        var out: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let v = Double(line[line.index(after: space)...]) else { continue }
            out[String(line[..<space])] = v
        }
        return out
    }

    /// Series that can only grow (counters, histogram counts, buckets and sums of non-negative values).
    public static func isMonotonic(_ series: String) -> Bool {
        let name = series.split(separator: "{").first.map(String.init) ?? series
        return name.hasSuffix("_total") || name.hasSuffix("_count") || name.hasSuffix("_bucket") || name.hasSuffix("_sum")
    }

    /// Each monotonic series of `before` that is lower in `after`, in words.
    public static func wentBackwards(_ before: [String: Double], _ after: [String: Double]) -> [String] {
        before.compactMap { k, v in
            guard isMonotonic(k), let now = after[k], now < v else { return nil }
            return "\(k) went from \(v) to \(now)"
        }.sorted()
    }
}
