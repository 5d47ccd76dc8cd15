#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore
import SwitchyardHTTP

public struct LivecodingSettings: Sendable, Equatable {
    public var apiURL = "https://www.livecoding.tv/api/v1"
    public var oauthURL = "https://www.livecoding.tv/o"
    public var clientID = ""
    public var clientSecret: String?
    public var scopes = ["read"]
    public var tokenStore = "/var/lib/switchyard/livecoding-token.json"
    public var redirectPort = 8080
    public var redirectURI = "http://localhost:8080/oauth-callback"
    public var channels: [String] = []
    public var pollInterval = 60.0
    public var pageSize = 100
    public var timeout = 30.0
    public init() {}
}

/// The OAuth2 endpoints (django-oauth-toolkit: `/o/authorize/`, `/o/token/`), client authentication by
/// HTTP Basic. Every token answer replaces the stored tokens (refresh tokens rotate).
public struct LivecodingOAuth: Sendable {
    let settings: LivecodingSettings
    let http: any HTTPTransport

    public init(settings: LivecodingSettings, http: any HTTPTransport) {
        self.settings = settings
        self.http = http
    }

    public func authorizeURL(state: String) -> String {
        var c = URLComponents(string: "\(settings.oauthURL)/authorize/")!
        c.queryItems = [
            URLQueryItem(name: "scope", value: settings.scopes.joined(separator: " ")), URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "redirect_uri", value: settings.redirectURI), URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: settings.clientID),
        ]
        return c.url!.absoluteString
    }

    public func exchange(code: String) async throws(AdapterError) -> LivecodingTokens {
        try await token(["grant_type": "authorization_code", "code": code, "redirect_uri": settings.redirectURI])
    }

    public func refresh(_ refreshToken: String) async throws(AdapterError) -> LivecodingTokens {
        try await token(["grant_type": "refresh_token", "refresh_token": refreshToken])
    }

    static func form(_ fields: [String: String]) -> String {
        fields.keys.sorted().map { k in
            "\(k)=\(fields[k]!.percentEncoded())"
        }.joined(separator: "&")
    }

    func token(_ fields: [String: String]) async throws(AdapterError) -> LivecodingTokens {
        var f = fields
        f["client_id"] = settings.clientID
        let basic = Data("\(settings.clientID):\(settings.clientSecret ?? "")".utf8).base64EncodedString()
        let request = HTTPRequest(method: "POST", url: "\(settings.oauthURL)/token/",
                                  headers: [("Authorization", "Basic \(basic)"), ("Content-Type", "application/x-www-form-urlencoded"),
                                            ("Accept", "application/json")],
                                  body: Array(Self.form(f).utf8), timeout: settings.timeout)
        let r: HTTPResponse
        do {
            r = try await http.send(request)
        } catch {
            throw AdapterError("the Livecoding token endpoint is unreachable: \(error)")
        }
        let j = try? JSONValue.parse(r.body)
        guard r.status == 200, let j, let t = LivecodingTokens.from(response: j) else {
            let reason = j?["error_description"]?.stringValue ?? j?["error"]?.stringValue ?? "HTTP \(r.status)"
            throw AdapterError("the Livecoding token endpoint refused the \(fields["grant_type"] == "refresh_token" ? "refresh" : "code") "
                + "(HTTP \(r.status): \(reason))")
        }
        return t
    }
}
