import Foundation
import Testing
import SwitchyardHTTP
import SwitchyardSimulators

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

    @Test func getReturnsStatusHeadersAndBody() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        let r = try await c.get("\(s.baseURL)/hello", headers: [("Authorization", "Bearer t0k")])
        #expect(r.status == 200)
        #expect(r.text == #"{"hello":"world"}"#)
        #expect(r.headers["x-ratelimit-remaining"] == "119")
        #expect(s.received.first?.headers["authorization"] == "Bearer t0k")
        let missing = try await c.get("\(s.baseURL)/nope")
        #expect(missing.status == 404)
        c.shutdown()
        await s.stop()
    }

    @Test func bodyArrivesExactlyWithTheMethod() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        let body = #"{"power":"on","brightness":0.4}"#
        let r = try await c.send(HTTPRequest(method: "PUT", url: "\(s.baseURL)/lights/all", headers: [("Content-Type", "application/json")],
                                             body: Array(body.utf8)))
        #expect(r.status == 207)
        let got = try #require(s.received.first)
        #expect(got.method == "PUT")
        #expect(got.path == "/lights/all")
        #expect(got.text == body)
        #expect(got.headers["content-type"] == "application/json")
        c.shutdown()
        await s.stop()
    }

    @Test func connectionsAreReused() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        let first = try await c.get("\(s.baseURL)/hello")
        let second = try await c.get("\(s.baseURL)/hello")
        #expect(first.newConnections == 1)
        #expect(second.newConnections == 0)
        c.shutdown()
        await s.stop()
    }

    @Test func manyConcurrentRequestsAllComplete() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        let statuses = try await withThrowingTaskGroup(of: Int.self) { g in
            for _ in 0..<40 { g.addTask { try await c.get("\(s.baseURL)/hello").status } }
            return try await g.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses.count == 40 && statuses.allSatisfy { $0 == 200 })
        c.shutdown()
        await s.stop()
    }

    @Test func timeoutsAndRefusedConnectionsAreTypedErrors() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        await #expect(throws: HTTPError.self) { _ = try await c.get("\(s.baseURL)/slow", timeout: 0.3) }
        do {
            _ = try await c.get("\(s.baseURL)/slow", timeout: 0.3)
        } catch let e as HTTPError {
            #expect(e.kind == .timeout)
        }
        await s.stop()
        do {
            _ = try await c.get("http://127.0.0.1:1/", timeout: 5)
            Issue.record("connected to port 1")
        } catch let e as HTTPError {
            #expect(e.kind == .connection)
        }
        c.shutdown()
    }

    @Test func injectedFailuresComeBackAsStatuses() async throws {
        let s = try await Self.server()
        let c = HTTPClient()
        s.injectFailures([503])
        #expect(try await c.get("\(s.baseURL)/hello").status == 503)
        #expect(try await c.get("\(s.baseURL)/hello").status == 200)
        c.shutdown()
        await s.stop()
    }
}
