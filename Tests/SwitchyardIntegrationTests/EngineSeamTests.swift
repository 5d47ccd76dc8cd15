import Foundation
import Logging
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// An adapter whose commands finish only when the test opens its gate: commands pile up in its queue.
actor GatedAdapter: Adapter {
    nonisolated let id = "test"
    let gate: Latch
    var performed: [String] = []
    init(gate: Latch) { self.gate = gate }

    func run(context: AdapterContext) async throws {
        await context.setDevices([ScriptedAdapter.lamp()], authoritative: false)
        await context.update("lamp-1", ["state": "OFF", "brightness": 50])
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }

    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        await gate.wait()
        try Task.checkCancellation()
        performed.append("\(command.fields["brightness"] ?? .null)")
        await context.update(command.deviceID, command.fields)
    }

    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

/// Where two things meet over time: a command during a reload, a command for a device that is not
/// there. Each command with a transaction gets exactly one result (docs/topics.md "Commands").
@Suite struct EngineSeamTests {
    func engine(_ t: InMemoryTransport, drain: Double = 30) -> BridgeEngine {
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        return BridgeEngine(settings: EngineSettings(scheme: TopicScheme(base: "b"), version: "t", drainTimeout: drain), transport: t, logger: logger)
    }

    func command(_ t: InMemoryTransport, _ n: Int, device: String = "lamp") {
        t.inject(.message(InboundMessage(topic: "b/test/\(device)/set", payload: Array(#"{"brightness": \#(n), "transaction": "t\#(n)"}"#.utf8))))
    }

    /// Transaction → the results it got, from what the in-memory broker was given.
    func results(_ t: InMemoryTransport) -> [String: [JSONValue]] {
        var out: [String: [JSONValue]] = [:]
        for p in t.published where p.topic.hasSuffix("/result") {
            guard let j = try? JSONValue.parse(p.payload), case .string(let tr)? = j["transaction"] else { continue }
            out[tr, default: []].append(j)
        }
        return out
    }

    /// Commands queued for the adapter being replaced are carried out by it (its queue drains first);
    /// those that arrive while it stops wait for the new instance. None is refused as "not running".
    @Test func commandsDuringAReloadWaitForTheNewAdapter() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        let gate = Latch()
        let old = GatedAdapter(gate: gate)
        let new = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [old]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            for n in 1...5 { command(t, n) }
            let replaced = Task { await e.replaceAdapters(start: [new], remove: []) }
            for n in 6...10 { command(t, n) }
            try await Task.sleep(for: .milliseconds(200))
            gate.signal()
            await replaced.value
            for n in 11...12 { command(t, n) }
            try await waitUntil("every result") { results(t).count == 12 }
            let r = results(t)
            for n in 1...12 {
                let got = r["t\(n)"] ?? []
                #expect(got.count == 1, "t\(n): \(got)")
                #expect(got.first?["status"] == "ok", "t\(n): \(got)")
            }
            // The old instance carried out what was queued for it before it stopped; the new one the rest.
            let oldDone = await old.performed.count, newDone = await new.commands.count
            #expect(oldDone + newDone == 12)
            #expect(newDone >= 2)
        }
    }

    /// An adapter that does not answer within `drainTimeout` is stopped anyway; what it held is answered
    /// with an error, once.
    @Test func aStuckAdapterIsStoppedAndItsCommandsAnsweredOnce() async throws {
        let t = InMemoryTransport()
        let e = engine(t, drain: 0.2)
        let old = GatedAdapter(gate: Latch())   // never opens
        let new = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [old]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            for n in 1...3 { command(t, n) }
            try await Task.sleep(for: .milliseconds(100))
            await e.replaceAdapters(start: [new], remove: [])
            try await waitUntil("every result") { results(t).count == 3 }
            for (tr, got) in results(t) {
                #expect(got.count == 1, "\(tr): \(got)")
                #expect(got.first?["status"] == "error", "\(tr): \(got)")
                #expect(got.first?["error"]?.stringValue?.contains("stopped before") == true, "\(tr): \(got)")
            }
        }
    }

    /// Two reloads at once (SIGHUP and a config/reload request) replace the adapter one after the other:
    /// in the end one instance runs, the newest, and the others have stopped.
    @Test func overlappingReloadsLeaveOneAdapterRunning() async throws {
        let t = InMemoryTransport()
        let e = engine(t, drain: 0.3)
        let gate = Latch()
        let old = GatedAdapter(gate: gate)
        let first = ScriptedAdapter(devices: [ScriptedAdapter.lamp()]), second = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [old]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            command(t, 1)   // keeps the old instance draining until its time is up
            try await Task.sleep(for: .milliseconds(50))
            async let a: Void = e.replaceAdapters(start: [first], remove: [])
            async let b: Void = e.replaceAdapters(start: [second], remove: [])
            _ = await (a, b)
            try await waitUntil("one running") {
                let running = [await first.running, await second.running]
                return running.filter { $0 }.count == 1
            }
            try await Task.sleep(for: .milliseconds(200))
            let running = [await first.running, await second.running]
            #expect(running.filter { $0 }.count == 1, "\(running)")
            gate.signal()
        }
    }

    /// A command with a transaction for a device the adapter does not know is answered with the error.
    @Test func anUnknownDeviceIsAnsweredOnItsResultTopic() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        let a = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            command(t, 1, device: "nosuch")
            t.inject(.message(InboundMessage(topic: "b/other/lamp/set", payload: Array(#"{"state":"ON","transaction":"t2"}"#.utf8))))
            try await waitUntil("answered") { results(t).count == 2 }
            let one = try #require(t.published.first { $0.topic == "b/test/nosuch/result" })
            let j = try JSONValue.parse(one.payload)
            #expect(j["status"] == "error" && j["transaction"] == "t1")
            #expect(j["error"]?.stringValue?.contains("unknown device 'nosuch'") == true)
            #expect(t.published.contains { $0.topic == "b/other/lamp/result" && $0.payload.contains("unknown adapter") })
        }
    }
}
