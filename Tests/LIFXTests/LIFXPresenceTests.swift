@testable import LIFXAdapter
import SwitchyardCore
import Testing

/// The presence model without sockets: sightings over time in; removals, availability and route out.
@Suite struct LIFXPresenceTests {
    let t0 = MonotonicInstant(sinceOrigin: .seconds(1000))
    func at(_ s: Double) -> MonotonicInstant { t0.adding(seconds: s) }

    /// The demo's failure: a light only the LAN knows survives any number of cloud listings.
    @Test func aLightOnlyTheLANKnowsIsNeverRemovedByTheCloud() {
        var p = LIFXPresence(cloudGrace: 3, lanGrace: 90)
        p.lanHeard("lan", at: at(0))
        for i in 0..<50 {
            #expect(p.cloudListed(["cloud": true], now: at(Double(i) * 5)).isEmpty)
            if i % 4 == 0 { p.lanHeard("lan", at: at(Double(i) * 5)) }
        }
        #expect(p.available("lan", now: at(250)))
        #expect(p.route("lan", now: at(250)) == .lan)
        // Silent past offline_after: offline, still there, still looked for on the LAN.
        #expect(!p.available("lan", now: at(400)))
        #expect(p.cloudListed(["cloud": true], now: at(400)).isEmpty)
        #expect(p.route("lan", now: at(400)) == .lan)
    }

    /// Table: a light both transports know, as each one loses and finds it.
    @Test func aLightGoesOnlyWhenNoTransportSeesIt() {
        var p = LIFXPresence(cloudGrace: 3, lanGrace: 90)
        struct Step { var t: Double; var cloud: Bool?; var lan: Bool; var removed: Bool; var available: Bool; var via: LIFXPresence.Transport? }
        let steps: [Step] = [
            Step(t: 0, cloud: true, lan: true, removed: false, available: true, via: .lan),
            Step(t: 30, cloud: false, lan: true, removed: false, available: true, via: .lan),   // cloud misses 1
            Step(t: 60, cloud: false, lan: false, removed: false, available: true, via: .lan),  // misses 2, LAN heard at 30
            Step(t: 90, cloud: false, lan: false, removed: false, available: true, via: .lan),  // misses 3, LAN within 90 s: kept
            Step(t: 150, cloud: true, lan: false, removed: false, available: true, via: .cloud), // LAN silent 120 s: via cloud
            Step(t: 200, cloud: false, lan: false, removed: false, available: true, via: .cloud),
            Step(t: 230, cloud: false, lan: false, removed: false, available: true, via: .cloud),
            Step(t: 260, cloud: false, lan: false, removed: true, available: false, via: nil),  // 3 listings, LAN silent: gone
        ]
        for s in steps {
            if s.lan { p.lanHeard("a", at: at(s.t)) }
            var removed: [String] = []
            if let cloud = s.cloud { removed = p.cloudListed(cloud ? ["a": true] : [:], now: at(s.t)) }
            else { removed = p.cloudListed([:], now: at(s.t)) }
            #expect(removed == (s.removed ? ["a"] : []), "t=\(s.t)")
            #expect(p.available("a", now: at(s.t)) == s.available, "t=\(s.t)")
            if let via = s.via { #expect(p.route("a", now: at(s.t)) == via, "t=\(s.t)") }
        }
        #expect(p.lights["a"] == nil)
    }

    /// The cloud's `connected: false` makes a cloud-only light unavailable; the LAN hearing it wins.
    @Test func availabilityIsAnyTransportThatReachesIt() {
        var p = LIFXPresence(cloudGrace: 3, lanGrace: 90)
        _ = p.cloudListed(["a": false, "b": true], now: at(0))
        #expect(!p.available("a", now: at(0)))
        #expect(p.available("b", now: at(0)))
        #expect(p.route("a", now: at(0)) == .cloud)
        p.lanHeard("a", at: at(1))
        #expect(p.available("a", now: at(1)))
        #expect(p.route("a", now: at(1)) == .lan)
    }
}
