import Foundation
import SimulatorSupport
import SwitchyardCore

/// The Livecoding.tv API v1 and its OAuth2 provider on loopback (docs/upstreams/imp-livecoding.md §2):
/// `/o/authorize/` (redirects with `code` and `state`, or `error=access_denied`), `/o/token/` (HTTP
/// Basic client auth, form body, authorization_code and refresh_token grants, refresh tokens rotate:
/// the old one dies), `/api/v1/livestreams/onair/` (DRF limit/offset pages with absolute `next`),
/// `/api/v1/livestreams/<slug>/`, DRF `{"detail"}` errors: 401 for a bad or expired token, 403 for a
/// missing scope or a private channel, 404 for an unknown one.
public final class LivecodingSimulator: Sendable {
    public struct Channel: Sendable, Equatable {
        public var slug: String
        public var live: Bool
        public var viewers: Int
        public var title: String
        public var category: String? = "Swift"
        public var forbidden = false
        public init(slug: String, live: Bool, viewers: Int = 0, title: String = "") {
            self.slug = slug
            self.live = live
            self.viewers = viewers
            self.title = title
        }
    }

    struct State: Sendable {
        var clientID: String
        var clientSecret: String
        var channels: [Channel]
        var codes: [String: (redirect: String, scope: String)] = [:]
        var access: [String: (expires: Date, scope: String)] = [:]
        var refresh: [String: String] = [:]   // refresh token -> scope
        var expiresIn = 36_000
        var deny = false
        var tokenRequests: [String] = []      // grant types, in order
    }

    let state: Locked<State>
    public let server: LoopbackHTTPServer
    public var apiURL: String { server.baseURL + "/api/v1" }
    public var oauthURL: String { server.baseURL + "/o" }

    private init(state: State, server: LoopbackHTTPServer) {
        self.state = Locked(state)
        self.server = server
    }

    public static func start(clientID: String, clientSecret: String, channels: [Channel]) async throws -> LivecodingSimulator {
        try await start(state: State(clientID: clientID, clientSecret: clientSecret, channels: channels), port: 0)
    }

    /// A new server on this one's port with its channels and the tokens it issued: the end of an outage
    /// that `stop` began (the soak run's schedule).
    public func restarted() async throws -> LivecodingSimulator {
        try await Self.start(state: state.withLock { $0 }, port: UInt16(server.port))
    }

    static func start(state: State, port: UInt16) async throws -> LivecodingSimulator {
        let holder = LateRef<LivecodingSimulator>()
        let handler: LoopbackHTTPServer.Handler = { req in
            guard let sim = holder.value else { return .init(status: 503) }
            return sim.handle(req)
        }
        let server = try await LoopbackHTTPServer.start(routes: [("GET *", handler), ("POST *", handler)], port: port)
        let sim = LivecodingSimulator(state: state, server: server)
        holder.set(sim)
        return sim
    }


    public func stop() async { await server.stop() }

    // MARK: knobs

    /// Lifetime of the access tokens issued from now on.
    public func setExpiresIn(_ seconds: Int) { state.withLock { $0.expiresIn = seconds } }
    /// The user clicks "Deny" on the authorise page.
    public func setDeny(_ deny: Bool) { state.withLock { $0.deny = deny } }
    /// Every access token issued so far stops working (401), as after a server-side revocation.
    public func revokeAccessTokens() { state.withLock { $0.access.removeAll() } }
    public func setLive(_ slug: String, _ live: Bool, viewers: Int = 0) {
        state.withLock { s in
            if let i = s.channels.firstIndex(where: { $0.slug == slug }) { s.channels[i].live = live; s.channels[i].viewers = viewers }
        }
    }
    public func setChannels(_ channels: [Channel]) { state.withLock { $0.channels = channels } }
    /// Grant types seen by the token endpoint, in order.
    public var tokenRequests: [String] { state.withLock { $0.tokenRequests } }
    public var requests: [LoopbackHTTPServer.Received] { server.received }
    /// Refresh tokens that still work.
    public var liveRefreshTokens: [String] { state.withLock { Array($0.refresh.keys) } }

    // MARK: the API

    static func json(_ status: Int, _ body: Any, headers: [String: String] = [:]) -> LoopbackHTTPServer.Reply {
        let data = (try? JSONSerialization.data(withJSONObject: body, options: [.sortedKeys])) ?? Data()
        return .json(String(decoding: data, as: UTF8.self), status: status, headers: headers)
    }

    static func token() -> String { (0..<30).map { _ in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".randomElement()! }.map(String.init).joined() }

    func handle(_ req: LoopbackHTTPServer.Received) -> LoopbackHTTPServer.Reply {
        let base = server.baseURL
        // Every path of the API ends in a slash (the bridge sends it); matched here without it.
        var path = req.path
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        return state.withLock { s -> LoopbackHTTPServer.Reply in
            switch (req.method, path) {
            case ("GET", "/o/authorize"):
                let q = req.query
                guard q["client_id"] == s.clientID, q["response_type"] == "code", let redirect = q["redirect_uri"], let st = q["state"] else {
                    return Self.json(400, ["error": "invalid_request"])
                }
                var target = URLComponents(string: redirect)!
                if s.deny {
                    target.queryItems = [URLQueryItem(name: "error", value: "access_denied"), URLQueryItem(name: "state", value: st)]
                } else {
                    let code = Self.token()
                    s.codes[code] = (redirect, q["scope"] ?? "read")
                    target.queryItems = [URLQueryItem(name: "code", value: code), URLQueryItem(name: "state", value: st)]
                }
                return .init(status: 302, headers: ["Location": target.url!.absoluteString])
            case ("POST", "/o/token"):
                let basic = "Basic " + Data("\(s.clientID):\(s.clientSecret)".utf8).base64EncodedString()
                guard req.headers["authorization"] == basic else { return Self.json(401, ["error": "invalid_client"]) }
                var form: [String: String] = [:]
                for pair in req.text.split(separator: "&") {
                    let kv = pair.split(separator: "=", maxSplits: 1).map { String($0).removingPercentEncoding ?? String($0) }
                    if kv.count == 2 { form[kv[0]] = kv[1] }
                }
                let grant = form["grant_type"] ?? ""
                s.tokenRequests.append(grant)
                let scope: String
                switch grant {
                case "authorization_code":
                    guard let code = form["code"], let issued = s.codes.removeValue(forKey: code), issued.redirect == form["redirect_uri"] else {
                        return Self.json(400, ["error": "invalid_grant"])
                    }
                    scope = issued.scope
                case "refresh_token":
                    guard let rt = form["refresh_token"], let sc = s.refresh.removeValue(forKey: rt) else {   // rotation: the old one dies
                        return Self.json(400, ["error": "invalid_grant"])
                    }
                    scope = sc
                default:
                    return Self.json(400, ["error": "unsupported_grant_type"])
                }
                let access = Self.token(), refresh = Self.token()
                s.access[access] = (Date().addingTimeInterval(Double(s.expiresIn)), scope)
                s.refresh[refresh] = scope
                return Self.json(200, ["access_token": access, "token_type": "Bearer", "expires_in": s.expiresIn, "refresh_token": refresh,
                                       "scope": scope])
            default:
                break
            }
            guard req.method == "GET", path.hasPrefix("/api/v1/") else { return Self.json(404, ["detail": "Not found."]) }
            let auth = req.headers["authorization"] ?? ""
            guard auth.hasPrefix("Bearer "), let t = s.access[String(auth.dropFirst(7))], t.expires > Date() else {
                return Self.json(401, ["detail": "Authentication credentials were not provided."])
            }
            guard t.scope.split(separator: " ").contains("read") else {
                return Self.json(403, ["detail": "You do not have permission to perform this action."])
            }
            let rest = String(path.dropFirst("/api/v1".count))
            if rest == "/livestreams/onair" {
                let limit = max(1, Int(req.query["limit"] ?? "") ?? 100)
                let offset = max(0, Int(req.query["offset"] ?? "") ?? 0)
                let live = s.channels.filter(\.live)
                let page = Array(live.dropFirst(offset).prefix(limit))
                let next: Any = offset + limit < live.count ? "\(base)/api/v1/livestreams/onair/?limit=\(limit)&offset=\(offset + limit)" : NSNull()
                let previous: Any = offset > 0 ? "\(base)/api/v1/livestreams/onair/?limit=\(limit)&offset=\(max(0, offset - limit))" : NSNull()
                return Self.json(200, ["count": live.count, "next": next, "previous": previous, "results": page.map { Self.stream($0, base) }])
            }
            let parts = rest.split(separator: "/")
            if parts.count == 2, parts[0] == "livestreams" {
                guard let c = s.channels.first(where: { $0.slug.lowercased() == parts[1].lowercased() }) else {
                    return Self.json(404, ["detail": "Not found."])
                }
                if c.forbidden { return Self.json(403, ["detail": "You do not have permission to perform this action."]) }
                return Self.json(200, Self.stream(c, base))
            }
            return Self.json(404, ["detail": "Not found."])
        }
    }

    /// A Livestream object with the field names every client reads (docs/upstreams/imp-livecoding.md §2).
    static func stream(_ c: Channel, _ base: String) -> [String: Any] {
        ["url": "\(base)/api/v1/livestreams/\(c.slug)/", "user": "\(base)/api/v1/users/\(c.slug)/", "user__slug": c.slug,
         "title": c.title, "description": "", "coding_category": c.category ?? NSNull(), "difficulty": "intermediate",
         "language": "English", "tags": "swift, linux", "is_live": c.live, "viewers_live": c.live ? c.viewers : 0,
         "viewing_urls": ["\(base)/\(c.slug)/playlist.m3u8"], "thumbnail_url": "\(base)/thumbnails/\(c.slug)_250_140/thumbnail.jpg"]
    }
}
