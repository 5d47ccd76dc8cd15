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
        /// The path the console is served under (`/switchyard`), for a reverse proxy that passes the whole
        /// path on: "" (the default) serves it at `/`. No trailing slash. A proxy that strips its prefix
        /// (Home Assistant's ingress) needs none: the page's links are all relative (docs/console.md).
        public var basePath = ""
        /// Required unless `host` is a loopback address.
        public var authToken: String?
        public var tlsCert: String?
        public var tlsKey: String?
        /// WebSocket clients (open pages) at once; one more is refused.
        public var maxClients = 8
        /// A page whose updates have waited this long to be taken is cut off.
        public var clientTimeout = 10.0

        public init() {}

        /// `http://127.0.0.1:9180`, or `https://…` with TLS; an IPv6 host in brackets; then `base_path`.
        public var url: String { "\(tlsCert == nil ? "http" : "https")://\(Self.hostForURL(host)):\(port)\(basePath)" }

        /// `web.base_path` as the console uses it: "" for none or `/`, else a leading slash and no trailing
        /// one; nil when it is not a plain path (only letters, digits, `-._~` and `/` between segments:
        /// no `.` or `..` segment, no percent escapes, query or fragment), so that it can go into a
        /// header (the session cookie's `Path`) and a route as it is. At most 200 bytes.
        public static func normalizedBasePath(_ s: String) -> String? {
            var p = s
            while p.hasSuffix("/") { p.removeLast() }
            if p.isEmpty { return "" }
            guard p.hasPrefix("/"), p.utf8.count <= 200 else { return nil }
            for segment in p.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
                guard !segment.isEmpty, segment != ".", segment != "..",
                      segment.utf8.allSatisfy({ isPathByte($0) }) else { return nil }
            }
            return p
        }

        /// Letters, digits and `-._~`: the unreserved characters of RFC 3986.
        public static func isPathByte(_ b: UInt8) -> Bool {
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: "-") || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "~")
        }

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
        if let (given, mark) = w.scalar("base_path", doc: "Serve the console under this path (/switchyard), e.g. behind a reverse proxy; empty: at /.",
                                        shownDefault: .string("")) {
            if let p = Web.normalizedBasePath(given) {
                c.basePath = p
            } else {
                r.problem(mark, w.key("base_path"),
                          "expected a path such as /switchyard (letters, digits, -._~ between slashes; no query, escapes or dot segments), got '\(given)'")
            }
        }
        w.record("base_path", .string(c.basePath))
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
