import Foundation
import Testing
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore

/// The YAML editor on real-looking files: `diff` (the real one) of the file before and after must be the
/// intended lines and nothing else, and the result must read as the intended config.
@Suite struct YAMLEditorTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func example() throws -> String {
        try String(contentsOf: root.appendingPathComponent("config.example.yaml"), encoding: .utf8)
    }

    /// config.example.yaml with the demo's sections (flow items, a names map, secrets by reference).
    static func exampleWithDemo() throws -> String {
        try example() + """

        virtual:
          sensor_interval: 10   # the demo reads sensors often
          devices:
            - {name: kitchen, label: Kitchen, type: light}
            - {name: hall/lamp, label: Hall Lamp, type: light}
            - {name: fan, label: Fan, type: switch}       # the noisy one
            - {name: outside, label: Outside, type: sensor}
        imp:
          devices:
            - {name: hall_clock, agent_id: "${IMP_HALL_CLOCK}"}
        nova:
          names: {"D0:39:72:00:00:01": key_light, "D0:39:72:00:00:02": fill_light}

        """
    }

    static let env = ["IMP_HALL_CLOCK": "abcdefABCDEF"]

    /// What the real `diff` says: the lines taken out (`<`) and put in (`>`), in order.
    static func diff(_ a: String, _ b: String) async throws -> (removed: [String], added: [String]) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("yamldiff-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(a.utf8).writeWithoutSync(to: dir.appendingPathComponent("a"))
        try Data(b.utf8).writeWithoutSync(to: dir.appendingPathComponent("b"))
        let (_, output) = try await Spawn.run(["diff", dir.appendingPathComponent("a").path, dir.appendingPathComponent("b").path])
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        return (lines.filter { $0.hasPrefix("< ") }.map { String($0.dropFirst(2)) }, lines.filter { $0.hasPrefix("> ") }.map { String($0.dropFirst(2)) })
    }

    static func edit(_ text: String, _ edits: [YAMLEdit]) throws -> String {
        var e = try YAMLEditor(text: text)
        try e.apply(edits)
        return e.text
    }

    /// A line of `text` containing `marker`, exactly one.
    static func line(_ text: String, _ marker: String) throws -> String {
        let found = text.split(separator: "\n", omittingEmptySubsequences: false).filter { $0.contains(marker) }
        try #require(found.count == 1, "\(found.count) lines contain \(marker)")
        return String(found[0])
    }

    /// The issue's "Done when", at the config layer: a device renamed, three options on another,
    /// health.interval and log.level changed: only those lines, plus the added section, every comment kept;
    /// and the file reads back as that config.
    @Test func renameOptionsAndSettingsChangeOnlyTheirLines() async throws {
        let before = try Self.exampleWithDemo()
        let after = try Self.edit(before, [
            .set("virtual.devices[name=kitchen].name", "galley"),
            .set("devices.virtual.fan", ["retain": false, "qos": 0, "debounce": 2]),
            .set("health.interval", 30),
            .set("log.level", "debug"),
        ])
        let d = try await Self.diff(before, after)
        let level = try Self.line(before, "  level: info ")
        let interval = try Self.line(before, "  interval: 60")
        let kitchen = try Self.line(before, "{name: kitchen")
        #expect(d.removed == [level, interval, kitchen])
        #expect(d.added.prefix(3) == [level.replacingOccurrences(of: "level: info", with: "level: debug"),
                                      interval.replacingOccurrences(of: "interval: 60", with: "interval: 30"),
                                      kitchen.replacingOccurrences(of: "name: kitchen", with: "name: galley")])
        // The added section: a new top-level key, indented like the file, after the last section.
        #expect(Array(d.added.dropFirst(3)) == ["", "devices:", "  virtual:", "    fan:", "      retain: false", "      qos: 0", "      debounce: 2"])
        // Every comment line is still there, in order.
        let comments = { (t: String) in t.split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("#") } }
        #expect(comments(before) == comments(after))
        let c = try SwitchyardConfig.parse(yaml: after, file: "config.yaml", upstreams: upstreams, environment: Self.env)
        #expect(c.log.level == "debug" && c.healthInterval == 30)
        #expect(c.virtual?.devices.map(\.name) == ["galley", "hall/lamp", "fan", "outside"])
        let fan = try #require(c.deviceOptions["virtual"]?["fan"])
        #expect(fan.retain == false && fan.qos == 0 && fan.debounce == 2 && fan.throttle == nil)
        // Everything else reads as before.
        var was = try SwitchyardConfig.parse(yaml: before, file: "config.yaml", upstreams: upstreams, environment: Self.env)
        was.log.level = "debug"
        was.healthInterval = 30
        was.deviceOptions = c.deviceOptions
        #expect(was.mqtt == c.mqtt && was.web == c.web && was.imp == c.imp && was.nova == c.nova && was.lifx == c.lifx)
    }

    struct Case: CustomStringConvertible, Sendable {
        var name: String
        var yaml: String
        var edits: [YAMLEdit]
        var removed: [String]
        var added: [String]
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "a comment after the value stays", yaml: "log:\n  level: info    # how much\n  format: text\n",
             edits: [.set("log.level", "warning")], removed: ["  level: info    # how much"], added: ["  level: warning    # how much"]),
        Case(name: "quoting is kept", yaml: "mqtt:\n  protocol: \"3.1.1\"  # or 5\n  base_topic: 'home'\n",
             edits: [.set("mqtt.protocol", "5"), .set("mqtt.base_topic", "house")],
             removed: ["  protocol: \"3.1.1\"  # or 5", "  base_topic: 'home'"], added: ["  protocol: \"5\"  # or 5", "  base_topic: 'house'"]),
        Case(name: "a value that needs quotes gets them", yaml: "virtual:\n  devices:\n    - name: a\n      label: A\n",
             edits: [.set("virtual.devices[name=a].label", "Hall: #2")], removed: ["      label: A"], added: ["      label: \"Hall: #2\""]),
        Case(name: "a string that reads as something else is quoted", yaml: "virtual:\n  devices:\n    - name: a\n      label: A\n",
             edits: [.set("virtual.devices[0].label", "yes")], removed: ["      label: A"], added: ["      label: \"yes\""]),
        Case(name: "a $ is doubled, never read as a reference", yaml: "virtual:\n  devices:\n    - name: a\n      label: A\n",
             edits: [.set("virtual.devices[0].label", "${HOME}")], removed: ["      label: A"], added: ["      label: $${HOME}"]),
        Case(name: "a new key goes after its last sibling, indented like it", yaml: "mqtt:\n    url: mqtt://b   # broker\n    keepalive: 30\n\n# next\nhealth:\n    interval: 5\n",
             edits: [.set("mqtt.username", "bridge")], removed: [], added: ["    username: bridge"]),
        Case(name: "continuation comments stay with their key", yaml: "mqtt:\n  reconnect:\n    max_delay: 1     # up to this\n                     # (more)\nweb:\n  enabled: true\n",
             edits: [.set("mqtt.reconnect.stuck_after", 60)], removed: [], added: ["    stuck_after: 60"]),
        Case(name: "a flow mapping grows in flow style", yaml: "mqtt: {url: \"mqtt://b\", base_topic: home}\n",
             edits: [.set("mqtt.keepalive", 30)], removed: ["mqtt: {url: \"mqtt://b\", base_topic: home}"],
             added: ["mqtt: {url: \"mqtt://b\", base_topic: home, keepalive: 30}"]),
        Case(name: "a flow value with a comma is quoted", yaml: "virtual:\n  devices:\n    - {name: a, label: A}\n",
             edits: [.set("virtual.devices[name=a].label", "A, B")], removed: ["    - {name: a, label: A}"], added: ["    - {name: a, label: \"A, B\"}"]),
        Case(name: "an item is appended like the others", yaml: "virtual:\n  devices:\n    - name: a     # first\n      type: light\n  sensor_interval: 5\n",
             edits: [.append("virtual.devices", ["name": "b", "type": "switch"])], removed: [], added: ["    - name: b", "      type: switch"]),
        Case(name: "an item is appended to a flow list", yaml: "livecoding:\n  channels: [a, b]   # slugs\n",
             edits: [.append("livecoding.channels", "c")], removed: ["  channels: [a, b]   # slugs"], added: ["  channels: [a, b, c]   # slugs"]),
        Case(name: "lists at the key's column stay so", yaml: "virtual:\n  devices:\n  - name: a\n",
             edits: [.append("virtual.devices", ["name": "b"])], removed: [], added: ["  - name: b"]),
        Case(name: "a removed key takes its lines, not its neighbours' comments", yaml: "log:\n  # the level\n  level: info   # default\n  format: text\n",
             edits: [.remove("log.level")], removed: ["  level: info   # default"], added: []),
        Case(name: "a removed item takes its lines", yaml: "virtual:\n  devices:\n    - name: a\n      type: light\n    - name: b\n",
             edits: [.remove("virtual.devices[name=a]")], removed: ["    - name: a", "      type: light"], added: []),
        Case(name: "the first key of an item goes, the item stays", yaml: "virtual:\n  devices:\n    - label: A\n      name: a\n",
             edits: [.remove("virtual.devices[0].label")], removed: ["    - label: A", "      name: a"], added: ["    - name: a"]),
        Case(name: "a key is renamed in place", yaml: "devices:\n  virtual:\n    kitchen:   # by the window\n      retain: false\n",
             edits: [.rename("devices.virtual.kitchen", to: "galley")], removed: ["    kitchen:   # by the window"], added: ["    galley:   # by the window"]),
        Case(name: "an empty section gets its first key", yaml: "virtual:   # none yet\nlog:\n  level: info\n",
             edits: [.set("virtual.sensor_interval", 5)], removed: [], added: ["  sensor_interval: 5"]),
        Case(name: "a null is replaced", yaml: "log:\n  level: ~\n",
             edits: [.set("log.level", "debug")], removed: ["  level: ~"], added: ["  level: debug"]),
        Case(name: "yes stays yes-like", yaml: "web:\n  enabled: yes\n", edits: [.set("web.enabled", false)], removed: ["  enabled: yes"], added: ["  enabled: no"]),
        Case(name: "a ${ENV} reference elsewhere is untouched", yaml: "mqtt:\n  url: mqtt://${BROKER}\n  keepalive: 60\n",
             edits: [.set("mqtt.keepalive", 90)], removed: ["  keepalive: 60"], added: ["  keepalive: 90"]),
        Case(name: "an anchor that is not used elsewhere is kept", yaml: "health:\n  interval: &i 60\n",
             edits: [.set("health.interval", 30)], removed: ["  interval: &i 60"], added: ["  interval: &i 30"]),
        Case(name: "a multi-line value becomes one quoted line", yaml: "virtual:\n  devices:\n    - name: a\n      label: |\n        two\n        lines\n    - name: b\n",
             edits: [.set("virtual.devices[0].label", "one")], removed: ["      label: |", "        two", "        lines"], added: ["      label: one"]),
    ]

    @Test(arguments: cases)
    func aTableOfEdits(_ c: Case) async throws {
        let after = try Self.edit(c.yaml, c.edits)
        let d = try await Self.diff(c.yaml, after)
        #expect(d.removed == c.removed)
        #expect(d.added == c.added)
    }

    @Test func crlfFilesStayCRLF() throws {
        let before = "log:\r\n  level: info\r\nmqtt:\r\n  keepalive: 60\r\n"
        let after = try Self.edit(before, [.set("log.level", "debug"), .set("mqtt.username", "u")])
        #expect(after == "log:\r\n  level: debug\r\nmqtt:\r\n  keepalive: 60\r\n  username: u\r\n")
    }

    @Test func aFileWithoutAFinalLineBreakGetsOneBeforeTheNewKey() throws {
        #expect(try Self.edit("log:\n  level: info", [.set("log.format", "json")]) == "log:\n  level: info\n  format: json\n")
        #expect(try Self.edit("# only comments\n", [.set("log.level", "debug")]) == "# only comments\nlog:\n  level: debug\n")
        #expect(try Self.edit("", [.set("health.interval", 5)]) == "health:\n  interval: 5\n")
    }

    @Test func aSharedAnchorIsNotChangedThroughEitherSide() throws {
        let yaml = "base: &b\n  interval: 60\nhealth: *b\n"
        for path: ConfigPath in ["base.interval", "health.interval"] {
            #expect(throws: YAMLEditError.self) { try Self.edit(yaml, [.set(path, 5)]) }
            do { _ = try Self.edit(yaml, [.set(path, 5)]) } catch let e as YAMLEditError { #expect(e.kind == .shared, "\(path): \(e)") }
        }
    }

    @Test func errorsSayWhatIsWrong() throws {
        let yaml = "log: {level: info}\nvirtual:\n  devices:\n    - {name: a}\n    - {name: a}\n"
        func kind(_ e: YAMLEdit) -> YAMLEditError.Kind? {
            do { _ = try Self.edit(yaml, [e]); return nil } catch let e as YAMLEditError { return e.kind } catch { return nil }
        }
        #expect(kind(.set("log.level.x", 1)) == .wrongType)
        #expect(kind(.set("virtual.devices[name=a].label", "A")) == .invalid)
        #expect(kind(.set("virtual.devices[name=zz].label", "A")) == .notFound)
        #expect(kind(.remove("mqtt")) == .notFound)
        #expect(kind(.rename("log", to: "virtual")) == .exists)
        #expect(kind(.set("virtual.devices[7]", "x")) == .notFound)
        #expect(throws: YAMLEditError.self) { try YAMLEditor(text: "a: [b\n") }
        // All or nothing: a failing edit leaves the earlier ones undone.
        var e = try YAMLEditor(text: yaml)
        #expect(throws: YAMLEditError.self) { try e.apply([.set("log.level", "debug"), .remove("nope")]) }
        #expect(e.text == yaml)
    }

    @Test func pathsReadAndPrintTheirTextForm() throws {
        let p = try ConfigPath(parsing: #"devices.lifx."kitchen.ceiling"[name=a b].x[3]"#)
        #expect(p.components == [.key("devices"), .key("lifx"), .key("kitchen.ceiling"), .item(key: "name", equals: "a b"), .key("x"), .index(3)])
        #expect(p.description == #"devices.lifx."kitchen.ceiling"[name=a b].x[3]"#)
        #expect(try ConfigPath(parsing: p.description) == p)
        for bad in ["a..b", "a.", "[x", "a[1", "\"open", "a.\"\"x"] {
            #expect(throws: ConfigPathError.self, "\(bad)") { try ConfigPath(parsing: bad) }
        }
    }
}
