import CMosquitto
import SwitchyardTestSupport
import Testing
import SwitchyardCore
@testable import SwitchyardMQTT

/// The outbox bookkeeping, without a broker (design.md §4).
@Suite struct OutboxTests {
    func drain(_ o: inout Outbox, ack: Bool = true) -> [String] { Self.drain(&o, ack: ack) }

    static func drain(_ o: inout Outbox, ack: Bool = true) -> [String] {
        var out: [String] = []
        var mid: Int32 = 0
        while let (key, m) = o.next() {
            mid += 1
            o.sent(key, mid: mid)
            out.append("\(m.topic)=\(String(decoding: m.payload, as: UTF8.self))")
            if ack { o.acknowledged(mid: mid) }
        }
        return out
    }

    @Test func latestRetainedValueWinsAndOrderIsKept() {
        var o = Outbox(maxEvents: 10)
        o.add(topic: "a", payload: Array("1".utf8), qos: 1, retain: true)
        o.add(topic: "e", payload: Array("x".utf8), qos: 1, retain: false)
        o.add(topic: "a", payload: Array("2".utf8), qos: 1, retain: true)
        #expect(drain(&o) == ["e=x", "a=2"])
        #expect(o.pending == 0)
    }

    @Test func overflowDropsTheOldestEventAndCountsIt() {
        var o = Outbox(maxEvents: 3)
        for i in 1...5 { o.add(topic: "e", payload: Array("\(i)".utf8), qos: 1, retain: false) }
        o.add(topic: "r", payload: Array("kept".utf8), qos: 1, retain: true)
        #expect(o.dropped == 2)
        #expect(drain(&o) == ["e=3", "e=4", "e=5", "r=kept"])
    }

    @Test func everythingUnacknowledgedAndEveryRetainedTopicGoesAgainAfterReconnect() {
        var o = Outbox(maxEvents: 10)
        o.add(topic: "r1", payload: Array("a".utf8), qos: 1, retain: true)
        o.add(topic: "r2", payload: Array("b".utf8), qos: 1, retain: true)
        #expect(drain(&o) == ["r1=a", "r2=b"])          // acknowledged
        o.add(topic: "e1", payload: Array("x".utf8), qos: 1, retain: false)
        o.add(topic: "gone", payload: [], qos: 1, retain: true)
        #expect(drain(&o, ack: false) == ["e1=x", "gone="])   // sent, never acknowledged: connection lost
        o.resetForReconnect()
        #expect(o.inflight.isEmpty)
        #expect(drain(&o) == ["r1=a", "r2=b", "gone=", "e1=x"])
        #expect(o.retained("gone") == nil)               // a delivered clear is not republished again
        o.resetForReconnect()
        #expect(drain(&o) == ["r1=a", "r2=b"])
        o.add(topic: "state", payload: Array("online".utf8), qos: 1, retain: true)
        o.resetForReconnect(first: "state")
        #expect(drain(&o) == ["state=online", "r1=a", "r2=b"])
    }

    /// A removal clears a device's discovery config before its state (docs/topics.md "Device lifecycle"),
    /// though the state was published first: after a reconnect the clears go again in the order they
    /// were made.
    @Test func clearsGoAgainInTheOrderTheyWereMade() {
        var o = Outbox(maxEvents: 10)
        o.add(topic: "b/dev", payload: Array("s".utf8), qos: 1, retain: true)
        o.add(topic: "cfg/dev", payload: Array("c".utf8), qos: 1, retain: true, lane: .late)
        #expect(drain(&o) == ["b/dev=s", "cfg/dev=c"])
        o.add(topic: "cfg/dev", payload: [], qos: 1, retain: true)
        o.add(topic: "b/dev", payload: [], qos: 1, retain: true)
        #expect(drain(&o, ack: false) == ["cfg/dev=", "b/dev="])   // the connection is lost before the PUBACKs
        o.resetForReconnect()
        #expect(drain(&o) == ["cfg/dev=", "b/dev="])
    }

    /// Acknowledged events leave no id behind: a long run of events on a healthy connection holds nothing.
    @Test func acknowledgedEventsLeaveNothingBehind() async throws {
        // A hundred thousand rounds: off the cooperative pool (`offThePool`).
        let (pending, order) = try await offThePool {
            var o = Outbox(maxEvents: 10)
            for i in 0..<100_000 {
                o.add(topic: "b/log", payload: Array("\(i)".utf8), qos: i % 2, retain: false)
                _ = Self.drain(&o)
            }
            return (o.pending, o.eventOrder.count)
        }
        #expect(pending == 0)
        #expect(order == 0)
    }

    @Test func theLedgerGivesBackExactlyTheBytesItWasGiven() {
        var o = Outbox(maxEvents: 10)
        let payloads: [[UInt8]] = [
            [], Array("online".utf8), Array("\"°C\"".utf8), Array("exactly 15 byte".utf8), Array("sixteen bytes!!!".utf8),
            [0xff, 0xfe, 0x00, 0x41], Array("é".utf8) + [0x80], Array(repeating: 0x7a, count: 300),
        ]
        for (i, p) in payloads.enumerated() { o.add(topic: "t\(i)", payload: p, qos: 1, retain: true) }
        var got: [String: [UInt8]] = [:]
        var mid: Int32 = 0
        while let (key, m) = o.next() {
            mid += 1
            o.sent(key, mid: mid)
            got[m.topic] = m.payload
            #expect(m.retain && m.qos == 1)
        }
        for (i, p) in payloads.enumerated() { #expect(got["t\(i)"] == p, "t\(i)") }
        // Tens of thousands of entries live for the whole run: keep them packed.
        #expect(MemoryLayout<RetainedLedger.Entry>.stride <= 40)
    }

    /// What the console's feed reads instead of keeping an index of its own: the latest payload of a topic
    /// (a short one from its inline form, a source as the source), the topics under a prefix, and nothing for
    /// a topic being cleared or never published.
    @Test func theLedgerIsReadByTopicAndByPrefix() {
        final class Details: PayloadSource {
            func payload() -> [UInt8] { Array(#"{"name":"kitchen"}"#.utf8) }
        }
        var o = Outbox(maxEvents: 10)
        let long = Array(#"{"state":"ON","brightness":40,"color_mode":"color_temp"}"#.utf8)
        o.add(topic: "sy/virtual/kitchen", payload: long, qos: 1, retain: true)
        o.add(topic: "sy/virtual/kitchen/availability", payload: Array("online".utf8), qos: 1, retain: true)
        o.add(Publication("sy/bridge/devices/virtual/kitchen", body: .source(Details()), retain: true))
        o.add(topic: "sy2/virtual/porch", payload: Array("{}".utf8), qos: 1, retain: true)
        o.add(topic: "sy/virtual/gone", payload: Array("{}".utf8), qos: 1, retain: true)
        o.add(topic: "sy/virtual/gone", payload: [], qos: 1, retain: true)
        o.add(topic: "sy/bridge/log", payload: Array("event".utf8), qos: 0, retain: false)
        #expect(o.retainedBody("sy/virtual/kitchen")?.bytes == long)
        #expect(o.retainedBody("sy/virtual/kitchen/availability")?.bytes == Array("online".utf8))
        if case .source? = o.retainedBody("sy/bridge/devices/virtual/kitchen") {} else { Issue.record("the source was not kept as a source") }
        #expect(o.retainedBody("sy/virtual/gone") == nil && o.retainedBody("sy/bridge/log") == nil && o.retainedBody("sy/nothing") == nil)
        let under = o.retained(under: "sy/").map(\.topic).sorted()
        #expect(under == ["sy/bridge/devices/virtual/kitchen", "sy/virtual/kitchen", "sy/virtual/kitchen/availability"])
        #expect(o.retained(under: "sy/virtual/kitchen").count == 2 && o.retainedCount(under: "sy2/") == 1 && o.retainedCount(under: "sy/") == 3)
        // A level inside the topic, past the prefix (a device's discovery node).
        #expect(o.retained(under: "sy/", containing: "/virtual/").map(\.topic) == ["sy/bridge/devices/virtual/kitchen"])
        #expect(o.retained(under: "sy/virtual/", containing: "/availability").map(\.topic) == ["sy/virtual/kitchen/availability"])
        #expect(o.retained(under: "sy/", excluding: ["sy/virtual/"]).map(\.topic) == ["sy/bridge/devices/virtual/kitchen"])
        #expect(o.retainedCount(under: "sy/", excluding: ["sy/virtual/"]) == 1)
        _ = drain(&o)
        #expect(o.retainedBody("sy/virtual/gone") == nil && o.retainedCount(under: "sy/") == 3)
    }

    /// A payload source is asked for its bytes when the message is sent, and again after a reconnect.
    @Test func aSourcedPayloadIsMadeWhenItIsSent() {
        final class Counted: PayloadSource, @unchecked Sendable {
            var made = 0
            func payload() -> [UInt8] { made += 1; return Array("made \(made)".utf8) }
        }
        let source = Counted()
        var o = Outbox(maxEvents: 10)
        o.add(Publication("d", body: .source(source), retain: true))
        #expect(source.made == 0)
        #expect(drain(&o) == ["d=made 1"])
        o.resetForReconnect()
        #expect(drain(&o) == ["d=made 2"])
    }

    /// States go before the new devices' availability and events, and those before discovery and details; a
    /// `now` event never passes a `soon` event of its topic; a reconnect republishes by lane too.
    @Test func lanesOrderWhatWaitsAndEventsKeepTheirOrder() {
        var o = Outbox(maxEvents: 10)
        o.add(topic: "disc/1", payload: Array("c1".utf8), qos: 1, retain: true, lane: .late)
        o.add(topic: "b/1/availability", payload: Array("online".utf8), qos: 1, retain: true, lane: .soon)
        o.add(topic: "b/event", payload: Array("added 1".utf8), qos: 1, retain: false, lane: .soon)
        o.add(topic: "b/1", payload: Array("s1".utf8), qos: 1, retain: true)
        o.add(topic: "b/log", payload: Array("l".utf8), qos: 0, retain: false)
        #expect(drain(&o) == ["b/1=s1", "b/log=l", "b/1/availability=online", "b/event=added 1", "disc/1=c1"])
        o.add(topic: "b/event", payload: Array("added 2".utf8), qos: 1, retain: false, lane: .soon)
        o.add(topic: "b/2/availability", payload: Array("online".utf8), qos: 1, retain: true, lane: .soon)
        o.add(topic: "b/2", payload: Array("s2".utf8), qos: 1, retain: true)
        o.add(topic: "b/event", payload: Array("removed 2".utf8), qos: 1, retain: false)
        o.add(topic: "b/3", payload: Array("s3".utf8), qos: 1, retain: true)
        #expect(drain(&o) == ["b/2=s2", "b/event=added 2", "b/2/availability=online", "b/event=removed 2", "b/3=s3"])
        // A later value of a deferred topic supersedes it, in its own lane.
        o.add(topic: "disc/4", payload: Array("c4".utf8), qos: 1, retain: true, lane: .late)
        o.add(topic: "disc/4", payload: [], qos: 1, retain: true)
        o.add(topic: "b/4", payload: Array("s4".utf8), qos: 1, retain: true)
        #expect(drain(&o) == ["disc/4=", "b/4=s4"])
        o.resetForReconnect()
        #expect(drain(&o) == ["b/1=s1", "b/2=s2", "b/3=s3", "b/4=s4", "b/1/availability=online", "b/2/availability=online", "disc/1=c1"])
    }
}

@Suite struct ReconnectSettingsTests {
    /// A publish that fails on the connection keeps its message for the reconnect; only the message's own
    /// faults drop it.
    @Test func aWriteErrorIsTheConnectionsNotTheMessages() {
        for rc in [MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST, MOSQ_ERR_ERRNO, MOSQ_ERR_KEEPALIVE, MOSQ_ERR_NOMEM] {
            #expect(NetworkLoop.connectionLost(rc.rawValue), "\(rc)")
        }
        for rc in [MOSQ_ERR_INVAL, MOSQ_ERR_PAYLOAD_SIZE, MOSQ_ERR_MALFORMED_UTF8, MOSQ_ERR_OVERSIZE_PACKET, MOSQ_ERR_QOS_NOT_SUPPORTED] {
            #expect(!NetworkLoop.connectionLost(rc.rawValue), "\(rc)")
        }
    }

    @Test func backoffIsBoundedExponentialWithJitter() {
        let s = MQTTSettings(clientID: "x", stateTopic: "t", reconnectMinDelay: 1, reconnectMaxDelay: 30)
        #expect(s.backoff(attempt: 0, random: 1) == 1)
        #expect(s.backoff(attempt: 3, random: 1) == 8)
        #expect(s.backoff(attempt: 3, random: 0) == 4)
        #expect(s.backoff(attempt: 50, random: 1) == 30)
    }
}

/// The retained ledger's own storage: packed topics, the index, slots reused and chunks compacted.
@Suite struct RetainedLedgerTests {
    @Test func everyTopicIsFoundAfterRemovalsReuseAndCompaction() async throws {
        // Tens of thousands of sets and clears: off the cooperative pool (`offThePool`).
        let problems = try await offThePool { Self.fillRemoveAndFind() }
        #expect(problems.isEmpty, "\(problems.count) problems: \(problems.prefix(5))")
    }

    /// Rounds of sets and random clears checked against a dictionary: what differs, in words.
    static func fillRemoveAndFind() -> [String] {
        var problems: [String] = []
        var l = RetainedLedger()
        var model: [String: [UInt8]] = [:]
        var rng = SystemRandomNumberGenerator()
        // Long and short topics, enough of them to fill several 64 KiB chunks and to grow the index often.
        func topic(_ i: Int) -> String { i % 3 == 0 ? "t/\(i)" : "base/ha/sensor/entity_\(i)/" + String(repeating: "x", count: i % 50) }
        for round in 0..<4 {
            for i in 0..<6_000 {
                let t = topic(i + round * 1_000)
                let p = Array("v\(round)-\(i)".utf8) + (i % 7 == 0 ? [UInt8](repeating: 0x61, count: 40) : [])
                let (slot, gen) = l.set(t, RetainedLedger.Stored(.bytes(p)), qos: 1, lane: .now)
                l.acknowledge(slot, generation: gen)
                model[t] = p
            }
            // Remove about two thirds at random: clears, acknowledged.
            for t in model.keys.shuffled(using: &rng).prefix(model.count * 2 / 3) {
                let (slot, gen) = l.set(t, RetainedLedger.Stored(.bytes([])), qos: 1, lane: .now)
                l.acknowledge(slot, generation: gen)
                model[t] = nil
            }
            if l.count != model.count { problems.append("round \(round): \(l.count) entries, \(model.count) expected") }
            if l.unacked != 0 { problems.append("round \(round): \(l.unacked) unacknowledged") }
            for (t, p) in model {
                guard let slot = l.find(t) else { problems.append("\(t) lost in round \(round)"); return problems }
                if l.topic(slot) != t || l[slot].payload.bytes != p { problems.append("\(t) reads back wrong in round \(round)") }
            }
            if l.find("t/never") != nil { problems.append("a topic never set is found") }
        }
        if Set(l.slots.map { l.topic($0) }) != Set(model.keys) { problems.append("the slots' topics are not the model's") }
        return problems
    }

    @Test func aStaleGenerationChangesNothing() {
        var l = RetainedLedger()
        let (slot, first) = l.set("a", RetainedLedger.Stored(.bytes(Array("1".utf8))), qos: 1, lane: .now)
        let (_, second) = l.set("a", RetainedLedger.Stored(.bytes(Array("2".utf8))), qos: 1, lane: .now)
        l.acknowledge(slot, generation: first)
        #expect(l.unacked == 1)
        l.acknowledge(slot, generation: second)
        #expect(l.unacked == 0 && l[slot].payload.bytes == Array("2".utf8))
        // A removed slot is reused with a generation the old one never had.
        let (_, cleared) = l.set("a", RetainedLedger.Stored(.bytes([])), qos: 1, lane: .now)
        l.acknowledge(slot, generation: cleared)
        #expect(l.find("a") == nil)
        let (again, gen) = l.set("b", RetainedLedger.Stored(.bytes(Array("x".utf8))), qos: 1, lane: .now)
        #expect(again == slot && gen != first && gen != second && gen != cleared)
    }

}

/// MQTT 5 message expiry in the outbox: an event that waited is sent with what is left of its expiry, and one
/// that waited longer than it is dropped and counted; its correlation data goes with it.
@Suite struct OutboxExpiryTests {
    @Test func anEventThatWaitedGoesWithWhatIsLeftAndAnExpiredOneIsDropped() {
        var o = Outbox(maxEvents: 10)
        let t0 = MonotonicInstant.origin
        var result = Publication("r", Array("ok".utf8), qos: 1, retain: false)
        result.properties = MessageProperties(expiry: 60, correlationData: [1, 2])
        var log = Publication("l", Array("x".utf8), qos: 0, retain: false)
        log.properties.expiry = 10
        o.add(result, now: t0)
        o.add(log, now: t0)
        o.add(Publication("e", Array("y".utf8), qos: 1, retain: false), now: t0)
        o.add(Publication("s", Array("on".utf8), qos: 1, retain: true), now: t0)
        var sent: [(String, MessageProperties)] = []
        while let (_, m) = o.next(now: t0.adding(seconds: 25.5)) { sent.append((m.topic, m.properties)) }
        #expect(sent.map(\.0) == ["r", "e", "s"])
        #expect(sent[0].1 == MessageProperties(expiry: 35, correlationData: [1, 2]))
        #expect(sent[1].1 == .none && sent[2].1 == .none)
        #expect(o.expired == 1)
        #expect(o.eventBytes == "ok".utf8.count + 2 + 1)
    }

    @Test func withoutAClockNothingExpires() {
        var o = Outbox(maxEvents: 10)
        var p = Publication("r", Array("ok".utf8), qos: 1, retain: false)
        p.properties.expiry = 1
        o.add(p)
        #expect(o.next(now: MonotonicInstant.origin.adding(seconds: 100))?.1.properties.expiry == 1)
        #expect(o.expired == 0)
    }
}

/// Topic aliases on one connection (`TopicAliases`): a topic published again gets the next alias while the
/// broker's maximum leaves one, and keeps it; nothing before the broker allows any, all gone after a reset.
@Suite struct TopicAliasesTests {
    @Test func aTopicPublishedAgainGetsAnAliasAndKeepsIt() {
        var a = TopicAliases()
        a.reset(maximum: 2)
        #expect(a.use("s/one") == .topic)
        #expect(a.use("s/one") == .establish(1))
        // Not established (the publish was refused): asked again, the same alias is offered.
        #expect(a.use("s/one") == .establish(1))
        a.established("s/one", 1)
        #expect(a.use("s/one") == .alias(1))
        #expect(a.use("s/two") == .topic)
        #expect(a.use("s/two") == .establish(2))
        a.established("s/two", 2)
        // The broker's maximum is reached: a third topic goes with its topic, however often.
        #expect(a.use("s/three") == .topic)
        #expect(a.use("s/three") == .topic)
        #expect(a.use("s/two") == .alias(2) && a.use("s/one") == .alias(1))
        #expect(a.count == 2)
        a.reset(maximum: 2)
        #expect(a.use("s/one") == .topic && a.count == 0)
    }

    @Test func noAliasWhereTheBrokerTakesNone() {
        var a = TopicAliases()
        for _ in 0..<3 { #expect(a.use("s/one") == .topic) }
        a.reset(maximum: 0)
        for _ in 0..<3 { #expect(a.use("s/one") == .topic) }
    }
}

/// When the network thread counts itself as just resumed (design.md §18: the upstream lease is invalid then).
@Suite struct PauseDetectorTests {
    @Test func aTurnLongAfterTheLastIsAPause() {
        let t0 = MonotonicInstant.origin
        var p = PauseDetector(keepalive: 10, at: t0)
        #expect(p.turn(at: t0.adding(seconds: 0.25)) == nil)
        #expect(p.turn(at: t0.adding(seconds: 5.0)) == nil)       // 4.75 s: under half the keepalive (a busy machine)
        #expect(p.turn(at: t0.adding(seconds: 25.0)) == t0.adding(seconds: 26.0))   // 20 s: paused
        #expect(p.turn(at: t0.adding(seconds: 25.2)) == nil)
    }
}
