import Foundation
import Testing
import SimulatorSupport
import SwitchyardCore
import SwitchyardHTTP

/// The libcurl client against a real loopback HTTP server.
@Suite struct HTTPClientTests {
    static func server() async throws -> LoopbackHTTPServer {
        try await LoopbackHTTPServer.start(routes: [
            ("GET /hello", { _ in .json(#"{"hello":"world"}"#, headers: ["X-RateLimit-Remaining": "119"]) }),
            ("PUT /lights/*", { r in .json(#"{"echo":\#(r.text)}"#, status: 207) }),
            ("GET /slow", { _ in
                try? await Task.sleep(for: .seconds(3))
                return .json("{}")
            }),
        ])
    }

    /// The server for the body, stopped (and awaited) before the test goes on, whatever the body did.
    static func withServer<R: Sendable>(_ body: (LoopbackHTTPServer) async throws -> R) async throws -> R {
        let s = try await server()
        return try await withTeardown { try await body(s) } teardown: { await s.stop() }
    }

    @Test func getReturnsStatusHeadersAndBody() async throws {
        try await Self.withServer { s in
            try await HTTPClient.withClient { c in
                let r = try await c.get("\(s.baseURL)/hello", headers: [("Authorization", "Bearer t0k")])
                #expect(r.status == 200)
                #expect(r.text == #"{"hello":"world"}"#)
                #expect(r.headers["x-ratelimit-remaining"] == "119")
                #expect(s.received.first?.headers["authorization"] == "Bearer t0k")
                let missing = try await c.get("\(s.baseURL)/nope")
                #expect(missing.status == 404)
            }
        }
    }

    /// A peer cannot make us hold more than `maxResponseBytes` of body or `maxHeaderBytes` of headers:
    /// the transfer fails past either bound, a body exactly at the bound arrives whole.
    @Test func responsesPastTheirBoundsAreRefused() async throws {
        let s = try await LoopbackHTTPServer.start(routes: [
            ("GET /body/*", { r in .init(body: Array(repeating: UInt8(ascii: "["), count: Int(r.path.split(separator: "/").last!)!)) }),
            ("GET /headers", { _ in .init(headers: ["X-Big": String(repeating: "h", count: 3000)], body: Array("{}".utf8)) }),
        ])
        try await withTeardown {
            let counter = BoundsCounter()
            try await Bounds.$counter.withValue(counter) {
            try await HTTPClient.withClient(options: .init(maxResponseBytes: 100_000, maxHeaderBytes: 2048)) { c in
                let exact = try await c.get("\(s.baseURL)/body/100000")
                #expect(exact.body.count == 100_000)
                do {
                    _ = try await c.get("\(s.baseURL)/body/100001")
                    Issue.record("a body past the bound was accepted")
                } catch let e as HTTPError {
                    #expect(e.message == "response body larger than 100000 bytes")
                }
                do {
                    _ = try await c.get("\(s.baseURL)/headers")
                    Issue.record("headers past the bound were accepted")
                } catch let e as HTTPError {
                    #expect(e.message == "response headers larger than 2048 bytes")
                }
                // Counted where the request was made, once each (the exact body was not refused).
                #expect(counter.snapshot == ["http_body": 1, "http_headers": 1])
                // The client is still fine afterwards.
                #expect(try await c.get("\(s.baseURL)/body/10").body.count == 10)
            }
            }
        } teardown: { await s.stop() }
    }

    @Test func bodyArrivesExactlyWithTheMethod() async throws {
        try await Self.withServer { s in
            try await HTTPClient.withClient { c in
                let body = #"{"power":"on","brightness":0.4}"#
                let r = try await c.send(HTTPRequest(method: "PUT", url: "\(s.baseURL)/lights/all", headers: [("Content-Type", "application/json")],
                                                     body: Array(body.utf8)))
                #expect(r.status == 207)
                let got = try #require(s.received.first)
                #expect(got.method == "PUT")
                #expect(got.path == "/lights/all")
                #expect(got.text == body)
                #expect(got.headers["content-type"] == "application/json")
            }
        }
    }

    @Test func connectionsAreReused() async throws {
        try await Self.withServer { s in
            try await HTTPClient.withClient { c in
                let first = try await c.get("\(s.baseURL)/hello")
                let second = try await c.get("\(s.baseURL)/hello")
                #expect(first.newConnections == 1)
                #expect(second.newConnections == 0)
            }
        }
    }

    @Test func manyConcurrentRequestsAllComplete() async throws {
        try await Self.withServer { s in
            try await HTTPClient.withClient { c in
                let statuses = try await withThrowingTaskGroup(of: Int.self) { g in
                    for _ in 0..<40 { g.addTask { try await c.get("\(s.baseURL)/hello").status } }
                    return try await g.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(statuses.count == 40 && statuses.allSatisfy { $0 == 200 })
            }
        }
    }

    /// A cancellation that comes before the request is handed to the transfer thread is not lost: the
    /// request fails with CancellationError and never reaches the server (a lost cancellation would run
    /// the request until its time-out, here 1 s against a server that answers after 3, and end as a timeout).
    @Test func cancellationBeforeTheStartIsNotLost() async throws {
        try await HTTPClient.withClient { c in
            try await Self.withServer { s in
                for _ in 0..<20 {
                    let task = Task {
                        withUnsafeCurrentTask { $0?.cancel() }
                        return try await c.get("\(s.baseURL)/slow", timeout: 1)
                    }
                    let result = await task.result
                    switch result {
                    case .failure(let e): #expect(e is CancellationError, "\(e)")
                    case .success(let r): Issue.record("a cancelled request was answered: \(r.status)")
                    }
                }
                #expect(s.received.isEmpty)
            }
        }
    }

    @Test func timeoutsAndRefusedConnectionsAreTypedErrors() async throws {
        try await HTTPClient.withClient { c in
            try await Self.withServer { s in
                await #expect(throws: HTTPError.self) { _ = try await c.get("\(s.baseURL)/slow", timeout: 0.3) }
                let e = await #expect(throws: HTTPError.self) { _ = try await c.get("\(s.baseURL)/slow", timeout: 0.3) }
                #expect(e?.kind == .timeout)
            }
            let e = await #expect(throws: HTTPError.self) { _ = try await c.get("http://127.0.0.1:1/", timeout: 5) }
            #expect(e?.kind == .connection)
        }
    }

    @Test func injectedFailuresComeBackAsStatuses() async throws {
        try await Self.withServer { s in
            try await HTTPClient.withClient { c in
                s.injectFailures([503])
                let injected = try await c.get("\(s.baseURL)/hello")
                let next = try await c.get("\(s.baseURL)/hello")
                #expect(injected.status == 503)
                #expect(next.status == 200)
            }
        }
    }

    /// The client's thread lives exactly as long as `withClient`: it starts inside, and has ended (its
    /// kept-alive connections closed with the multi handle) when `withClient` returns.
    @Test func nothingOutlivesWithClient() async throws {
        try await Self.withServer { s in
            let tid = try await HTTPClient.withClient { c in
                _ = try await c.get("\(s.baseURL)/hello")
                let tid = c.threadID
                #expect(tid > 0 && FileManager.default.fileExists(atPath: "/proc/self/task/\(tid)"))
                return tid
            }
            // The thread signals its end as its last act and is gone moments later.
            for _ in 0..<500 where FileManager.default.fileExists(atPath: "/proc/self/task/\(tid)") {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(!FileManager.default.fileExists(atPath: "/proc/self/task/\(tid)"), "the curl thread outlived withClient")
        }
    }
}

/// The upstream lease of hot standby (design.md §18) at the HTTP client, the place every cloud adapter's
/// request leaves by: nothing is sent while the bound lease is invalid, and what is sent names its instance.
@Suite struct UpstreamLeaseHTTPTests {
    @Test func noRequestLeavesUnderAnInvalidLeaseAndEachSaysItsInstance() async throws {
        try await HTTPClientTests.withServer { s in
            try await HTTPClient.withClient { c in
                let valid = Locked(true)
                let lease = UpstreamLease(name: "east") { valid.withLock { $0 } }
                try await UpstreamLease.$current.withValue(lease) {
                    #expect(try await c.get("\(s.baseURL)/hello").status == 200)
                    valid.withLock { $0 = false }
                    do {
                        _ = try await c.get("\(s.baseURL)/hello")
                        Issue.record("a request left under an invalid lease")
                    } catch let e as AdapterError {
                        #expect(e.message.contains("instance 'east' is no longer sure to be the active bridge"))
                    }
                }
                // Without a lease (no standby), requests go as always and name no instance.
                #expect(try await c.get("\(s.baseURL)/hello").status == 200)
                #expect(s.received.count == 2)
                #expect(s.received.map { $0.headers["x-switchyard-instance"] } == ["east", nil])
            }
        }
    }

    /// A process paused after the request was checked and before it went out (the check is on the caller's
    /// task, the sending on the transfer thread) resumes with the lease gone: the request is asked again
    /// right before it is sent, and does not go. The lease here is valid for its first question only.
    @Test func aRequestWhoseLeaseEndsBeforeItIsSentDoesNotGo() async throws {
        try await HTTPClientTests.withServer { s in
            try await HTTPClient.withClient { c in
                let asked = Locked(0)
                let lease = UpstreamLease(name: "west") { asked.withLock { $0 += 1; return $0 == 1 } }
                try await UpstreamLease.$current.withValue(lease) {
                    do {
                        let r = try await c.get("\(s.baseURL)/hello")
                        Issue.record("the request went out with status \(r.status)")
                    } catch let e as HTTPError {
                        #expect(e.message == "instance 'west' is no longer sure to be the active bridge: nothing is sent upstream")
                    }
                }
                #expect(asked.withLock { $0 } == 2)
                #expect(s.received.isEmpty)
                // The client goes on: the next request, without a lease, is sent.
                #expect(try await c.get("\(s.baseURL)/hello").status == 200)
            }
        }
    }
}
