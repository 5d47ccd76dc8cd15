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

/// A new instance whose `inherit` waits on a gate: the engine suspends between stopping the old instance and
/// starting this one.
actor SlowInheritingAdapter: Adapter {
    nonisolated let id = "test"
    let gate: Latch
    let inheriting = Latch()
    var performed: [String] = []
    init(gate: Latch) { self.gate = gate }

    func inherit(from previous: any Adapter) async {
        inheriting.signal()
        await gate.wait()
    }

    func run(context: AdapterContext) async throws {
        await context.setDevices([ScriptedAdapter.lamp()], authoritative: false)
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }

    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        performed.append("\(command.fields["brightness"] ?? .null)")
        await context.update(command.deviceID, command.fields)
    }

    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

/// An adapter that lists its lamp only a moment after it starts, and refuses commands for devices it has
/// not listed (as the virtual adapter does).
actor LateListingAdapter: Adapter {
    nonisolated let id = "test"
    var listed = false
    var performed = 0
    func run(context: AdapterContext) async throws {
        try await Task.sleep(for: .milliseconds(300))
        // Known before they are listed, as a real adapter knows them: the listing routes the held commands,
        // and they may reach `perform` while this call is still suspended in `setDevices`.
        listed = true
        await context.setDevices([ScriptedAdapter.lamp()], authoritative: false)
        await context.update("lamp-1", ["state": "OFF", "brightness": 50])
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        guard listed else { throw AdapterError("device '\(command.deviceID)' is not known") }
        performed += 1
        await context.update(command.deviceID, command.fields)
    }
    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

/// An adapter whose one request, `echo`, answers with the body it was given.
actor EchoAdapter: Adapter {
    nonisolated let id = "test"
    func run(context: AdapterContext) async throws {
        await context.setStatus(.running)
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {}
    func refresh(deviceID: String, context: AdapterContext) async throws {}
    func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? {
        path == "echo" ? ["got": payload] : nil
    }
}

/// An engine over `t` (base `b` unless `settings` say otherwise) that logs only what is critical; not running.
func quietEngine(_ t: InMemoryTransport, _ settings: EngineSettings = EngineSettings(scheme: TopicScheme(base: "b"), version: "t")) -> BridgeEngine {
    var logger = Logger(label: "t")
    logger.logLevel = .critical
    return BridgeEngine(settings: settings, transport: t, logger: logger)
}

/// Where two things meet over time: a command during a reload, a command for a device that is not
/// there. Each command with a transaction gets exactly one result (docs/topics.md "Commands").
@Suite struct EngineSeamTests {
    func engine(_ t: InMemoryTransport, drain: Double = 30) -> BridgeEngine {
        quietEngine(t, EngineSettings(scheme: TopicScheme(base: "b"), version: "t", drainTimeout: drain))
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

    /// A reload's new instance knows its devices only once it has listed them; the engine carries them over
    /// at once, so commands for them wait until it has (the soak found a virtual light's command refused as
    /// "not known" right after a reload).
    @Test func commandsForCarriedDevicesWaitForTheNewInstancesListing() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        let new = LateListingAdapter()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            await e.replaceAdapters(start: [new], remove: [])
            for n in 1...3 { command(t, n) }
            try await waitUntil("every result") { results(t).count == 3 }
            for (tr, got) in results(t) {
                #expect(got.count == 1 && got.first?["status"] == "ok", "\(tr): \(got)")
            }
            #expect(await new.performed == 3)
        }
    }

    /// Request paths are matched without case, the adapter's part included: its request gets the body
    /// whatever the case it was sent in.
    @Test func anAdapterRequestInAnotherCaseKeepsItsBody() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [EchoAdapter()]) }
            defer { t.finish() }
            for (i, path) in ["test/echo", "TEST/Echo"].enumerated() {
                t.inject(.message(InboundMessage(topic: "b/bridge/request/\(path)", payload: Array(#"{"x": \#(i), "transaction": "r\#(i)"}"#.utf8))))
                try await waitUntil("\(path) answered") { t.published.contains { $0.topic == "b/bridge/response/\(path)" } }
                let answer = try JSONValue.parse(t.published.last { $0.topic == "b/bridge/response/\(path)" }!.payload)
                #expect(answer["data"]?["got"]?["x"] == .number(Double(i)), "\(path): \(answer)")
                #expect(answer["transaction"] == .string("r\(i)"))
            }
        }
    }

    /// Commands queued for the adapter being replaced are carried out by it (its queue drains first);
    /// those that arrive while it stops wait for the new instance. None is refused as "not running".
    /// Commands that come while the new instance inherits from the old one (the old one stopped, the new one
    /// not started) wait for it: LIFXHybridTests' reload test once got "adapter 'lifx' is not running" there.
    @Test func commandsWhileTheNewInstanceInheritsWaitForIt() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        let gate = Latch()
        let old = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let new = SlowInheritingAdapter(gate: gate)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [old]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            let replaced = Task { await e.replaceAdapters(start: [new], remove: []) }
            await new.inheriting.wait()
            for n in 1...3 { command(t, n) }
            try await waitUntil("the commands routed") { t.released >= 3 }
            gate.signal()
            await replaced.value
            try await waitUntil("every result") { results(t).count == 3 }
            let r = results(t)
            for n in 1...3 { #expect(r["t\(n)"]?.first?["status"] == "ok", "t\(n): \(r["t\(n)"] ?? [])") }
            let performed = await new.performed
            #expect(performed == ["number(1.0)", "number(2.0)", "number(3.0)"])
        }
    }

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

    /// After a standby takeover (design.md §18) the engine is told the devices the group's previous active
    /// instance listed: a command for one its adapter has not listed yet waits past the adapter's first
    /// listing for the listing that brings it (a LIFX light the LAN finds again), while a command for a
    /// device nobody knew is refused at once, as before.
    @Test func aCommandForADeviceTheGroupKnewWaitsForTheListingThatBringsIt() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        await e.expectDevices(["test": ["desk"]])
        let a = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            command(t, 1, device: "desk")
            command(t, 2, device: "nosuch")
            try await waitUntil("the unknown device answered") { results(t)["t2"] != nil }
            #expect(results(t)["t2"]?.first?["error"]?.stringValue?.contains("unknown device 'nosuch'") == true)
            #expect(results(t)["t1"] == nil, "the known device's command was answered before its device was listed: \(results(t)["t1"] ?? [])")
            await a.list([ScriptedAdapter.lamp(), ScriptedAdapter.lamp("lamp-2", name: "desk")])
            try await waitUntil("the desk's command answered") { results(t)["t1"] != nil }
            #expect(results(t)["t1"] == [["status": "ok", "transaction": "t1"]])
            #expect(await a.commands.map(\.deviceID) == ["lamp-2"])
        }
    }

    /// The wait is bounded by the adapter's settle time: a device the group knew that never comes is then
    /// unknown, and its command answered once.
    @Test func aDeviceTheGroupKnewThatNeverComesIsUnknownAfterTheSettleTime() async throws {
        let t = InMemoryTransport()
        let e = quietEngine(t, EngineSettings(scheme: TopicScheme(base: "b"), version: "t", settleTimeout: 0.5))
        await e.expectDevices(["test": ["desk"]])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [ScriptedAdapter(devices: [ScriptedAdapter.lamp()])]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            command(t, 1, device: "desk")
            try await waitUntil("answered") { results(t)["t1"] != nil }
            let got = results(t)["t1"] ?? []
            #expect(got.count == 1 && got.first?["error"]?.stringValue?.contains("unknown device 'desk'") == true, "\(got)")
        }
    }

    /// A device listed before its upstream said what it is (`detecting`: an Imp whose app is being detected)
    /// has no fields yet: its command waits for the listing that gives them, instead of being refused for
    /// fields it does not have yet.
    @Test func aCommandForADeviceStillBeingIdentifiedWaitsForItsFields() async throws {
        let t = InMemoryTransport()
        let e = engine(t)
        var bare = DeviceDescriptor(id: "lamp-1", label: "Lamp", configuredName: "lamp", category: .generic, capabilities: [])
        bare.detecting = true
        let a = ScriptedAdapter(devices: [bare])
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            command(t, 1)
            try await Task.sleep(for: .milliseconds(100))
            #expect(results(t)["t1"] == nil, "answered before the device's fields were known: \(results(t)["t1"] ?? [])")
            await a.list([ScriptedAdapter.lamp()])
            try await waitUntil("answered") { results(t)["t1"] != nil }
            #expect(results(t)["t1"] == [["status": "ok", "transaction": "t1"]])
            #expect(await a.commands.first?.fields["brightness"] == 1)
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

/// Routing and the device lifecycle through the core with the in-memory transport.
@Suite struct EngineTests {
    /// The engine running with one scripted adapter over the in-memory transport, for `body`.
    func withEngine<R: Sendable>(_ body: (BridgeEngine, InMemoryTransport, ScriptedAdapter) async throws -> R) async throws -> R {
        let t = InMemoryTransport()
        let e = quietEngine(t)
        let a = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await e.run(adapters: [a]) }
            defer { t.finish() }   // the end of the transport's events ends `run`
            try await waitUntil("adapter listed") { await e.deviceNames("test") == ["lamp-1": "lamp"] }
            try await waitUntil("its state") { t.published.contains { $0.topic == "b/test/lamp" } }
            // The adapter says it runs after its first states, and bridge/info follows: over before `body`, so
            // that a test reading what comes next reads only what it caused.
            try await waitUntil("bridge/info with the adapter running") {
                t.published.contains { $0.topic == "b/bridge/info" && $0.payload.contains(#""test":"running""#) }
            }
            return try await body(e, t, a)
        }
    }

    /// `bridge/info` tells a client the bridge is there: set before `run` (a standby instance's takeover
    /// does), it is kept and published only once the engine has set its subscriptions, so that a request
    /// sent on seeing it is not published before anyone listens.
    @Test func bridgeInfoGoesOutOnlyOnceTheEngineIsSubscribed() async throws {
        let t = InMemoryTransport()
        let e = quietEngine(t)
        await e.setInfo(["standby": "east"])
        #expect(!t.published.contains { $0.topic == "b/bridge/info" })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await e.run(adapters: []) }
            defer { t.finish() }
            try await waitUntil("bridge/info") { t.published.contains { $0.topic == "b/bridge/info" } }
            #expect(t.subscriptions.contains("b/bridge/request/#"))
            #expect(t.published.first { $0.topic == "b/bridge/info" }?.payload.contains(#""standby":"east""#) == true)
        }
    }

    @Test func quantisedValuesDoNotRepublish() async throws {
        try await withEngine { _, t, a in
            await a.push("lamp-1", ["brightness": 29.999237])
            await a.push("lamp-1", ["brightness": 30.2])
            await a.push("lamp-1", ["brightness": 30.4])
            let states = t.published.filter { $0.topic == "b/test/lamp" }.map(\.payload)
            #expect(states == [#"{"brightness":50,"state":"OFF"}"#, #"{"brightness":30,"state":"OFF"}"#])
        }
    }

    /// Several devices in one hand-over: each state and availability published as separate calls would,
    /// in the order given; an unchanged value publishes nothing.
    @Test func oneReportCarriesSeveralDevicesStateAndAvailability() async throws {
        try await withEngine { _, t, a in
            await a.list([ScriptedAdapter.lamp(), ScriptedAdapter.lamp("lamp-2", name: "desk")])
            // desk's announcement, which the supervisor makes on its own after the listing (it would follow the
            // report's states if the report came first): over before the report, so that the report's own
            // publications are all there is to read.
            try await waitUntil("desk's announcement") {
                let topics = t.published.map(\.topic)
                guard let i = topics.firstIndex(of: "b/test/desk/availability") else { return false }
                return topics[i...].contains("b/bridge/event")
            }
            t.clear()
            await a.report([DeviceReport("lamp-1", fields: ["brightness": 20], available: false),
                            DeviceReport("lamp-2", fields: ["state": "ON"]),
                            DeviceReport("lamp-1", available: false)])
            let got = t.published.map { "\($0.topic)=\($0.payload)" }
            #expect(got == [#"b/test/lamp={"brightness":20,"state":"OFF"}"#, "b/test/lamp/availability=offline", #"b/test/desk={"state":"ON"}"#])
        }
    }

    /// A bound hit by one bridge's work is counted in that bridge's health, not in another's in the same
    /// process (the tests run many engines in one process).
    @Test func boundsAreCountedPerBridge() async throws {
        try await withEngine { e, t, _ in
            try await withEngine { other, _, _ in
                let long = String(repeating: "x", count: 300)
                t.inject(.message(InboundMessage(topic: "b/test/lamp/set", payload: Array(#"{"state": "ON", "transaction": "\#(long)"}"#.utf8))))
                try await waitUntil("the refusal") { t.published.contains { $0.topic == "b/bridge/log" && $0.payload.contains("transaction") } }
                #expect(e.bounds.snapshot["transaction"] == 1)
                #expect(other.bounds.snapshot.isEmpty)
            }
        }
    }

    /// When `run` returns, every adapter has stopped and every device is offline, in that order.
    @Test func runEndsWithTheAdaptersStoppedAndEveryDeviceOffline() async throws {
        let t = InMemoryTransport()
        let e = quietEngine(t)
        let a = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        let running = Task { await e.run(adapters: [a]) }
        try await waitUntil("online") { t.published.contains { $0.topic == "b/test/lamp/availability" && $0.payload == "online" } }
        #expect(await a.running)
        running.cancel()
        await running.value
        #expect(await !a.running)
        let last = try #require(t.published.last)
        #expect(last.topic == "b/test/lamp/availability" && last.payload == "offline" && last.retain)
        // A stopped adapter's calls change nothing.
        t.clear()
        await a.push("lamp-1", ["brightness": 1])
        #expect(t.published.isEmpty)
    }

    @Test func aDeviceIsRemovedOnlyAfterThreeListingsWithoutIt() async throws {
        try await withEngine { e, t, a in
        for _ in 0..<2 { await a.list([]) }
        #expect(await e.deviceNames("test") == ["lamp-1": "lamp"])
        #expect(!t.published.contains { $0.topic == "b/test/lamp" && $0.payload.isEmpty })
        await a.list([ScriptedAdapter.lamp()])            // back: the count starts again
        for _ in 0..<2 { await a.list([]) }
        #expect(await e.deviceNames("test") == ["lamp-1": "lamp"])
        await a.list([])
        #expect(await e.deviceNames("test").isEmpty)
        let cleared = Set(t.published.filter { $0.payload.isEmpty && $0.retain }.map(\.topic))
        #expect(cleared.isSuperset(of: ["b/test/lamp", "b/test/lamp/availability", "b/bridge/devices/test/lamp",
                                        "homeassistant/light/switchyard_b_test_lamp-1/light/config"]))
        #expect(t.published.contains { $0.topic == "b/bridge/event" && $0.payload.contains("device_removed") })
        }
    }

    @Test func aRenameClearsTheOldTopicsAndKeepsTheDiscoveryID() async throws {
        try await withEngine { e, t, a in
        t.clear()
        await a.list([ScriptedAdapter.lamp(name: "desk")])
        #expect(await e.deviceNames("test") == ["lamp-1": "desk"])
        let p = t.published
        #expect(p.contains { $0.topic == "b/test/lamp" && $0.payload.isEmpty && $0.retain })
        #expect(p.contains { $0.topic == "b/test/lamp/availability" && $0.payload.isEmpty })
        #expect(p.contains { $0.topic == "b/test/desk" && $0.payload == #"{"brightness":50,"state":"OFF"}"# })
        let disc = try #require(p.first { $0.topic == "homeassistant/light/switchyard_b_test_lamp-1/light/config" })
        #expect(disc.payload.contains(#""state_topic":"b/test/desk""#))
        #expect(p.contains { $0.topic == "b/bridge/event" && $0.payload.contains("device_renamed") })
        }
    }
}
