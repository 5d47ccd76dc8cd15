import Foundation
import HTTPTypes
import HummingbirdCore
import NIOCore
import SwitchyardCore
import SwitchyardHTTP

/// An HTTP server on 127.0.0.1 (free port) that every upstream simulator builds on: routes, a record of
/// the requests received (for exact-body assertions), and knobs for latency and injected failures. The same
/// routes answer without a socket (`inMemory`, then `respond(to:)` or `twinResponder`): a simulator is then
/// the peer of the unit tier's `HTTPTwin`, answering through exactly the code it answers with on the wire.
public final class LoopbackHTTPServer: Sendable {
    public struct Received: Sendable, Equatable {
        public var method: String
        /// The request target's path, percent-decoded, as sent (a trailing slash kept).
        public var path: String
        public var query: [String: String]
        /// Names lower-cased; the last value wins.
        public var headers: [String: String]
        public var body: [UInt8]
        /// When the request was read, on the monotonic clock (`DispatchTime.now().uptimeNanoseconds`).
        public var at: UInt64 = 0
        public var text: String { String(decoding: body, as: UTF8.self) }

        public init(method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:], body: [UInt8] = [],
                    at: UInt64 = DispatchTime.now().uptimeNanoseconds) {
            self.method = method
            self.path = path
            self.query = query
            self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { _, b in b })
            self.body = body
            self.at = at
        }

        /// A request as the server reads it off the wire: `target` is the request line's
        /// (`/v1/lights/label:Hall%20Lamp/state?fast=true`), split into the decoded path and query.
        public init(method: String, target: String, headers: [(String, String)] = [], body: [UInt8] = [],
                    at: UInt64 = DispatchTime.now().uptimeNanoseconds) {
            let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            let rawPath = parts.first.map(String.init) ?? ""
            var query: [String: String] = [:]
            if parts.count > 1 {
                for pair in parts[1].split(separator: "&") {
                    let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map { String($0).removingPercentEncoding ?? String($0) }
                    query[kv[0]] = kv.count > 1 ? kv[1] : ""
                }
            }
            self.init(method: method, path: rawPath.removingPercentEncoding ?? rawPath, query: query,
                      headers: Dictionary(headers.map { ($0.0, $0.1) }, uniquingKeysWith: { _, b in b }), body: body, at: at)
        }
    }

    public struct Reply: Sendable, Equatable {
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
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public typealias Handler = @Sendable (Received) async -> Reply

    /// "METHOD /path": methods comma-separated (none: any), path components matched without regard to case,
    /// `*` any one component, and a last `*` any number of them.
    struct Route: Sendable {
        var methods: Set<String>
        var components: [String]
        var handler: Handler

        init(_ pattern: String, _ handler: @escaping Handler) {
            let parts = pattern.split(separator: " ", maxSplits: 1)
            var path = pattern
            methods = []
            if parts.count > 1, !parts[0].hasPrefix("/") {
                methods = Set(parts[0].split(separator: ",").map { $0.uppercased() })
                path = String(parts[1])
            }
            components = path.split(separator: "?").first.map { $0.split(separator: "/").map(String.init) } ?? []
            self.handler = handler
        }

        func matches(_ method: String, _ path: String) -> Bool {
            guard methods.isEmpty || methods.contains(method.uppercased()) else { return false }
            let nodes = path.split(separator: "/")
            guard nodes.count >= components.count else { return nodes.isEmpty && components.first == "*" }
            for (i, node) in nodes.enumerated() {
                let c = i < components.count ? components[i] : (components.last == "*" ? "*" : nil)
                guard let c, c == "*" || node.caseInsensitiveCompare(c) == .orderedSame else { return false }
            }
            return true
        }
    }

    struct State {
        var received: [Received] = []
        var delay: Double = 0
        var held = false
        var failNext: [Int] = []
    }

    let routes: [Route]
    let state = Locked(State())
    let listener: LoopbackListener?
    public let port: Int
    public let baseURL: String

    private init(routes: [Route], listener: LoopbackListener?, baseURL: String) {
        self.routes = routes
        self.listener = listener
        self.port = listener?.port ?? 0
        self.baseURL = baseURL
    }

    /// The largest request body read (a simulator's peer is the bridge, in a test).
    static let maxBody = 64 << 20

    /// Starts the server; `routes` maps "METHOD /path" (`*` wildcards, see `Route`) to handlers, the first
    /// that matches answers; a request none matches is answered 404 and not recorded. `port` 0 takes any
    /// free port (tests that need a known port, e.g. an upstream that comes up late, give one).
    public static func start(routes: [(String, Handler)], port: UInt16 = 0) async throws -> LoopbackHTTPServer {
        let table = routes.map { Route($0.0, $0.1) }
        // The listener's responder needs the server, which needs the listener's port: the server is made
        // once the port is known and the responder finds it through `box`.
        let box = LateRef<LoopbackHTTPServer>()
        let channel = HTTP1Channel(responder: { request, writer, _ in
            var request = request
            let body = try await request.collectBody(upTo: Self.maxBody)
            let received = Received(method: request.method.rawValue, target: request.head.path ?? "/",
                                    headers: request.headers.map { ($0.name.canonicalName, $0.value) }, body: Array(buffer: body))
            let reply = await box.value?.respond(to: received) ?? Reply(status: 503)
            var fields = HTTPFields()
            for (k, v) in reply.headers.sorted(by: { $0.key < $1.key }) {
                if let name = HTTPField.Name(k) { fields[name] = v }
            }
            let response = Response(status: .init(code: reply.status), headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: reply.body)))
            try await writer.write(response: response.head, body: response.body)
        })
        let listener = try await LoopbackListener.start(port: port, name: "http", channel: channel)
        let server = LoopbackHTTPServer(routes: table, listener: listener, baseURL: "http://127.0.0.1:\(listener.port)")
        box.set(server)
        return server
    }

    /// The same routes, record and knobs with no socket: `respond(to:)` (or `twinResponder`) is the only way
    /// in. `baseURL` is what the simulator says its address is (in links it writes into answers).
    public static func inMemory(routes: [(String, Handler)], baseURL: String = "http://simulator.invalid") -> LoopbackHTTPServer {
        LoopbackHTTPServer(routes: routes.map { Route($0.0, $0.1) }, listener: nil, baseURL: baseURL)
    }

    /// Answers one request as the server does, socket or not: the first route that matches records it,
    /// waits the delay, gives an injected failure if one is due, else its handler's answer.
    public func respond(to request: Received) async -> Reply {
        guard let route = routes.first(where: { $0.matches(request.method, request.path) }) else { return Reply(status: 404) }
        let (delay, injected) = state.withLock { s -> (Double, Int?) in
            s.received.append(request)
            return (s.delay, s.failNext.isEmpty ? nil : s.failNext.removeFirst())
        }
        if delay > 0 { try? await Task.sleep(for: .seconds(delay)) }
        for _ in 0..<1200 {
            guard state.withLock({ $0.held }) else { break }
            try? await Task.sleep(for: .milliseconds(50))
        }
        if let injected { return Reply(status: injected) }
        return await route.handler(request)
    }

    /// `respond(to:)` as an `HTTPTwin`'s responder: `HTTPTwin(server.twinResponder)` is this server in memory for
    /// an adapter under test (URL's host ignored, header names lower-cased as the libcurl client gives them).
    public var twinResponder: HTTPTwin.Responder {
        { [self] request in
            let reply = await respond(to: Received(method: request.method, target: Self.target(of: request.url),
                                                   headers: request.headers, body: request.body ?? []))
            return SwitchyardHTTP.HTTPResponse(status: reply.status, headers: reply.headers, body: reply.body)
        }
    }

    /// The request target of a URL: its path and query (`/v1/lights/all?x=1`), the scheme and host left out.
    static func target(of url: String) -> String {
        var rest = Substring(url)
        if let scheme = rest.range(of: "://") { rest = rest[scheme.upperBound...] }
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return "/" }
        let target = rest[start...]
        return target.hasPrefix("?") ? "/" + target : String(target)
    }

    public var received: [Received] { state.withLock { $0.received } }
    public var receivedCount: Int { state.withLock { $0.received.count } }
    public func clearReceived() { state.withLock { $0.received.removeAll() } }
    /// Latency added before every answer.
    public func setDelay(_ seconds: Double) { state.withLock { $0.delay = seconds } }
    /// Requests are recorded, and their answers wait until `release()` (at most 1 200 polls 50 ms apart): an
    /// upstream that has not answered yet until the test says so, instead of for a delay that a loaded test
    /// process can stretch. Once released, an answer still waits for the test process to run it.
    public func hold() { state.withLock { $0.held = true } }
    public func release() { state.withLock { $0.held = false } }
    /// The next requests get these status codes instead of their route's answer (e.g. [500, 503]).
    public func injectFailures(_ statuses: [Int]) { state.withLock { $0.failNext += statuses } }
    /// Connections open now (0 in memory).
    public var openConnections: Int { listener?.openConnections ?? 0 }

    /// Stops listening and drops every connection, after letting answers under way finish for up to a second.
    public func stop() async {
        await listener?.stop()
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
