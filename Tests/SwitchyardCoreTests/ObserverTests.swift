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

    func published(topic: String, body: PayloadBody, retain: Bool) {}
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

/// The bounds a bridge's work hits are counted in that bridge's counter, whatever task the work comes from.
@Suite struct EngineBoundsTests {
    /// A console's command runs `submit` on the console's task, outside the engine's `run`.
    @Test func aSubmittedCommandsBoundIsTheEnginesNotTheCallers() async throws {
        let caller = BoundsCounter()
        try await Bounds.$counter.withValue(caller) { try await InMemoryBridge.with(adapters: [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])]) { bridge in
            try await bridge.waitForState("test", "lamp")
            let long = String(repeating: "x", count: CommandParser.maxTransactionBytes + 10)
            await bridge.engine.submit(topic: "b/test/lamp/set", payload: Array(#"{"state": "ON", "transaction": "\#(long)"}"#.utf8))
            #expect(bridge.engine.bounds.snapshot["transaction"] == 1)
        } }
        #expect(caller.snapshot.isEmpty)
    }

    /// A reload from another task (the runtime's) removes an adapter that had not listed its devices yet:
    /// the commands held for it are routed again there, refused, and their errors beyond 100 a second hit
    /// `error_logs`, this bridge's bound.
    @Test func aReplacementsBoundsAreTheEngines() async throws {
        let caller = BoundsCounter()
        try await Bounds.$counter.withValue(caller) { try await InMemoryBridge.with(adapters: [SilentAdapter()]) { bridge in
            try await waitUntil("the adapter started", timeout: 10) { await bridge.engine.snapshot().adapters.count == 1 }
            for i in 0..<(BridgeEngine.errorLogsPerSecond + 20) {
                await bridge.engine.submit(topic: "b/silent/d\(i)/set", payload: Array("ON".utf8))
            }
            #expect(bridge.engine.bounds.snapshot["error_logs"] == nil)
            await bridge.engine.replaceAdapters(start: [], remove: ["silent"])
            #expect((bridge.engine.bounds.snapshot["error_logs"] ?? 0) > 0)
        } }
        #expect(caller.snapshot.isEmpty)
    }
}

/// An adapter that never lists its devices: commands for it are held.
actor SilentAdapter: Adapter {
    nonisolated let id = "silent"
    func run(context: AdapterContext) async throws {
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {}
    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

/// An adapter that counts `requests` upstream requests (the last `errors` of them failed) when it starts.
actor CountingAdapter: Adapter {
    nonisolated let id = "counting"
    let requests: Int, errors: Int
    init(requests: Int, errors: Int) {
        self.requests = requests
        self.errors = errors
    }
    func run(context: AdapterContext) async throws {
        for i in 0..<requests { await context.recordRequest(error: i >= requests - errors ? "refused" : nil) }
        await context.setDevices([], authoritative: true)
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {}
    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

/// An adapter's upstream totals (bridge/health, the console's counters) only grow: a reload's new
/// instance goes on from the old one's, and so does one added back after it was removed.
@Suite struct AdapterTotalsTests {
    @Test func totalsAreCarriedAcrossInstances() async throws {
        try await InMemoryBridge.with(adapters: [CountingAdapter(requests: 5, errors: 2)]) { bridge in
            @Sendable func totals() async -> (Int, Int)? {
                await bridge.engine.snapshot().adapters.first { $0.id == "counting" }.map { ($0.requests, $0.errors) }
            }
            try await waitUntil("the first instance's requests", timeout: 10) { await totals()?.0 == 5 }
            await bridge.engine.replaceAdapters(start: [CountingAdapter(requests: 3, errors: 1)], remove: [])
            try await waitUntil("the second instance's requests", timeout: 10) { await totals()?.0 == 8 }
            #expect(await totals()?.1 == 3)
            await bridge.engine.replaceAdapters(start: [], remove: ["counting"])
            #expect(await totals() == nil)
            await bridge.engine.replaceAdapters(start: [CountingAdapter(requests: 1, errors: 0)], remove: [])
            try await waitUntil("the third instance's requests", timeout: 10) { await totals()?.0 == 9 }
            #expect(await totals()?.1 == 3)
        }
    }
}
