import Foundation
@testable import LIFXAdapter
import SwitchyardCore
import Testing

/// The routing decision, without I/O: a home built from what each transport saw, a command in, the plan out
/// (which transport gets what, and the lights as the command leaves them).
@Suite struct LIFXPlanTests {
    static let t0 = MonotonicInstant(sinceOrigin: .seconds(5000))
    static let wall = Date(timeIntervalSince1970: 1_800_000_000)
    static let kitchen = LIFXRef(id: "06e3ec50395511e9a0757200055bf1c0", name: "Kitchen")
    static let both = LIFXTransports(lan: true, cloud: true)

    /// A light as a cloud listing gives it.
    static func listed(_ id: String, _ label: String, group: LIFXRef? = nil, on: Bool = true, brightness: Int = 50,
                       connected: Bool = true) -> LIFXLight {
        var l = LIFXLight(id: id)
        l.label = label
        l.group = group
        l.on = on
        l.brightness = brightness
        l.connected = connected
        return l
    }

    /// A home: `cloud` listed at t0, and `lan` identified by the LAN at t0 (product 27 unless given).
    static func home(cloud: [LIFXLight] = [], lan: [(String, String, LIFXRef?)] = [], product: UInt32 = 27,
                     zones: Int? = nil, matrix: Bool = false, lanGrace: Double = 90) -> LIFXHome {
        var h = LIFXHome(lanGrace: lanGrace)
        if !cloud.isEmpty { _ = h.cloudListed(cloud, pending: [], now: t0) }
        let p = LIFXProduct.lookup(product).at(firmware: (4, 10))
        for (id, label, group) in lan {
            let white = LIFXZone(hue: 0, saturation: 0, brightness: 80, kelvin: 3500)
            let reading = LIFXReading(on: true, colour: white, label: label, zones: zones.map { Array(repeating: white, count: $0) },
                                      infrared: p.infrared ? 0 : nil, clean: p.hev ? LIFXClean() : nil,
                                      matrix: matrix ? Array(repeating: white, count: LIFXCeiling.zones) : nil)
            _ = h.lanFound(id, identity: LIFXIdentity(caps: p.caps, model: p.name, firmware: "4.10", group: group), reading: reading,
                           now: t0, wall: wall)
        }
        return h
    }

    func plan(_ h: LIFXHome, _ id: String, _ fields: [String: JSONValue], transports: LIFXTransports = both,
              at t: Double = 0) throws -> LIFXPlan {
        try h.plan(LIFXCommand(.device(id), fields), transports: transports, now: Self.t0.adding(seconds: t), wall: Self.wall,
                   defaultTransition: 0.5)
    }

    func refusal(_ body: () throws -> LIFXPlan) -> String? {
        do {
            _ = try body()
            return nil
        } catch {
            return error.reason
        }
    }

    // MARK: which transport

    @Test func aLightTheLANSeesIsCommandedOverTheLANWithTheStateItIsToShow() throws {
        let h = Self.home(lan: [("d073d5100001", "Desk", nil)])
        let p = try plan(h, "d073d5100001", ["brightness": 40, "transition": 2])
        #expect(p.cloud.isEmpty)
        #expect(p.lan.count == 1)
        let o = try #require(p.lan.first)
        #expect(o.serial == "d073d5100001" && o.label == "Desk" && o.duration == 2)
        #expect(o.want.on && o.want.colour == LIFXZone(hue: 0, saturation: 0, brightness: 40, kelvin: 3500))
        // The model change is the same light, as the command leaves it.
        #expect(p.lights["d073d5100001"]?.brightness == 40 && p.touched == ["d073d5100001"])
        // The home itself is a value: planning changed nothing in it.
        #expect(h.lights["d073d5100001"]?.brightness == 80)
    }

    @Test func aLightOnlyTheCloudListsIsOneCloudRequestWithItsValuesBefore() throws {
        let h = Self.home(cloud: [Self.listed("a", "Hall", brightness: 30)])
        let p = try plan(h, "a", ["brightness": 40])
        #expect(p.lan.isEmpty)
        #expect(p.cloud == [LIFXCloudOrder(kind: .set(LIFXSet(power: true, brightness: 0.4, duration: 0.5)), selector: "id:a", lights: ["a"],
                                           previous: ["a": LIFXLight.Values(on: true, brightness: 30, hue: 0, saturation: 0, kelvin: 3500)],
                                           label: "Hall", labels: ["a": "Hall"])])
        #expect(p.lights["a"]?.brightness == 40)
    }

    @Test func aLightBothTransportsSeeGoesOverTheLANAlone() throws {
        let h = Self.home(cloud: [Self.listed("d073d5000001", "Kitchen")], lan: [("d073d5000001", "Kitchen", nil)])
        let p = try plan(h, "d073d5000001", ["state": "OFF"])
        #expect(p.cloud.isEmpty && p.lan.map(\.serial) == ["d073d5000001"] && p.lan[0].want.on == false)
    }

    /// The LAN lost the light (silent past `offline_after`) while the cloud still lists it: the cloud gets it.
    @Test func aLightSilentOnTheLANPastItsGraceGoesToTheCloud() throws {
        let h = Self.home(cloud: [Self.listed("d073d5000001", "Kitchen")], lan: [("d073d5000001", "Kitchen", nil)], lanGrace: 90)
        let within = try plan(h, "d073d5000001", ["brightness": 10], at: 90)
        #expect(within.cloud.isEmpty && within.lan.count == 1)
        let past = try plan(h, "d073d5000001", ["brightness": 10], at: 91)
        #expect(past.lan.isEmpty && past.cloud.map(\.selector) == ["id:d073d5000001"])
    }

    /// A light only the LAN ever knew stays on the LAN's route when it falls silent: it is looked for there
    /// (and the LAN fails the command if it does not answer); without a cloud nothing else could reach it.
    @Test func aLightOnlyTheLANKnewStaysOnTheLANRouteWhenSilent() throws {
        let h = Self.home(lan: [("d073d5100001", "Desk", nil)])
        let p = try plan(h, "d073d5100001", ["state": "ON"], at: 500)
        #expect(p.cloud.isEmpty && p.lan.map(\.serial) == ["d073d5100001"])
    }

    @Test func withoutALANTransportEveryLightGoesToTheCloud() throws {
        let h = Self.home(cloud: [Self.listed("d073d5000001", "Kitchen")], lan: [("d073d5000001", "Kitchen", nil)])
        let p = try plan(h, "d073d5000001", ["brightness": 10], transports: LIFXTransports(lan: false, cloud: true))
        #expect(p.lan.isEmpty && p.cloud.count == 1)
    }

    @Test func whatNoTransportReachesIsRefusedSayingWhy() throws {
        let h = Self.home(cloud: [Self.listed("a", "Hall")])
        #expect(refusal { try plan(h, "a", ["state": "ON"], transports: LIFXTransports(lan: true, cloud: false, lanOnly: true)) }
                == "Hall is not reachable on the LAN (and no lifx.token is set)")
        #expect(refusal { try plan(h, "a", ["state": "ON"], transports: LIFXTransports(lan: true, cloud: false)) }
                == "the LIFX cloud is not connected")
        #expect(refusal { try plan(h, "nope", ["state": "ON"]) } == "LIFX device 'nope' is not known")
        #expect(refusal { try plan(h, "a", ["transition": 3]) } == "nothing to do: the command changes no field")
    }

    // MARK: groups and lists

    /// A group across both: the LAN's light gets its order, the cloud's lights share one request that names
    /// them by id (the group's selector would reach the LAN's light too), with only their values to revert.
    @Test func aGroupAcrossBothIsLANOrdersAndOneCloudRequestForTheRest() throws {
        let h = Self.home(cloud: [Self.listed("b", "Two", group: Self.kitchen, brightness: 20), Self.listed("c", "Three", group: Self.kitchen)],
                          lan: [("d073d5100001", "Desk", Self.kitchen)])
        let p = try plan(h, "group_\(Self.kitchen.id)", ["brightness": 70])
        #expect(p.lan.map(\.serial) == ["d073d5100001"] && p.lan[0].want.colour.brightness == 70)
        #expect(p.cloud.count == 1)
        let o = try #require(p.cloud.first)
        #expect(o.selector == "id:b,id:c" && o.lights == ["b", "c"] && o.label == "Kitchen")
        #expect(Set(o.previous.keys) == ["b", "c"] && o.previous["b"]?.brightness == 20)
        #expect(p.touched == ["b", "c", "d073d5100001"] && p.lights.values.allSatisfy { $0.brightness == 70 })
    }

    @Test func aGroupAllOnTheCloudUsesTheGroupsSelector() throws {
        let h = Self.home(cloud: [Self.listed("b", "Two", group: Self.kitchen), Self.listed("c", "Three", group: Self.kitchen)])
        let p = try plan(h, "group_\(Self.kitchen.id)", ["brightness_step": -10])
        #expect(p.cloud.map(\.selector) == ["group_id:\(Self.kitchen.id)"])
        // A step on several lights is a relative change: each light moves from its own value.
        #expect(p.cloud[0].kind == .delta(LIFXDelta(brightness: -0.1, duration: 0.5)))
        #expect(p.lights["b"]?.brightness == 40 && p.lights["c"]?.brightness == 40)
    }

    /// Several lights as one command (the next feature, cross-upstream groups, hands the adapter such a list):
    /// one cloud request names the cloud's lights, the LAN's get their orders in the same plan.
    @Test func aListOfLightsIsOneCloudRequestAndOneLANHandOver() throws {
        let h = Self.home(cloud: [Self.listed("a", "One"), Self.listed("b", "Two"), Self.listed("c", "Three")],
                          lan: [("d073d5100001", "Desk", nil), ("d073d5100002", "Shelf", nil)])
        let p = try h.plan(LIFXCommand(.lights(["a", "d073d5100001", "b", "c", "d073d5100002", "a"]), ["state": "OFF"]),
                           transports: Self.both, now: Self.t0, wall: Self.wall, defaultTransition: 1)
        #expect(p.cloud.count == 1 && p.cloud[0].selector == "id:a,id:b,id:c" && p.cloud[0].label == "One, Desk, Two and 2 more")
        #expect(p.cloud[0].kind == .set(LIFXSet(power: false, duration: 1)))
        #expect(p.lan.map(\.serial) == ["d073d5100001", "d073d5100002"] && p.lan.allSatisfy { !$0.want.on && $0.duration == 1 })
        #expect(p.touched.count == 5)
        // One light in a list is that light, with its own selector and absolute steps.
        let one = try h.plan(LIFXCommand(.lights(["a"]), ["brightness_step": 10]), transports: Self.both, now: Self.t0, wall: Self.wall,
                             defaultTransition: 1)
        #expect(one.cloud.map(\.selector) == ["id:a"] && one.cloud[0].kind == .set(LIFXSet(power: true, brightness: 0.6, duration: 1)))
        #expect(refusal { try h.plan(LIFXCommand(.lights([]), ["state": "ON"]), transports: Self.both, now: Self.t0, wall: Self.wall,
                                     defaultTransition: 1) } == "no LIFX light given")
    }

    /// LIFX combines at most 25 selectors in one request: sixty lights are three requests, which the queue
    /// then sends as one `PUT /lights/states` (absolute sets in a row go together).
    @Test func moreThan25LightsAreRequestsOf25AtMostSentAsOneBatch() throws {
        let ids = (0..<60).map { String(format: "d073d50%05x", $0) }
        let h = Self.home(cloud: ids.map { Self.listed($0, "L\($0)") })
        let p = try h.plan(LIFXCommand(.lights(ids), ["brightness": 25]), transports: Self.both, now: Self.t0, wall: Self.wall,
                           defaultTransition: 0)
        #expect(p.cloud.map(\.lights.count) == [25, 25, 10])
        #expect(p.cloud.allSatisfy { $0.selector.split(separator: ",").count == $0.lights.count })
        #expect(p.cloud.flatMap(\.lights) == ids)
        var q = LIFXRequestQueue(minInterval: 0, retryDelay: 1)
        let census = LIFXOutcome.Census()
        for o in p.cloud { q.enqueue(LIFXOp(o), LIFXOutcome(census)) }
        let batch = q.takeBatch(now: Self.t0)
        let r = LIFXCloudAPI.request(for: batch)
        #expect(batch.count == 3 && r.method == "PUT" && r.path == "/lights/states")
        #expect(r.body["states"]?.arrayValue?.map { $0["selector"]?.stringValue ?? "" } == p.cloud.map(\.selector))
    }

    /// Several commands as one plan, each on the home as the ones before leave it.
    @Test func severalCommandsPlanAsOneAndAllOrNothing() throws {
        let h = Self.home(cloud: [Self.listed("a", "One", brightness: 10), Self.listed("b", "Two")], lan: [("d073d5100001", "Desk", nil)])
        let p = try h.plan([LIFXCommand(.device("a"), ["brightness": 20]), LIFXCommand(.device("b"), ["state": "OFF"]),
                            LIFXCommand(.device("a"), ["brightness_step": 5]), LIFXCommand(.device("d073d5100001"), ["brightness": 5])],
                           transports: Self.both, now: Self.t0, wall: Self.wall, defaultTransition: 0.5)
        #expect(p.cloud.map(\.selector) == ["id:a", "id:b", "id:a"])
        // The step is taken from the first command's 20 %, and the revert of the first goes back to 10 %.
        #expect(p.lights["a"]?.brightness == 25 && p.cloud[0].previous["a"]?.brightness == 10 && p.cloud[2].previous["a"]?.brightness == 20)
        #expect(p.lights["b"]?.on == false && p.lan.map(\.serial) == ["d073d5100001"])
        #expect(refusal { try h.plan([LIFXCommand(.device("a"), ["brightness": 20]), LIFXCommand(.device("zz"), ["state": "ON"])],
                                     transports: Self.both, now: Self.t0, wall: Self.wall, defaultTransition: 0.5) }
                == "LIFX device 'zz' is not known")
    }

    // MARK: what only one transport carries

    @Test func effectsGoWhereALightRunsThemAndSkyOnlyOverTheLAN() throws {
        let h = Self.home(cloud: [Self.listed("b", "Two", group: Self.kitchen, on: false)], lan: [("d073d5100001", "Desk", Self.kitchen)])
        let g = "group_\(Self.kitchen.id)"
        let p = try plan(h, g, ["effect": ["name": "breathe", "color": "red", "cycles": 2]])
        #expect(p.lan.map { $0.effect?.name } == ["breathe"] && p.lan[0].duration == 0)
        #expect(p.cloud.map(\.selector) == ["id:b"] && p.cloud[0].kind == .effect(name: "breathe", body: ["color": "hue:0 saturation:1", "cycles": 2]))
        // The LAN's light shows the effect at once; the cloud's shows it when it is listed.
        #expect(p.lights["d073d5100001"]?.effect == "breathe" && p.lights["b"] == nil)
        #expect(refusal { try plan(h, "b", ["effect": "move"]) }?.hasPrefix("effect move: Two cannot run it") == true)
        // A Ceiling the cloud lists too: once the LAN has lost it, the cloud is its route, and the sky is refused.
        let ceiling = Self.home(cloud: [Self.listed("d073d5c0ffee", "Ceiling")], lan: [("d073d5c0ffee", "Ceiling", nil)], product: 176, matrix: true)
        #expect(try plan(ceiling, "d073d5c0ffee", ["effect": "sky"]).lan.first?.effect?.name == "sky")
        #expect(refusal { try plan(ceiling, "d073d5c0ffee", ["effect": "sky"], at: 200) }
                == "effect sky: goes over the LAN only, and Ceiling is not reachable on the LAN now")
    }

    @Test func zonesInfraredAndTheCleanCycleGoToOneLANLight() throws {
        let strip = Self.home(cloud: [Self.listed("b", "Two", group: Self.kitchen)], lan: [("d073d5100002", "Shelf", Self.kitchen)],
                              product: 32, zones: 16)
        let p = try plan(strip, "d073d5100002", ["zones": [["start": 0, "end": 3, "color": ["h": 240, "s": 100]]], "transition": 0])
        let zones = try #require(p.lan.first?.want.zones)
        #expect(zones[0..<4].allSatisfy { $0.hue == 240 && $0.saturation == 100 } && zones[4].saturation == 0)
        #expect(p.lan[0].duration == 0 && p.lights["d073d5100002"]?.on == true)
        #expect(refusal { try plan(strip, "group_\(Self.kitchen.id)", ["zones": [["start": 0]]]) }
                == "zones, infrared and the clean cycle go to one light reached over the LAN")
        #expect(refusal { try plan(strip, "d073d5100002", ["zones": [["start": 0, "end": 20, "brightness": 5]]]) }?
                .hasPrefix("zones[0]: zone 20 is past the light's 16 zones") == true)
        let porch = Self.home(lan: [("d073d5100004", "Porch", nil)], product: 29)
        #expect(try plan(porch, "d073d5100004", ["infrared": 50]).lan.first?.want.infrared == 50)
        let clean = Self.home(lan: [("d073d5100005", "Clean", nil)], product: 90)
        let c = try plan(clean, "d073d5100005", ["clean_cycle": "ON", "clean_duration": 600])
        #expect(c.lan.first?.clean == LIFXCleanRequest(on: true, seconds: 600) && c.lights["d073d5100005"]?.clean?.remaining == 600)
        #expect(refusal { try plan(clean, "d073d5100005", ["clean_duration": 600]) }?.hasPrefix("clean_duration goes with clean_cycle ON") == true)
    }

    @Test func aCeilingsPartIsALANOrderOfItsMatrix() throws {
        let h = Self.home(cloud: [Self.listed("d073d5c0ffee", "Ceiling")], lan: [("d073d5c0ffee", "Ceiling", nil)], product: 176, matrix: true)
        let p = try plan(h, "d073d5c0ffee_uplight", ["color": ["h": 120, "s": 100], "transition": 1])
        let m = try #require(p.lan.first?.want.matrix)
        #expect(p.cloud.isEmpty && p.lan[0].serial == "d073d5c0ffee" && p.lan[0].duration == 1)
        #expect(m[63].hue == 120 && m[63].saturation == 100 && m[0].saturation == 0)
        #expect(refusal { try plan(h, "d073d5c0ffee_uplight", ["state": "ON"], at: 200) }
                == "Ceiling's uplight is controlled over the LAN only, and the LAN does not reach it now")
        #expect(refusal { try plan(h, "d073d5000001_uplight", ["state": "ON"]) }
                == "the zones of this LIFX Ceiling are not read yet; try again in a moment")
    }

    @Test func aSceneIsOneCloudRequestAndItsLightsTakeItsStates() throws {
        var h = Self.home(cloud: [Self.listed("a", "One", brightness: 50), Self.listed("b", "Two", on: false)])
        var dim = LIFXSet(duration: 0)
        dim.brightness = 0.1
        h.scenes = ["u1": LIFXScene(uuid: "u1", name: "Night", states: [.init(selector: "id:a", set: dim), .init(selector: "id:b", set: LIFXSet(power: true, duration: 0))])]
        let p = try plan(h, "scene_u1", ["activate": true, "transition": 3])
        #expect(p.cloud.count == 1 && p.cloud[0].kind == .scene(uuid: "u1", duration: 3) && p.cloud[0].selector == "scene_id:u1")
        #expect(p.cloud[0].lights == ["a", "b"] && p.cloud[0].previous["a"]?.brightness == 50)
        #expect(p.lights["a"]?.brightness == 10 && p.lights["b"]?.on == true)
        #expect(p.activated == ["u1": Timestamp.rfc3339(Self.wall)])
        #expect(refusal { try plan(h, "scene_u1", ["activate": true], transports: LIFXTransports(lan: true, cloud: false)) }
                == "the LIFX cloud is not connected")
        #expect(refusal { try plan(h, "scene_u2", ["activate": true]) }?.hasPrefix("LIFX scene is not known") == true)
        // Taken in: the lights and the scene's stamp change, nothing else.
        h.take(p)
        #expect(h.lights["a"]?.brightness == 10 && h.lights["b"]?.on == true && h.lastActivated["u1"] == Timestamp.rfc3339(Self.wall))
    }

    @Test func takingAPlanChangesOnlyItsLights() throws {
        var h = Self.home(cloud: [Self.listed("a", "One", brightness: 10), Self.listed("b", "Two", brightness: 20)])
        let before = h.lights["b"]
        let p = try plan(h, "a", ["brightness": 90])
        h.take(p)
        #expect(h.lights["a"]?.brightness == 90 && h.lights["b"] == before)
    }

    /// `/get` follows the same rule: the LAN's route over the LAN, the rest from the cloud, scenes from the cloud.
    @Test func aReadFollowsTheSameRoute() throws {
        let h = Self.home(cloud: [Self.listed("a", "One", group: Self.kitchen)], lan: [("d073d5100001", "Desk", nil)])
        let now = Self.t0
        #expect(try h.readRoute("d073d5100001", transports: Self.both, now: now) == .lan(serial: "d073d5100001"))
        #expect(try h.readRoute("a", transports: Self.both, now: now) == .cloud(selector: "id:a"))
        #expect(try h.readRoute("group_\(Self.kitchen.id)", transports: Self.both, now: now) == .cloud(selector: "group_id:\(Self.kitchen.id)"))
        #expect(try h.readRoute("scene_x", transports: Self.both, now: now) == .scenes)
        #expect(throws: AdapterError.self) { try h.readRoute("a", transports: LIFXTransports(lan: true, cloud: false, lanOnly: true), now: now) }
    }
}

extension Error {
    /// The message a user would read.
    var reason: String { (self as? AdapterError)?.message ?? "\(self)" }
}
