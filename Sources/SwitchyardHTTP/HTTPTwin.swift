import SwitchyardCore

/// The in-memory twin of an HTTP upstream, for the unit tier (as `ManualClock` is of the clock): every request
/// an adapter sends is recorded and answered by `respond`, a closure the test gives (and may change), with no
/// socket, thread or libcurl. As an `HTTPConnector` it hands itself out to each run and counts the runs that
/// have it open; like a closed `HTTPClient`, it refuses a request while no run has it.
public final class HTTPTwin: HTTPTransport, HTTPConnector, Sendable {
    /// Answers one request: a response (any status), or a thrown `HTTPError` for no answer at all.
    public typealias Responder = @Sendable (HTTPRequest) async throws -> HTTPResponse

    struct State {
        var respond: Responder
        var requests: [HTTPRequest] = []
        var open = 0
        var runs = 0
        var options: [HTTPClient.Options] = []
    }
    let state: Locked<State>

    public init(_ respond: @escaping Responder) {
        state = Locked(State(respond: respond))
    }

    /// Answers from a table: `"METHOD /path"` (the URL's path, query left out) → response; anything else 404.
    public convenience init(routes: [String: HTTPResponse]) {
        self.init { r in routes["\(r.method) \(HTTPTwin.path(of: r.url))"] ?? .json(#"{"error":"not found"}"#, status: 404) }
    }

    /// From now on, requests are answered by `respond`.
    public func answer(with respond: @escaping Responder) { state.withLock { $0.respond = respond } }

    /// Every request sent, in order.
    public var requests: [HTTPRequest] { state.withLock { $0.requests } }
    /// The requests as `"METHOD /path"`, in order.
    public var lines: [String] { requests.map { "\($0.method) \(Self.path(of: $0.url))" } }
    public func clearRequests() { state.withLock { $0.requests = [] } }
    /// Runs that have the client open now, and runs that ever opened it.
    public var openRuns: Int { state.withLock { $0.open } }
    public var runs: Int { state.withLock { $0.runs } }
    /// The options each run opened the client with.
    public var options: [HTTPClient.Options] { state.withLock { $0.options } }

    /// The path of a URL (after the host, before `?`), still percent-encoded.
    public static func path(of url: String) -> String {
        var rest = Substring(url)
        if let colon = rest.firstIndex(of: ":"), rest[colon...].hasPrefix("://") { rest = rest[rest.index(colon, offsetBy: 3)...] }
        guard let slash = rest.firstIndex(of: "/") else { return "/" }
        let path = rest[slash...]
        return String(path.prefix { $0 != "?" })
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        let respond = try state.withLock { s -> Responder in
            guard s.open > 0 else { throw HTTPError(kind: .other, message: "HTTP client is shut down") }
            s.requests.append(request)
            return s.respond
        }
        // Like the libcurl client: a request whose task is cancelled fails with CancellationError.
        try Task.checkCancellation()
        let response = try await respond(request)
        try Task.checkCancellation()
        return response
    }

    public func withClient<R>(options: HTTPClient.Options, isolation: isolated (any Actor)?,
                              _ body: (any HTTPTransport) async throws -> R) async throws -> R {
        state.withLock {
            $0.open += 1
            $0.runs += 1
            $0.options.append(options)
        }
        return try await withTeardown { try await body(self) } teardown: { self.state.withLock { $0.open -= 1 } }
    }
}
