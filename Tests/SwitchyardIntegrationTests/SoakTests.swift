import Foundation
import Testing
import SwitchyardSoak
import SwitchyardTestSupport

/// The soak run, short: the demo's home for about three minutes under commands, reloads, broker
/// restarts (graceful and kill -9), upstream outages and LAN lights leaving; no invariant may break
/// (docs/testing.md "The soak run"; `make soak` runs it for an hour).
@Suite struct SoakTests {
    @Test func theWholeBridgeHoldsItsInvariantsForMinutes() async throws {
        let minutes = Double(ProcessInfo.processInfo.environment["SOAK_MINUTES"] ?? "") ?? 3
        let report = try await SoakRun.run(.short(minutes: minutes).with(say: { print($0) }))
        for f in report.figures { print(f.line) }
        #expect(report.breaches.isEmpty, "\(report.breaches.map(\.description).joined(separator: "\n"))")
        // The schedule ran: commands were answered, faults happened.
        #expect(report.figures.first { $0.name == "commands answered (exactly once each)" }.map { $0.value > 100 } == true)
    }
}
