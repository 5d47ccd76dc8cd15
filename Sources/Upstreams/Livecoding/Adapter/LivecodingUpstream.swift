import SwitchyardConfig
import SwitchyardCore

/// `livecoding:` — Livecoding.tv stream status, with `switchyard auth livecoding` for the OAuth2 consent.
public struct LivecodingUpstream: Upstream {
    public init() {}
    public var key: String { LivecodingAdapter.id }
    public var summary: String { "Livecoding.tv stream status (switchyard auth livecoding for the OAuth2 consent)." }
    public var secretKeys: Set<String> { ["client_secret"] }

    public func read(_ s: ConfigSection, bridge: BridgeConfigContext) -> LivecodingSettings {
        var l = LivecodingSettings()
        l.apiURL = s.cloudURL("api_url", l.apiURL, secret: "the token", doc: "The Livecoding API; https only (http:// for a loopback simulator).")
        l.oauthURL = s.cloudURL("oauth_url", l.oauthURL, secret: "the client secret", doc: "The OAuth2 provider.")
        l.clientID = s.string("client_id", doc: "The client id of the app registered with Livecoding (required).") ?? ""
        if l.clientID.isEmpty { s.problem(at: "client_id", "the client id of the app registered with Livecoding is required") }
        l.clientSecret = s.secret("client_secret", doc: "The app's client secret.")
        let scopes = s.stringList("scopes", doc: "read (required), read:viewer, read:user, read:channel, chat.").map(\.0)
        if s.has("scopes") { l.scopes = scopes }
        s.record("scopes", .array(l.scopes.map(JSONValue.string)))
        let known = ["read", "read:viewer", "read:user", "read:channel", "chat"]
        for sc in l.scopes where !known.contains(sc) {
            s.problem(at: "scopes", "unknown scope '\(sc)' (known: \(known.joined(separator: ", ")))")
        }
        if !l.scopes.contains("read") { s.problem(at: "scopes", "the read scope is required") }
        let dir = bridge.stateDir.hasSuffix("/") ? bridge.stateDir : bridge.stateDir + "/"
        l.tokenStore = s.string("token_store", dir + "livecoding-token.json", doc: "The token file (mode 0600); default <state_dir>/livecoding-token.json.")
        l.redirectPort = s.int("redirect_port", 8080, min: 1, max: 65_535, doc: "Where switchyard auth livecoding listens (127.0.0.1 and ::1).")
        l.redirectURI = s.string("redirect_uri", "http://localhost:\(l.redirectPort)/oauth-callback",
                                 doc: "As registered; default from redirect_port.")
        l.pollInterval = s.double("poll_interval", 60, min: 5, max: 86_400, doc: "Seconds between status reads.")
        var seen: Set<String> = []
        for (slug, mark) in s.stringList("channels", doc: "User slugs: switchyard/livecoding/<slug>.") {
            if let p = Naming.problem(withName: slug) {
                s.problem(mark, key: "channels", "'\(slug)': \(p)")
            } else if slug.lowercased() == LivecodingAdapter.authID || slug.contains("/") {
                s.problem(mark, key: "channels", "'\(slug)' cannot be a channel name (auth is the authorisation topic; no /)")
            } else if !seen.insert(slug.lowercased()).inserted {
                s.problem(mark, key: "channels", "duplicate channel '\(slug)'")
            }
            l.channels.append(slug)
        }
        s.finish()
        return l
    }

    public func makeAdapter(_ settings: LivecodingSettings) -> any Adapter { LivecodingAdapter(settings: settings) }

    /// The OAuth2 consent: prints the URL, waits for the redirect (or a pasted URL), stores the tokens.
    public func authorize(_ settings: LivecodingSettings, options: AuthorizationOptions) async throws -> String? {
        let tokens = try await LivecodingAuthorization.run(settings: settings, timeout: options.timeout, readStdin: options.readStdin,
                                                           say: options.say)
        let scope = tokens.scope.isEmpty ? settings.scopes.joined(separator: " ") : tokens.scope
        return "Authorised (scope: \(scope)). Tokens saved to \(settings.tokenStore) (mode 0600); the access token expires "
            + "\(Timestamp.rfc3339(tokens.expiresAt)) and is refreshed by the running bridge, which picks the file up by itself."
    }
}
