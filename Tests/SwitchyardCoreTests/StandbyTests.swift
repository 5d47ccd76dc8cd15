import Foundation
import Testing
@testable import SwitchyardCore
import SwitchyardTestSupport

/// Hot standby's pure parts (design.md §18): when an instance takes over (`StandbyWatch`), and what it keeps
/// of the group's traffic meanwhile (`StandbyJournal`). Times are instants made here; nothing sleeps.
@Suite struct StandbyWatchTests {
    func at(_ s: Double) -> MonotonicInstant { MonotonicInstant.origin.adding(seconds: s) }
    func watch() -> StandbyWatch { StandbyWatch(me: "b", takeoverDelay: 1, confirmWithin: 3) }

    @Test func aStandbyTakesOverOnlyAfterNobodyWasActiveForTheDelay() {
        var w = watch()
        #expect(w.decide(now: at(0)) == .wait)             // not connected: never
        w.connected(now: at(0))
        w.saw("a", role: .active, replayed: false, now: at(0.1))
        #expect(w.decide(now: at(5)) == .wait)
        w.saw("a", role: .offline, replayed: false, now: at(6))   // a's Last Will
        #expect(w.decide(now: at(6.5)) == .wait)
        #expect(w.decide(now: at(6.99)) == .wait)
        #expect(w.decide(now: at(7.0)) == .takeOver(from: "a", reason: "its connection ended (Last Will)"))
    }

    @Test func theJitterSpreadsTheGroupsAttempts() {
        var w = watch()
        w.connected(now: at(0))
        #expect(w.decide(now: at(0), jitter: 0.5) == .wait)
        #expect(w.decide(now: at(1.4), jitter: 0.5) == .wait)
        #expect(w.decide(now: at(1.5), jitter: 0.5) == .takeOver(from: nil, reason: "no instance is active"))
    }

    @Test func anActiveClaimSeenDuringTheDelayStopsIt() {
        var w = watch()
        w.connected(now: at(0))
        _ = w.decide(now: at(0.5))
        w.saw("c", role: .active, replayed: false, now: at(0.9))    // another standby won the race
        #expect(w.decide(now: at(1.2)) == .wait)
        #expect(w.vacantSince == nil)
    }

    /// A claim the broker kept (retained, replayed at subscribe time) from an instance that died while a
    /// persistent broker was down is believed for `confirmWithin` only.
    @Test func aReplayedClaimNotSaidAgainIsBelievedOnlyForAWhile() {
        var w = watch()
        w.connected(now: at(10))
        w.saw("a", role: .active, replayed: true, now: at(10.1))
        #expect(w.decide(now: at(12.9)) == .wait)
        // Past confirm_within: the vacancy starts now, and the delay runs from there.
        #expect(w.decide(now: at(13.1)) == .wait)
        #expect(w.decide(now: at(14.1)) == .takeOver(from: "a", reason: "its claim was not confirmed within 3.0 s"))
    }

    @Test func aReplayedClaimSaidAgainLiveIsBelievedForGood() {
        var w = watch()
        w.connected(now: at(10))
        w.saw("a", role: .active, replayed: true, now: at(10.1))
        w.saw("a", role: .active, replayed: false, now: at(10.2))   // a answers the ping
        #expect(w.decide(now: at(60)) == .wait)
        // A reconnect of the watching connection makes every claim unconfirmed again.
        w.connected(now: at(60))
        w.saw("a", role: .active, replayed: true, now: at(60.1))
        #expect(w.decide(now: at(63.5)) == .wait)                 // the vacancy starts only now…
        #expect(w.decide(now: at(64.6)) == .takeOver(from: "a", reason: "its claim was not confirmed within 3.0 s"))
    }

    /// An instance that was active and paused (its watching connection may not even have noticed yet) must
    /// not take the id back at once from the instance that replaced it meanwhile.
    @Test func afterItsActivePhaseAnInstanceWaitsForTheOthersToSpeak() {
        var w = watch()
        w.connected(now: at(0))
        _ = w.decide(now: at(0))
        #expect(w.decide(now: at(1)) == .takeOver(from: nil, reason: "no instance is active"))
        // Active for a while (the runtime does not ask), then paused 20 s; c took over meanwhile, unseen.
        w.activePhaseEnded(now: at(40))
        #expect(w.decide(now: at(40.5)) == .wait)
        w.saw("c", role: .active, replayed: false, now: at(40.6))  // c answers the ping
        #expect(w.decide(now: at(50)) == .wait)
    }

    /// A broker restart ends this instance's active phase, and nobody else takes over: its next takeover is
    /// from itself, dated from its phase's end (not from the last other instance it saw go, long before).
    @Test func aTakeoverAfterItsOwnPhaseIsFromItself() {
        var w = watch()
        w.connected(now: at(0))
        w.saw("c", role: .active, replayed: false, now: at(0.1))
        w.saw("c", role: .offline, replayed: false, now: at(5))        // c killed; this instance takes over
        #expect(w.decide(now: at(7)) == .takeOver(from: "c", reason: "its connection ended (Last Will)"))
        w.disconnected()                                                // the broker stops at 40
        w.activePhaseEnded(now: at(40.2))
        w.connected(now: at(44))                                       // back at 44
        w.saw("c", role: .offline, replayed: true, now: at(44.1))
        _ = w.decide(now: at(44.2))
        #expect(w.decide(now: at(46)) == .takeOver(from: "b", reason: "its connection ended"))
        #expect(w.lastActive?.at == at(40.2))
    }

    @Test func itsOwnClaimIsNotAnother() {
        var w = watch()
        w.connected(now: at(0))
        w.saw("b", role: .active, replayed: true, now: at(0.1))
        _ = w.decide(now: at(0.2))
        #expect(w.decide(now: at(1.2)) == .takeOver(from: nil, reason: "no instance is active"))
    }
}

@Suite struct StandbyJournalTests {
    let scheme = TopicScheme(base: "b")
    func at(_ s: Double) -> MonotonicInstant { MonotonicInstant.origin.adding(seconds: s) }
    func msg(_ topic: String, _ payload: String, retain: Bool = false) -> InboundMessage {
        InboundMessage(topic: topic, payload: Array(payload.utf8), retain: retain)
    }

    @Test func commandsWithATransactionWaitUntilTheirResult() {
        var j = StandbyJournal(scheme: scheme)
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"t1"}"#), now: at(0))
        j.saw(msg("b/virtual/lamp/set", #"{"state":"OFF"}"#), now: at(0.1))                        // no transaction: not kept
        j.saw(msg("b/virtual/lamp/set/brightness", "40"), now: at(0.2))                             // plain value: none either
        j.saw(msg("b/lifx/group/desk/set", #"{"brightness":10,"transaction":7}"#), now: at(0.3))
        #expect(j.pending.map(\.transaction) == ["t1", 7])
        #expect(j.pending.map(\.resultTopic) == ["b/virtual/lamp/result", "b/lifx/group/desk/result"])
        // The result of another device with the same transaction answers nothing here.
        j.saw(msg("b/virtual/other/result", #"{"transaction":"t1","status":"ok"}"#), now: at(1))
        #expect(j.pending.count == 2)
        j.saw(msg("b/virtual/lamp/result", #"{"transaction":"t1","status":"ok"}"#), now: at(1))
        #expect(j.pending.map(\.transaction) == [7])
        // A retained command (a ghost) is never kept.
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"r"}"#, retain: true), now: at(2))
        #expect(j.pending.count == 1)
    }

    /// What a takeover replays is handed over once: the instance answers it while active (when its journal
    /// is not fed), so its next takeover, after a phase cut short, replays only what it saw since.
    @Test func aTakeoverTakesThePendingCommandsOnce() {
        var j = StandbyJournal(scheme: scheme)
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"t1"}"#), now: at(0))
        #expect(j.takeOver(now: at(1)).map(\.transaction) == ["t1"])
        #expect(j.pending.isEmpty && j.takeOver(now: at(1)).isEmpty)
        // Back on standby: what comes now is kept, and bounded as before.
        j.saw(msg("b/virtual/lamp/set", #"{"state":"OFF","transaction":"t2"}"#), now: at(5))
        #expect(j.takeOver(now: at(6)).map(\.transaction) == ["t2"])
        // Nothing heard since (the broker was down): what is past the window by the takeover is not replayed.
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"t3"}"#), now: at(10))
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"t4"}"#), now: at(20))
        #expect(j.takeOver(now: at(45)).map(\.transaction) == ["t4"])
    }

    /// Commands an active phase held (a group's, until every adapter had listed) and answered into a connection
    /// that was gone: handed back, from when they were received, so that the next takeover replays them, and
    /// taken out by another instance's result like any other.
    @Test func heldCommandsAreHandedBackFromWhenTheyCame() {
        var j = StandbyJournal(scheme: scheme, window: 30)
        // Received `age` seconds before the monotonic 100 s; the wall clock says otherwise (it was set back a
        // minute meanwhile), and is not what counts.
        let wall = Date(timeIntervalSince1970: 1_000)
        func held(_ topic: String, _ payload: String, _ age: Double, before: Double = 100) -> InboundMessage {
            InboundMessage(topic: topic, payload: Array(payload.utf8), receivedAt: wall.addingTimeInterval(60 - age),
                           receivedAtMonotonic: at(before - age))
        }
        _ = j.takeOver(now: at(0))
        j.saw(msg("b/virtual/lamp/set", #"{"state":"ON","transaction":"s"}"#), now: at(99))   // seen while standing by again
        j.handBack([held("b/group/downstairs/set", #"{"state":"ON","transaction":"g1"}"#, 25),
                    held("b/scene/movie/set", #"{"activate":true,"transaction":"m1"}"#, 5),
                    held("b/group/downstairs/set", #"{"state":"OFF"}"#, 4),                         // no transaction: not replayable
                    held("b/group/downstairs/set", #"{"state":"ON","transaction":"old"}"#, 31)],     // past the window
                   now: at(100))
        // In the order they came, with what the journal saw since.
        #expect(j.pending.map(\.transaction) == ["g1", "m1", "s"])
        #expect(j.pending.map(\.resultTopic) == ["b/group/downstairs/result", "b/scene/movie/result", "b/virtual/lamp/result"])
        // Handed back twice (a second phase cut short before it replayed them): kept once.
        j.handBack([held("b/group/downstairs/set", #"{"state":"ON","transaction":"g1"}"#, 25)], now: at(100))
        #expect(j.pending.count == 3)
        // Another instance took over and answered one.
        j.saw(msg("b/group/downstairs/result", #"{"transaction":"g1","status":"ok"}"#), now: at(101))
        #expect(j.pending.map(\.transaction) == ["m1", "s"])
        // The window counts from when they came: g1 would have gone 5 s after the hand-back.
        j.handBack([held("b/group/downstairs/set", #"{"state":"ON","transaction":"g2"}"#, 25, before: 101)], now: at(101))
        j.expire(now: at(106.5))
        #expect(j.pending.map(\.transaction) == ["m1", "s"])
        #expect(j.takeOver(now: at(106.5)).map(\.message.topic) == ["b/scene/movie/set", "b/virtual/lamp/set"])
    }

    @Test func theWindowAndTheBoundsLetTheOldestGo() {
        var j = StandbyJournal(scheme: scheme, window: 30, maxEntries: 2)
        j.saw(msg("b/virtual/lamp/set", #"{"transaction":1}"#), now: at(0))
        j.saw(msg("b/virtual/lamp/set", #"{"transaction":2}"#), now: at(10))
        j.saw(msg("b/virtual/lamp/set", #"{"transaction":3}"#), now: at(20))   // over the count: dropped
        #expect(j.pending.map(\.transaction) == [1, 2] && j.dropped == 1)
        j.expire(now: at(35))
        #expect(j.pending.map(\.transaction) == [2])
    }

    @Test func devicesLastStatesAreRestorableByIdInWhateverOrderTheyCome() {
        var j = StandbyJournal(scheme: scheme)
        // A state before the list that names its topic (the broker's replay order is its own).
        j.saw(msg("b/virtual/kitchen", #"{"state":"ON","brightness":40}"#, retain: true), now: at(0))
        j.saw(msg("b/virtual/kitchen/availability", "online", retain: true), now: at(0))
        j.saw(msg("b/bridge/devices", #"[{"adapter":"virtual","id":"k1","name":"kitchen","topic":"b/virtual/kitchen"}]"#, retain: true), now: at(0))
        j.saw(msg("b/ha/light/porch/state", "on", retain: true), now: at(0))
        #expect(j.restorable == ["virtual": ["k1": ["state": "ON", "brightness": 40]]])
        // A live change (retain flag cleared on delivery) replaces it; a clear removes it.
        j.saw(msg("b/virtual/kitchen", #"{"state":"OFF","brightness":40}"#), now: at(1))
        #expect(j.restorable["virtual"]?["k1"]?["state"] == "OFF")
        j.saw(msg("b/virtual/kitchen", "", retain: true), now: at(2))
        #expect(j.restorable.isEmpty)
    }

    /// The devices the active instance listed last, by adapter and name: what a new active instance's
    /// commands may wait for. A new list replaces the old one.
    @Test func theDevicesTheActiveInstanceListedAreKnownByName() {
        var j = StandbyJournal(scheme: scheme)
        #expect(j.knownDevices.isEmpty)
        j.saw(msg("b/bridge/devices", #"[{"adapter":"virtual","id":"k1","name":"kitchen","topic":"b/virtual/kitchen"},"# +
                  #"{"adapter":"lifx","id":"d073d5100001","name":"desk","topic":"b/lifx/desk"},"# +
                  #"{"adapter":"lifx","id":"d073d5100002","name":"shelf/strip","topic":"b/lifx/shelf/strip"}]"#, retain: true), now: at(0))
        #expect(j.knownDevices == ["virtual": ["kitchen"], "lifx": ["desk", "shelf/strip"]])
        j.saw(msg("b/bridge/devices", #"[{"adapter":"lifx","id":"d073d5100001","name":"desk","topic":"b/lifx/desk"}]"#), now: at(1))
        #expect(j.knownDevices == ["lifx": ["desk"]])
    }
}

/// The soak's judgements of a standby group (docs/testing.md "The soak run", 14–16), fed what a subscriber
/// and the upstream simulators would see: each is shown catching the fault it is for.
@Suite struct SoakStandbyInvariantTests {
    func takeover(_ from: String?, _ to: String, gap: Double = 1200) -> [UInt8] {
        let f = from.map { #""\#($0)""# } ?? "null"
        return Array(#"{"type":"takeover","data":{"from":\#(f),"to":"\#(to)","reason":"r","gap_ms":\#(gap)}}"#.utf8)
    }
    func role(_ r: String) -> [UInt8] { Array(#"{"instance":"x","role":"\#(r)"}"#.utf8) }

    @Test func everyTakeoverIsCausedAnnouncedInTimeAndGoesElsewhere() {
        var w = TakeoverWatch()
        #expect(w.event(takeover(nil, "a"), at: 1, explained: false) == nil)           // the first start
        w.expect(from: "a", what: "kill -9", at: 10, within: 4.5)
        #expect(w.event(takeover("a", "b"), at: 11.8, explained: false) == nil)
        #expect(w.takeovers.last?.afterFault.map { abs($0 - 1.8) < 1e-9 } == true && w.active == "b")
        // Nothing caused this one: a ping-pong.
        #expect(w.event(takeover("b", "a"), at: 20, explained: false) != nil)
        // The same inside a broker restart's window: the group picked one again.
        #expect(w.event(takeover("a", "b"), at: 30, explained: true) == nil)
        // Too late, and back to the stopped instance.
        w.expect(from: "b", what: "SIGSTOP", at: 40, within: 12)
        #expect(w.event(takeover("b", "a"), at: 53, explained: false)?.contains("bound") == true)
        w.expect(from: "a", what: "kill -9", at: 60, within: 4.5)
        #expect(w.event(takeover("a", "a"), at: 62, explained: false)?.contains("went back") == true)
        // Never announced.
        w.expect(from: "a", what: "kill -9", at: 70, within: 4.5)
        #expect(w.overdue(now: 74).isEmpty)
        #expect(w.overdue(now: 75).count == 1)
        #expect(w.overdue(now: 80).isEmpty)                                            // said once
        // A start that is not the first, from nobody: caused by nothing.
        #expect(w.event(takeover(nil, "b"), at: 90, explained: false) != nil)
    }

    @Test func twoInstancesNeverClaimActiveAtOnceOutsideABrokerRestart() {
        var w = TakeoverWatch()
        #expect(w.claim("a", payload: role("active"), explained: false) == nil)
        #expect(w.claim("b", payload: role("standby"), explained: false) == nil)
        #expect(w.claim("a", payload: role("offline"), explained: false) == nil)        // a's Last Will
        #expect(w.claim("b", payload: role("active"), explained: false) == nil)
        #expect(w.claim("a", payload: role("active"), explained: false) != nil)         // b still says active
        #expect(w.claim("b", payload: [], explained: false) == nil)                     // cleared
        #expect(w.claim("b", payload: role("active"), explained: true) == nil && w.overlapsExplained == 1)
    }

    @Test func upstreamRequestsOfTwoInstancesNeverInterleave() {
        var w = UpstreamInstanceWatch(slack: 1)
        w.activated("a", at: 1)
        w.request(instance: "a", at: 2, what: "GET /v1/lights/all")
        w.request(instance: "a", at: 9.9, what: "PUT /v1/lights/1/state")      // its last, before the kill
        w.activated("b", at: 12)
        w.request(instance: "b", at: 11.5, what: "GET /v1/lights/all")        // its first, just before its event was seen
        w.request(instance: "b", at: 13, what: "PUT /v1/lights/1/state")
        #expect(w.judge(before: 20).isEmpty)
        #expect(w.judged == ["a": 2, "b": 2])
        // The paused instance, resumed, sends once more: a breach, said once.
        w.request(instance: "a", at: 21, what: "PUT /v1/lights/2/state")
        w.request(instance: "b", at: 22, what: "GET /v1/lights/all")
        w.request(instance: "b", at: 23, what: "GET /v1/lights/all")
        #expect(w.judge(before: 30).count == 2)   // a after b since a's activation; b after a since b's
        // Requests judged in time order whatever order they were read in; not before their horizon.
        w.activated("a", at: 40)
        w.request(instance: "a", at: 42, what: "x")
        w.request(instance: "b", at: 41, what: "y")                           // b, after a took over
        #expect(w.judge(before: 41).isEmpty)
        #expect(w.judge(before: 50).count == 1)
        // One that names no instance, one from an instance never seen active.
        w.request(instance: nil, at: 51, what: "z")
        w.request(instance: "c", at: 52, what: "z")
        #expect(w.judge(before: 60).count == 2)
    }

    /// Rule 8 for active phases: a phase at another level than the last is no growth; growth within phases is.
    @Test func theSlopeWithinPhasesIgnoresTheirLevels() {
        func phase(from start: Int, level: Double, rate: Double) -> [(x: Double, y: Double)] {
            (start..<(start + 10)).map { i -> (x: Double, y: Double) in (x: Double(i), y: level + rate * Double(i - start)) }
        }
        let flat = [phase(from: 0, level: 27, rate: 0), phase(from: 20, level: 39, rate: 0)]
        #expect(slope(flat.flatMap { $0 }) > 0.3)                   // joined, the two levels read as growth
        #expect(pooledSlope(flat) == 0)
        let leaking = [phase(from: 0, level: 27, rate: 0.5), phase(from: 20, level: 39, rate: 0.5)]
        #expect(abs(pooledSlope(leaking) - 0.5) < 1e-9)
    }

    /// Inside a broker restart's window both instances can take the client id, one after the other: their
    /// activations are dated at the broker's start, and count from each one's first request after it.
    @Test func aHandOverInsideABrokerRestartIsNotAnInterleaving() {
        var w = UpstreamInstanceWatch(slack: 1)
        w.activated("west", at: 1)
        w.request(instance: "west", at: 5, what: "GET /v1/lights/all")            // before the broker stopped
        w.activated("west", at: 20, uncertain: true)                              // the broker back at 20
        w.activated("east", at: 20, uncertain: true)
        w.request(instance: "west", at: 21.00, what: "PUT /v1/lights/1/state")    // west held the id first
        w.request(instance: "east", at: 21.02, what: "GET /v1/lights/all")        // then east took it
        w.request(instance: "east", at: 22, what: "PUT /v1/lights/1/state")
        #expect(w.judge(before: 30).isEmpty)
        // West sends once more after east's first request: two serving at once.
        w.request(instance: "west", at: 31, what: "PUT /v1/lights/2/state")
        #expect(w.judge(before: 40).count == 1)
        // Dated at the window's start, certain activations would have made the hand-over itself a breach.
        var strict = UpstreamInstanceWatch(slack: 1)
        strict.activated("west", at: 20)
        strict.activated("east", at: 20)
        strict.request(instance: "west", at: 21.00, what: "PUT /v1/lights/1/state")
        strict.request(instance: "east", at: 21.02, what: "GET /v1/lights/all")
        #expect(strict.judge(before: 30).count == 1)
    }

    /// Invariant 3 across takeovers: a second result only for a command unanswered at a kill or pause, once.
    @Test func aSecondResultIsTakenOnlyForACommandOpenAtAHandOver() {
        var l = TransactionLedger()
        func result(_ t: String, _ status: String = "ok") -> [UInt8] { Array(#"{"status":"\#(status)","transaction":"\#(t)"}"#.utf8) }
        l.sent("a", topic: "b/x/set", at: 0)
        l.sent("b", topic: "b/x/set", at: 0)
        l.sent("c", topic: "b/x/set", at: 0)
        #expect(l.result(result("a"), at: 1) == nil)
        l.handOver(until: 20)                                       // b and c are open: the stopped instance may have taken them
        #expect(l.openAtHandOver == 2)
        #expect(l.result(result("b"), at: 3) == nil)
        #expect(l.result(result("b", "error"), at: 4) == nil)      // the new instance carried it out again
        #expect(l.result(result("b"), at: 5) != nil)               // a third: a breach
        #expect(l.result(result("a"), at: 6) != nil)               // a was answered before the hand-over
        #expect(l.result(result("c"), at: 7) == nil)
        #expect(l.result(result("c"), at: 21) != nil)              // again, long after the takeover: a breach
        #expect(l.answered == 3 && l.answeredTwice == 1)
    }
}
