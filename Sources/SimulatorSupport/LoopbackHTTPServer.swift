import FlyingFox
import FlyingSocks
import Foundation
import SwitchyardCore

/// An HTTP server on 127.0.0.1 (free port) that every upstream simulator builds on: routes, a record of
/// the requests received (for exact-body assertions), and knobs for latency and injected failures.
public final class LoopbackHTTPServer: Sendable {
    public struct Received: Sendable, Equatable {
        public var method: String
        public var path: String
        public var query: [String: String]
        public var headers: [String: String]
        public var body: [UInt8]
        /// When the request was read, on the monotonic clock (`DispatchTime.now().uptimeNanoseconds`).
        public var at: UInt64 = 0
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public struct Reply: Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
        public init(status: Int = 200, headers: [String: String] = [:], body: [UInt8] = []) {
            self.status = status
            self.headers = headers
            self.body = body
        }
        public static func json(_ text: String, status: Int = 200, headers: [String: String] = [:]) -> Reply {
            var h = headers
            h["Content-Type"] = "application/json"
            return Reply(status: status, headers: h, body: Array(text.utf8))
        }
    }

    public typealias Handler = @Sendable (Received) async -> Reply

    let server: HTTPServer
    let task: Task<Void, any Error>
    let state = Locked<(received: [Received], delay: Double, failNext: [Int])>(([], 0, []))
    public let port: Int

    private init(server: HTTPServer, task: Task<Void, any Error>, port: Int) {
        self.server = server
        self.task = task
        self.port = port
    }

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Starts the server; `routes` maps "METHOD /path" (FlyingFox route syntax, `*` wildcards) to handlers.
    /// `port` 0 takes any free port (tests that need a known port, e.g. an upstream that comes up late).
    public static func start(routes: [(String, Handler)], port: UInt16 = 0) async throws -> LoopbackHTTPServer {
        let server = HTTPServer(config: .init(address: try .inet(ip4: "127.0.0.1", port: port), timeout: 30,
                                              pool: NoDelayPool(inner: HTTPServer.defaultPool()), logger: ErrorsToStderr()))
        let box = LateRef<LoopbackHTTPServer>()
        for (route, handler) in routes {
            await server.appendRoute(HTTPRoute(stringLiteral: route)) { req in
                let received = Received(
                    method: req.method.rawValue, path: req.path,
                    query: Dictionary(req.query.map { ($0.name, $0.value) }, uniquingKeysWith: { _, b in b }),
                    headers: Dictionary(req.headers.map { ($0.key.rawValue.lowercased(), $0.value) }, uniquingKeysWith: { _, b in b }),
                    body: Array(try await req.bodyData), at: DispatchTime.now().uptimeNanoseconds)
                guard let owner = box.value else { return HTTPResponse(statusCode: .serviceUnavailable) }
                let (delay, injected) = owner.state.withLock { s -> (Double, Int?) in
                    s.received.append(received)
                    return (s.delay, s.failNext.isEmpty ? nil : s.failNext.removeFirst())
                }
                if delay > 0 { try? await Task.sleep(for: .seconds(delay)) }
                if let injected { return HTTPResponse(statusCode: HTTPStatusCode(injected, phrase: "Injected")) }
                let reply = await handler(received)
                var headers = HTTPHeaders()
                for (k, v) in reply.headers { headers[HTTPHeader(k)] = v }
                return HTTPResponse(statusCode: HTTPStatusCode(reply.status, phrase: ""), headers: headers, body: Data(reply.body))
            }
        }
        let task = Task { try await server.run() }
        try await server.waitUntilListening(timeout: 10)
        guard case .ip4(_, let port) = await server.listeningAddress else { throw SimulatorError("server did not report its port") }
        let s = LoopbackHTTPServer(server: server, task: task, port: Int(port))
        box.set(s)
        return s
    }


    public var received: [Received] { state.withLock { $0.received } }
    public var receivedCount: Int { state.withLock { $0.received.count } }
    public func clearReceived() { state.withLock { $0.received.removeAll() } }
    /// Latency added before every answer.
    public func setDelay(_ seconds: Double) { state.withLock { $0.delay = seconds } }
    /// The next requests get these status codes instead of their route's answer (e.g. [500, 503]).
    public func injectFailures(_ statuses: [Int]) { state.withLock { $0.failNext += statuses } }

    public func stop() async {
        await server.stop(timeout: 1)
        task.cancel()
    }
}

/// FlyingFox writes a response's header and body separately; with Nagle on, the body waits for the
/// client's delayed ACK (40 ms on Linux), which no real upstream does. Every socket the server waits
/// on gets TCP_NODELAY (accepted sockets inherit it from the listener on Linux; set again to be sure).
public struct NoDelayPool: AsyncSocketPool {
    public init(inner: any AsyncSocketPool) { self.inner = inner }
    let inner: any AsyncSocketPool
    public func prepare() async throws { try await inner.prepare() }
    public func run() async throws { try await inner.run() }
    public func suspendSocket(_ socket: Socket, untilReadyFor events: Socket.Events) async throws {
        var one: Int32 = 1
        _ = setsockopt(socket.file.rawValue, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        try await inner.suspendSocket(socket, untilReadyFor: events)
    }
}

/// FlyingFox's warnings and errors (a connection closed without an answer says why only here), on
/// stderr: a test's output then shows what the simulator saw.
public struct ErrorsToStderr: FlyingSocks.Logging {
    public init() {}
    public func logDebug(_ debug: @autoclosure () -> String) {}
    public func logInfo(_ info: @autoclosure () -> String) {}
    public func logWarning(_ warning: @autoclosure () -> String) { say("warning", warning()) }
    public func logError(_ error: @autoclosure () -> String) { say("error", error()) }
    public func logCritical(_ critical: @autoclosure () -> String) { say("critical", critical()) }
    func say(_ level: String, _ text: String) {
        // Stopping a server cancels its connections, and clients hang up after their answer: routine.
        // SWITCHYARD_SIM_LOG=all shows those too.
        if ProcessInfo.processInfo.environment["SWITCHYARD_SIM_LOG"] != "all",
           text.contains("CancellationError") || text.contains("SocketError. Disconnected") || text.contains("Broken pipe")
            || text.contains("unhandled request") { return }
        FileHandle.standardError.write(Data("simulator http \(level): \(text)\n".utf8))
    }
}

/// A reference filled in once its object exists: route handlers are registered before the server or
/// simulator that answers them is built. Weak: the object owns the server whose handlers hold this, and
/// a strong reference would make that a cycle that outlives the simulator (LeakSanitizer reports it).
public final class LateRef<T: AnyObject & Sendable>: Sendable {
    struct Weak { weak var object: T? }
    let ref = Locked(Weak())
    public init() {}
    public var value: T? { ref.withLock { $0.object } }
    public func set(_ object: T) { ref.withLock { $0.object = object } }
}

public struct SimulatorError: Error, CustomStringConvertible {
    public var description: String
    public init(_ d: String) { description = d }
}
