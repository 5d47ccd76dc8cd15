import Foundation
import Logging
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// MQTT 5 request/response through the engine over the in-memory transport: every answer a v5 client asks
/// for (its Response Topic) is published there with its Correlation Data, beside today's answer; message
/// expiry on the non-retained messages (docs/topics.md "MQTT 5"). Over a real broker: MQTT5Tests.
@Suite struct ReplyToEngineTests {
    static let expiry = MessageExpiry(events: 3600, logs: 600, results: 60)

    func withEngine<R: Sendable>(expiry: MessageExpiry = Self.expiry,
                                 _ body: (BridgeEngine, InMemoryTransport, ScriptedAdapter) async throws -> R) async throws -> R {
        let t = InMemoryTransport()
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        var settings = EngineSettings(scheme: TopicScheme(base: "b"), version: "t")
        settings.expiry = expiry
        let e = BridgeEngine(settings: settings, transport: t, logger: logger)
        let a = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }
            try await waitUntil("adapter listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            try await waitUntil("its state") { t.published.contains { $0.topic == "b/test/lamp" } }
            return try await body(e, t, a)
        }
    }

    func send(_ t: InMemoryTransport, _ topic: String, _ payload: String, replyTo: ReplyTo?) {
        t.inject(.message(InboundMessage(topic: topic, payload: Array(payload.utf8), replyTo: replyTo)))
    }

    func answers(_ t: InMemoryTransport, on topic: String) -> [InMemoryTransport.Published] { t.published.filter { $0.topic == topic } }

    @Test func aCommandWithAResponseTopicIsAnsweredThereWithItsCorrelationDataAndStillOnItsResultTopic() async throws {
        try await withEngine { _, t, a in
            let reply = ReplyTo(topic: "app/reply", correlationData: Array("c-1".utf8))
            send(t, "b/test/lamp/set", #"{"state":"ON","transaction":"t1"}"#, replyTo: reply)
            try await waitUntil("answered") { answers(t, on: "app/reply").count == 1 && answers(t, on: "b/test/lamp/result").count == 1 }
            let v5 = answers(t, on: "app/reply")[0], old = answers(t, on: "b/test/lamp/result")[0]
            #expect(try JSONValue.parse(v5.payload) == ["transaction": "t1", "status": "ok"])
            #expect(v5.properties == MessageProperties(expiry: 60, correlationData: Array("c-1".utf8)) && v5.qos == 1 && !v5.retain)
            // Today's result is unchanged but for its expiry: no correlation data on it.
            #expect(old.payload == v5.payload && old.properties == MessageProperties(expiry: 60))
            #expect(await a.commands.map(\.fields) == [["state": "ON"]])

            // Without a transaction: answered on the Response Topic only (a 3.1.1 client asked for nothing).
            send(t, "b/test/lamp/set/brightness", "40", replyTo: ReplyTo(topic: "app/reply", correlationData: [2]))
            try await waitUntil("second answer") { answers(t, on: "app/reply").count == 2 }
            #expect(try JSONValue.parse(answers(t, on: "app/reply")[1].payload) == ["status": "ok"])
            #expect(answers(t, on: "app/reply")[1].properties.correlationData == [2])
            #expect(answers(t, on: "b/test/lamp/result").count == 1)
        }
    }

    @Test func anErrorReachesTheResponseTopicTooAndTheResultTopicIsAnsweredOnce() async throws {
        try await withEngine { _, t, a in
            // Refused by validation.
            send(t, "b/test/lamp/set", #"{"brightness":150}"#, replyTo: ReplyTo(topic: "app/reply", correlationData: [1]))
            try await waitUntil("refusal") { answers(t, on: "app/reply").count == 1 }
            let refusal = try JSONValue.parse(answers(t, on: "app/reply")[0].payload)
            #expect(refusal["status"] == "error" && refusal["error"]?.stringValue?.contains("out of range") == true)
            // Failed by the adapter.
            await a.setFailure("the lamp said no")
            send(t, "b/test/lamp/set", "ON", replyTo: ReplyTo(topic: "app/reply", correlationData: [2]))
            try await waitUntil("failure") { answers(t, on: "app/reply").count == 2 }
            let failed = answers(t, on: "app/reply")[1]
            #expect(try JSONValue.parse(failed.payload) == ["status": "error", "error": "the lamp said no"])
            #expect(failed.properties.correlationData == [2])
            // The Response Topic is the result topic: one answer, with the correlation data.
            await a.setFailure(nil)
            send(t, "b/test/lamp/set", #"{"state":"OFF","transaction":7}"#, replyTo: ReplyTo(topic: "b/test/lamp/result", correlationData: [3]))
            try await waitUntil("the one result") { answers(t, on: "b/test/lamp/result").count == 1 }
            try await Task.sleep(for: .milliseconds(50))
            #expect(answers(t, on: "b/test/lamp/result").count == 1)
            #expect(answers(t, on: "b/test/lamp/result")[0].properties.correlationData == [3])
        }
    }

    @Test func aRequestAndAGetAreAnsweredOnTheResponseTopic() async throws {
        try await withEngine { _, t, a in
            send(t, "b/bridge/request/health_check", #"{"transaction":"h"}"#, replyTo: ReplyTo(topic: "app/reply", correlationData: [4]))
            try await waitUntil("response") { answers(t, on: "app/reply").count == 1 }
            let r = answers(t, on: "app/reply")[0]
            #expect(try JSONValue.parse(r.payload)["data"]?["healthy"] == true && r.properties.correlationData == [4])
            #expect(answers(t, on: "b/bridge/response/health_check").map(\.payload) == [r.payload])

            send(t, "b/test/lamp/get", "", replyTo: ReplyTo(topic: "app/reply", correlationData: [5]))
            try await waitUntil("get answered") { answers(t, on: "app/reply").count == 2 }
            let got = answers(t, on: "app/reply")[1]
            let state = try JSONValue.parse(t.published.last { $0.topic == "b/test/lamp" }!.payload)
            #expect(try JSONValue.parse(got.payload) == ["status": "ok", "state": state] && got.properties.correlationData == [5])
            #expect(await a.refreshes == ["lamp-1"])

            // A request with a refused Response Topic: answered on bridge/response alone, with the reason.
            send(t, "b/bridge/request/republish", "", replyTo: ReplyTo(topic: "b/test/lamp/set", correlationData: [6]))
            try await waitUntil("refused request") { !answers(t, on: "b/bridge/response/republish").isEmpty }
            let refused = try JSONValue.parse(answers(t, on: "b/bridge/response/republish")[0].payload)
            #expect(refused["status"] == "error" && refused["error"]?.stringValue?.contains("one of the bridge's own topics") == true)
            #expect(!t.published.contains { $0.topic == "b/test/lamp/set" })
            #expect(answers(t, on: "app/reply").count == 2)
        }
    }

    @Test func withoutAResponseTopicNothingChanges() async throws {
        try await withEngine(expiry: MessageExpiry()) { _, t, _ in
            send(t, "b/test/lamp/set", "ON", replyTo: nil)
            send(t, "b/test/lamp/set", #"{"state":"OFF","transaction":"x"}"#, replyTo: nil)
            send(t, "b/test/lamp/set", #"{"brightness":900}"#, replyTo: nil)
            try await waitUntil("result and error") {
                answers(t, on: "b/test/lamp/result").count == 1 && t.published.contains { $0.topic == "b/bridge/log" }
            }
            // Only the state, the one result and the log line; none with a property (expiry is off by default).
            #expect(t.published.allSatisfy { $0.properties == .none })
            #expect(try JSONValue.parse(answers(t, on: "b/test/lamp/result")[0].payload) == ["transaction": "x", "status": "ok"])
        }
    }

    @Test func eventsLogsAndResultsExpireAsConfiguredAndRetainedTopicsNever() async throws {
        try await withEngine { _, t, a in
            await a.emit("something")
            send(t, "b/test/lamp/set", #"{"brightness":900,"transaction":"e"}"#, replyTo: nil)
            try await waitUntil("event, log and result") {
                ["b/bridge/event", "b/bridge/log", "b/test/lamp/result"].allSatisfy { topic in t.published.contains { $0.topic == topic } }
            }
            #expect(t.published.first { $0.topic == "b/bridge/event" }?.properties.expiry == 3600)
            #expect(t.published.first { $0.topic == "b/bridge/log" }?.properties.expiry == 600)
            #expect(t.published.first { $0.topic == "b/test/lamp/result" }?.properties.expiry == 60)
            #expect(t.published.filter(\.retain).allSatisfy { $0.properties == .none })
        }
    }
}
