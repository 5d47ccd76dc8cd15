import Foundation
@testable import LIFXAdapter
import SwitchyardCore
import Testing

@Suite struct LIFXParsingTests {
    /// docs/upstreams/lifx-cloud.md §1.4, the official "Bulb Response", verbatim.
    static let bulbResponse = """
    [{
      "id": "d073d5141876",
      "uuid": "02a5b510-2d3d-46ea-92ac-c4533f75c24e",
      "label": "Lamp",
      "connected": true,
      "power": "on",
      "color": { "hue": 59.997253376058595, "saturation": 1, "kelvin": 3500 },
      "brightness": 0.29999237048905164,
      "effect": "OFF",
      "group":    { "id": "06e3ec50395511e9a0757200055bf1c0", "name": "Loungeroom" },
      "location": { "id": "f2c1aa82395411e9a0757200055bf1c0", "name": "Home" },
      "product": {
        "name": "Color 1000", "identifier": "lifx_color_a19", "company": "LIFX",
        "capabilities": { "has_color": true, "has_variable_color_temp": true, "has_ir": false,
                          "has_chain": false, "has_multizone": false,
                          "min_kelvin": 2500, "max_kelvin": 9000 },
        "product_id": 22, "vendor_id": 1 },
      "last_seen": "2019-02-25T23:40:40Z",
      "seconds_since_seen": 0
    }]
    """

    /// docs/upstreams/lifx-cloud.md §1.10 (klarstil/lifx-http-api fixture), verbatim.
    static let scenesResponse = """
    [ { "uuid": "1d52671c-99ba-4631-a563-2c31809b700d",
        "name": "Night time",
        "account": { "uuid": "cc7e0336-43c8-4f00-b874-830690884adc" },
        "states": [ { "selector": "id:d073d5002bb3", "brightness": 0.1 },
                    { "selector": "id:d073d5002b35", "power": "on",
                      "color": { "hue": 0, "saturation": 0, "kelvin": 2700 } } ],
        "created_at": 1430118664,
        "updated_at": 1430118664 } ]
    """

    @Test func theOfficialBulbResponseIsReadInTheUsersUnitsAndRounded() throws {
        let list = try JSONValue.parse(Self.bulbResponse).arrayValue!
        let l = try #require(LIFXLight.parse(list[0]))
        #expect(l.id == "d073d5141876")
        #expect(l.brightness == 30)   // 0.29999237…
        #expect(l.hue == 60)          // 59.99725…
        #expect(l.saturation == 100)
        #expect(l.kelvin == 3500)
        #expect(l.on && l.connected)
        #expect(l.group == LIFXRef(id: "06e3ec50395511e9a0757200055bf1c0", name: "Loungeroom"))
        #expect(l.location?.name == "Home")
        #expect(l.model == "Color 1000")
        #expect(l.caps.minKelvin == 2500 && l.caps.maxKelvin == 9000 && l.caps.hasColor)
        #expect(l.effect == "off")
        let f = l.fields
        #expect(f["color_mode"] == "hs")
        #expect(f["color"] == ["h": 60, "s": 100])
        #expect(f["last_seen"] == "2019-02-25T23:40:40Z")
    }

    @Test func theScenesFixtureIsRead() throws {
        let list = try JSONValue.parse(Self.scenesResponse).arrayValue!
        let s = try #require(LIFXScene.parse(list[0]))
        #expect(s.name == "Night time")
        #expect(s.states.count == 2)
        #expect(s.states[0].selector == "id:d073d5002bb3" && s.states[0].set.brightness == 0.1 && s.states[0].set.power == nil)
        #expect(s.states[1].set.power == true && s.states[1].set.color.kelvin == 2700)
    }

    @Test func colourStringsFollowTheLIFXGrammar() throws {
        let blue = try LIFXColorChange.parse("blue saturation:0.5")
        #expect(blue.hue == 250 && blue.saturation == 0.5)
        #expect(blue.wireString == "hue:250 saturation:0.5")
        let warm = try LIFXColorChange.parse("kelvin:2700")
        #expect(warm.kelvin == 2700 && warm.saturation == 0)
        #expect(warm.wireString == "kelvin:2700")
        let red = try LIFXColorChange.parse("#FF0000")
        #expect(red.hue == 0 && red.saturation == 1 && red.brightness == 1)
        let rgbBlue = try LIFXColorChange.parse("rgb:0,0,255")
        #expect(rgbBlue.hue == 240)
        let half = try LIFXColorChange.parse("white brightness:50%")
        #expect(half.saturation == 0 && half.brightness == 0.5)
        // Later components win per channel.
        #expect(try LIFXColorChange.parse("red hue:120").hue == 120)
        for bad in ["mauve", "hue:400", "saturation:2", "kelvin:900", "#12345", "rgb:1,2", ""] {
            #expect(throws: LIFXColorError.self) { try LIFXColorChange.parse(bad) }
        }
    }

    @Test func mergedSetsKeepTheLastValuePerField() {
        var a = LIFXSet(duration: 0.5)
        a.power = true
        a.brightness = 0.2
        var b = LIFXSet(duration: 1)
        b.brightness = 0.7
        b.color = LIFXColorChange(kelvin: 3000)
        let m = a.merged(with: b)
        #expect(m.body == ["power": "on", "brightness": 0.7, "color": "kelvin:3000", "duration": 1])
    }

    @Test func groupsAggregateOverConnectedLightsWithACircularHueMean() {
        var a = LIFXLight(id: "a"); a.hue = 350; a.saturation = 100; a.brightness = 20; a.on = false
        var b = LIFXLight(id: "b"); b.hue = 10; b.saturation = 100; b.brightness = 60; b.on = true
        var c = LIFXLight(id: "c"); c.connected = false; c.on = true; c.brightness = 0
        let f = LIFXAggregate.fields([a, b, c], name: "Lounge")
        #expect(f["state"] == "ON")
        #expect(f["brightness"] == 40)          // the offline light does not drag the mean down
        #expect(f["color"]?["h"] == 0)          // not 180
        #expect(f["lights"] == 3)
        c.on = true
        let offOnly = LIFXAggregate.fields([c], name: "Garage")
        #expect(offOnly["state"] == "OFF")      // only a connected light that is on counts
        #expect(offOnly["connected"] == false)
    }

    @Test func theBudgetWaitsForTheResetWhenSpentAndKeepsAReserveForPolls() {
        var b = RateBudget()
        let now = MonotonicInstant.origin + .seconds(500)
        let wall = Date(timeIntervalSince1970: 1_000_000)
        // The server's reset (a Unix time) is placed on the monotonic clock: 30 s from now.
        b.update(headers: ["x-ratelimit-limit": "120", "x-ratelimit-remaining": "10", "x-ratelimit-reset": "1000030"], now: now, wallNow: wall)
        #expect(b.readyAt(now, reserve: 0) == now)
        #expect(b.readyAt(now, reserve: 24) == now + .seconds(30))
        b.exhausted(headers: [:], now: now, wallNow: wall)
        #expect(b.readyAt(now, reserve: 0) == now + .seconds(30))
        #expect(b.metrics(now, wallNow: wall)["reset_at"] == .string(Timestamp.rfc3339(Date(timeIntervalSince1970: 1_000_030))))
        var local = RateBudget()
        local.limit = 3
        for i in 0..<3 { local.record(now + .seconds(i)) }
        #expect(local.readyAt(now + .seconds(3), reserve: 0) == now + .seconds(60))
        // A 429 without headers waits a second.
        var bare = RateBudget()
        bare.exhausted(headers: [:], now: now, wallNow: wall)
        #expect(bare.readyAt(now, reserve: 0) == now + .seconds(1))
    }
}

/// The merging request queue and its pacing, on instants the test chooses.
@Suite struct LIFXRequestQueueTests {
    func set(_ brightness: Double, duration: Double = 0.5) -> LIFXOp.Kind {
        var s = LIFXSet(duration: duration)
        s.brightness = brightness
        return .set(s)
    }
    func op(_ kind: LIFXOp.Kind, _ selector: String, _ lights: [String]) -> LIFXOp {
        LIFXOp(kind: kind, selector: selector, lights: lights, label: selector)
    }
    let t0 = MonotonicInstant.origin + .seconds(100)
    let census = LIFXOutcome.Census()
    func outcome() -> LIFXOutcome { LIFXOutcome(census) }
    func ids(_ o: [LIFXOutcome]) -> [ObjectIdentifier] { o.map(ObjectIdentifier.init) }

    @Test func setsForOneSelectorMergeLastValueWinsAndEveryCommandKeepsItsOutcome() {
        var q = LIFXRequestQueue(minInterval: 0.5, retryDelay: 1)
        let a = outcome(), b = outcome(), c = outcome()
        q.enqueue(op(set(0.1), "id:a", ["a"]), a)
        q.enqueue(op(set(0.2), "id:a", ["a"]), b)
        q.enqueue(op(set(0.3), "id:b", ["b"]), c)
        #expect(q.queue.count == 2 && q.merged == 1)
        #expect(ids(q.queue[0].outcomes) == ids([a, b]) && ids(q.queue[1].outcomes) == ids([c]))
        #expect(q.queue[0].kind == set(0.2))
        // Deltas add up; an effect never merges.
        q.enqueue(op(.delta(LIFXDelta(brightness: 0.1, duration: 1)), "group_id:g", ["a", "b"]), outcome())
        q.enqueue(op(.delta(LIFXDelta(brightness: -0.3, duration: 1)), "group_id:g", ["a", "b"]), outcome())
        q.enqueue(op(.effect(name: "off", body: [:]), "group_id:g", ["a", "b"]), outcome())
        q.enqueue(op(.effect(name: "off", body: [:]), "group_id:g", ["a", "b"]), outcome())
        #expect(q.queue.count == 5)
        if case .delta(let d) = q.queue[2].kind { #expect(abs((d.brightness ?? 0) + 0.2) < 1e-9) } else { Issue.record("no delta") }
    }

    @Test func aSetMergesOnlyIntoTheLatestRequestForItsLights() {
        var q = LIFXRequestQueue(minInterval: 0.5, retryDelay: 1)
        q.enqueue(op(set(0.1), "id:a", ["a"]), outcome())
        q.enqueue(op(.effect(name: "pulse", body: [:]), "id:a", ["a"]), outcome())
        q.enqueue(op(set(0.9), "id:a", ["a"]), outcome())   // after the effect: must not jump ahead of it
        #expect(q.queue.map(\.kind) == [set(0.1), .effect(name: "pulse", body: [:]), set(0.9)])
    }

    @Test func pacingIsTheLatestOfMinIntervalRetryAndBudget() {
        var q = LIFXRequestQueue(minInterval: 0.5, retryDelay: 1)
        #expect(q.sendableAt(budgetAllows: t0) == nil)   // nothing queued
        q.enqueue(op(set(0.1), "id:a", ["a"]), outcome())
        #expect(q.sendableAt(budgetAllows: t0) == t0)     // idle: at once
        let batch = q.takeBatch(now: t0)
        #expect(batch.count == 1 && q.inFlight.count == 1)
        q.answered()
        q.enqueue(op(set(0.2), "id:a", ["a"]), outcome())
        #expect(q.sendableAt(budgetAllows: t0) == t0 + .milliseconds(500))
        #expect(q.sendableAt(budgetAllows: t0 + .seconds(3)) == t0 + .seconds(3))
    }

    @Test func setsRightBehindEachOtherGoAsOneBatchOfAtMostFifty() {
        var q = LIFXRequestQueue(minInterval: 0, retryDelay: 1)
        for i in 0..<60 { q.enqueue(op(set(0.5), "id:\(i)", ["\(i)"]), outcome()) }
        q.enqueue(op(.delta(LIFXDelta(brightness: 0.1, duration: 1)), "id:x", ["x"]), outcome())
        #expect(q.takeBatch(now: t0).count == 50)
        q.answered()
        #expect(q.takeBatch(now: t0).count == 10)   // the delta is not a set: it goes alone
        q.answered()
        #expect(q.takeBatch(now: t0).count == 1)
    }

    @Test func onlyAbsoluteSetsAreRetriedTwiceWithADoublingDelay() {
        var q = LIFXRequestQueue(minInterval: 0, retryDelay: 1)
        q.enqueue(op(set(0.5), "id:a", ["a"]), outcome())
        var batch = q.takeBatch(now: t0)
        q.answered()
        var retried = q.retry(batch, now: t0)
        #expect(retried)
        #expect(q.sendableAt(budgetAllows: t0) == t0 + .seconds(1))
        batch = q.takeBatch(now: t0 + .seconds(1))
        q.answered()
        retried = q.retry(batch, now: t0 + .seconds(1))
        #expect(retried)
        #expect(q.sendableAt(budgetAllows: t0) == t0 + .seconds(3))   // 1 s, then 2 s
        batch = q.takeBatch(now: t0 + .seconds(3))
        q.answered()
        retried = q.retry(batch, now: t0 + .seconds(3))
        #expect(!retried)                                               // the third attempt was the last
        q.enqueue(op(.effect(name: "off", body: [:]), "id:a", ["a"]), outcome())
        let effect = q.takeBatch(now: t0)
        retried = q.retry(effect, now: t0)
        #expect(!retried)
        #expect(q.retries == 2)
    }

    @Test func aRefusedBatchGoesBackToTheFront() {
        var q = LIFXRequestQueue(minInterval: 0, retryDelay: 1)
        q.enqueue(op(set(0.1), "id:a", ["a"]), outcome())
        let batch = q.takeBatch(now: t0)
        q.enqueue(op(set(0.2), "id:b", ["b"]), outcome())
        #expect(q.changes(light: "a") && q.changes(light: "b") && !q.changes(light: "c"))
        q.answered()
        q.requeue(batch)
        #expect(q.queue.map(\.selector) == ["id:a", "id:b"])
    }
}

/// Commands into requests, from the lights as they are.
@Suite struct LIFXCommandPlannerTests {
    func light(_ id: String, on: Bool = false, connected: Bool = true, minK: Int = 2500, maxK: Int = 9000) -> LIFXLight {
        var l = LIFXLight(id: id)
        l.on = on
        l.connected = connected
        l.caps.minKelvin = minK
        l.caps.maxKelvin = maxK
        return l
    }
    let one = LIFXTarget(selector: "id:a", lights: ["a"], label: "Kitchen")
    let group = LIFXTarget(selector: "group_id:g", lights: ["a", "b"], label: "Lounge")

    @Test func toggleGoesOffWhenAnyReachableLightIsOn() throws {
        let lights = [light("a", on: true), light("b", on: false), light("c", on: true, connected: false)]
        let p = try LIFXCommandPlanner.plan(["state": "TOGGLE"], target: group, members: Array(lights.prefix(2)), defaultTransition: 0.5)
        #expect(p.kinds == [.set(LIFXSet(power: false, duration: 0.5))])
        // Only unreachable lights: judged on them all.
        let q = try LIFXCommandPlanner.plan(["state": "TOGGLE"], target: one, members: [light("c", on: false, connected: false)], defaultTransition: 1)
        #expect(q.kinds == [.set(LIFXSet(power: true, duration: 1))])
    }

    @Test func kelvinIsClampedToTheNarrowestRangeWithANote() throws {
        let p = try LIFXCommandPlanner.plan(["color_temp": 2000, "transition": 2], target: group,
                                            members: [light("a", minK: 2500), light("b", minK: 2700, maxK: 6500)], defaultTransition: 0.5)
        #expect(p.notes == ["color_temp 2000 K is outside Lounge's range 2700–6500 K; clamped to 2700 K"])
        guard case .set(let s) = p.kinds.first else { Issue.record("no set"); return }
        #expect(s.color.kelvin == 2700 && s.power == true && s.duration == 2)
    }

    @Test func stepsAreAbsoluteForOneLightAndDeltasForAGroup() throws {
        var a = light("a"); a.brightness = 95
        let single = try LIFXCommandPlanner.plan(["brightness_step": 10], target: one, members: [a], defaultTransition: 0.5)
        guard case .set(let s) = single.kinds.first else { Issue.record("no set"); return }
        #expect(s.brightness == 1.0)   // clipped at 100 %
        let g = try LIFXCommandPlanner.plan(["brightness_step": -10, "color_temp_step": 500], target: group, members: [a, light("b")],
                                            defaultTransition: 0.5)
        #expect(g.kinds == [.delta(LIFXDelta(brightness: -0.1, kelvin: 500, duration: 0.5))])
    }

    @Test func effectsAndRefusals() throws {
        let p = try LIFXCommandPlanner.plan(["effect": ["name": "breathe", "color": "red", "cycles": 3]], target: one, members: [light("a")],
                                            defaultTransition: 0.5)
        #expect(p.kinds == [.effect(name: "breathe", body: ["color": "hue:0 saturation:1", "cycles": 3])])
        #expect(throws: AdapterError.self) { try LIFXCommandPlanner.plan(["transition": 1], target: one, members: [light("a")], defaultTransition: 0.5) }
        #expect(throws: AdapterError.self) { try LIFXCommandPlanner.plan(["color": "mauve"], target: one, members: [light("a")], defaultTransition: 0.5) }
        #expect(throws: AdapterError.self) { try LIFXCommandPlanner.effect(["name": "pulse", "peak": 0.5]) }
        #expect(try LIFXCommandPlanner.sceneActivation(["activate": true], defaultTransition: 0.5) == 0.5)
        #expect(throws: AdapterError.self) { try LIFXCommandPlanner.sceneActivation(["activate": false], defaultTransition: 0.5) }
    }
}

/// The cloud API's requests and answers.
@Suite struct LIFXCloudAPITests {
    @Test func aBatchIsOnePUTOfStatesAndSingleOpsUseTheirEndpoints() {
        var s1 = LIFXSet(duration: 0.5); s1.power = false
        var s2 = LIFXSet(duration: 1); s2.brightness = 0.25
        let batch = [LIFXOp(kind: .set(s1), selector: "id:a", lights: ["a"], label: "a"),
                     LIFXOp(kind: .set(s2), selector: "label:Hall Lamp", lights: ["b"], label: "b")]
        let r = LIFXCloudAPI.request(for: batch)
        #expect(r.method == "PUT" && r.path == "/lights/states")
        #expect(r.body == ["states": [["selector": "id:a", "power": "off", "duration": 0.5],
                                      ["selector": "label:Hall Lamp", "brightness": 0.25, "duration": 1]]])
        #expect(LIFXCloudAPI.request(for: [batch[1]]).path == "/lights/label:Hall%20Lamp/state")
        let scene = LIFXCloudAPI.request(for: [LIFXOp(kind: .scene(uuid: "u1", duration: 2), selector: "scene_id:u1", lights: [], label: "s")])
        #expect(scene.method == "PUT" && scene.path == "/scenes/scene_id:u1/activate" && scene.body == ["duration": 2])
    }

    @Test func resultsAreReadPerOpAndPerLight() throws {
        let single = try JSONValue.parse(#"{"results":[{"id":"a","status":"ok"},{"id":"b","status":"offline"},{"id":"c"}]}"#)
        let r = LIFXCloudAPI.results(single, ops: 1, multi: false)
        #expect(r.count == 1 && r[0].error == nil)
        #expect(r[0].lights.map(\.id) == ["a", "b", "c"] && r[0].lights.map(\.status) == ["ok", "offline", "ok"])
        let multi = try JSONValue.parse(#"{"results":[{"operation":{},"results":[{"id":"a","status":"ok"}]},{"error":"bad selector"}]}"#)
        let m = LIFXCloudAPI.results(multi, ops: 3, multi: true)
        #expect(m.map(\.error) == [nil, "LIFX: bad selector", nil])
        #expect(m[0].lights.map(\.id) == ["a"] && m[2].lights.isEmpty)
        #expect(LIFXCloudAPI.describe(status: 401, json: nil, selector: "all").contains("refused the token"))
        #expect(LIFXCloudAPI.describe(status: 422, json: ["error": "x"], selector: "all") == "LIFX rejected the request (HTTP 422): x")
    }
}
