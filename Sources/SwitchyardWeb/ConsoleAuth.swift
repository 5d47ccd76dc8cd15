#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardConfig
import SwitchyardCore

/// Who may use the console (docs/console.md "Access"): with `web.auth_token`, a request carries
/// `Authorization: Bearer <token>` (scripts, Prometheus) or the session cookie the login form sets
/// (`HttpOnly`, `SameSite=Strict`); without one (loopback only), anyone on this machine. Tokens and
/// sessions are compared in constant time. Sessions live in memory: a restart, or a changed `web:`
/// section, logs everyone out.
public final class ConsoleAuth: Sendable {
    static let cookieName = "switchyard_console"
    /// Sessions kept at once; the oldest is dropped past this.
    static let maxSessions = 32

    let token: [UInt8]?
    let secure: Bool
    let sessions = Locked<[[UInt8]]>([])

    public init(token: String?, secure: Bool) {
        self.token = token.map { Array($0.utf8) }
        self.secure = secure
    }

    var required: Bool { token != nil }

    /// Equal bytes, in a time that depends on the lengths only.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(truncatingIfNeeded: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            diff |= x ^ y
        }
        return diff == 0 && a.count == b.count
    }

    func tokenMatches(_ given: String) -> Bool {
        guard let token else { return false }
        return Self.constantTimeEqual(Array(given.utf8), token)
    }

    /// Whether a request with these headers may pass: no token configured, the bearer token, or a session.
    func allows(authorization: String?, cookie: String?) -> Bool {
        guard required else { return true }
        if let a = authorization, a.count > 7, a.prefix(7).lowercased() == "bearer " {
            return tokenMatches(String(a.dropFirst(7)).trimmingWhitespace())
        }
        if let cookie, let session = Self.cookieValue(cookie, name: Self.cookieName) {
            let given = Array(session.utf8)
            // Every session is compared, whichever matches.
            return sessions.withLock { all in all.reduce(false) { Self.constantTimeEqual($1, given) || $0 } }
        }
        return false
    }

    /// A new session after a good login: its cookie header, for the pages under `path` (the console's
    /// prefix and `/`: `ConsoleService.cookiePath`).
    func newSession(path: String = "/") -> String {
        let value = randomHex(bytes: 32)
        sessions.withLock { s in
            if s.count >= Self.maxSessions { s.removeFirst(s.count - Self.maxSessions + 1) }
            s.append(Array(value.utf8))
        }
        return "\(Self.cookieName)=\(value); Path=\(path); HttpOnly; SameSite=Strict\(secure ? "; Secure" : "")"
    }

    func endSession(cookie: String?, path: String = "/") -> String {
        if let cookie, let session = Self.cookieValue(cookie, name: Self.cookieName) {
            let given = Array(session.utf8)
            sessions.withLock { $0.removeAll { Self.constantTimeEqual($0, given) } }
        }
        return "\(Self.cookieName)=; Path=\(path); HttpOnly; SameSite=Strict; Max-Age=0\(secure ? "; Secure" : "")"
    }

    /// `name`'s value in a Cookie header (`a=1; b=2`).
    public static func cookieValue(_ header: String, name: String) -> String? {
        for part in header.split(separator: ";") {
            let kv = part.split(separator: "=", maxSplits: 1)
            if kv.count == 2, kv[0].trimmingWhitespace() == name { return String(kv[1]).trimmingWhitespace() }
        }
        return nil
    }

    /// The `token` field of a login form (`application/x-www-form-urlencoded`).
    public static func formField(_ body: String, _ name: String) -> String? {
        for pair in body.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1)
            guard kv.count == 2, kv[0] == name else { continue }
            return percentDecoded(String(kv[1]))
        }
        return nil
    }

    public static func percentDecoded(_ s: String) -> String {
        var out: [UInt8] = []
        var bytes = Array(s.utf8)[...]
        while let b = bytes.popFirst() {
            if b == UInt8(ascii: "+") { out.append(UInt8(ascii: " ")); continue }
            if b == UInt8(ascii: "%"), bytes.count >= 2,
               let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) {
                out.append(v)
                bytes = bytes.dropFirst(2)
                continue
            }
            out.append(b)
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether a browser's request comes from the console's own page. Without a token the console is open
    /// to anything on this machine, so another site open in the same browser, or a name that resolves to
    /// 127.0.0.1 (DNS rebinding), must not be able to use it: the Host must be a loopback name and an
    /// Origin, when sent, must be the console's own.
    public func sameOrigin(host: String?, origin: String?) -> Bool {
        if !required {
            guard let host, let name = Self.hostName(host), SwitchyardConfig.Web.isLoopback(name) else { return false }
        }
        // No Origin, or a ws: one (no browser sends those; WebSocket libraries do): a program, not a page of
        // another site, and a program can send any header anyway.
        guard let origin, !origin.hasPrefix("ws://"), !origin.hasPrefix("wss://") else { return true }
        guard let host else { return false }
        return origin == "http://\(host)" || origin == "https://\(host)"
    }

    /// The name part of a Host header (`127.0.0.1:9180` → `127.0.0.1`, `[::1]:9180` → `::1`); nil when malformed.
    public static func hostName(_ host: String) -> String? {
        SwitchyardConfig.Web.splitHostPort(host).map { String($0.host) }
    }
}
