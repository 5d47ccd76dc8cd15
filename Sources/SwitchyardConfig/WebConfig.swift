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
            var host: Substring
            var rest: Substring
            if s.hasPrefix("[") {
                guard let close = s.firstIndex(of: "]") else { return nil }
                host = s[s.index(after: s.startIndex)..<close]
                rest = s[s.index(after: close)...]
            } else {
                guard let colon = s.lastIndex(of: ":") else { return nil }
                host = s[..<colon]
                rest = s[colon...]
                if host.contains(":") { return nil }   // IPv6 needs brackets
            }
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (0...65_535).contains(port), !host.isEmpty else { return nil }
            return (String(host), port)
        }
    }

    static func readWeb(_ w: ConfigSection, into c: inout Web) {
        let r = w.reader
        c.enabled = w.bool("enabled", true)
        if let (listen, mark) = w.scalar("listen") {
            if let (host, port) = Web.parseListen(listen) {
                (c.host, c.port) = (host, port)
            } else {
                r.problem(mark, w.key("listen"), "expected host:port (an IPv6 host in brackets: [::1]:9180), got '\(listen)'")
            }
        }
        w.record("listen", .string("\(Web.hostForURL(c.host)):\(c.port)"))
        c.authToken = w.secret("auth_token")
        if let t = c.authToken, t.utf8.count < 16 {
            r.problem(w.mark(of: w.has("auth_token") ? "auth_token" : "auth_token_file"), w.key(w.has("auth_token") ? "auth_token" : "auth_token_file"),
                      "a token shorter than 16 characters is too easy to guess (e.g. openssl rand -hex 24)")
        }
        c.tlsCert = w.string("tls_cert")
        c.tlsKey = w.string("tls_key")
        for (k, v) in [("tls_cert", c.tlsCert), ("tls_key", c.tlsKey)] {
            if let v, !FileManager.default.isReadableFile(atPath: v) { r.problem(w.mark(of: k), w.key(k), "file '\(v)' cannot be read") }
        }
        if (c.tlsCert == nil) != (c.tlsKey == nil) { r.problem(w.mark, w.path, "tls_cert and tls_key go together") }
        c.maxClients = w.int("max_clients", 8, min: 1, max: 256)
        c.clientTimeout = w.double("client_timeout", 10, min: 1, max: 3600)
        if c.enabled, c.authToken == nil, !Web.isLoopback(c.host) {
            r.problem(w.mark(of: "listen"), w.key("listen"),
                      "listening on \(c.host) (not loopback) needs web.auth_token or web.auth_token_file: anyone who can reach it could switch your devices")
        }
        w.finish()
    }
}
