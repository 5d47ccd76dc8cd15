import Foundation
import Testing
import SimulatorSupport
import SwitchyardCore
import SwitchyardHTTP

/// The server every HTTP simulator builds on, as the tests, the demo, the soak and the bench rely on it: no
/// Nagle on its connections, a stop that is an upstream gone (connections dropped, port free for the one that
/// comes back), and the same answers without a socket.
@Suite struct LoopbackHTTPServerTests {
    static let routes: [(String, LoopbackHTTPServer.Handler)] = [
        ("GET,PUT /v1/*", { r in .json(#"{"path":"\#(r.path)","x":"\#(r.query["x"] ?? "")","body":"\#(r.text)"}"#) }),
        ("/exact", { _ in .init(status: 204) }),
    ]

    /// Whether each socket of this process that is a connection accepted on 127.0.0.1:`port` (not the
    /// listener, not a client's) has TCP_NODELAY set.
    static func acceptedNoDelay(port: Int) -> [Bool] {
        var out: [Bool] = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
            guard let fd = Int32(name) else { continue }
            var addr = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let named = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
            guard named == 0, addr.sin_family == sa_family_t(AF_INET), Int(UInt16(bigEndian: addr.sin_port)) == port else { continue }
            var listening: Int32 = 0, noDelay: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) == 0, listening == 0 else { continue }
            size = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &noDelay, &size) == 0 else { continue }
            out.append(noDelay != 0)
        }
        return out
    }

    /// An answer is never held back for the client's delayed ACK: the connection the server accepted has
    /// TCP_NODELAY.
    @Test func theAcceptedConnectionHasNoDelay() async throws {
        let s = try await LoopbackHTTPServer.start(routes: Self.routes)
        try await withTeardown {
            try await HTTPClient.withClient { c in
                let r = try await c.get("\(s.baseURL)/exact")
                #expect(r.status == 204)
                #expect(Self.acceptedNoDelay(port: s.port) == [true])
            }
        } teardown: { await s.stop() }
    }

    /// A stopped server is an upstream gone: the connection kept alive is dropped (the next request is
    /// refused, not answered on it), and a server started on the same port serves again.
    @Test func aStoppedServerDropsItsConnectionsAndItsPortServesAgain() async throws {
        let first = try await LoopbackHTTPServer.start(routes: Self.routes)
        try await HTTPClient.withClient { c in
            let r = try await c.get("\(first.baseURL)/exact")
            #expect(r.newConnections == 1)
            #expect(first.openConnections == 1)
            await first.stop()
            let refused = await #expect(throws: HTTPError.self) { try await c.get("\(first.baseURL)/exact", timeout: 5) }
            #expect(refused?.kind == .connection)
            let again = try await LoopbackHTTPServer.start(routes: Self.routes, port: UInt16(first.port))
            try await withTeardown {
                let r = try await c.get("\(again.baseURL)/exact")
                #expect(r.status == 204 && r.newConnections == 1 && again.receivedCount == 1)
                #expect(first.receivedCount == 1)
            } teardown: { await again.stop() }
        }
    }

    /// In memory, a request is routed, recorded and answered as on the wire: the same request sent over the
    /// socket is read into the same `Received`, and gets the same answer.
    @Test func inMemoryARequestIsAnsweredAsOnTheWire() async throws {
        let memory = LoopbackHTTPServer.inMemory(routes: Self.routes)
        let target = "/v1/lights/label:Hall%20Lamp/state?x=a%2Cb"
        let body = Array(#"{"power":"on"}"#.utf8)
        let direct = await memory.respond(to: .init(method: "PUT", target: target, headers: [("X-Test", "1")], body: body))
        #expect(direct.status == 200 && direct.text == #"{"path":"/v1/lights/label:Hall Lamp/state","x":"a,b","body":"{"power":"on"}"}"#)
        // Routing: methods as listed (none: any), components without regard to case, `*` at least one of them.
        #expect(await memory.respond(to: .init(method: "POST", target: "/v1/x")).status == 404)
        #expect(await memory.respond(to: .init(method: "GET", target: "/v1")).status == 404)
        #expect(await memory.respond(to: .init(method: "DELETE", target: "/EXACT")).status == 204)
        // The knobs: the next answer is the injected failure; requests no route takes are not recorded.
        memory.injectFailures([503])
        #expect(await memory.respond(to: .init(method: "GET", target: "/v1/a")).status == 503)
        #expect(memory.received.map { "\($0.method) \($0.path)" } == ["PUT /v1/lights/label:Hall Lamp/state", "DELETE /EXACT", "GET /v1/a"])

        let wire = try await LoopbackHTTPServer.start(routes: Self.routes)
        try await withTeardown {
            try await HTTPClient.withClient { c in
                let r = try await c.send(HTTPRequest(method: "PUT", url: wire.baseURL + target, headers: [("X-Test", "1")], body: body))
                #expect(r.status == direct.status && r.text == direct.text && r.headers["content-type"] == "application/json")
            }
            let got = try #require(wire.received.first)
            let sent = memory.received[0]
            #expect(got.method == sent.method && got.path == sent.path && got.query == sent.query && got.body == sent.body)
            #expect(got.headers["x-test"] == "1" && sent.headers["x-test"] == "1")
        } teardown: { await wire.stop() }
    }
}
