import Testing
import SwitchyardCore
import SwitchyardHTTP

/// The in-memory HTTP twin the cloud adapters' unit tests run against: it answers as it is told, records what
/// it was sent, and behaves like a client that exists only inside a run.
@Suite struct HTTPTwinTests {
    @Test func itAnswersFromItsTableAndRecordsEveryRequest() async throws {
        let twin = HTTPTwin(routes: ["GET /v1/lights/all": .json(#"[{"id":"a"}]"#, headers: ["X-RateLimit-Remaining": "119"])])
        try await twin.withClient(options: .init(userAgent: "test"), isolation: #isolation) { http in
            let r = try await http.get("https://api.example/v1/lights/all?fast=1", headers: [("Authorization", "Bearer t")])
            #expect(r.status == 200 && r.text == #"[{"id":"a"}]"#)
            // Header names are lower-cased, as the libcurl client gives them.
            #expect(r.headers["x-ratelimit-remaining"] == "119" && r.headers["content-type"] == "application/json")
            let missing = try await http.send(HTTPRequest(method: "PUT", url: "https://api.example/v1/lights/id:a/state", body: Array("{}".utf8)))
            #expect(missing.status == 404)
        }
        #expect(twin.lines == ["GET /v1/lights/all", "PUT /v1/lights/id:a/state"])
        #expect(twin.requests[0].headers.map(\.0) == ["Authorization"] && twin.requests[1].body == Array("{}".utf8))
        #expect(twin.options.map(\.userAgent) == ["test"])
    }

    @Test func aResponderCanChangeFailAndSeeTheRequest() async throws {
        let twin = HTTPTwin { r in .json(#"{"echo":"\#(r.method)"}"#, status: 207) }
        try await twin.withClient(options: .init(), isolation: #isolation) { http in
            let r = try await http.get("http://h/x")
            #expect(r.text == #"{"echo":"GET"}"# && r.status == 207)
            twin.answer { _ in throw HTTPError(kind: .timeout, message: "timed out") }
            await #expect(throws: HTTPError(kind: .timeout, message: "timed out")) { try await http.get("http://h/x") }
        }
        // A failed request was sent all the same.
        #expect(twin.lines == ["GET /x", "GET /x"])
    }

    /// Like `HTTPClient`, the twin is a client only while a run has it open: a request outside is refused.
    @Test func outsideARunItRefusesRequests() async throws {
        let twin = HTTPTwin(routes: [:])
        #expect(twin.openRuns == 0)
        await #expect(throws: HTTPError.self) { try await twin.get("http://h/") }
        try await twin.withClient(options: .init(), isolation: #isolation) { _ in
            #expect(twin.openRuns == 1)
        }
        #expect(twin.openRuns == 0 && twin.runs == 1)
        await #expect(throws: HTTPError.self) { try await twin.get("http://h/") }
        #expect(twin.requests.isEmpty)
        #expect(HTTPTwin.path(of: "https://api.lifx.com/v1/lights/label:Hall%20Lamp/state?x=1") == "/v1/lights/label:Hall%20Lamp/state")
        #expect(HTTPTwin.path(of: "http://h") == "/")
    }
}
