import CCurl
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SwitchyardCore

public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    public var headers: [(String, String)]
    public var body: [UInt8]?
    /// Whole-transfer timeout, seconds.
    public var timeout: Double

    public init(method: String = "GET", url: String, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Double = 30) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

public struct HTTPResponse: Sendable {
    public var status: Int
    /// Header names lower-cased; the last value wins.
    public var headers: [String: String]
    public var body: [UInt8]
    /// New TCP connections this transfer opened (0 when an idle connection was reused).
    public var newConnections: Int

    /// A response as a twin gives it (`HTTPTwin`); header names are lower-cased.
    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = [], newConnections: Int = 0) {
        self.status = status
        var lower: [String: String] = [:]
        for (k, v) in headers { lower[k.lowercased()] = v }
        self.headers = lower
        self.body = body
        self.newConnections = newConnections
    }

    public var text: String { String(decoding: body, as: UTF8.self) }
}

public struct HTTPError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable { case timeout, connection, tls, other }
    public var kind: Kind
    public var message: String
    public var description: String { message }
    /// A failure as a twin gives it (`HTTPTwin`: no answer at all).
    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }
}

/// An async HTTP client over the libcurl multi interface. One thread owns the multi handle and makes
/// every curl call (so nothing blocks the cooperative pool); requests are handed over through a mutex
/// and `curl_multi_wakeup`. The multi handle keeps a connection cache, so requests to the same host
/// reuse connections. TLS peers and host names are verified unless `verifyTLS` is false.
///
/// A client exists only inside `HTTPClient.withClient { … }`: its thread starts there and has ended
/// (its connections closed) when that returns, so an adapter's client lives exactly as long as its run.
public final class HTTPClient: HTTPTransport, Sendable {
    public struct Options: Sendable {
        public var userAgent: String
        public var verifyTLS: Bool
        public var caFile: String?
        public var connectTimeout: Double
        /// A response body (after decompression) larger than this fails the request without being kept;
        /// counted as `http_body` in `bridge/health` `limits`.
        public var maxResponseBytes: Int
        /// The same for the response's header lines together (`http_headers`).
        public var maxHeaderBytes: Int
        public init(userAgent: String = "switchyard", verifyTLS: Bool = true, caFile: String? = nil, connectTimeout: Double = 10,
                    maxResponseBytes: Int = 8 << 20, maxHeaderBytes: Int = 64 << 10) {
            self.userAgent = userAgent
            self.verifyTLS = verifyTLS
            self.caFile = caFile
            self.connectTimeout = connectTimeout
            self.maxResponseBytes = maxResponseBytes
            self.maxHeaderBytes = maxHeaderBytes
        }
    }

    enum Command: @unchecked Sendable {
        case start(Transfer)
        case cancel(UInt64)
    }

    struct Shared: ~Copyable {
        var commands: [Command] = []
        var stopping = false
        var nextID: UInt64 = 0
    }

    let options: Options
    let shared = Locked(Shared())
    nonisolated(unsafe) let multi: UnsafeMutableRawPointer?   // nil without libcurl
    /// Why there is no libcurl (it is loaded on first use, see ccurl.h); every request fails with it.
    let unavailable: String?
    /// Signalled by the transfer thread as its last act.
    let threadEnded = Latch()
    let thread = Atomic<Int32>(0)
    /// The transfer thread's kernel id (0 before it runs; tests check it has ended).
    package var threadID: Int32 { thread.load(ordering: .relaxed) }

    private init(options: Options) {
        self.options = options
        if let why = ccurl_load() {
            unavailable = String(cString: why)
            multi = nil
        } else {
            unavailable = nil
            multi = ccurl_multi_init()
            ccurl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, 8)
        }
    }

    /// Runs `body` with a client whose transfer thread starts now and has stopped, every connection
    /// closed and every pending request failed, when this returns.
    public static func withClient<R>(options: Options = Options(), isolation: isolated (any Actor)? = #isolation,
                                     _ body: (HTTPClient) async throws -> R) async throws -> R {
        let client = HTTPClient(options: options)
        client.startThread()
        return try await withTeardown { try await body(client) } teardown: { await client.close() }
    }

    func startThread() {
        guard multi != nil else { threadEnded.signal(); return }
        OSThread.start("http-curl") { [self] in
            thread.store(OSThread.currentID(), ordering: .relaxed)
            CurlLoop(client: self).run()
            threadEnded.signal()
        }
    }

    /// Stops the transfer thread (pending requests fail) and waits until it has ended.
    func close() async {
        shared.withLock { $0.stopping = true }
        if multi != nil { ccurl_multi_wakeup(multi) }
        await threadEnded.waitUncancellable()
    }

    public func send(_ request: HTTPRequest) async throws -> HTTPResponse {
        if let unavailable { throw HTTPError(kind: .other, message: unavailable) }
        // Under hot standby, nothing leaves an instance that may have been replaced (design.md §18), and what
        // does says which instance sent it (an upstream's logs, and the failover test, tell them apart).
        // The lease is asked again on the transfer thread right before the request goes out (`prereq`): the
        // process may be paused between here and there, and resumed after another instance took over.
        try UpstreamLease.check()
        var request = request
        let lease = UpstreamLease.current
        if let lease { request.headers.append(("X-Switchyard-Instance", lease.name)) }
        let id = shared.withLock { s -> UInt64 in
            s.nextID += 1
            return s.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<HTTPResponse, any Error>) in
                let t = Transfer(id: id, request: request, continuation: c, lease: lease,
                                 maxBody: options.maxResponseBytes, maxHeaders: options.maxHeaderBytes, bounds: Bounds.counter)
                // Checked under the lock that `onCancel` takes: the task's cancelled flag is set before its
                // handler runs, so either the handler's `.cancel` comes after this `.start` in the commands,
                // or the flag is seen here and the request never starts (a cancel before the start was lost).
                let refusal = shared.withLock { s -> (any Error)? in
                    if s.stopping { return HTTPError(kind: .other, message: "HTTP client is shut down") }
                    if Task.isCancelled { return CancellationError() }
                    s.commands.append(.start(t))
                    return nil
                }
                if let refusal {
                    c.resume(throwing: refusal)
                } else {
                    ccurl_multi_wakeup(multi)
                }
            }
        } onCancel: {
            shared.withLock { $0.commands.append(.cancel(id)) }
            ccurl_multi_wakeup(multi)
        }
    }
}

/// One transfer's buffers; lives on the curl thread from `start` to completion.
final class Transfer {
    let id: UInt64
    let request: HTTPRequest
    let continuation: CheckedContinuation<HTTPResponse, any Error>
    /// The upstream lease the request was made under (hot standby), asked again right before it is sent.
    let lease: UpstreamLease?
    var easy: UnsafeMutableRawPointer?
    var headerList: UnsafeMutablePointer<curl_slist>?
    var body: [UInt8] = []
    var headers: [String: String] = [:]
    let maxBody: Int
    let maxHeaders: Int
    /// Where a refused response is counted: the requesting task's counter (the callbacks run on curl's thread).
    let bounds: BoundsCounter
    var headerBytes = 0
    /// Set when the response passed a bound: the callback refused it and the transfer fails with this.
    var refused: String?

    init(id: UInt64, request: HTTPRequest, continuation: CheckedContinuation<HTTPResponse, any Error>, lease: UpstreamLease?,
         maxBody: Int, maxHeaders: Int, bounds: BoundsCounter) {
        self.id = id
        self.request = request
        self.continuation = continuation
        self.lease = lease
        self.maxBody = maxBody
        self.maxHeaders = maxHeaders
        self.bounds = bounds
    }
}

/// Callbacks from libcurl (on the curl thread, inside curl_multi_perform), nonisolated.
enum CurlCallbacks {
    static let write: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = { ptr, size, n, ud in
        guard let ptr, let ud else { return 0 }
        let t = Unmanaged<Transfer>.fromOpaque(ud).takeUnretainedValue()
        guard t.body.count + size * n <= t.maxBody else {
            // Returning less than was given makes libcurl abort the transfer (CURLE_WRITE_ERROR).
            t.refused = "response body larger than \(t.maxBody) bytes"
            t.bounds.hit("http_body")
            return 0
        }
        ptr.withMemoryRebound(to: UInt8.self, capacity: size * n) { t.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: size * n)) }
        return size * n
    }
    /// Right before the request is sent, on an open connection: a request made under a lease that is no longer
    /// valid is aborted, so that one queued (or connecting) when the process was paused does not go out when
    /// it resumes after another instance took over (design.md §18 rule 3).
    static let prereq: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<CChar>?, Int32, Int32) -> Int32 = {
        ud, _, _, _, _ in
        guard let ud else { return Int32(CURL_PREREQFUNC_OK) }
        let t = Unmanaged<Transfer>.fromOpaque(ud).takeUnretainedValue()
        guard let lease = t.lease, !lease.valid else { return Int32(CURL_PREREQFUNC_OK) }
        t.refused = UpstreamLease.refusal(lease)
        return Int32(CURL_PREREQFUNC_ABORT)
    }
    static let header: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = { ptr, size, n, ud in
        guard let ptr, let ud else { return 0 }
        let t = Unmanaged<Transfer>.fromOpaque(ud).takeUnretainedValue()
        t.headerBytes += size * n
        guard t.headerBytes <= t.maxHeaders else {
            t.refused = "response headers larger than \(t.maxHeaders) bytes"
            t.bounds.hit("http_headers")
            return 0
        }
        let line = ptr.withMemoryRebound(to: UInt8.self, capacity: size * n) { String(decoding: UnsafeBufferPointer(start: $0, count: size * n), as: UTF8.self) }
        if line.hasPrefix("HTTP/") { t.headers = [:] }   // a new response (redirect, 100-continue)
        if let colon = line.firstIndex(of: ":") {
            let name = line[..<colon].lowercased()
            t.headers[name] = line[line.index(after: colon)...].trimmingWhitespace()
        }
        return size * n
    }
}

final class CurlLoop {
    let client: HTTPClient
    var active: [UInt64: Transfer] = [:]

    init(client: HTTPClient) { self.client = client }

    func run() {
        let multi = client.multi
        while true {
            let (commands, stopping) = client.shared.withLock { s -> ([HTTPClient.Command], Bool) in
                let c = s.commands
                s.commands = []
                return (c, s.stopping)
            }
            for c in commands {
                switch c {
                case .start(let t): start(t)
                case .cancel(let id):
                    if let t = active[id] { finish(t, .failure(CancellationError())) }
                }
            }
            if stopping {
                for t in active.values { finish(t, .failure(HTTPError(kind: .other, message: "HTTP client is shut down"))) }
                ccurl_multi_cleanup(multi)
                return
            }
            var running: Int32 = 0
            ccurl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let msg = ccurl_multi_info_read(multi, &left) {
                guard msg.pointee.msg == CURLMSG_DONE, let easy = msg.pointee.easy_handle else { continue }
                var ud: UnsafeMutableRawPointer? = nil
                _ = ccurl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &ud)
                guard let ud else { continue }
                let t = Unmanaged<Transfer>.fromOpaque(ud).takeUnretainedValue()
                let code = ccurl_msg_result(msg)
                if code == CURLE_OK {
                    var status = 0
                    _ = ccurl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
                    var connects = 0
                    _ = ccurl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
                    finish(t, .success(HTTPResponse(status: status, headers: t.headers, body: t.body, newConnections: connects)))
                } else if let refused = t.refused {
                    finish(t, .failure(HTTPError(kind: .other, message: refused)))
                } else {
                    finish(t, .failure(Self.error(code)))
                }
            }
            ccurl_multi_poll(multi, nil, 0, 1000, nil)
        }
    }

    static func error(_ code: CURLcode) -> HTTPError {
        let message = String(cString: ccurl_easy_strerror(code))
        switch code {
        case CURLE_OPERATION_TIMEDOUT: return HTTPError(kind: .timeout, message: message)
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_GOT_NOTHING, CURLE_RECV_ERROR, CURLE_SEND_ERROR:
            return HTTPError(kind: .connection, message: message)
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CACERT_BADFILE:
            return HTTPError(kind: .tls, message: message)
        default: return HTTPError(kind: .other, message: message)
        }
    }

    func start(_ t: Transfer) {
        guard let easy = ccurl_easy_init() else {
            t.continuation.resume(throwing: HTTPError(kind: .other, message: "curl_easy_init failed"))
            return
        }
        t.easy = easy
        let r = t.request
        let o = client.options
        ccurl_easy_setopt_string(easy, CURLOPT_URL, r.url)
        ccurl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        ccurl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, Int(r.timeout * 1000))
        ccurl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(o.connectTimeout * 1000))
        ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, o.verifyTLS ? 1 : 0)
        ccurl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, o.verifyTLS ? 2 : 0)
        if let ca = o.caFile { ccurl_easy_setopt_string(easy, CURLOPT_CAINFO, ca) }
        ccurl_easy_setopt_string(easy, CURLOPT_USERAGENT, o.userAgent)
        ccurl_easy_setopt_string(easy, CURLOPT_ACCEPT_ENCODING, "")
        ccurl_easy_setopt_long(easy, CURLOPT_PROTOCOLS, Int(CURLPROTO_HTTP | CURLPROTO_HTTPS))
        let ud = Unmanaged.passUnretained(t).toOpaque()
        ccurl_easy_setopt_pointer(easy, CURLOPT_PRIVATE, ud)
        ccurl_easy_setopt_write(easy, CURLOPT_WRITEFUNCTION, CurlCallbacks.write)
        ccurl_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, ud)
        ccurl_easy_setopt_write(easy, CURLOPT_HEADERFUNCTION, CurlCallbacks.header)
        ccurl_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, ud)
        if t.lease != nil {
            ccurl_easy_setopt_prereq(easy, CurlCallbacks.prereq)
            ccurl_easy_setopt_pointer(easy, CURLOPT_PREREQDATA, ud)
        }
        var list: UnsafeMutablePointer<curl_slist>? = nil
        for (k, v) in r.headers { list = ccurl_slist_append(list, "\(k): \(v)") }
        if r.body != nil { list = ccurl_slist_append(list, "Expect:") }   // no 100-continue round trip
        t.headerList = list
        if let list { ccurl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list) }
        let method = r.method.uppercased()
        if let body = r.body {
            ccurl_easy_setopt_off(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            body.withUnsafeBytes { b in
                _ = ccurl_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: b.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!))
            }
        }
        if method == "HEAD" {
            ccurl_easy_setopt_long(easy, CURLOPT_NOBODY, 1)
        } else if method != "GET" || r.body != nil {
            ccurl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)
        }
        active[t.id] = t
        ccurl_multi_add_handle(client.multi, easy)
    }

    func finish(_ t: Transfer, _ result: Result<HTTPResponse, any Error>) {
        if let easy = t.easy {
            ccurl_multi_remove_handle(client.multi, easy)
            ccurl_easy_cleanup(easy)
        }
        ccurl_slist_free_all(t.headerList)
        active[t.id] = nil
        t.continuation.resume(with: result)
    }
}
