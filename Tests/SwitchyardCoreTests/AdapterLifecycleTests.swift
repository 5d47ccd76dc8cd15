import Testing
@testable import SwitchyardCore

/// `AdapterLifecycle`, transition by transition, as tables: no engine, no clock, no task. Held commands
/// are strings ("h1"), routed work is strings ("w1"), each counted as its length in bytes.
@Suite struct AdapterLifecycleTests {
    typealias Life = AdapterLifecycle<String, String>
    typealias Phase = Life.Phase

    static let bounds = Life.Bounds(limit: 3, bytes: 100)
    func fresh() -> Life { Life(bounds: Self.bounds, carried: false) }
    func carried() -> Life { Life(bounds: Self.bounds, carried: true) }

    /// Brings an instance to a phase by the transitions that lead there.
    func life(in phase: Phase) -> Life {
        var l = fresh()
        switch phase {
        case .starting: break
        case .listing: l = carried()
        case .running: _ = l.settle()
        case .failed: _ = l.runFailed()
        case .draining(let s):
            _ = l.settle()
            _ = l.beginStop(successor: s)
        case .stopping(let s):
            _ = l.settle()
            _ = l.beginStop(successor: s)
            l.cancel()
        case .replaced:
            _ = l.settle()
            _ = l.beginStop(successor: true)
            _ = l.finish()
        case .stopped:
            _ = l.settle()
            _ = l.beginStop(successor: false)
            _ = l.finish()
        }
        #expect(l.phase == phase)
        return l
    }

    static let allPhases: [Phase] = [.starting, .listing, .running, .failed, .draining(successor: true), .draining(successor: false),
                                     .stopping(successor: true), .stopping(successor: false), .replaced, .stopped]

    // MARK: routing, per phase

    /// Work for a listed device and a mirror's work, in every phase: queued, kept, or refused.
    @Test(arguments: [
        (Phase.starting, Life.Route.enqueue, Life.Route.enqueue),
        (.listing, .kept, .enqueue),
        (.running, .enqueue, .enqueue),
        (.failed, .enqueue, .enqueue),
        (.draining(successor: true), .kept, .kept),
        (.draining(successor: false), .kept, .kept),
        (.stopping(successor: true), .kept, .kept),
        (.stopping(successor: false), .kept, .kept),
        (.replaced, .kept, .kept),
        (.stopped, .refuse(.notRunning), .refuse(.notRunning)),
    ])
    func workIsRoutedByPhase(phase: Phase, forDevice: Life.Route, mirror: Life.Route) {
        var l = life(in: phase)
        do { let r = l.route("w1", bytes: 2, .listedDevice); #expect(r == forDevice) }
        do { let r = l.route("m1", bytes: 2, .unlisted); #expect(r == mirror) }
        let kept = [forDevice, mirror].filter { $0 == .kept }.count
        #expect(l.waitingCount == kept)
    }

    /// A command for a device not listed: held until the instance settles, then unknown.
    @Test(arguments: [
        (Phase.starting, Life.Route.kept), (.listing, .kept), (.running, .refuse(.unknown)), (.failed, .refuse(.unknown)),
        (.draining(successor: true), .refuse(.unknown)), (.stopped, .refuse(.unknown)),
    ])
    func aCommandForAnUnlistedDeviceIsHeldOnlyUntilTheInstanceSettles(phase: Phase, expected: Life.Route) {
        var l = life(in: phase)
        do { let r = l.hold("h1", bytes: 2); #expect(r == expected) }
    }

    /// A command for a device the instance may still list (the group knew it, its adapter is identifying
    /// it): held past the first listing, while the start window is open, in every live phase.
    @Test(arguments: [
        (Phase.starting, Life.Route.kept), (.listing, .kept), (.running, .kept), (.failed, .refuse(.unknown)),
        (.draining(successor: true), .kept), (.replaced, .kept), (.stopped, .refuse(.unknown)),
    ])
    func aCommandForAnExpectedDeviceIsHeldWhileTheStartWindowIsOpen(phase: Phase, expected: Life.Route) {
        var l = life(in: phase)
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == expected) }
    }

    /// After the first listing, a later listing routes the expected commands again (the listing may have
    /// brought their devices), and the window's end lets them go for good: then they are unknown.
    @Test func expectedCommandsWaitForALaterListingOrTheEndOfTheWindow() {
        var l = fresh()
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == .kept) }
        do { let r = l.settle(); #expect(r.held == ["h1"]) }
        // Routed again: still not listed, held again; a device nobody expects is unknown at once.
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == .kept) }
        do { let r = l.hold("x", bytes: 1); #expect(r == .refuse(.unknown)) }
        do { let r = l.relisted(); #expect(r.held == ["h1"] && r.heldBytes == 2 && r.waiting.isEmpty) }
        #expect(l.heldCount == 0 && l.phase == .running)
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == .kept) }
        do { let r = l.stopAwaiting(); #expect(r.held == ["h1"]) }
        #expect(!l.awaitsDevices)
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == .refuse(.unknown)) }
        do { let r = l.relisted(); #expect(r.isEmpty) }
    }

    /// The window closing before the first listing releases nothing yet (the listing, or the settle time,
    /// does); a failed run closes it too, and lets go what waited.
    @Test func theWindowClosesAtTheSettleTimeOrWhenTheRunFails() {
        var l = fresh()
        _ = l.hold("h1", bytes: 2, expected: true)
        do { let r = l.stopAwaiting(); #expect(r.isEmpty && l.heldCount == 1) }
        do { let r = l.settle(); #expect(r.held == ["h1"]) }
        do { let r = l.hold("h1", bytes: 2, expected: true); #expect(r == .refuse(.unknown)) }
        var m = fresh()
        _ = m.settle()
        _ = m.hold("h2", bytes: 2, expected: true)
        do { let r = m.runFailed(); #expect(r.held == ["h2"] && !m.awaitsDevices && m.phase == .failed) }
    }

    /// An instance replaced before it ever listed keeps holding, for its successor.
    @Test func anInstanceStoppedBeforeItListedKeepsHoldingForItsSuccessor() {
        var l = fresh()
        do { let r = l.hold("h1", bytes: 2); #expect(r == .kept) }
        do { let r = l.beginStop(successor: true); #expect(r) }
        do { let r = l.hold("h2", bytes: 2); #expect(r == .kept) }
        guard case .handOver(let left) = l.finish() else { Issue.record("no hand-over"); return }
        #expect(left.held == ["h1", "h2"] && left.heldBytes == 4)
        let next = Life(bounds: Self.bounds, carried: true, held: left.held, heldBytes: left.heldBytes)
        #expect(next.phase == .listing && next.heldCount == 2)
    }

    // MARK: bounds

    @Test func heldCommandsAreBoundedInCountAndBytes() {
        var l = fresh()
        do { let r = l.hold("a", bytes: 40); #expect(r == .kept) }
        do { let r = l.hold("b", bytes: 40); #expect(r == .kept) }
        do { let r = l.hold("c", bytes: 30); #expect(r == .refuse(.heldFull)) }   // 110 bytes > 100
        do { let r = l.hold("d", bytes: 20); #expect(r == .kept) }   // 100 bytes: at the bound, not past it
        do { let r = l.hold("e", bytes: 1); #expect(r == .refuse(.heldFull)) }   // 4 items > 3
        #expect(l.heldCount == 3)
    }

    @Test func waitingWorkIsBoundedInCountAndBytes() {
        var l = carried()
        do { let r = l.route("a", bytes: 90, .listedDevice); #expect(r == .kept) }
        do { let r = l.route("b", bytes: 11, .listedDevice); #expect(r == .refuse(.waitingFull)) }
        do { let r = l.route("c", bytes: 10, .listedDevice); #expect(r == .kept) }
        do { let r = l.route("d", bytes: 0, .listedDevice); #expect(r == .kept) }
        do { let r = l.route("e", bytes: 0, .listedDevice); #expect(r == .refuse(.waitingFull)) }
        // A mirror's work is not kept by a listing instance, so no bound applies to it.
        do { let r = l.route("m", bytes: 1000, .unlisted); #expect(r == .enqueue) }
    }

    // MARK: settling

    @Test func settlingReleasesWhatWaitedInArrivalOrderOnce() {
        var l = carried()
        _ = l.route("w1", bytes: 2, .listedDevice)
        _ = l.hold("h1", bytes: 2)
        _ = l.route("w2", bytes: 2, .listedDevice)
        _ = l.hold("h2", bytes: 2)
        let r = l.settle()
        #expect(r.waiting == ["w1", "w2"] && r.held == ["h1", "h2"])
        #expect(l.phase == .running && l.isSettled && l.waitingCount == 0 && l.heldCount == 0)
        // A second listing, or the settle timer firing after it, releases nothing and changes nothing.
        do { let r = l.settle(); #expect(r.isEmpty) }
        #expect(l.phase == .running)
    }

    /// What settles, from each phase: only starting and listing move.
    @Test(arguments: [
        (Phase.starting, Phase.running), (.listing, .running), (.running, .running), (.failed, .failed),
        (.draining(successor: true), .draining(successor: true)), (.stopping(successor: false), .stopping(successor: false)),
        (.replaced, .replaced), (.stopped, .stopped),
    ])
    func settleMovesOnlyAnUnsettledInstance(from: Phase, to: Phase) {
        var l = life(in: from)
        _ = l.settle()
        #expect(l.phase == to)
    }

    // MARK: failure

    @Test(arguments: [
        (Phase.starting, Phase.failed), (.listing, .failed), (.running, .failed), (.failed, .failed),
        (.draining(successor: true), .draining(successor: true)), (.stopping(successor: true), .stopping(successor: true)),
        (.replaced, .replaced), (.stopped, .stopped),
    ])
    func aRunThatThrowsFailsOnlyALiveInstance(from: Phase, to: Phase) {
        var l = life(in: from)
        _ = l.runFailed()
        #expect(l.phase == to)
    }

    @Test func failingBeforeTheFirstListingReleasesWhatWaited() {
        var l = carried()
        _ = l.route("w1", bytes: 2, .listedDevice)
        _ = l.hold("h1", bytes: 2)
        let r = l.runFailed()
        #expect(r.waiting == ["w1"] && r.held == ["h1"] && l.isSettled)
        // After failing, commands still reach the worker.
        do { let r = l.route("w2", bytes: 2, .listedDevice); #expect(r == .enqueue) }
    }

    // MARK: stopping

    @Test(arguments: allPhases)
    func reportsAreTakenUntilTheRunIsCancelled(phase: Phase) {
        let l = life(in: phase)
        switch phase {
        case .stopping, .replaced, .stopped: #expect(!l.acceptsReports)
        default: #expect(l.acceptsReports)
        }
    }

    @Test func aReplacedInstanceHandsItsWorkToItsSuccessor() {
        var l = fresh()
        _ = l.settle()
        do { let r = l.beginStop(successor: true); #expect(r) }
        do { let r = l.beginStop(successor: false); #expect(!r) }       // told once: the second call changes nothing
        #expect(l.phase == .draining(successor: true))
        _ = l.route("w1", bytes: 2, .listedDevice)
        l.cancel()
        _ = l.route("w2", bytes: 2, .unlisted)
        guard case .handOver(let left) = l.finish() else { Issue.record("no hand-over"); return }
        #expect(left.waiting == ["w1", "w2"] && left.held.isEmpty)
        #expect(l.phase == .replaced && l.waitingCount == 0)
        // Its successor, carrying the devices, keeps work for them until it lists.
        var next = Life(bounds: Self.bounds, carried: true, held: left.held, heldBytes: left.heldBytes)
        for w in left.waiting {
            let r = next.route(w, bytes: 2, w == "w2" ? .unlisted : .listedDevice)
            #expect(r == (w == "w2" ? .enqueue : .kept))
        }
        let released = next.settle()
        #expect(released.waiting == ["w1"])
    }

    @Test func aRemovedInstanceLetsItsWorkGo() {
        var l = carried()
        _ = l.hold("h1", bytes: 2)
        _ = l.beginStop(successor: false)
        _ = l.route("w1", bytes: 2, .listedDevice)
        guard case .drop(let left) = l.finish() else { Issue.record("handed over without a successor"); return }
        #expect(left.waiting == ["w1"] && left.held == ["h1"])
        #expect(l.phase == .stopped)
        do { let r = l.route("w2", bytes: 2, .listedDevice); #expect(r == .refuse(.notRunning)) }
    }

    @Test func cancelMovesOnlyADrainingInstance() {
        var l = fresh()
        l.cancel()
        #expect(l.phase == .starting)
        _ = l.beginStop(successor: false)
        l.cancel()
        #expect(l.phase == .stopping(successor: false))
        l.cancel()
        #expect(l.phase == .stopping(successor: false))
    }

    /// Work that comes after a replaced instance's `finish` and before its successor starts (the engine
    /// suspends between them while the new instance inherits from the old) waits, and goes to the successor.
    @Test func workBetweenTheStopAndTheSuccessorsStartIsHandedOff() {
        var l = fresh()
        _ = l.settle()
        _ = l.beginStop(successor: true)
        _ = l.finish()
        let kept = l.route("late", bytes: 4, .listedDevice)
        #expect(kept == .kept)
        let late = l.handOff()
        #expect(late.waiting == ["late"] && l.phase == .stopped)
        let after = l.route("later", bytes: 5, .listedDevice)
        #expect(after == .refuse(.notRunning))
        #expect(l.handOff().isEmpty)
    }
}
