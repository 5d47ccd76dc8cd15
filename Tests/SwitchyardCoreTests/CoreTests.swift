import Testing
import Foundation
@testable import SwitchyardCore
import SwitchyardTestSupport

@Suite struct NamingTests {
    @Test func slugFollowsTheContract() {
        #expect(Naming.slug("Hall Lamp") == "hall_lamp")
        #expect(Naming.slug("  Kitchen -- Ceiling (2) ") == "kitchen_ceiling_2")
        #expect(Naming.slug("Café Lüster") == "caf_l_ster")
        #expect(Naming.slug("***") == "")
    }

    @Test func idsAreNormalisedForDiscovery() {
        #expect(Naming.normaliseID("AA:BB:CC:DD:EE:FF") == "aabbccddeeff")
        #expect(Naming.normaliseID("d073d5 01/x") == "d073d5_01_x")
    }

    @Test func namesAreMadeReadableForPeople() {
        #expect(Naming.readable("key_light") == "Key light")
        #expect(Naming.readable("hall/lamp") == "Hall lamp")
        #expect(Naming.readable("mode_24h") == "Mode 24h")
        #expect(Naming.readable("utc") == "UTC")
        #expect(Naming.readable("ha_status") == "HA status")
        #expect(Naming.readable("Kitchen ceiling") == "Kitchen ceiling")
        #expect(Naming.readable("") == "")
    }

    @Test func badNamesAreRejected() {
        #expect(Naming.problem(withName: "kitchen/floor") == nil)
        #expect(Naming.problem(withName: "/kitchen") != nil)
        #expect(Naming.problem(withName: "kitchen/") != nil)
        #expect(Naming.problem(withName: "a+b") != nil)
        #expect(Naming.problem(withName: "a#") != nil)
        #expect(Naming.problem(withName: "a\u{7}b") != nil)
        #expect(Naming.problem(withName: "lamp/set") != nil)
        #expect(Naming.problem(withName: "availability") != nil)
        #expect(Naming.problem(withName: "bridge") != nil)
        #expect(Naming.problem(withName: "group/x", reservedPrefixes: ["group/"]) != nil)
    }

    static func light(_ id: String, _ label: String, configured: String? = nil) -> DeviceDescriptor {
        DeviceDescriptor(id: id, label: label, configuredName: configured, category: .light, capabilities: [.state()])
    }

    @Test func clashesGetTheIdWhateverTheOrder() {
        let devices = [Self.light("d2", "Lamp"), Self.light("d1", "Lamp"), Self.light("d3", "Desk"), Self.light("d4", "")]
        let a = Naming.assign(devices)
        let b = Naming.assign(devices.reversed())
        #expect(a.names == b.names)
        #expect(a.names["d1"] == "lamp_d1")
        #expect(a.names["d2"] == "lamp_d2")
        #expect(a.names["d3"] == "desk")
        #expect(a.names["d4"] == "d4")
        #expect(a.warnings.keys.sorted() == ["d1", "d2"])
    }

    @Test func configuredNamesWinAndReservedSlugsAreSuffixed() {
        let a = Naming.assign([Self.light("d1", "Desk"), Self.light("d2", "Other", configured: "desk"), Self.light("d3", "Set")])
        #expect(a.names["d2"] == "desk")
        #expect(a.names["d1"] == "desk_d1")
        #expect(a.names["d3"] == "set_d3")
    }
}

@Suite struct TopicTests {
    let scheme = TopicScheme(base: "switchyard")

    @Test func classifiesCommandTopics() {
        #expect(scheme.classify("switchyard/lifx/kitchen/set") == .set(adapter: "lifx", device: "kitchen", field: nil))
        #expect(scheme.classify("switchyard/lifx/kitchen/set/brightness") == .set(adapter: "lifx", device: "kitchen", field: "brightness"))
        #expect(scheme.classify("switchyard/lifx/group/upstairs/set") == .set(adapter: "lifx", device: "group/upstairs", field: nil))
        #expect(scheme.classify("switchyard/lifx/kitchen/get") == .get(adapter: "lifx", device: "kitchen"))
        #expect(scheme.classify("switchyard/bridge/request/devices/refresh") == .request(path: "devices/refresh"))
        #expect(scheme.classify("switchyard/lifx/kitchen") == .other)
        #expect(scheme.classify("switchyard/bridge/set") == .other)
        #expect(scheme.classify("homeassistant/status") == .haStatus)
        #expect(scheme.classify("other/lifx/kitchen/set") == .other)
    }

    /// The reading by separators against the plain one (split into levels, joined again) over every topic
    /// made of up to six levels from a set of awkward ones: empty levels, `set`/`get` anywhere, a trailing
    /// separator, non-ASCII.
    @Test func classifyingBySeparatorsAgreesWithSplittingIntoLevels() async throws {
        let (differ, checked) = try await offThePool { Self.classifyBothWays() }
        #expect(differ.isEmpty, "\(differ.count) differ: \(differ.prefix(5))")
        #expect(checked > 60_000)
    }

    /// Every topic of up to five levels of awkward words, classified by `classify` and by splitting into
    /// levels: the topics where they differ, and how many were checked (work for `offThePool`).
    static func classifyBothWays() -> (differ: [String], checked: Int) {
        let scheme = TopicScheme(base: "switchyard")
        func byLevels(_ topic: String) -> TopicScheme.Inbound {
            guard topic.hasPrefix("switchyard/") else { return .other }
            let rest = topic.dropFirst("switchyard/".count)
            if rest.hasPrefix("bridge/request/") { return scheme.classify(topic) }
            let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 3, parts[0] != "bridge" else { return .other }
            if parts.last == "get" {
                let device = parts[1..<(parts.count - 1)].joined(separator: "/")
                return device.isEmpty ? .other : .get(adapter: parts[0], device: device)
            }
            if parts.last == "set" {
                let device = parts[1..<(parts.count - 1)].joined(separator: "/")
                return device.isEmpty ? .other : .set(adapter: parts[0], device: device, field: nil)
            }
            if parts.count >= 4, parts[parts.count - 2] == "set" {
                let device = parts[1..<(parts.count - 2)].joined(separator: "/")
                let field = parts[parts.count - 1]
                return device.isEmpty || field.isEmpty ? .other : .set(adapter: parts[0], device: device, field: field)
            }
            return .other
        }
        let levels = ["", "set", "get", "lifx", "bridge", "kitchen", "brightness", "küche", "💡"]
        var topics = ["switchyard/"]
        var checked = 0
        var differ: [String] = []
        for _ in 0..<5 {
            topics = topics.flatMap { t in levels.map { t.hasSuffix("/") ? t + $0 : t + "/" + $0 } }
            for t in topics where scheme.classify(t) != byLevels(t) { differ.append(t) }
            checked += topics.count
        }
        return (differ, checked)
    }

    @Test func subscriptionsCoverEveryNameDepthWithoutTheWholeTree() {
        let f = scheme.commandFilters(depths: [1, 3])
        #expect(f.contains("switchyard/+/+/set"))
        #expect(f.contains("switchyard/+/+/+/set/+"))
        #expect(f.contains("switchyard/+/+/+/+/get"))
        #expect(!f.contains("switchyard/#"))
    }
}

@Suite struct JSONTests {
    @Test func parsesAndSerialisesDeterministically() throws {
        let v = try JSONValue.parse(#"{"b": [1, 2.5, true, null], "a": "x\"y\u00e9\ud83d\ude00", "c": {"z": -0.25e1}}"#)
        #expect(v.serialized == #"{"a":"x\"yé😀","b":[1,2.5,true,null],"c":{"z":-2.5}}"#)
        #expect(v["b"] == [1, 2.5, true, nil])
    }

    @Test func aNumberNoDoubleHoldsIsRefusedAndSaidSo() {
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse(#"{"brightness":1e999}"#) }
        do { _ = try JSONValue.parse(#"{"brightness":1e999}"#) } catch { #expect("\(error)".contains("number out of range")) }
        #expect((try? JSONValue.parse("1e-999")) == 0)
    }

    @Test func rejectsMalformedJSON() {
        // 1e999 and its kind (in the json fuzz target's corpus): no Double holds them.
        for bad in ["{bad", "{\"a\":}", "[1,]", "01", "\"\\x\"", "{\"a\":1} x", "nul", "", " 2E8888888888888888888888888", "[-1e400]"] {
            #expect(throws: JSONValue.ParseError.self, "\(bad)") { try JSONValue.parse(bad) }
        }
    }

    @Test func escapesControlCharacters() {
        #expect(JSONValue.string("a\nb\u{1}\u{1f}").serialized == #""a\nb\u0001\u001f""#)
    }

    /// A `\u` escape is four hex digits, no sign.
    @Test func aUnicodeEscapeIsFourHexDigits() throws {
        #expect(try JSONValue.parse(#""\u0041\u00e9""#) == .string("Aé"))
        for bad in [#""\u+041""#, #""\u-000""#, #""\u 041""#, #""\u04g1""#, #""\u041""#] {
            #expect(throws: JSONValue.ParseError.self, "\(bad)") { try JSONValue.parse(bad) }
            #expect(throws: JSONValue.ParseError.self, "\(bad)") { try JSONValue.parse(Array(bad.utf8)) { _ in true } }
        }
    }

    /// The byte-level writer is the one `serialized` uses: the same text for any string.
    @Test func theByteWriterWritesWhatSerialisedDoes() {
        for s in ["plain", "a \"quoted\" \\ path\r\n\t\u{0}\u{7f}", "Küche 🔥", ""] {
            var buf: [UInt8] = []
            JSONValue.appendString(s.utf8, to: &buf)
            #expect(String(decoding: buf, as: UTF8.self) == JSONValue.string(s).serialized)
            #expect((try? JSONValue.parse(buf)) == .string(s))
        }
    }

    /// Integers are written and read without text conversion; a long number's magnitude decides before any
    /// conversion: each result is checked against the standard library's own reading of the same text.
    @Test func numbersReadAsTheStandardLibraryReadsThem() throws {
        for n in [0.0, -0.0, 1, -1, 42, 999_999_999_999_999, -999_999_999_999_999, 1e15, 0.5, -2.25, 1e-7, 123456.789] {
            #expect(try JSONValue.parse(JSONValue.number(n).serialized) == .number(n), "\(n)")
        }
        #expect(JSONValue.number(-7).serialized == "-7")
        let zeros = String(repeating: "0", count: 300)
        for text in ["1" + zeros, "1" + zeros + "e-250", "0." + zeros + "1e290", "-0." + zeros + zeros + "1", "12345678901234567890123456789012345e-20",
                     "0." + zeros, "1" + String(repeating: "0", count: 307), "-1" + String(repeating: "7", count: 307)] {
            let expected = Double(text)!
            #expect(try JSONValue.parse(text) == .number(expected), "\(text.prefix(40))…")
        }
        for text in ["1" + zeros + zeros, "2" + String(repeating: "0", count: 308), "-" + String(repeating: "9", count: 5_000), "1" + zeros + "e9"] {
            #expect(Double(text)?.isFinite != true)
            #expect(throws: JSONValue.ParseError.self, "\(text.prefix(40))…") { try JSONValue.parse(text) }
        }
    }

    /// What a message quotes of a value (`excerpt`) is the start of its serialisation, cut at a scalar,
    /// written without serialising the rest.
    @Test func anExcerptIsTheStartOfTheWholeText() {
        let values: [JSONValue] = [
            .string(String(repeating: "é", count: 100)), .string(String(repeating: "a", count: 79) + "😀😀"),
            .array((0..<1_000).map { ["k\($0)": .number(Double($0)), "a": "x"] }), ["z": "1", "a": .array([.string(String(repeating: "\"", count: 60))])],
            .array([.array([.array([1, 2, 3])]), "\u{1}"]), "short", 12.5, nil,
        ]
        for v in values {
            #expect(v.excerpt == v.serialized.excerpt(), "\(v.serialized.prefix(60))")
        }
    }

    /// The cheap reader of a payload that is worth building only as an object.
    @Test func theCheapReaderBuildsOnlyWhatItKeepsAndChecksEverything() throws {
        let big = String(repeating: "p", count: 200_000)
        let doc = try JSONValue.parse(Array(#"{"state":"ON","x":"\#(big)","n":[[1],{"b":true}],"transaction":7}"#.utf8)) { $0 != "x" && $0 != "n" }
        #expect(doc == .object(["state": "ON", "x": nil, "n": nil, "transaction": 7]))
        // A member that is not built is still checked: too deep, bad UTF-8, a number no Double holds.
        for bad in [#"{"a":1,"x":"# + String(repeating: "[", count: 70) + String(repeating: "]", count: 70) + "}",
                    "{\"x\":\"\u{FF}\"}", #"{"x":1e999}"#, #"{"x":[1,]}"#, #"{"x":"\q"}"#, #"{"x":{"k" 1}}"#] {
            let bytes = bad.hasPrefix("{\"x\":\"\u{FF}") ? Array(#"{"x":""#.utf8) + [0xFF] + Array(#""}"#.utf8) : Array(bad.utf8)
            #expect(throws: JSONValue.ParseError.self, "\(bad.prefix(40))") { try JSONValue.parse(bytes) { _ in false } }
            #expect(throws: JSONValue.ParseError.self, "\(bad.prefix(40))") { try JSONValue.parse(bytes) }
        }
        // Anything else is quoted as its serialisation's start, never built whole.
        let array = "[" + (0..<1_000).map { #"{"k\#($0)": \#($0)}"# }.joined(separator: ", ") + "]"
        #expect(try JSONValue.parse(Array(array.utf8)) { _ in true } == .other(excerpt: try JSONValue.parse(array).excerpt))
        #expect(try JSONValue.parse(Array(#"  "text"  "#.utf8)) { _ in true } == .other(excerpt: #""text""#))
    }
}

@Suite struct JSONStreamingTests {
    /// The compressed subscribe_entities shape, coalesced with a registry result, as HA sends it.
    let frame = #"[{"id":2,"type":"result","success":true,"result":[{"entity_id":"light.a","platform":"mqtt"},{"entity_id":"light.b"}]},"#
        + #"{"type":"event","event":{"a":{"light.a":{"s":"on","a":{"b":1}},"light.b":{"s":"off"}},"x":[1]},"id":3}]"#

    @Test func membersAtAPathAreVisitedOneByOneAndLeftOutOfTheTree() throws {
        var seen: [String] = []
        let v = try JSONValue.parse(Array(frame.utf8), streaming: [["event", "a"], ["result"]]) { m in
            seen.append("\(m.document) \(m.path) \(m.key ?? "-") \(m.value.serialized)")
        }
        #expect(seen == [
            #"0 1 - {"entity_id":"light.a","platform":"mqtt"}"#, #"0 1 - {"entity_id":"light.b"}"#,
            #"1 0 light.a {"a":{"b":1},"s":"on"}"#, #"1 0 light.b {"s":"off"}"#,
        ])
        // Everything else is parsed as usual; the streamed containers are empty.
        #expect(v.arrayValue?[0]["result"] == .array([]))
        #expect(v.arrayValue?[1]["event"] == ["a": [:], "x": [1]])
        #expect(v.arrayValue?[1]["id"] == 3)
        // Without streaming, the same text parses whole.
        let whole = try JSONValue.parse(frame)
        #expect(whole.arrayValue?[1]["event"]?["a"]?["light.b"] == ["s": "off"])
    }

    @Test func aPathThatIsNotThereOrNotAContainerChangesNothing() throws {
        let text = #"{"event":{"a":"scalar"},"result":null,"b":{"event":{"a":{"k":1}}}}"#
        var visits = 0
        let v = try JSONValue.parse(Array(text.utf8), streaming: [["event", "a"], ["result"], ["nope"]]) { _ in visits += 1 }
        #expect(visits == 0)   // only from the root: b.event.a is not on the path
        #expect(v == (try JSONValue.parse(text)))
        #expect(throws: JSONValue.ParseError.self) { try JSONValue.parse(Array(#"{"event":{"a":{"k":}}}"#.utf8), streaming: [["event", "a"]]) { _ in } }
    }
}

@Suite struct CommandTests {
    let light = DeviceDescriptor(id: "l1", label: "Lamp", category: .light, capabilities: [
        .state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .transition(),
        Capability("effect", .enumeration(["breathe", "pulse", "off"]), writable: true),
        Capability("rssi", .integer(min: -127, max: 20), role: .diagnostic),
    ])

    func parse(_ payload: String, field: String? = nil) -> Result<CommandParser.Parsed, CommandParser.Failure> {
        CommandParser.read(payload: Array(payload.utf8), field: field)
    }

    @Test func bareWordsAndJSON() throws {
        #expect(try parse("on").get().fields == ["state": "ON"])
        #expect(try parse(" TOGGLE\n").get().fields == ["state": "TOGGLE"])
        let p = try parse(#"{"brightness": 40, "transaction": "t-1"}"#).get()
        #expect(p.fields == ["brightness": 40])
        #expect(p.transaction == "t-1")
    }

    @Test func plainFieldValues() throws {
        #expect(try parse("40", field: "brightness").get().fields == ["brightness": 40])
        #expect(try parse("breathe", field: "effect").get().fields == ["effect": "breathe"])
        #expect(try parse(#"{"h":10,"s":20}"#, field: "color").get().fields == ["color": ["h": 10, "s": 20]])
    }

    /// What a flood sends is refused with the words a full read gives, and what is not the device's is never built.
    @Test func payloadsThatCannotBeCommandsAreRefusedCheaplyInTheSameWords() throws {
        let keep: (String) -> Bool = { light.capability($0) != nil }
        let pad = String(repeating: "p", count: 250_000)
        guard case .success(let p) = CommandParser.read(payload: Array(#"{"state":"ON","x":"\#(pad)"}"#.utf8), field: nil, keep: keep) else {
            Issue.record("refused"); return
        }
        #expect(p.fields == ["state": "ON", "x": nil])
        guard case .failure(let f) = CommandParser.validate(p.fields, against: light) else { Issue.record("accepted"); return }
        #expect(f.message.hasPrefix("unknown field 'x' (writable: "))
        // Not an object: quoted from its first bytes, as the value's own excerpt.
        let array = "[" + (0..<1_000).map { #"{"k\#($0)":\#($0)}"# }.joined(separator: ",") + "]"
        guard case .failure(let g) = CommandParser.read(payload: Array(array.utf8), field: nil, keep: keep) else { Issue.record("accepted"); return }
        #expect(g.message == "expected a JSON object or OFF, ON, TOGGLE, got \(try JSONValue.parse(array).excerpt)")
        // Invalid UTF-8 is repaired first, as a String would (the payload is read, not refused as malformed).
        let repaired = try CommandParser.read(payload: Array(#"{"state":""#.utf8) + [0xFF] + Array(#""}"#.utf8), field: nil, keep: keep).get()
        #expect(repaired.fields == ["state": "\u{FFFD}"])
        // Unicode whitespace around a bare word is trimmed like ASCII whitespace.
        #expect(try parse("\u{A0}on\u{2003}").get().fields == ["state": "ON"])
        // A thousand unknown fields: four named, the rest counted.
        let many = "{" + (0..<1_000).map { #""key\#($0)":"v""# }.joined(separator: ",") + "}"
        let m = try CommandParser.read(payload: Array(many.utf8), field: nil, keep: keep).get()
        guard case .failure(let v) = CommandParser.validate(m.fields, against: light) else { Issue.record("accepted"); return }
        #expect(v.message.hasSuffix("; and 996 more problems"))
        #expect(v.message.components(separatedBy: "unknown field").count == 5)
    }

    @Test func malformedPayloadsFailClearly() {
        guard case .failure(let f) = parse("{bad") else { Issue.record("accepted"); return }
        #expect(f.message.contains("malformed JSON"))
        guard case .failure(let g) = parse("[1,2]") else { Issue.record("accepted"); return }
        #expect(g.message.contains("expected a JSON object"))
        guard case .failure(let h) = parse(#"{"transaction": 5}"#) else { Issue.record("accepted"); return }
        #expect(h.transaction == 5)
    }

    @Test func validationNormalisesAndReportsEveryProblem() throws {
        let ok = try CommandParser.validate(["state": "on", "brightness": 39.6, "effect": "PULSE", "color": ["h": 120, "s": 50]],
                                            against: light).get()
        #expect(ok == ["state": "ON", "brightness": 40, "effect": "pulse", "color": ["h": 120, "s": 50]])
        guard case .failure(let f) = CommandParser.validate(["brightness": 150, "speed": 3, "rssi": -40, "color": ["h": 400]],
                                                             against: light) else {
            Issue.record("accepted"); return
        }
        #expect(f.message.contains("brightness: 150 is out of range 0–100"))
        #expect(f.message.contains("unknown field 'speed'"))
        #expect(f.message.contains("rssi: is read-only"))
        #expect(f.message.contains("color.h: 400 is out of range 0–360"))
    }

    @Test func roundingMakesQuantisedValuesEqual() {
        let b = Capability.brightness()
        #expect(b.normalise(.number(29.999237)) == .number(30))
        let t = Capability("t", .number(min: 0, max: 100, precision: 1))
        #expect(t.normalise(.number(21.04)) == .number(21))
        #expect(t.normalise(.number(21.06)) == .number(21.1))
    }
}

@Suite struct DiscoveryTests {
    @Test func lightConfigFollowsTheContract() throws {
        let b = DiscoveryBuilder(scheme: TopicScheme(base: "switchyard"), version: "1.0")
        let d = DeviceDescriptor(id: "AA:BB:CC:DD:EE:FF", label: "Hall Lamp", model: "A19", category: .light, capabilities: [
            .state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(),
            Capability("rssi", .integer(min: -127, max: 20), unit: "dBm", role: .diagnostic, deviceClass: "signal_strength"),
        ])
        let entries = b.entries(adapter: "nova", name: "hall/lamp", device: d)
        let light = try #require(entries.first { $0.topic == "homeassistant/light/switchyard_switchyard_nova_aabbccddeeff/light/config" })
        let p = light.payload
        #expect(p["name"] == .null)
        #expect(p["schema"] == "json")
        #expect(p["brightness_scale"] == 100)
        #expect(p["color_temp_kelvin"] == true)
        #expect(p["supported_color_modes"] == ["hs", "color_temp"])
        #expect(p["unique_id"] == "switchyard_switchyard_nova_aabbccddeeff_light")
        #expect(p["object_id"] == "hall_lamp")
        #expect(p["default_entity_id"] == "light.hall_lamp")
        #expect(p["state_topic"] == "switchyard/nova/hall/lamp")
        #expect(p["command_topic"] == "switchyard/nova/hall/lamp/set")
        #expect(p["availability_mode"] == "all")
        #expect(p["availability"] == [["topic": "switchyard/bridge/state"], ["topic": "switchyard/nova/hall/lamp/availability"]])
        #expect(p["origin"]?["name"] == "Switchyard")
        #expect(p["device"]?["identifiers"] == ["switchyard_switchyard_nova_aabbccddeeff"])
        let rssi = try #require(entries.first { $0.topic.contains("/sensor/") })
        #expect(rssi.payload["entity_category"] == "diagnostic")
        #expect(rssi.payload["value_template"] == "{{ value_json.rssi }}")
        #expect(entries.count == 2)
    }

    /// A part (a Ceiling's uplight) names its whole device in Home Assistant: the same identifiers and name
    /// as the whole's own configs, its light called by the part's name, its other entities prefixed.
    @Test func aPartIsOneMoreEntityOfTheDeviceItBelongsTo() throws {
        let b = DiscoveryBuilder(scheme: TopicScheme(base: "switchyard"), version: "1.0")
        let whole = DeviceDescriptor(id: "d073d5000001", label: "Living Ceiling", model: "LIFX Ceiling", category: .light,
                                     capabilities: [.state(), .brightness()])
        let up = DeviceDescriptor(id: "d073d5000001_uplight", label: "Living Ceiling Uplight", model: "LIFX Ceiling", category: .light,
                                  capabilities: [.state(), .brightness(), Capability("rssi", .integer(min: -127, max: 20), role: .diagnostic)],
                                  partOf: DevicePart(parentID: "d073d5000001", parentName: "Living Ceiling", name: "Uplight"))
        let wholeLight = try #require(b.entries(adapter: "lifx", name: "living_ceiling", device: whole).first)
        let upEntries = b.entries(adapter: "lifx", name: "living_ceiling_uplight", device: up)
        let upLight = try #require(upEntries.first { $0.shape.component == "light" })
        #expect(upLight.topic == "homeassistant/light/switchyard_switchyard_lifx_d073d5000001_uplight/light/config")
        #expect(upLight.payload["device"]?["identifiers"] == ["switchyard_switchyard_lifx_d073d5000001"])
        #expect(upLight.payload["device"]?["identifiers"] == wholeLight.payload["device"]?["identifiers"])
        #expect(upLight.payload["device"]?["name"] == "Living Ceiling" && upLight.payload["device"]?["model"] == nil)
        #expect(upLight.payload["name"] == "Uplight")
        #expect(upLight.payload["unique_id"] != wholeLight.payload["unique_id"])
        #expect(upLight.payload["default_entity_id"] == "light.living_ceiling_uplight")
        #expect(upLight.payload["state_topic"] == "switchyard/lifx/living_ceiling_uplight")
        let rssi = try #require(upEntries.first { $0.shape.component == "sensor" })
        #expect(rssi.payload["name"] == "Uplight RSSI")
        #expect(wholeLight.payload["name"] == .null)
    }
}

/// Timestamps are formatted and parsed by hand (no ICU); the expected epochs come from Python's
/// calendar.timegm and datetime, not from the code under test.
@Suite struct TimestampTests {
    @Test func formatsUTCWithZ() {
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: 1_795_378_214)) == "2026-11-22T20:10:14Z")
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: 1_795_378_214.999)) == "2026-11-22T20:10:14Z")
        #expect(Timestamp.rfc3339(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00Z")
    }

    @Test func parsesRFC3339WithFractionsOffsetsAndEpochSeconds() {
        #expect(Timestamp.parse("2026-11-22T20:10:14Z")?.timeIntervalSince1970 == 1_795_378_214)
        #expect(Timestamp.parse("2024-02-29T23:59:59-05:30")?.timeIntervalSince1970 == 1_709_270_999)
        let frac = Timestamp.parse("2026-11-22T20:10:14.25+00:00")?.timeIntervalSince1970
        #expect(frac == 1_795_378_214.25)
        #expect(Timestamp.parse("1795378214")?.timeIntervalSince1970 == 1_795_378_214)
    }

    @Test func rejectsWhatIsNotADate() {
        for bad in ["", "2026-11-22", "2026-11-22T20:10:14", "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z",
                    "2026-11-22T24:00:00Z", "2026-11-22T20:10:14Zjunk", "2026-11-22T20:10:14.Z", "2026-11-22 20:10:14Z"] {
            #expect(Timestamp.parse(bad) == nil, "\(bad)")
        }
    }
}

/// The standard-library string helpers that replaced Foundation's NSString-backed ones.
@Suite struct StringHelperTests {
    @Test func percentEncodingKeepsOnlyUnreservedAndWhatIsAsked() {
        #expect("Living Room/1".percentEncoded() == "Living%20Room%2F1")
        #expect("label:Kitchen,id:d073d5|x".percentEncoded(keeping: ":,|") == "label:Kitchen,id:d073d5|x")
        #expect("Küche~a.b_c-d".percentEncoded() == "K%C3%BCche~a.b_c-d")
        #expect("a+b=c&d".percentEncoded() == "a%2Bb%3Dc%26d")
    }

    @Test func hexAndTrimming() {
        #expect([0x00, 0x0f, 0xa5, 0xff].hexString == "000fa5ff")
        #expect(" \t on \r\n".trimmingWhitespace() == "on")
        #expect(" \n ".trimmingWhitespace() == "")
        #expect("a b".trimmingWhitespace() == "a b")
    }

    @Test func anAdapterStatusIsNamedOnce() {
        let all: [AdapterStatus] = [.starting, .running, .disabled("no radio"), .error("refused")]
        #expect(all.map(\.kind) == AdapterStatus.kinds)
        #expect(all.map(\.description) == ["starting", "running", "disabled: no radio", "error: refused"])
    }

    @Test func randomHexHasTwoDigitsPerByteAndDiffers() {
        let a = randomHex(bytes: 16), b = randomHex(bytes: 16)
        #expect(a.utf8.count == 32 && a.utf8.allSatisfy { hexDigits.contains($0) })
        #expect(a != b)
        #expect(randomHex(bytes: 0) == "")
    }
}
