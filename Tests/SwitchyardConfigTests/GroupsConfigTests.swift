import Foundation
import Testing
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore

/// `groups:` and `scenes:` read from the file (each problem with its position), and the requests that change
/// them written back with `ConfigEditor`, every comment kept.
@Suite struct GroupsConfigTests {
    static func ref(_ s: String) -> MemberRef { MemberRef(s)! }

    static func yaml(_ state: String) -> String {
        """
        # my home
        state_dir: \(state)
        virtual:
          devices:
            - {name: hall, type: light}
            - {name: plug, type: switch}
        groups:
          # the ground floor
          downstairs:
            members:
              - virtual/hall      # by the door
              - group/desk_area
            state_mode: any
          desk_area:
            members: [lifx/desk, virtual/plug]   # lifx is not configured: its desk is missing, not refused
            state_mode: all
        scenes:
          movie:   # evenings
            transition: 2
            states:
              group/downstairs: {state: OFF}
              lifx/desk: {state: on, brightness: 20, color_temp: 2700}
              virtual/hall:
                color: {h: 30, s: 80}

        """
    }

    static let expected = GroupsConfig(groups: [
        GroupDefinition(name: "downstairs", members: [ref("virtual/hall"), ref("group/desk_area")], stateMode: .any),
        GroupDefinition(name: "desk_area", members: [ref("lifx/desk"), ref("virtual/plug")], stateMode: .all),
    ], scenes: [
        SceneDefinition(name: "movie", transition: 2, entries: [
            .init(member: ref("group/downstairs"), fields: ["state": "OFF"]),
            .init(member: ref("lifx/desk"), fields: ["state": "ON", "brightness": 20, "color_temp": 2700]),
            .init(member: ref("virtual/hall"), fields: ["color": ["h": 30, "s": 80]]),
        ]),
    ])

    @Test func groupsAndScenesAreRead() throws {
        let c = try SwitchyardConfig.parse(yaml: Self.yaml("/tmp/x"), file: "c.yaml", upstreams: upstreams)
        #expect(c.groups == Self.expected)
        // Shown on bridge/info with the rest of the config.
        #expect(c.redactedJSON["groups"]?["desk_area"]?["state_mode"] == "all")
    }

    @Test func everyProblemIsNamedWithItsPlace() {
        let yaml = """
        virtual:
          devices: [{name: hall}]
        groups:
          a:
            members: [group/b, virtual/hall]
          b:
            members:
              - group/a
              - nosuch/x
              - scene/movie
              - hall
              - virtual/hall
              - virtual/hall
              - group/nope
            state_mode: most
          c:
            members: [group/c]
        scenes:
          movie:
            states:
              virtual/hall: {state: dim, brightness: 120, color: {h: 10}}
              group/zzz: {state: ON}
              lifx/desk: {}

        """
        do {
            _ = try SwitchyardConfig.parse(yaml: yaml, file: "c.yaml", upstreams: upstreams)
            Issue.record("a config with problems was read")
        } catch {
            let lines = error.problems.map(\.description)
            let want = [
                "c.yaml:9:9: groups.b.members: 'nosuch/x': no adapter 'nosuch' (adapters: virtual, lifx, imp, livecoding, ha, nova, group)",
                "c.yaml:10:9: groups.b.members: 'scene/movie': a scene cannot be a member (recall it with scene/movie/set)",
                "c.yaml:11:9: groups.b.members: 'hall' is not adapter/name (as in the device's topic: lifx/kitchen)",
                "c.yaml:13:9: groups.b.members: 'virtual/hall' is listed twice",
                "c.yaml:15:17: groups.b.state_mode: expected one of any, all, got 'most'",
                "c.yaml:14:9: groups.b.members: no group 'nope' is defined (groups: a, b, c)",
                "c.yaml:5:15: groups.a.members: a group may not contain itself: group/a → group/b → group/a",
                "c.yaml:17:15: groups.c.members: a group may not contain itself: group/c → group/c",
                "c.yaml:21:29: scenes.movie.states.virtual/hall.state: expected ON or OFF, got 'dim'",
                "c.yaml:21:46: scenes.movie.states.virtual/hall.brightness: 120 is out of range 0–100",
                "c.yaml:21:58: scenes.movie.states.virtual/hall.color: a colour needs both h and s",
                "c.yaml:22:18: scenes.movie.states.group/zzz: no group 'zzz' is defined",
                "c.yaml:23:18: scenes.movie.states.lifx/desk: stores nothing: give state, brightness, color or color_temp",
            ]
            for w in want { #expect(lines.contains(w), "missing: \(w)\nall:\n\(lines.joined(separator: "\n"))") }
            #expect(lines.count == want.count, "\(lines.joined(separator: "\n"))")
        }
    }

    /// A directory with the config file and its state directory.
    struct Home {
        let dir: URL
        var config: String { dir.appendingPathComponent("config.yaml").path }
        init() throws {
            dir = FileManager.default.temporaryDirectory.appendingPathComponent("groups-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            try Data(GroupsConfigTests.yaml(dir.appendingPathComponent("state").path).utf8).write(to: URL(fileURLWithPath: config))
        }
        func text() throws -> String { try String(contentsOfFile: config, encoding: .utf8) }
        func load() throws -> SwitchyardConfig { try SwitchyardConfig.load(path: config, upstreams: upstreams, environment: [:]) }
        func remove() { try? FileManager.default.removeItem(at: dir) }

        /// One request, as the bridge carries it out: its edits planned on the file as it is and committed.
        @discardableResult
        func request(_ path: String, _ body: JSONValue, captured: [(MemberRef, [String: JSONValue]?)] = []) throws -> ConfigChange {
            let c = try load()
            let edits = try GroupEdits.edits(path, body, config: c.groups, captured: captured)
            let change = try ConfigEditor(source: try #require(c.source), upstreams: upstreams, environment: [:], schema: ConfigSchemaTests.schema).plan(edits)
            _ = try change.commit()
            return change
        }
    }

    @Test func theRequestsChangeTheFileKeepingEveryComment() throws {
        let home = try Home()
        defer { home.remove() }
        try home.request("group/add", ["name": "upstairs", "members": ["virtual/plug"], "state_mode": "all"])
        try home.request("group/members/add", ["group": "upstairs", "member": "lifx/bed"])
        try home.request("group/members/remove", ["group": "downstairs", "member": "virtual/hall"])
        let rename = try home.request("group/rename", ["from": "desk_area", "to": "desk"])
        #expect(rename.diff.contains("-      - group/desk_area\n+      - group/desk\n"), "\(rename.diff)")
        try home.request("scene/store", ["name": "night", "members": ["virtual/hall", "group/upstairs"], "transition": 1.5],
                         captured: [(Self.ref("virtual/hall"), ["state": "ON", "brightness": 30, "color_temp": 2700]),
                                    (Self.ref("group/upstairs"), ["state": "OFF"])])
        // Stored again: replaced, not merged with what it stored before.
        try home.request("scene/store", ["name": "movie"],
                         captured: [(Self.ref("group/downstairs"), ["state": "ON", "brightness": 10]), (Self.ref("lifx/desk"), ["state": "OFF"]),
                                    (Self.ref("virtual/hall"), ["state": "OFF"])])
        try home.request("scene/remove", ["name": "night"])

        let c = try home.load()
        #expect(c.groups.groups == [
            GroupDefinition(name: "downstairs", members: [Self.ref("group/desk")], stateMode: .any),
            GroupDefinition(name: "desk", members: [Self.ref("lifx/desk"), Self.ref("virtual/plug")], stateMode: .all),
            GroupDefinition(name: "upstairs", members: [Self.ref("virtual/plug"), Self.ref("lifx/bed")], stateMode: .all),
        ])
        #expect(c.groups.scenes == [SceneDefinition(name: "movie", transition: 2, entries: [
            .init(member: Self.ref("group/downstairs"), fields: ["state": "ON", "brightness": 10]),
            .init(member: Self.ref("lifx/desk"), fields: ["state": "OFF"]),
            .init(member: Self.ref("virtual/hall"), fields: ["state": "OFF"]),
        ])])
        let text = try home.text()
        for comment in ["# my home", "# the ground floor", "# lifx is not configured: its desk is missing, not refused", "# evenings"] {
            #expect(text.contains(comment), "lost: \(comment)\n\(text)")
        }
    }

    @Test func whatWouldBreakTheGroupsIsRefusedAndNothingIsWritten() throws {
        let home = try Home()
        defer { home.remove() }
        let before = try home.text()
        func refusal(_ path: String, _ body: JSONValue) -> String {
            do {
                try home.request(path, body)
                return "(written)"
            } catch let e as AdapterError {
                return e.message
            } catch let e as ConfigChangeError {
                return e.description
            } catch {
                return "\(error)"
            }
        }
        // The reader's own words, with the place in the file it would have been.
        #expect(refusal("group/members/add", ["group": "desk_area", "member": "group/downstairs"]).contains(
            "groups.downstairs.members: a group may not contain itself: group/downstairs → group/desk_area → group/downstairs"))
        #expect(refusal("group/members/add", ["group": "desk_area", "member": "nosuch/x"]).contains("no adapter 'nosuch'"))
        #expect(refusal("group/remove", ["name": "desk_area"]) == "group/remove: group 'desk_area' is used by group/downstairs: remove it there first")
        #expect(refusal("group/remove", ["name": "downstairs"]) == "group/remove: group 'downstairs' is used by scene/movie: remove it there first")
        #expect(refusal("group/add", ["name": "downstairs"]) == "group/add: group 'downstairs' exists already")
        #expect(refusal("group/members/add", ["group": "downstairs", "member": "virtual/hall"])
                == "group/members/add: virtual/hall is a member of group 'downstairs' already")
        #expect(refusal("group/members/remove", ["group": "downstairs", "member": "virtual/plug"])
                == "group/members/remove: virtual/plug is not a member of group 'downstairs'")
        #expect(refusal("group/rename", ["from": "nope", "to": "x"]) == "group/rename: no group 'nope' (groups: downstairs, desk_area)")
        #expect(refusal("scene/store", ["name": "new"])
                == "scene/store: scene 'new' does not exist yet: give its \"members\" (adapter/name of devices or groups)")
        #expect(refusal("group/add", ["name": "bad/set"]).hasPrefix("group/add: name: name 'bad/set' may not contain the reserved segment 'set'"))
        #expect(try home.text() == before)
    }
}
