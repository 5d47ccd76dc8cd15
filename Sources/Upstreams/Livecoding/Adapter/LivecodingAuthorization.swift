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

/// `switchyard auth livecoding`: the authorisation-code flow on a machine without a keychain or a
/// browser of its own. Prints the authorise URL (with a random `state`), waits for the provider's
/// redirect on 127.0.0.1 and ::1 at `redirect_port` — or for the redirect URL pasted on stdin (headless
/// servers) — checks `state`, exchanges the code and saves the tokens (mode 0600, atomically).
public enum LivecodingAuthorization {
    public static func run(settings: LivecodingSettings, timeout: Double, readStdin: Bool,
                           say: @Sendable (String) -> Void) async throws(AdapterError) -> LivecodingTokens {
        guard !settings.clientID.isEmpty else { throw AdapterError("livecoding.client_id is not configured") }
        let state = randomHex(bytes: 16)
        let listener = try RedirectListener(port: settings.redirectPort)
        defer { listener.close() }
        do {
            return try await HTTPClient.withClient(options: .init(userAgent: "switchyard")) { http in
                try await flow(settings: settings, state: state, listener: listener, http: http, timeout: timeout, readStdin: readStdin, say: say)
            }
        } catch {
            throw error as? AdapterError ?? AdapterError("\(error)")
        }
    }

    static func flow(settings: LivecodingSettings, state: String, listener: RedirectListener, http: any HTTPTransport, timeout: Double,
                     readStdin: Bool, say: @Sendable (String) -> Void) async throws(AdapterError) -> LivecodingTokens {
        let oauth = LivecodingOAuth(settings: settings, http: http)
        say("""
        Open this URL in a browser, sign in and allow access:

          \(oauth.authorizeURL(state: state))

        Waiting for the redirect to \(settings.redirectURI) (listening on 127.0.0.1 and ::1, port \(settings.redirectPort)).
        On a headless machine, paste the URL the browser was sent to here and press Enter.

        """)
        let clock = SystemClock()
        let deadline = clock.now().adding(seconds: timeout)
        while true {
            let left = (deadline - clock.now()).seconds
            if left <= 0 { throw AdapterError("no redirect within \(Int(timeout)) s; nothing was saved (run the command again)") }
            let event = await listener.next(timeout: left, readStdin: readStdin)
            let query: [URLQueryItem]
            var reply: Int32?
            switch event {
            case .timeout:
                continue
            case .request(let target, let fd):
                let comps = URLComponents(string: "http://localhost\(target)")
                guard comps?.path == "/oauth-callback" else {
                    RedirectListener.respond(fd, 404, "Not found")
                    continue
                }
                query = comps?.queryItems ?? []
                reply = fd
            case .pasted(let line):
                let text = line.trimmingWhitespace()
                if text.isEmpty { continue }
                let comps = URLComponents(string: text.contains("://") ? text : "http://localhost/oauth-callback?\(text.drop { $0 == "?" })")
                query = comps?.queryItems ?? []
            }
            func value(_ k: String) -> String? { query.first { $0.name == k }?.value }
            func fail(_ message: String) -> AdapterError {
                if let reply { RedirectListener.respond(reply, 400, "Switchyard: \(message)") }
                return AdapterError(message)
            }
            if let e = value("error") {
                throw fail("the provider refused the authorisation: \(e)\(value("error_description").map { " (\($0))" } ?? ""); nothing was saved")
            }
            guard value("state") == state else {
                throw fail("the redirect's state does not match this request (a stale or forged redirect); nothing was saved")
            }
            guard let code = value("code"), !code.isEmpty else { throw fail("the redirect carries no code; nothing was saved") }
            let tokens: LivecodingTokens
            do {
                tokens = try await oauth.exchange(code: code)
            } catch {
                throw fail(error.message)
            }
            do {
                try TokenStore(path: settings.tokenStore).save(tokens)
            } catch {
                throw fail(error.message)
            }
            if let reply { RedirectListener.respond(reply, 200, "Switchyard is authorised for Livecoding. You can close this tab.") }
            return tokens
        }
    }
}

/// A one-purpose HTTP listener for the OAuth redirect, on 127.0.0.1 and ::1, plus stdin. Plain
/// sockets and poll(2) on a thread of its own: it lives for one command run.
final class RedirectListener: @unchecked Sendable {
    enum Event: Sendable {
        case request(target: String, fd: Int32)
        case pasted(String)
        case timeout
    }

    var fds: [Int32] = []
    var stdinOpen = true
    var pending = ""

    init(port: Int) throws(AdapterError) {
        for v6 in [false, true] {
            let fd = socket(v6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { continue }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            var ok: Int32
            if v6 {
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, socklen_t(MemoryLayout<Int32>.size))
                var a = sockaddr_in6()
                a.sin6_family = sa_family_t(AF_INET6)
                a.sin6_port = in_port_t(UInt16(port).bigEndian)
                a.sin6_addr = in6addr_loopback
                ok = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
            } else {
                var a = sockaddr_in()
                a.sin_family = sa_family_t(AF_INET)
                a.sin_port = in_port_t(UInt16(port).bigEndian)
                a.sin_addr.s_addr = inet_addr("127.0.0.1")
                ok = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            }
            if ok == 0 && listen(fd, 8) == 0 { fds.append(fd) } else { Glibc.close(fd) }
        }
        if fds.isEmpty {
            throw AdapterError("cannot listen on 127.0.0.1 or ::1 port \(port) for the redirect (in use?); set livecoding.redirect_port")
        }
    }

    func next(timeout: Double, readStdin: Bool) async -> Event {
        await withCheckedContinuation { (c: CheckedContinuation<Event, Never>) in
            OSThread.start("auth-wait") { c.resume(returning: self.wait(timeout: timeout, readStdin: readStdin)) }
        }
    }

    /// Blocks until a request, a pasted line or the timeout.
    func wait(timeout: Double, readStdin: Bool) -> Event {
        let clock = SystemClock()
        let deadline = clock.now().adding(seconds: timeout)
        while true {
            if let nl = pending.firstIndex(of: "\n") {
                let line = String(pending[..<nl])
                pending = String(pending[pending.index(after: nl)...])
                return .pasted(line)
            }
            var polls = fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let watchStdin = readStdin && stdinOpen
            if watchStdin { polls.append(pollfd(fd: 0, events: Int16(POLLIN), revents: 0)) }
            let left = (deadline - clock.now()).seconds
            if left <= 0 { return .timeout }
            let ms = Int32(max(0, min(1000, left * 1000)))
            guard poll(&polls, nfds_t(polls.count), ms) > 0 else { continue }
            for p in polls where p.revents != 0 {
                if p.fd == 0 {
                    var buf = [UInt8](repeating: 0, count: 4096)
                    let n = read(0, &buf, buf.count)
                    if n <= 0 {
                        stdinOpen = false
                        if !pending.isEmpty { defer { pending = "" }; return .pasted(pending) }
                    } else {
                        pending += String(decoding: buf[0..<n], as: UTF8.self)
                    }
                    continue
                }
                let conn = accept(p.fd, nil, nil)
                guard conn >= 0 else { continue }
                var tv = timeval(tv_sec: 5, tv_usec: 0)
                setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                var head = [UInt8]()
                var buf = [UInt8](repeating: 0, count: 4096)
                while head.count < 16_384, !String(decoding: head, as: UTF8.self).contains("\r\n\r\n") {
                    let n = recv(conn, &buf, buf.count, 0)
                    if n <= 0 { break }
                    head += buf[0..<n]
                }
                let line = String(decoding: head, as: UTF8.self).split(separator: "\r\n").first.map(String.init) ?? ""
                let parts = line.split(separator: " ")
                guard parts.count >= 2, parts[0] == "GET" else {
                    Self.respond(conn, 400, "Bad request")
                    continue
                }
                return .request(target: String(parts[1]), fd: conn)
            }
        }
    }

    static func respond(_ fd: Int32, _ status: Int, _ message: String) {
        let html = "<!doctype html><html><body><p>\(message.replacing("<", with: "&lt;"))</p></body></html>"
        let phrase = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request"
        let text = "HTTP/1.1 \(status) \(phrase)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(html.utf8.count)\r\nConnection: close\r\n\r\n\(html)"
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        Glibc.close(fd)
    }

    func close() {
        for fd in fds { Glibc.close(fd) }
        fds = []
    }
}
