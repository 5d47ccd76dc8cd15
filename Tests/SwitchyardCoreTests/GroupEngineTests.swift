import Foundation
import Testing
@testable import SwitchyardCore
import SwitchyardTestSupport

/// Groups and scenes in the engine over the in-memory transport: a group's command fans out to two adapters
/// and is answered once, its state follows its members', a member that goes is missing and comes back, a
/// scene is recalled by request. The same over a real broker with the real upstreams is `GroupBridgeTests`.
@Suite struct GroupEngineTests {
    static func ref(_ s: String) -> MemberRef { MemberRef(s)! }
    static let plug = DeviceDescriptor(id: "plug-1", label: "Plug", configuredName: "plug", category: .switch, capabilities: [.state()])

    static func adapters() -> (ScriptedAdapter, ScriptedAdapter) {
        let alpha = ScriptedAdapter(id: "alpha", devices: [ScriptedAdapter.lamp("a1", name: "one"), ScriptedAdapter.lamp("a2", name: "two")],
                                    initial: ["a1": ["state": "OFF", "brightness": 50], "a2": ["state": "ON", "brightness": 90]])
        let beta = ScriptedAdapter(id: "beta", devices: [plug], initial: ["plug-1": ["state": "OFF"]])
        return (alpha, beta)
    }

    static let config = GroupsConfig(groups: [
        GroupDefinition(name: "all", members: [ref("alpha/one"), ref("group/pair"), ref("beta/plug")]),
        GroupDefinition(name: "pair", members: [ref("alpha/two"), ref("alpha/one")], stateMode: .all),
    ], scenes: [
        SceneDefinition(name: "evening", transition: 1, entries: [
            .init(member: ref("group/pair"), fields: ["state": "ON", "brightness": 25]),
            .init(member: ref("beta/plug"), fields: ["state": "OFF"]),
        ]),
    ])

    @Test func aGroupCommandReachesEveryMemberAndIsAnsweredOnce() async throws {
        let (alpha, beta) = Self.adapters()
        try await InMemoryBridge.with(adapters: [alpha, beta]) { b in
            await b.engine.setGroups(Self.config)
            // Derived from the members' first states: one is on (any), the pair is not all on; brightness the mean.
            try await b.waitForState("group", "all") { $0["state"] == "ON" && $0["brightness"] == 70 }
            try await b.waitForState("group", "pair") { $0["state"] == "OFF" }
            // Waited for, not read: when the listing already knew the group available, its availability goes out with
            // its announcement, which follows the states (design.md §16) in a publication of its own.
            try await b.waitFor("b/group/all/availability", "online")

            b.command("group", "all", #"{"state": "ON", "brightness": 30, "transaction": "t1"}"#)
            let r = try await b.result("group", "all", transaction: "t1")
            #expect(r == ["status": "ok", "transaction": "t1"])
            // Each device once, though it is in the group and in its nested pair; the plug has no brightness.
            #expect(await alpha.commands.sorted { $0.deviceID < $1.deviceID } == [DeviceCommand(deviceID: "a1", fields: ["state": "ON", "brightness": 30]),
                                                                            DeviceCommand(deviceID: "a2", fields: ["state": "ON", "brightness": 30])])
            #expect(await beta.commands == [DeviceCommand(deviceID: "plug-1", fields: ["state": "ON"])])
            try await b.waitForState("group", "pair") { $0["state"] == "ON" && $0["brightness"] == 30 }
            try await waitUntil("one result") { b.transport.published.filter { $0.topic == "b/group/all/result" }.count == 1 }
            try await Task.sleep(for: .milliseconds(100))
            #expect(b.transport.published.filter { $0.topic == "b/group/all/result" }.count == 1)

            // TOGGLE: the group is on, so every member goes off.
            b.command("group", "all", #"{"state": "TOGGLE", "transaction": "t2"}"#)
            #expect(try await b.result("group", "all", transaction: "t2")["status"] == "ok")
            try await b.waitForState("group", "all") { $0["state"] == "OFF" }
            #expect(await beta.commands.last == DeviceCommand(deviceID: "plug-1", fields: ["state": "OFF"]))
        }
    }

    @Test func aMemberThatFailsOrIsMissingMakesItPartialAndTheRestStillGo() async throws {
        let (alpha, beta) = Self.adapters()
        try await InMemoryBridge.with(adapters: [alpha, beta]) { b in
            await b.engine.setGroups(Self.config)
            try await b.waitForState("group", "all")
            await beta.setFailure("the plug is unplugged")
            b.command("group", "all", #"{"state": "ON", "transaction": "p1"}"#)
            let r = try await b.result("group", "all", transaction: "p1")
            #expect(r["status"] == "partial")
            #expect(r["failed"] == [["member": "beta/plug", "error": "the plug is unplugged"]])
            #expect(r["error"] == "group/all: 1 of 3 members failed: beta/plug: the plug is unplugged")
            #expect(b.logErrors.contains { $0["message"] == "group/all: 1 of 3 members failed: beta/plug: the plug is unplugged" })
            try await b.waitForState("alpha", "one") { $0["state"] == "ON" }
            await beta.setFailure(nil)

            // alpha/two goes (absent from 3 listings): the group keeps it, as missing, and says so.
            for _ in 0..<3 { await alpha.list([ScriptedAdapter.lamp("a1", name: "one")]) }
            try await b.waitForState("group", "pair") { $0["members"]?["alpha/two"] == "missing" }
            b.command("group", "pair", #"{"state": "OFF", "transaction": "p2"}"#)
            let missing = try await b.result("group", "pair", transaction: "p2")
            #expect(missing["failed"] == [["member": "alpha/two", "error": "missing: alpha does not list it"]])
            // It comes back: a member again, commanded again.
            await alpha.list([ScriptedAdapter.lamp("a1", name: "one"), ScriptedAdapter.lamp("a2", name: "two")])
            try await b.waitForState("group", "pair") { $0["members"]?["alpha/two"] == "online" }
            b.command("group", "pair", #"{"state": "OFF", "transaction": "p3"}"#)
            #expect(try await b.result("group", "pair", transaction: "p3") == ["status": "ok", "transaction": "p3"])
            #expect(await alpha.commands.last { $0.deviceID == "a2" }?.fields == ["state": "OFF"])
        }
    }

    @Test func aSceneIsRecalledByItsTopicAndByRequest() async throws {
        let (alpha, beta) = Self.adapters()
        try await InMemoryBridge.with(adapters: [alpha, beta]) { b in
            await b.engine.setGroups(Self.config)
            try await b.waitForState("scene", "evening") { $0["members"] == ["group/pair", "beta/plug"] && $0["last_activated"] == .null }
            b.send("b/bridge/request/scene/recall", #"{"name": "evening", "transition": 0, "transaction": 5}"#)
            try await b.waitFor("b/bridge/response/scene/recall", #"{"data":{"scene":"evening","status":"ok"},"status":"ok","transaction":5}"#)
            #expect(await alpha.commands.map(\.fields) == [["state": "ON", "brightness": 25, "transition": 0], ["state": "ON", "brightness": 25, "transition": 0]])
            #expect(await beta.commands.map(\.fields) == [["state": "OFF"]])
            try await b.waitForState("scene", "evening") { $0["last_activated"]?.stringValue != nil }

            b.command("scene", "evening", "ACTIVATE")
            try await waitUntil("the second recall") { await alpha.commands.count == 4 }
            // The scene's own transition now.
            #expect(await alpha.commands.last?.fields["transition"] == 1)
            b.send("b/bridge/request/scene/recall", #"{"name": "nope"}"#)
            try await b.waitFor("b/bridge/response/scene/recall", #"{"error":"unknown scene 'nope' (scenes: evening)","status":"error"}"#)
        }
    }

    @Test func groupsComeAndGoWithTheConfig() async throws {
        let (alpha, beta) = Self.adapters()
        try await InMemoryBridge.with(adapters: [alpha, beta]) { b in
            await b.engine.setGroups(Self.config)
            try await b.waitForState("group", "pair")
            await b.engine.setGroups(GroupsConfig(groups: [GroupDefinition(name: "pair", members: [Self.ref("alpha/two")])]))
            // `all` and the scene are gone (their topics cleared); `pair` has one member now.
            try await b.waitFor("b/group/all", "")
            try await b.waitFor("b/scene/evening", "")
            try await b.waitForState("group", "pair") { $0["members"] == ["alpha/two": "online"] }
            b.command("scene", "evening", #"{"activate": true, "transaction": "gone"}"#)
            #expect(try await b.result("scene", "evening", transaction: "gone")["error"]?.stringValue?.hasPrefix("unknown adapter 'scene'") == true)
        }
    }
    /// Until every adapter has listed, a group's commands are held; an engine that stops meanwhile answers each
    /// with its error, once, and says which it held (`heldAtStop`: under hot standby, handed over when the
    /// connection the answer went to was gone, design.md §18).
    @Test func aGroupCommandHeldWhenTheBridgeStopsIsAnsweredOnce() async throws {
        let (alpha, _) = Self.adapters()
        let (t, engine) = try await InMemoryBridge.with(adapters: [alpha, NeverListingAdapter(id: "beta")]) { b in
            await b.engine.setGroups(GroupsConfig(groups: [GroupDefinition(name: "pair", members: [Self.ref("alpha/one"), Self.ref("beta/plug")])]))
            b.command("group", "pair", #"{"state": "ON", "transaction": "g1"}"#)
            b.command("group", "pair", "OFF")
            try await waitUntil("alpha listed") { b.state("alpha", "one") != nil }
            try await Task.sleep(for: .milliseconds(200))
            #expect(b.transport.published.filter { $0.topic == "b/group/pair/result" }.isEmpty)
            return (b.transport, b.engine)
        }
        let results = t.published.filter { $0.topic == "b/group/pair/result" }.map(\.payload)
        #expect(results == [#"{"error":"the bridge stopped before the command was carried out","status":"error","transaction":"g1"}"#])
        #expect(await engine.heldAtStop.map { String(decoding: $0.payload, as: UTF8.self) } == [#"{"state": "ON", "transaction": "g1"}"#, "OFF"])
        #expect(await alpha.commands.isEmpty)
    }

    /// A takeover's replay still waiting for its sentinel when the phase ends (here the sentinel is never
    /// asked for: the replay is set after the connect) is answered and handed back with the held commands,
    /// not dropped.
    @Test func aReplayCutShortIsAnsweredAndHandedBack() async throws {
        let (alpha, _) = Self.adapters()
        let (t, engine) = try await InMemoryBridge.with(adapters: [alpha]) { b in
            try await waitUntil("alpha listed") { b.state("alpha", "one") != nil }
            await b.engine.prepareReplay([InboundMessage(topic: "b/alpha/one/set", payload: Array(#"{"state": "ON", "transaction": "r1"}"#.utf8))])
            return (b.transport, b.engine)
        }
        let results = t.published.filter { $0.topic == "b/alpha/one/result" }.map(\.payload)
        #expect(results == [#"{"error":"the bridge stopped before the command was carried out","status":"error","transaction":"r1"}"#])
        #expect(await engine.heldAtStop.map { String(decoding: $0.payload, as: UTF8.self) } == [#"{"state": "ON", "transaction": "r1"}"#])
        #expect(await alpha.commands.isEmpty)
    }

    /// Groups are listed once the adapters their members are in have listed: one that no group or scene
    /// reaches and that has not listed (a mirror lists nothing and settles only when its settle time passes)
    /// does not keep the groups from following their members, nor their commands from being carried out.
    /// After a standby's takeover the soak saw every group's state frozen for the settle time (invariant 13).
    @Test func anAdapterNoGroupReachesDoesNotHoldTheGroupsBack() async throws {
        let (alpha, beta) = Self.adapters()
        try await InMemoryBridge.with(adapters: [alpha, beta, NeverListingAdapter(id: "gamma")], settleTimeout: 3600) { b in
            await b.engine.setGroups(Self.config)
            try await b.waitForState("group", "all") { $0["state"] == "ON" && $0["brightness"] == 70 }
            await alpha.push("a1", ["state": "ON", "brightness": 10])
            try await b.waitForState("group", "pair") { $0["state"] == "ON" && $0["brightness"] == 50 }
            b.command("group", "all", #"{"state": "OFF", "transaction": "n1"}"#)
            #expect(try await b.result("group", "all", transaction: "n1") == ["status": "ok", "transaction": "n1"])
            #expect(await beta.commands == [DeviceCommand(deviceID: "plug-1", fields: ["state": "OFF"])])
            b.command("scene", "evening", #"{"activate": true, "transaction": "n2"}"#)
            #expect(try await b.result("scene", "evening", transaction: "n2")["status"] == "ok")
        }
    }

    /// After a takeover, a member the group's previous active instance knew (a LAN light) and its adapter has
    /// not listed again yet is waited for: the group's command is carried out once it is listed, not
    /// answered `partial` with the member `missing` (design.md §18 "Ready from the first command").
    @Test func aGroupWaitsForAMemberTheGroupKnewBeforeATakeover() async throws {
        let (_, beta) = Self.adapters()
        let alpha = ScriptedAdapter(id: "alpha", devices: [ScriptedAdapter.lamp("a1", name: "one")])
        try await InMemoryBridge.with(adapters: [alpha, beta], settleTimeout: 3600) { b in
            await b.engine.expectDevices(["alpha": ["one", "two"]])
            try await b.waitForState("alpha", "one")
            await b.engine.setGroups(GroupsConfig(groups: [GroupDefinition(name: "pair", members: [Self.ref("alpha/one"), Self.ref("alpha/two")])]))
            b.command("group", "pair", #"{"state": "ON", "transaction": "k1"}"#)
            try await Task.sleep(for: .milliseconds(200))
            #expect(b.transport.published.filter { $0.topic == "b/group/pair/result" }.isEmpty)
            await alpha.list([ScriptedAdapter.lamp("a1", name: "one"), ScriptedAdapter.lamp("a2", name: "two")])
            #expect(try await b.result("group", "pair", transaction: "k1") == ["status": "ok", "transaction": "k1"])
            #expect(Set(await alpha.commands.map(\.deviceID)) == ["a1", "a2"])
        }
    }

    /// The soak's group invariant (`GroupWatch`) over everything the engine published while members changed,
    /// went offline and came back: each group state is what the members' states published before it make it.
    /// And the watch itself catches a state that is not, and a partial naming a device the group does not reach.
    @Test func everyGroupStatePublishedIsWhatItsMembersSay() async throws {
        let (alpha, beta) = Self.adapters()
        let watched: [String: GroupWatch.Group] = ["group/all": .init(leaves: ["alpha/one", "alpha/two", "beta/plug"]),
                                                   "group/pair": .init(leaves: ["alpha/two", "alpha/one"], mode: "all")]
        try await InMemoryBridge.with(adapters: [alpha, beta]) { b in
            await b.engine.setGroups(Self.config)
            try await b.waitForState("group", "all")
            for (i, level) in [10, 80, 35, 60].enumerated() {
                b.command("group", i % 2 == 0 ? "pair" : "all", #"{"state": "ON", "brightness": \#(level), "transaction": "w\#(i)"}"#)
                _ = try await b.result("group", i % 2 == 0 ? "pair" : "all", transaction: "w\(i)")
            }
            await alpha.report([DeviceReport("a2", fields: ["state": "OFF", "brightness": 5], available: false)])
            await beta.push("plug-1", ["state": "OFF"])
            await alpha.report([DeviceReport("a1", fields: ["brightness": 99]), DeviceReport("a2", available: true)])
            try await b.waitForState("group", "all") { $0["brightness"] == 52 }
            // In memory nothing overtakes: every group's next state (within a few messages) agrees.
            var watch = GroupWatch(groups: watched, window: 4)
            var breaches: [String] = []
            for (i, p) in b.transport.published.enumerated() where p.topic.hasPrefix("b/") {
                if let x = watch.see(rel: String(p.topic.dropFirst(2)), payload: Array(p.payload.utf8), at: Double(i)) { breaches.append(x) }
            }
            if let x = watch.due(at: .infinity) { breaches.append(x) }
            #expect(breaches.isEmpty, "\(breaches)")
            #expect(watch.checked >= 8)
        }
        // The watch: a group ON whose members are all OFF; brightness not their mean; a stranger in a partial.
        var w = GroupWatch(groups: watched)
        for (rel, payload) in [("alpha/one", #"{"state":"OFF","brightness":10}"#), ("alpha/two", #"{"state":"OFF","brightness":20}"#),
                               ("beta/plug", #"{"state":"OFF"}"#), ("alpha/one/availability", "online"), ("alpha/two/availability", "online"),
                               ("beta/plug/availability", "online")] {
            #expect(w.see(rel: rel, payload: Array(payload.utf8)) == nil)
        }
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"OFF","brightness":15}"#.utf8), at: 1) == nil)
        // ON although every member is OFF: pending, and a breach once it has lasted past the window (5 s).
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"ON","brightness":15}"#.utf8), at: 2) == nil)
        #expect(w.due(at: 6) == nil)
        #expect(w.due(at: 7.5)?.contains("is ON although its members say OFF") == true)
        // A brightness that is not the mean, likewise, reported by a later message.
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"OFF","brightness":20}"#.utf8), at: 10) == nil)
        #expect(w.see(rel: "beta/plug", payload: Array(#"{"state":"OFF"}"#.utf8), at: 16)?.contains("brightness 20 although its members' mean is 15") == true)
        // A member's newer state overtaking the group's: the group's next state agrees within the window.
        #expect(w.see(rel: "alpha/two", payload: Array(#"{"state":"OFF","brightness":40}"#.utf8), at: 20) == nil)
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"OFF","brightness":15}"#.utf8), at: 20.1) == nil)
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"OFF","brightness":25}"#.utf8), at: 20.3) == nil)
        #expect(w.due(at: 40) == nil && w.converged >= 1)
        // Or the member's state that the group was made from comes back: agreeing again, nothing pending.
        #expect(w.see(rel: "alpha/two", payload: Array(#"{"state":"OFF","brightness":50}"#.utf8), at: 41) == nil)
        #expect(w.see(rel: "alpha/two", payload: Array(#"{"state":"OFF","brightness":40}"#.utf8), at: 42) == nil)
        #expect(w.due(at: 60) == nil)
        // Offline members do not count while one is online.
        _ = w.see(rel: "alpha/one/availability", payload: Array("offline".utf8), at: 61)
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"OFF","brightness":40}"#.utf8), at: 62) == nil)
        #expect(w.due(at: 80) == nil)
        let partial = Array(#"{"status":"partial","failed":[{"member":"gamma/x","error":"e"}],"transaction":"t"}"#.utf8)
        #expect(w.failed(group: "group/all", result: partial).breach != nil)
        let fine = Array(#"{"status":"partial","failed":[{"member":"beta/plug","error":"unplugged"}],"transaction":"t"}"#.utf8)
        #expect(w.failed(group: "group/all", result: fine) == (["beta/plug"], nil))
        #expect(GroupWatch.failedInLog("group/all: 2 of 3 members failed: beta/plug: the plug is unplugged; alpha/two: x; y") == ["beta/plug", "alpha/two"])
        #expect(GroupWatch.failedInLog("lifx: something else") == nil)
    }

    /// A member's state, then the active instance stopped before its group's state went out (the soak's
    /// SIGSTOP falls between two publications): nothing is due until another instance takes over, and then
    /// once that one has had its settle time and the window.
    @Test func aGroupLeftBehindByAStoppedInstanceIsTheNextOneToPutRight() {
        var w = GroupWatch(groups: ["group/all": .init(leaves: ["alpha/one", "beta/plug"])])
        for (rel, payload) in [("alpha/one", #"{"state":"OFF"}"#), ("beta/plug", #"{"state":"OFF"}"#), ("alpha/one/availability", "online"),
                               ("beta/plug/availability", "online"), ("group/all", #"{"state":"OFF"}"#)] {
            #expect(w.see(rel: rel, payload: Array(payload.utf8), at: 1) == nil)
        }
        #expect(w.see(rel: "alpha/one", payload: Array(#"{"state":"ON"}"#.utf8), at: 2) == nil)
        w.activeStops()
        #expect(w.due(at: 12) == nil)
        w.resume(deadlinesFrom: 13 + 15)  // a takeover at 13, then the 15 s settle time
        #expect(w.due(at: 32) == nil)
        #expect(w.due(at: 33.5)?.contains("group/all for 31.5 s: group/all is OFF although its members say ON") == true)
        // Put right in time by the new instance: nothing due.
        #expect(w.see(rel: "beta/plug", payload: Array(#"{"state":"ON"}"#.utf8), at: 40) == nil)
        w.activeStops()
        w.resume(deadlinesFrom: 45 + 15)
        #expect(w.due(at: 49) == nil)
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"ON"}"#.utf8), at: 50) == nil)
        #expect(w.due(at: 100) == nil)
        // A stop that ends with no takeover (the run reports that apart): deadlines run again from its end.
        #expect(w.see(rel: "beta/plug", payload: Array(#"{"state":"OFF"}"#.utf8), at: 90) == nil)
        #expect(w.see(rel: "alpha/one", payload: Array(#"{"state":"OFF"}"#.utf8), at: 91) == nil)
        w.activeStops()
        w.resume(deadlinesFrom: 95)
        #expect(w.due(at: 99.5) == nil)
        #expect(w.due(at: 100.5)?.contains("group/all for 9.5 s: group/all is ON although its members say OFF") == true)
        // A takeover with nothing stopped (a broker restart's) changes nothing: a disagreement is due as ever.
        #expect(w.see(rel: "group/all", payload: Array(#"{"state":"ON"}"#.utf8), at: 101) == nil)
        w.resume(deadlinesFrom: 102 + 15)
        #expect(w.due(at: 106.5) != nil)
    }
}

/// An adapter that never lists its devices (an upstream that does not answer): commands for its devices, and
/// for the groups that reach them, wait until the settle time.
actor NeverListingAdapter: Adapter {
    nonisolated let id: String
    init(id: String) { self.id = id }
    func run(context: AdapterContext) async throws {
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {}
    func refresh(deviceID: String, context: AdapterContext) async throws {}
}
