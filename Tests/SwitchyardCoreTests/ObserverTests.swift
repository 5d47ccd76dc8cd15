import Foundation
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// What an observer (the console) is told: every command that reached an adapter, with its outcome.
final class RecordingObserver: EngineObserver {
    struct Outcome: Equatable {
        var adapter: String
        var ok: Bool
    }
    let outcomes = Locked<[Outcome]>([])
    let refused = Locked<[String]>([])

    func published(topic: String, payload: [UInt8], retain: Bool) {}
    func commandFinished(adapter: String, ok: Bool, seconds: Double) {
        precondition(seconds >= 0)
        outcomes.withLock { $0.append(Outcome(adapter: adapter, ok: ok)) }
    }
    func commandRefused(topic: String) { refused.withLock { $0.append(topic) } }

    var count: Int { outcomes.withLock { $0.count } }
}

/// The engine's observers over `InMemoryTransport`: no broker.
@Suite struct EngineObserverTests {
    /// A command without a transaction that goes well takes the short path (no hop back to the engine):
    /// it is counted all the same, as are commands with a transaction and failed ones.
    @Test func everyCommandIsCountedWithOrWithoutATransaction() async throws {
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let observer = RecordingObserver()
        try await InMemoryBridge.with(adapters: [adapter]) { bridge in
            await bridge.engine.observe(observer)
            try await bridge.waitForState("test", "lamp")
            bridge.command("test", "lamp", #"{"state": "ON"}"#)
            bridge.command("test", "lamp", #"{"state": "OFF", "transaction": "t1"}"#)
            try await waitUntil("two outcomes", timeout: 10) { observer.count >= 2 }
            await adapter.setFailure("the lamp said no")
            bridge.command("test", "lamp", #"{"state": "ON"}"#)
            bridge.command("test", "lamp", #"{"state": "ON", "transaction": "t2"}"#)
            try await waitUntil("four outcomes", timeout: 10) { observer.count >= 4 }
            _ = try await bridge.result("test", "lamp", transaction: "t2")
            // A refused command reaches no adapter: it is a refusal, not an outcome.
            bridge.command("test", "lamp", #"{"brightness": 500}"#)
            try await waitUntil("the refusal", timeout: 10) { !observer.refused.withLock { $0.isEmpty } }
        }
        #expect(observer.outcomes.withLock { $0 } == [.init(adapter: "test", ok: true), .init(adapter: "test", ok: true),
                                                       .init(adapter: "test", ok: false), .init(adapter: "test", ok: false)])
    }

    /// Commands cut short when their adapter stops (one on the wire with a transaction, one queued without)
    /// are each counted once, as failed: the one with a transaction is not counted again when the
    /// engine answers what its adapter left.
    @Test func commandsCutShortWhenTheirAdapterStopsAreCountedOnce() async throws {
        let gate = Latch()
        let observer = RecordingObserver()
        try await InMemoryBridge.with(adapters: [GatedAdapter(gate: gate)]) { bridge in
            await bridge.engine.observe(observer)
            try await bridge.waitForState("test", "lamp")
            bridge.command("test", "lamp", #"{"brightness": 10, "transaction": "held"}"#)
            bridge.command("test", "lamp", #"{"brightness": 20}"#)
            try await waitUntil("both queued", timeout: 10) { await bridge.engine.snapshot().adapters.first?.queuedBytes ?? 0 > 0 }
            await bridge.engine.replaceAdapters(start: [], remove: ["test"])
            let r = try await bridge.result("test", "lamp", transaction: "held")
            #expect(r["status"] == "error")
        }
        #expect(observer.outcomes.withLock { $0 } == [.init(adapter: "test", ok: false), .init(adapter: "test", ok: false)])
    }
}
