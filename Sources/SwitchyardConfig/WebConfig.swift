#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

extension SwitchyardConfig {
    /// The operator console (`web:`, docs/console.md): the page, `/metrics`, `/livez` and `/readyz`.
    public struct Web: Sendable, Equatable {
        public var enabled = true
        public var host = "127.0.0.1"
        public var port = 9180
        /// Required unless `host` is a loopback address.
        public var authToken: String?
        public var tlsCert: String?
        public var tlsKey: String?
        /// WebSocket clients (open pages) at once; one more is refused.
        public var maxClients = 8
        /// A page whose updates have waited this long to be taken is cut off.
        public var clientTimeout = 10.0

        public init() {}

        /// `http://127.0.0.1:9180`, or `https://…` with TLS; an IPv6 host in brackets.
        public var url: String { "\(tlsCert == nil ? "http" : "https")://\(Self.hostForURL(host)):\(port)" }

        static func hostForURL(_ host: String) -> String { host.contains(":") ? "[\(host)]" : host }

        /// 127.0.0.0/8, ::1 and `localhost`: reachable from this machine only.
        public static func isLoopback(_ host: String) -> Bool {
            if host == "localhost" || host == "::1" || host == "0:0:0:0:0:0:0:1" { return true }
            let parts = host.split(separator: ".", omittingEmptySubsequences: false)
            return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
        }

        /// `host:port` or `[v6]:port` → its parts; nil when malformed.
        static func parseListen(_ s: String) -> (host: String, port: Int)? {
            guard let (host, port) = splitHostPort(s), let port, let n = Int(port), (0...65_535).contains(n), !host.isEmpty else { return nil }
            return (String(host), n)
        }

        /// `host:port`, `[v6]:port`, or either without its `:port` (a Host header may leave it out) → the
        /// host (without brackets) and the port's text; nil when malformed (an IPv6 address without
        /// brackets, anything after `]` but a `:port`). The one reader of both `web.listen` and the console's
        /// Host headers.
        public static func splitHostPort(_ s: String) -> (host: Substring, port: Substring?)? {
            if s.hasPrefix("[") {
                guard let close = s.firstIndex(of: "]") else { return nil }
                let host = s[s.index(after: s.startIndex)..<close], rest = s[s.index(after: close)...]
                if rest.isEmpty { return (host, nil) }
                return rest.hasPrefix(":") ? (host, rest.dropFirst()) : nil
            }
            let parts = s.split(separator: ":", omittingEmptySubsequences: false)
            switch parts.count {
            case 1: return (parts[0], nil)
            case 2: return (parts[0], parts[1])
            default: return nil   // IPv6 needs brackets
            }
        }

        /// The most `max_clients` may be: well below the console's 64 connections, so that pages can
        /// never take the room probes, scrapes and logins need.
        public static let maxClientsLimit = 32
    }

    static func readWeb(_ w: ConfigSection, into c: inout Web) {
        let r = w.reader
        c.enabled = w.bool("enabled", true, doc: "Serve the console (on loopback only unless auth_token is given).")
        if let (listen, mark) = w.scalar("listen", doc: "host:port ([::1]:9180 for IPv6); anything but loopback needs auth_token.",
                                         shownDefault: "127.0.0.1:9180") {
            if let (host, port) = Web.parseListen(listen) {
                (c.host, c.port) = (host, port)
            } else {
                r.problem(mark, w.key("listen"), "expected host:port (an IPv6 host in brackets: [::1]:9180), got '\(listen)'")
            }
        }
        w.record("listen", .string("\(Web.hostForURL(c.host)):\(c.port)"))
        c.authToken = w.secret("auth_token", doc: "The console's token, at least 16 characters (openssl rand -hex 24).")
        if let t = c.authToken, t.utf8.count < 16 {
            r.problem(w.mark(of: w.has("auth_token") ? "auth_token" : "auth_token_file"), w.key(w.has("auth_token") ? "auth_token" : "auth_token_file"),
                      "a token shorter than 16 characters is too easy to guess (e.g. openssl rand -hex 24)")
        }
        c.tlsCert = w.string("tls_cert", doc: "Serve https://: the PEM certificate chain (with tls_key).")
        c.tlsKey = w.string("tls_key", doc: "The PEM key of tls_cert.")
        for (k, v) in [("tls_cert", c.tlsCert), ("tls_key", c.tlsKey)] {
            if let v, !FileManager.default.isReadableFile(atPath: v) { r.problem(w.mark(of: k), w.key(k), "file '\(v)' cannot be read") }
        }
        if (c.tlsCert == nil) != (c.tlsKey == nil) { r.problem(w.mark, w.path, "tls_cert and tls_key go together") }
        c.maxClients = w.int("max_clients", 8, min: 1, max: Web.maxClientsLimit, doc: "Pages open at once; one more is refused.")
        c.clientTimeout = w.double("client_timeout", 10, min: 1, max: 3600,
                                   doc: "Seconds: a page that has not taken its updates for this long is cut off.")
        if c.enabled, c.authToken == nil, !Web.isLoopback(c.host) {
            r.problem(w.mark(of: "listen"), w.key("listen"),
                      "listening on \(c.host) (not loopback) needs web.auth_token or web.auth_token_file: anyone who can reach it could switch your devices")
        }
        w.finish()
    }
}
