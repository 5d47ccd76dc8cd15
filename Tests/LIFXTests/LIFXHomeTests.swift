import Foundation
@testable import LIFXAdapter
import SwitchyardCore
import Testing

/// The model without sockets: tables of what each transport saw over time in; the entries (lights, groups,
/// locations) present, their availability and `via`, and what was removed, out.
@Suite struct LIFXHomeTests {
    static let t0 = MonotonicInstant(sinceOrigin: .seconds(5000))
    static let wall = Date(timeIntervalSince1970: 1_800_000_000)
    static let home = LIFXRef(id: "f2c1aa82395411e9a0757200055bf1c0", name: "Home")
    static let kitchen = LIFXRef(id: "06e3ec50395511e9a0757200055bf1c0", name: "Kitchen")
    static let study = LIFXRef(id: "1c8de82b81f445e7cfaafae49b259c71", name: "Study")

    /// What one step of a table does.
    enum Event {
        /// A complete cloud listing: these lights (id, group, location, connected).
        case cloud([(String, LIFXRef?, LIFXRef?, Bool)])
        /// The LAN identified a light (its group and location as the device stores them).
        case lanFound(String, LIFXRef?, LIFXRef?)
        /// The LAN heard these lights.
        case lanHeard([String])
        /// Cloud listings keep failing.
        case cloudDown
        /// Only time passes.
        case tick
    }

    struct Step {
        var t: Double
        var events: [Event]
        /// Every entry present afterwards, with its availability and `via` ("lan", "cloud", "mixed").
        var entries: [String: (available: Bool, via: String)]
        var removed: [String] = []
    }

    static func run(_ steps: [Step], lanGrace: Double = 90, sourceLocation: SourceLocation = #_sourceLocation) {
        var h = LIFXHome(cloudGrace: 3, lanGrace: lanGrace)
        for s in steps {
            let now = t0.adding(seconds: s.t)
            var removed: [String] = []
            for e in s.events {
                switch e {
                case .cloud(let list):
                    let lights = list.map { id, g, loc, connected -> LIFXLight in
                        var l = LIFXLight(id: id)
                        l.label = id
                        l.group = g
                        l.location = loc
                        l.connected = connected
                        return l
                    }
                    removed += h.cloudListed(lights, pending: [], now: now).removed
                case .lanFound(let id, let g, let loc):
                    let reading = LIFXReading(on: true, colour: LIFXZone(hue: 0, saturation: 0, brightness: 100, kelvin: 3500), label: id)
                    _ = h.lanFound(id, identity: LIFXIdentity(caps: LIFXProduct.lookup(27).caps, model: LIFXProduct.lookup(27).name, firmware: "3.70",
                                                            group: g, location: loc),
                                   reading: reading, now: now, wall: wall)
                case .lanHeard(let ids):
                    _ = h.lanHeard(Dictionary(uniqueKeysWithValues: ids.map { ($0, now) }), now: now)
                case .cloudDown:
                    _ = h.cloudUnreachable(now: now)
                case .tick:
                    _ = h.lanHeard([:], now: now)
                }
            }
            var seen: [String: (available: Bool, via: String)] = [:]
            for l in h.lights.values { seen[l.id] = (l.connected, l.via) }
            for c in h.collections() {
                let st = h.state(of: c)
                seen[c.key] = (st.available, st.fields["via"]?.stringValue ?? "?")
            }
            #expect(Set(seen.keys) == Set(s.entries.keys), "t=\(s.t): entries", sourceLocation: sourceLocation)
            for (k, want) in s.entries {
                guard let got = seen[k] else { continue }
                #expect(got.available == want.available && got.via == want.via,
                        "t=\(s.t) \(k): available \(got.available) via \(got.via), expected \(want.available) via \(want.via)",
                        sourceLocation: sourceLocation)
            }
            #expect(removed.sorted() == s.removed.sorted(), "t=\(s.t): removed", sourceLocation: sourceLocation)
        }
    }

    static let g1 = "group_\(kitchen.id)", g2 = "group_\(study.id)", loc = "location_\(home.id)"

    /// A light only the LAN knows, its group and the location it shares with a
    /// cloud light, through thirty cloud listings and a LAN outage: never removed, one location, and offline
    /// only while nothing reaches it.
    @Test func aLightOnlyTheLANKnowsAndItsGroupsStayThroughEveryListing() {
        var steps: [Step] = [
            Step(t: 0, events: [.cloud([("a", Self.kitchen, Self.home, true)]), .lanFound("b", Self.study, Self.home)],
                 entries: ["a": (true, "cloud"), "b": (true, "lan"), Self.g1: (true, "cloud"), Self.g2: (true, "lan"), Self.loc: (true, "mixed")]),
        ]
        for i in 1...30 {
            let t = Double(i) * 5
            steps.append(Step(t: t, events: [.cloud([("a", Self.kitchen, Self.home, true)])] + (i % 4 == 0 ? [.lanHeard(["b"])] : []),
                              entries: ["a": (true, "cloud"), "b": (true, "lan"), Self.g1: (true, "cloud"), Self.g2: (true, "lan"),
                                        Self.loc: (true, "mixed")]))
        }
        // b last heard at 140 s: silent past 90 s it is offline, still there, still looked for on the LAN.
        steps.append(Step(t: 240, events: [.cloud([("a", Self.kitchen, Self.home, true)])],
                          entries: ["a": (true, "cloud"), "b": (false, "lan"), Self.g1: (true, "cloud"), Self.g2: (false, "lan"),
                                    Self.loc: (true, "mixed")]))
        steps.append(Step(t: 250, events: [.lanHeard(["b"])],
                          entries: ["a": (true, "cloud"), "b": (true, "lan"), Self.g1: (true, "cloud"), Self.g2: (true, "lan"),
                                    Self.loc: (true, "mixed")]))
        Self.run(steps)
    }

    /// A light both transports know, as each one loses and finds it: it goes (with the group it was alone
    /// in) only when neither sees it; `via` follows the routing rule; the location it shares stays.
    @Test func aLightOnBothGoesOnlyWhenNoTransportSeesIt() {
        let both: (String, LIFXRef?, LIFXRef?, Bool) = ("a", Self.kitchen, Self.home, true)
        let other: (String, LIFXRef?, LIFXRef?, Bool) = ("c", nil, Self.home, true)
        let all = ["a": (true, "lan"), "c": (true, "cloud"), Self.g1: (true, "lan"), Self.loc: (true, "mixed")]
        Self.run([
            Step(t: 0, events: [.cloud([both, other]), .lanFound("a", Self.kitchen, Self.home)], entries: all),
            Step(t: 30, events: [.cloud([other]), .lanHeard(["a"])], entries: all),          // the cloud misses a: 1
            Step(t: 60, events: [.cloud([other])], entries: all),                                  // 2; heard at 30
            Step(t: 90, events: [.cloud([other])], entries: all),                                  // 3; the LAN still sees it: kept
            Step(t: 150, events: [.cloud([both, other])],                                         // LAN silent 120 s: the cloud
                 entries: ["a": (true, "cloud"), "c": (true, "cloud"), Self.g1: (true, "cloud"), Self.loc: (true, "cloud")]),
            Step(t: 180, events: [.cloud([other])],
                 entries: ["a": (true, "cloud"), "c": (true, "cloud"), Self.g1: (true, "cloud"), Self.loc: (true, "cloud")]),
            Step(t: 210, events: [.cloud([other])],
                 entries: ["a": (true, "cloud"), "c": (true, "cloud"), Self.g1: (true, "cloud"), Self.loc: (true, "cloud")]),
            Step(t: 240, events: [.cloud([other])], entries: ["c": (true, "cloud"), Self.loc: (true, "cloud")], removed: ["a"]),
        ])
    }

    /// When the cloud cannot be reached, what only it reaches is unavailable; what the LAN hears is not.
    @Test func aFailingCloudTakesOnlyWhatTheLANDoesNotHear() {
        Self.run([
            Step(t: 0, events: [.cloud([("a", Self.kitchen, nil, true), ("b", Self.kitchen, nil, false)]), .lanFound("c", Self.kitchen, nil)],
                 entries: ["a": (true, "cloud"), "b": (false, "cloud"), "c": (true, "lan"), Self.g1: (true, "mixed")]),
            Step(t: 10, events: [.cloudDown], entries: ["a": (false, "cloud"), "b": (false, "cloud"), "c": (true, "lan"), Self.g1: (true, "mixed")]),
            Step(t: 200, events: [.tick], entries: ["a": (false, "cloud"), "b": (false, "cloud"), "c": (false, "lan"), Self.g1: (false, "mixed")]),
            Step(t: 210, events: [.cloud([("a", Self.kitchen, nil, true), ("b", Self.kitchen, nil, false)])],
                 entries: ["a": (true, "cloud"), "b": (false, "cloud"), "c": (false, "lan"), Self.g1: (true, "mixed")]),
        ])
    }

    /// One group named by both transports is one group; its name is the newest the devices store, the
    /// cloud's while no device said.
    @Test func groupsMergeByIdAndTakeTheNewestName() throws {
        var h = LIFXHome(lanGrace: 90)
        let now = Self.t0
        var cloudLight = LIFXLight(id: "a")
        cloudLight.group = LIFXRef(id: Self.kitchen.id, name: "Lounge")
        _ = h.cloudListed([cloudLight], pending: [], now: now)
        #expect(h.collections().map(\.name) == ["Lounge"])
        let reading = LIFXReading(on: true, colour: LIFXZone(hue: 0, saturation: 0, brightness: 100, kelvin: 3500), label: "b")
        _ = h.lanFound("b", identity: LIFXIdentity(group: LIFXRef(id: Self.kitchen.id, name: "Living Room", updatedAt: 10)),
                       reading: reading, now: now, wall: Self.wall)
        _ = h.lanFound("c", identity: LIFXIdentity(group: LIFXRef(id: Self.kitchen.id, name: "Den", updatedAt: 20)),
                       reading: reading, now: now, wall: Self.wall)
        let groups = h.collections(locations: false)
        #expect(groups.count == 1)
        let g = try #require(groups.first)
        #expect(g.name == "Den" && g.members == ["a", "b", "c"] && g.key == "group_\(Self.kitchen.id)")
        // Every member shows the group under that one name.
        #expect(h.lights.values.allSatisfy { $0.group?.name == "Den" })
        // A cloud listing naming it otherwise changes nothing: the device's stamp wins.
        _ = h.cloudListed([cloudLight], pending: [], now: now)
        #expect(h.collections(locations: false).map(\.name) == ["Den"])
    }

    /// The published reports: a light, its group and location in one hand-over, each with its availability.
    @Test func reportsCarryTheLightItsGroupsAndTheirAvailability() {
        var h = LIFXHome(lanGrace: 90)
        var l = LIFXLight(id: "a")
        l.group = Self.kitchen
        l.location = Self.home
        _ = h.cloudListed([l], pending: [], now: Self.t0)
        let r = h.reports(["a"], groups: true, locations: false)
        #expect(r.map(\.deviceID) == ["a", Self.g1])
        #expect(r.allSatisfy { $0.available == true })
        #expect(r[1].fields["lights"] == 1 && r[1].fields["via"] == "cloud")
    }
}
