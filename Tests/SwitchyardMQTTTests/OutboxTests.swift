import Testing
@testable import SwitchyardMQTT

/// The outbox bookkeeping, without a broker (design.md §4).
@Suite struct OutboxTests {
    func drain(_ o: inout Outbox, ack: Bool = true) -> [String] {
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
        #expect(o.ledger["gone"] == nil)                 // a delivered clear is not republished again
        o.resetForReconnect()
        #expect(drain(&o) == ["r1=a", "r2=b"])
        o.add(topic: "state", payload: Array("online".utf8), qos: 1, retain: true)
        o.resetForReconnect(first: "state")
        #expect(drain(&o) == ["state=online", "r1=a", "r2=b"])
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
        #expect(MemoryLayout<Outbox.RetainedEntry>.stride <= 32)
    }

    @Test func backoffIsBoundedExponentialWithJitter() {
        let s = MQTTSettings(clientID: "x", stateTopic: "t", reconnectMinDelay: 1, reconnectMaxDelay: 30)
        #expect(s.backoff(attempt: 0, random: 1) == 1)
        #expect(s.backoff(attempt: 3, random: 1) == 8)
        #expect(s.backoff(attempt: 3, random: 0) == 4)
        #expect(s.backoff(attempt: 50, random: 1) == 30)
    }
}
