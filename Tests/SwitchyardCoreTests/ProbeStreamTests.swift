import Foundation
import SwitchyardCore
import Testing
@testable import SwitchyardTestSupport

/// The probe that a long run's checker streams every message through: the handler call must not get
/// deeper with every message (it did, by two reabstraction thunks each, until the stack overflowed).
@Suite struct ProbeStreamTests {
    @Test func theHandlerIsCalledAtTheSameDepthAfterManyMessages() throws {
        // Port 1: nothing answers, and nothing needs to (messages are recorded by hand).
        let probe = try MQTTProbe(port: 1)
        defer { probe.close() }
        let depths = Locked<[Int]>([])
        probe.stream { _ in depths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
        let m = MQTTProbe.Message(topic: "t", payload: "p", retain: false, at: Date())
        for _ in 0..<2_000 { probe.record(m) }
        let d = depths.withLock { $0 }
        #expect(d.count == 2_000)
        #expect(d.last == d.first, "the call got \((d.last ?? 0) - (d.first ?? 0)) frames deeper over 2 000 messages")
    }
}
