/// What an adapter sends its HTTP requests through: `HTTPClient` (libcurl, in the bridge), or `HTTPTwin`
/// (in memory, in the unit tier). The cloud adapters hold one of these, never the concrete client.
public protocol HTTPTransport: Sendable {
    /// Sends one request and returns the response (any status); throws `HTTPError` when there is none
    /// (time-out, no connection, TLS), `CancellationError` when the calling task is cancelled.
    func send(_ request: HTTPRequest) async throws -> HTTPResponse
}

extension HTTPTransport {
    public func get(_ url: String, headers: [(String, String)] = [], timeout: Double = 30) async throws -> HTTPResponse {
        try await send(HTTPRequest(url: url, headers: headers, timeout: timeout))
    }
}

/// Where an adapter's run gets its HTTP client. A client exists only inside `withClient`: the run opens it
/// there, and it is closed (libcurl's thread ended, every pending request failed) when that returns.
/// `CurlConnector` opens an `HTTPClient`; an `HTTPTwin` hands out itself.
public protocol HTTPConnector: Sendable {
    /// Runs `body` with a client open for exactly that long. `isolation` is the caller's (pass
    /// `#isolation`), so that `body` may use the caller's state.
    func withClient<R>(options: HTTPClient.Options, isolation: isolated (any Actor)?,
                       _ body: (any HTTPTransport) async throws -> R) async throws -> R
}

/// The bridge's connector: an `HTTPClient` over libcurl for each run (`HTTPClient.withClient`).
public struct CurlConnector: HTTPConnector {
    public init() {}
    public func withClient<R>(options: HTTPClient.Options, isolation: isolated (any Actor)?,
                              _ body: (any HTTPTransport) async throws -> R) async throws -> R {
        try await HTTPClient.withClient(options: options, isolation: isolation) { client in try await body(client) }
    }
}

extension HTTPResponse {
    /// A JSON answer (`Content-Type: application/json`).
    public static func json(_ text: String, status: Int = 200, headers: [String: String] = [:]) -> HTTPResponse {
        var h = headers
        h["content-type"] = "application/json"
        return HTTPResponse(status: status, headers: h, body: Array(text.utf8))
    }
}
