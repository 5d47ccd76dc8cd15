import Foundation
@testable import LIFXAdapter
import SwitchyardCore
import Testing

@Suite struct LIFXParsingTests {
    /// lifx.md §1.4, the official "Bulb Response", verbatim.
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

    /// lifx.md §1.10 (klarstil/lifx-http-api fixture), verbatim.
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
        let now = Date(timeIntervalSince1970: 1_000_000)
        b.update(headers: ["x-ratelimit-limit": "120", "x-ratelimit-remaining": "10", "x-ratelimit-reset": "1000030"], now: now)
        #expect(b.readyAt(now, reserve: 0) == now)
        #expect(b.readyAt(now, reserve: 24) == Date(timeIntervalSince1970: 1_000_030))
        b.exhausted(headers: [:], now: now)
        #expect(b.readyAt(now, reserve: 0) == Date(timeIntervalSince1970: 1_000_030))
        var local = RateBudget()
        local.limit = 3
        for i in 0..<3 { local.record(now.addingTimeInterval(Double(i))) }
        #expect(local.readyAt(now.addingTimeInterval(3), reserve: 0) == now.addingTimeInterval(60))
    }
}
