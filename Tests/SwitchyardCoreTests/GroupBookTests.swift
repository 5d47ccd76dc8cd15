import Testing
@testable import SwitchyardCore

/// Groups and scenes as values (`GroupBook`): what a group reaches, what it is, its state from its members',
/// what each member is sent, what a scene stores. Tables of devices as the registries would show them, and
/// the results worked out by hand.
@Suite struct GroupBookTests {
    static func ref(_ s: String) -> MemberRef { MemberRef(s)! }

    /// A virtual light (2500–9000 K), a LIFX-like light (1500–9000 K), a switch, an Imp clock (`power`, no
    /// `state`), a light in mired (153–500) with a brightness of 0–255, a sensor.
    static let light = DeviceDescriptor(id: "l1", label: "Light", category: .light, capabilities: [
        .state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(), .transition(),
    ])
    static let bulb = DeviceDescriptor(id: "d073d5000001", label: "Bulb", category: .light, capabilities: [
        .state(), .brightness(), .colorTemp(minKelvin: 1500, maxKelvin: 9000), .color(acceptsText: true), .colorMode(), .transition(),
    ])
    static let plug = DeviceDescriptor(id: "p1", label: "Plug", category: .switch, capabilities: [.state()])
    static let clock = DeviceDescriptor(id: "clock", label: "Clock", category: .generic, capabilities: [
        Capability("power", .binary(toggle: true), writable: true),
        Capability("brightness", .integer(min: 0, max: 100), unit: "%", writable: true),
        Capability("mode_24h", .bool, writable: true, role: .config),
    ])
    static let mired = DeviceDescriptor(id: "m1", label: "Mired", category: .light, capabilities: [
        .state(), Capability("brightness", .integer(min: 0, max: 255), writable: true),
        Capability("color_temp", .integer(min: 153, max: 500), unit: "mired", writable: true),
    ])
    static let sensor = DeviceDescriptor(id: "t1", label: "Temp", category: .sensor, capabilities: [
        Capability("temperature", .number(min: -40, max: 80, precision: 1), unit: "°C", role: .sensor),
    ])

    /// The registries: adapter/name → view.
    struct Home {
        var views: [MemberRef: MemberView] = [:]
        mutating func add(_ r: String, _ d: DeviceDescriptor, _ state: [String: JSONValue], available: Bool = true) {
            views[ref(r)] = MemberView(ref: ref(r), deviceID: d.id, descriptor: d, state: state, available: available)
        }
        func view(_ r: MemberRef) -> MemberView? { views[r] }
    }

    static func home() -> Home {
        var h = Home()
        h.add("virtual/hall", light, ["state": "ON", "brightness": 80, "color_mode": "color_temp", "color_temp": 3000, "color": ["h": 0, "s": 0]])
        h.add("lifx/desk", bulb, ["state": "OFF", "brightness": 40, "color_mode": "hs", "color": ["h": 350, "s": 100], "color_temp": 3500])
        h.add("virtual/plug", plug, ["state": "OFF"])
        h.add("imp/clock", clock, ["power": "ON", "brightness": 100, "mode_24h": true])
        h.add("zb/mired", mired, ["state": "ON", "brightness": 255, "color_temp": 250])
        h.add("virtual/temp", sensor, ["temperature": 21.5])
        return h
    }

    static let config = GroupsConfig(groups: [
        GroupDefinition(name: "downstairs", members: [ref("virtual/hall"), ref("group/desk_area"), ref("virtual/plug"), ref("nova/flash")]),
        GroupDefinition(name: "desk_area", members: [ref("lifx/desk"), ref("imp/clock"), ref("virtual/hall")], stateMode: .all),
        GroupDefinition(name: "plugs", members: [ref("virtual/plug")]),
        GroupDefinition(name: "odd", members: [ref("zb/mired"), ref("virtual/temp")]),
    ])

    @Test func aGroupReachesItsNestedGroupsDevicesOnceInOrder() {
        let book = GroupBook(Self.config)
        #expect(book.leaves(of: "downstairs").map(\.description) == ["virtual/hall", "lifx/desk", "imp/clock", "virtual/plug", "nova/flash"])
        #expect(book.leaves(of: "desk_area").map(\.description) == ["lifx/desk", "imp/clock", "virtual/hall"])
        #expect(book.leaves(of: "nosuch").isEmpty)
    }

    @Test func cyclesAreFoundOnceEachWithTheirPath() {
        func g(_ name: String, _ members: String...) -> GroupDefinition { GroupDefinition(name: name, members: members.map { Self.ref($0) }) }
        #expect(GroupsConfig.cycles([g("a", "group/b"), g("b", "group/c"), g("c", "group/a", "virtual/x")]) == [["a", "b", "c", "a"]])
        #expect(GroupsConfig.cycles([g("a", "group/a")]) == [["a", "a"]])
        // A diamond shares a group; it is no cycle.
        #expect(GroupsConfig.cycles([g("a", "group/b", "group/c"), g("b", "group/d"), g("c", "group/d"), g("d", "virtual/x")]).isEmpty)
        // Two cycles through one group: each once.
        #expect(GroupsConfig.cycles([g("a", "group/b", "group/c"), g("b", "group/a"), g("c", "group/a")]) == [["a", "b", "a"], ["a", "c", "a"]])
        // A cycle that does not go through the first group is still found, from its first group in the config.
        #expect(GroupsConfig.cycles([g("top", "group/x"), g("x", "group/y"), g("y", "group/x")]) == [["x", "y", "x"]])
    }

    @Test func aGroupHasTheFieldsItsMembersHave() {
        let book = GroupBook(Self.config), h = Self.home()
        let d = book.descriptor(book.group("downstairs")!, members: book.leaves(of: "downstairs").compactMap(h.view))
        #expect(d.category == .light)
        #expect(d.capabilities.map(\.name) == ["state", "brightness", "color_temp", "color", "color_mode", "transition", "members"])
        // The widest range among the members: the bulb's 1500 to the light's 9000.
        #expect(d.capability("color_temp")?.kind == .integer(min: 1500, max: 9000))
        #expect(d.capability("color_mode")?.kind == .enumeration(["hs", "color_temp"]))
        let plugs = book.descriptor(book.group("plugs")!, members: [h.view(Self.ref("virtual/plug"))!])
        #expect(plugs.category == .switch)
        #expect(plugs.capabilities.map(\.name) == ["state", "members"])
        // Mired is shown in kelvin: 153–500 mired is 2000–6536 K.
        let odd = book.descriptor(book.group("odd")!, members: book.leaves(of: "odd").compactMap(h.view))
        #expect(odd.capability("color_temp")?.kind == .integer(min: 2000, max: 6536))
        #expect(odd.capability("temperature") == nil)
    }

    @Test func eachMemberIsSentTheFieldsItHasInItsOwnUnits() {
        let book = GroupBook(Self.config), h = Self.home()
        let g = book.group("downstairs")!
        let d = book.descriptor(g, members: book.leaves(of: "downstairs").compactMap(h.view))
        let plan = book.plan(group: "downstairs", fields: ["state": "ON", "brightness": 40, "color_temp": 2000, "transition": 1.5],
                             descriptor: d, view: h.view)
        let sent = Dictionary(uniqueKeysWithValues: plan.commands.map { ($0.ref.description, $0.fields) })
        #expect(sent["virtual/hall"] == ["state": "ON", "brightness": 40, "color_temp": 2500, "transition": 1.5])   // clamped to 2500
        #expect(sent["lifx/desk"] == ["state": "ON", "brightness": 40, "color_temp": 2000, "transition": 1.5])
        #expect(sent["imp/clock"] == ["power": "ON", "brightness": 40])                                          // state is its power
        #expect(sent["virtual/plug"] == ["state": "ON"])                                                          // a switch: state alone
        #expect(plan.commands.map(\.ref.description) == ["virtual/hall", "lifx/desk", "imp/clock", "virtual/plug"])
        #expect(plan.failures == [FanOutPlan.Failure(ref: Self.ref("nova/flash"), message: "missing: nova does not list it")])
        #expect(plan.commands.first { $0.ref.description == "lifx/desk" }?.deviceID == "d073d5000001")

        let odd = book.descriptor(book.group("odd")!, members: book.leaves(of: "odd").compactMap(h.view))
        let p2 = book.plan(group: "odd", fields: ["brightness": 40, "color_temp": 4000], descriptor: odd, view: h.view)
        // 40 % of 0–255 is 102; 4000 K is 250 mired. The sensor takes none of it and is left alone.
        #expect(p2.commands.map(\.fields) == [["brightness": 102, "color_temp": 250]])
        #expect(p2.failures.isEmpty)
    }

    @Test func aColourGoesOnlyWhereThereIsColourAndAToggleEndsEveryMemberTheSameWay() {
        let book = GroupBook(Self.config), h = Self.home()
        let g = book.group("downstairs")!
        let d = book.descriptor(g, members: book.leaves(of: "downstairs").compactMap(h.view))
        let colour = book.plan(group: "downstairs", fields: ["color": ["h": 120, "s": 50]], descriptor: d, view: h.view)
        #expect(colour.commands.map(\.ref.description) == ["virtual/hall", "lifx/desk"])
        // The group is ON (the hall light is): TOGGLE turns every member off, whatever each is now.
        let toggle = book.plan(group: "downstairs", fields: ["state": "TOGGLE"], descriptor: d, view: h.view)
        #expect(toggle.commands.map(\.fields) == [["state": "OFF"], ["state": "OFF"], ["power": "OFF"], ["state": "OFF"]])
    }

    @Test func aGroupsStateIsDerivedFromItsMembers() {
        let book = GroupBook(Self.config)
        var h = Self.home()
        let g = book.group("downstairs")!
        let d = book.descriptor(g, members: book.leaves(of: "downstairs").compactMap(h.view))
        let (s, available) = book.state(of: g, descriptor: d, view: h.view)
        #expect(available)
        #expect(s["state"] == "ON")
        // Brightness over the members that have one: hall 80, desk 40, clock 100.
        #expect(s["brightness"] == 73)
        // Modes: hall color_temp, desk hs: a tie goes to color_temp; its mean over the members in it.
        #expect(s["color_mode"] == "color_temp")
        #expect(s["color_temp"] == 3000)
        // The circular mean of the desk's 350 alone.
        #expect(s["color"] == ["h": 350, "s": 100])
        #expect(s["members"] == ["virtual/hall": "online", "group/desk_area": "online", "virtual/plug": "online", "nova/flash": "missing"])

        // `all`: the desk is off, so the desk area is off although the hall light and the clock are on.
        let area = book.group("desk_area")!
        let ad = book.descriptor(area, members: book.leaves(of: "desk_area").compactMap(h.view))
        #expect(book.state(of: area, descriptor: ad, view: h.view).fields["state"] == "OFF")

        // Offline members do not count while another is online: the hall light offline leaves the desk and
        // clock (40 and 100 %).
        h.add("virtual/hall", Self.light, ["state": "ON", "brightness": 80, "color_mode": "color_temp", "color_temp": 3000], available: false)
        let (s2, _) = book.state(of: g, descriptor: d, view: h.view)
        #expect(s2["brightness"] == 70)
        #expect(s2["state"] == "ON")   // the clock is on
        #expect(s2["color_mode"] == "hs")
        #expect((s2["members"]?["virtual/hall"]) == "offline")

        // All offline: all count, and the group is unavailable.
        for r in ["lifx/desk", "imp/clock", "virtual/plug"] { h.views[Self.ref(r)]!.available = false }
        let (s3, a3) = book.state(of: g, descriptor: d, view: h.view)
        #expect(!a3)
        #expect(s3["brightness"] == 73)
        #expect(s3["members"] == ["virtual/hall": "offline", "group/desk_area": "offline", "virtual/plug": "offline", "nova/flash": "missing"])
    }

    @Test func hueIsACircularMean() {
        #expect(GroupBook.meanColor([["h": 350, "s": 100], ["h": 10, "s": 50]]) == ["h": 0, "s": 75])
        #expect(GroupBook.meanColor([["h": 90, "s": 0], ["h": 180, "s": 0]]) == ["h": 135, "s": 0])
        #expect(GroupBook.meanColor([]) == nil)
    }

    @Test func aSceneRecallTakesItsGroupsAndDevicesTheLaterWinning() {
        let book = GroupBook(Self.config), h = Self.home()
        let scene = SceneDefinition(name: "movie", transition: 2, entries: [
            .init(member: Self.ref("group/desk_area"), fields: ["state": "ON", "brightness": 20]),
            .init(member: Self.ref("virtual/hall"), fields: ["state": "OFF"]),
        ])
        let plan = book.plan(scene: scene, transition: nil, view: h.view)
        let sent = Dictionary(uniqueKeysWithValues: plan.commands.map { ($0.ref.description, $0.fields) })
        #expect(sent["lifx/desk"] == ["state": "ON", "brightness": 20, "transition": 2])
        #expect(sent["imp/clock"] == ["power": "ON", "brightness": 20])
        // Named in the group and on its own: its own entry comes later and wins (field by field).
        #expect(sent["virtual/hall"] == ["state": "OFF", "brightness": 20, "transition": 2])
        // A recall's own transition wins over the scene's.
        #expect(book.plan(scene: scene, transition: 0, view: h.view).commands.first?.fields["transition"] == 0)
    }

    @Test func aSceneStoresWhatEachDeviceShowsInTheGroupsFields() {
        let book = GroupBook(Self.config), h = Self.home()
        func capture(_ r: String) -> [String: JSONValue]? {
            book.capture(Self.ref(r), groupDescriptor: { name in book.descriptor(book.group(name)!, members: book.leaves(of: name).compactMap(h.view)) },
                         view: h.view)
        }
        #expect(capture("virtual/hall") == ["state": "ON", "brightness": 80, "color_temp": 3000])
        #expect(capture("lifx/desk") == ["state": "OFF"])
        #expect(capture("imp/clock") == ["state": "ON", "brightness": 100])
        #expect(capture("zb/mired") == ["state": "ON", "brightness": 100, "color_temp": 4000])
        #expect(capture("virtual/temp") == nil)
        #expect(capture("nova/flash") == nil)
        // A group: its derived state (ON by the hall light; brightness the mean; the modes tie to color_temp).
        #expect(capture("group/downstairs") == ["state": "ON", "brightness": 73, "color_temp": 3000])
    }
}
