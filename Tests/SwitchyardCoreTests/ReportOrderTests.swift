import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// An adapter is an actor whose reports come from several tasks (its transports' loops, commands) of one
/// priority: the host must get them in the order the adapter made them, or a later state is overwritten by
/// an earlier one (a failed command's revert by the optimistic state it reverts). `AdapterContext` and
/// `AdapterHost` run on the caller's executor up to the host's own (`nonisolated(nonsending)`), so no hop in
/// between can reorder them.
@Suite struct ReportOrderTests {
    /// Numbers made on the adapter's executor, one report each, from many tasks at once.
    actor Numbering {
        let context: AdapterContext
        var made = 0
        init(_ context: AdapterContext) { self.context = context }
        func next() async {
            made += 1
            await context.update("d", ["n": JSONValue(made)])
        }
    }

    @Test func theTwinRecordsReportsInTheOrderTheAdapterMadeThem() async {
        let host = RecordingAdapterHost(adapterID: "a")
        let numbering = Numbering(host.context)
        let n = 4000
        await withTaskGroup(of: Void.self) { g in
            for _ in 0..<n { g.addTask { await numbering.next() } }
        }
        let seen = host.reports(of: "d").compactMap { $0["n"]?.doubleValue }.map { Int($0) }
        #expect(seen.count == n)
        let outOfOrder = zip(seen, seen.dropFirst()).filter { $0 > $1 }.count
        #expect(outOfOrder == 0, "\(outOfOrder) of \(n) reports recorded after a later one")
    }

    /// The same through the engine: the states it publishes follow the adapter's order.
    @Test func theEnginePublishesStatesInTheOrderTheAdapterMadeThem() async throws {
        try await EngineTests().withEngine { _, t, a in
            // Brightness is 0–100: rounds of 1…100, each from 100 tasks at once, 0 in between.
            var rounds: [[Int]] = []
            for _ in 0..<100 {
                await a.push("lamp-1", ["brightness": 0])
                t.clear()
                await withTaskGroup(of: Void.self) { g in
                    for _ in 0..<100 { g.addTask { await a.pushNext("lamp-1") } }
                }
                rounds.append(t.published.filter { $0.topic == "b/test/lamp" }
                    .compactMap { try? JSONValue.parse(Array($0.payload.utf8))["brightness"]?.doubleValue }.map { Int($0) })
            }
            let disordered = rounds.filter { $0 != Array(1...100) }
            #expect(disordered.isEmpty, "\(disordered.count) of 100 rounds published out of order, e.g. \(disordered.first ?? [])")
        }
    }
}
