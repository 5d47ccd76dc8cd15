import Foundation
import Logging
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardManage
import SwitchyardRuntime
import SwitchyardTestSupport
import Testing

/// The bridge's engine over the in-memory transport with the runtime's management wiring
/// (`BridgeRuntime.manage`): a config file of its own, the virtual adapter, requests as a client sends them.
final class ManagedBridge: Sendable {
    let transport: InMemoryTransport
    let engine: BridgeEngine
    let manager: ConfigManager
    let file: String
    let counter = Locked(0)

    init(transport: InMemoryTransport, engine: BridgeEngine, manager: ConfigManager, file: String) {
        self.transport = transport
        self.engine = engine
        self.manager = manager
        self.file = file
    }

    static let config = """
    # my bridge: every comment here must stay
    state_dir: STATE

    log:
      level: info          # the least severe level logged
    mqtt:
      base_topic: b        # the topics
    health:
      interval: 60         # seconds
    web:
      enabled: false
    virtual:
      sensor_interval: 3600
      devices:
        - name: kitchen    # the kitchen light
          label: Kitchen
          type: light
        - name: fan
          type: switch

    """

    static func with<R: Sendable>(yaml: String = config, discovery: Bool = false, _ body: (ManagedBridge) async throws -> R) async throws -> R {
        let dir = TestEnvironment.makeTempDir("manage")
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("config.yaml").path
        try yaml.replacingOccurrences(of: "STATE", with: dir.appendingPathComponent("state").path).writeForTest(toFile: path)
        let config = try SwitchyardConfig.load(path: path, upstreams: upstreams, environment: [:])
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        let t = InMemoryTransport()
        var settings = BridgeRuntime.engineSettings(config)
        settings.discovery = discovery
        let e = BridgeEngine(settings: settings, transport: t, logger: logger)
        let manager = await BridgeRuntime.manage(config: config, configPath: path, upstreams: upstreams, engine: e, logger: logger, environment: [:])
        let bridge = ManagedBridge(transport: t, engine: e, manager: manager, file: path)
        return try await withThrowingTaskGroup(of: Void.self, returning: R.self) { group in
            group.addTask { await e.run(adapters: config.upstreams.map { $0.makeAdapter() }) }
            defer { t.finish() }
            try await waitUntil("listed") { await e.deviceNames("virtual").count == 2 }
            return try await body(bridge)
        }
    }

    var text: String { (try? String(contentsOfFile: file, encoding: .utf8)) ?? "" }

    /// A request as a client publishes it; its response (`bridge/response/<path>` with its transaction).
    func request(_ path: String, _ body: JSONValue, console: Bool = false, raw: [UInt8]? = nil) async throws -> JSONValue {
        let n = counter.withLock { $0 += 1; return $0 }
        var o = body.objectValue ?? [:]
        o["transaction"] = .string("t\(n)")
        var m = InboundMessage(topic: "b/bridge/request/\(path)", payload: raw ?? JSONValue.object(o).bytes)
        m.fromConsole = console
        transport.inject(.message(m))
        let topic = "b/bridge/response/\(path)"
        @Sendable func find() -> JSONValue? {
            transport.published.lazy.filter { $0.topic == topic }.compactMap { try? JSONValue.parse($0.payload) }
                .first { $0["transaction"] == .string("t\(n)") || (raw != nil && $0["transaction"] == nil) }
        }
        try await waitUntil("the response to \(path)") { find() != nil }
        return find()!
    }

    func events(_ type: String) -> [JSONValue] {
        transport.published.filter { $0.topic == "b/bridge/event" }.compactMap { try? JSONValue.parse($0.payload) }.filter { $0["type"] == .string(type) }
    }
}

@Suite struct ManagementTests {
    /// A rename writes one key into the user's file (every other byte as it was), renames the device at once,
    /// says so on bridge/log and bridge/event, and answers commands on the old topic with the new one; renamed
    /// back, the option goes and the file is byte for byte what it was.
    @Test func aRenameIsOneKeyInTheFileAndBackIsTheFileAsItWas() async throws {
        try await ManagedBridge.with { b in
            let original = b.text
            let r = try await b.request("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "galley"])
            #expect(r["status"] == "ok", "\(r)")
            #expect(r["data"]?["topic"] == "b/virtual/galley")
            #expect(await b.engine.deviceNames("virtual")["kitchen"] == "galley")
            let added = b.text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let before = original.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            #expect(added.filter { !before.contains($0) } == ["devices:", "  virtual:", "    kitchen:", "      name: galley"], "\(b.text)")
            #expect(before.allSatisfy(added.contains), "a line of the file went")
            #expect(r["data"]?["diff"]?.stringValue?.contains("+      name: galley") == true)
            let changed = try #require(b.events("config_changed").last)
            #expect(changed["data"]?["by"] == "mqtt" && changed["data"]?["request"] == "device/rename")
            #expect(changed["data"]?["paths"] == ["devices.virtual.kitchen.name"])
            #expect(b.transport.published.contains { $0.topic == "b/bridge/log" && $0.payload.contains("config changed by mqtt: device/rename") })
            #expect(!b.events("device_renamed").isEmpty)
            b.transport.inject(.message(InboundMessage(topic: "b/virtual/kitchen/set", payload: Array(#"{"state":"ON","transaction":"x"}"#.utf8))))
            try await waitUntil("the old topic's answer") {
                b.transport.published.contains { $0.topic == "b/virtual/kitchen/result" && $0.payload.contains("b/virtual/galley/set") }
            }
            let back = try await b.request("device/rename", ["adapter": "virtual", "device": "galley", "to": "kitchen"])
            #expect(back["status"] == "ok", "\(back)")
            #expect(b.text == original)
            #expect(await b.engine.deviceNames("virtual")["kitchen"] == "kitchen")
        }
    }

    /// Plan, then commit that plan: the plan writes nothing; a commit of a plan the file no longer matches, or
    /// of a file changed on disk since it was read, is a conflict and writes nothing.
    @Test func aPlanIsShownThenCommittedAndAChangedFileIsAConflict() async throws {
        try await ManagedBridge.with { b in
            let original = b.text
            let plan = try await b.request("options", ["options": ["log.level": "debug"], "plan": true])
            #expect(plan["status"] == "ok" && plan["data"]?["planned"] == true)
            #expect(plan["data"]?["diff"]?.stringValue?.contains("-  level: info") == true)
            #expect(b.text == original)
            let id = try #require(plan["data"]?["plan_id"])
            let done = try await b.request("options", ["options": ["log.level": "debug"], "plan_id": id])
            #expect(done["status"] == "ok", "\(done)")
            #expect(b.text.contains("  level: debug          # the least severe level logged"))
            // A plan, then the file changes on disk (a person edits it): the commit is refused.
            let next = try await b.request("options", ["options": ["health.interval": 30], "plan": true])
            let edited = b.text + "# edited by hand\n"
            try edited.writeForTest(toFile: b.file, replacing: true)
            let refused = try await b.request("options", ["options": ["health.interval": 30], "plan_id": next["data"]!["plan_id"]!])
            #expect(refused["status"] == "error")
            #expect(refused["details"]?["kind"] == "conflict", "\(refused)")
            #expect(refused["error"]?.stringValue?.contains("changed on disk") == true)
            #expect(b.text == edited)
            // After a reload the change goes through.
            #expect(try await b.request("config/reload", [:])["status"] == "ok")
            #expect(try await b.request("options", ["options": ["health.interval": 30]])["status"] == "ok")
            #expect(b.text.contains("interval: 30         # seconds") && b.text.hasSuffix("# edited by hand\n"))
        }
    }

    /// Bad input: a clear error, and the file as it was.
    @Test func badInputIsRefusedAndChangesNothing() async throws {
        try await ManagedBridge.with { b in
            let original = b.text
            func refused(_ path: String, _ body: JSONValue, _ words: String) async throws -> JSONValue {
                let r = try await b.request(path, body)
                #expect(r["status"] == "error", "\(path) \(body) was not refused")
                #expect(r["error"]?.stringValue?.contains(words) == true, "\(r)")
                #expect(b.text == original)
                return r
            }
            _ = try await refused("device/rename", ["adapter": "virtual", "device": "attic", "to": "x"], "unknown device 'attic'")
            _ = try await refused("device/rename", ["adapter": "nope", "device": "attic", "to": "x"], "unknown adapter 'nope'")
            _ = try await refused("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "fan"], "is taken by virtual device 'fan'")
            _ = try await refused("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "a+b"], "may not contain '+' or '#'")
            _ = try await refused("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "x/set"], "reserved segment")
            _ = try await refused("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "x", "colour": 1], "unknown key 'colour'")
            let range = try await refused("device/options", ["adapter": "virtual", "device": "kitchen", "options": ["qos": 5]], "is out of range 0–2")
            let problem = try #require(range["details"]?["problems"]?.arrayValue?.first)
            #expect(problem["path"] == "devices.virtual.kitchen.qos")
            #expect(problem["text"]?.stringValue?.hasPrefix(b.file + ":") == true, "check-config's words: file:line:column")
            _ = try await refused("device/options", ["adapter": "virtual", "device": "kitchen", "options": ["speed": 1]], "unknown option 'speed'")
            let unknown = try await refused("options", ["options": ["log.levl": "debug"]], "is not a key of the config")
            #expect(unknown["details"]?["kind"] == "unknown_key")
            _ = try await refused("options", ["options": ["health.interval": 0]], "out of range")
            _ = try await refused("options", ["options": ["mqtt.protocol": "4"]], "expected one of")
            // Over the bound: refused unread.
            let big = Array(#"{"options":{"log.level":""#.utf8) + [UInt8](repeating: UInt8(ascii: "a"), count: 70_000) + Array(#""}}"#.utf8)
            let over = try await b.request("options", [:], raw: big)
            #expect(over["status"] == "error" && over["error"]?.stringValue?.contains("over the 65536 bytes") == true, "\(over)")
            #expect(b.text == original)
        }
    }

    /// api.manage limits what MQTT clients may change; the console is not limited by it.
    @Test func apiManageTurnsRequestsOffForMQTTClientsOnly() async throws {
        let yaml = ManagedBridge.config + "\napi:\n  manage: [device/options]\n"
        try await ManagedBridge.with(yaml: yaml) { b in
            let r = try await b.request("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "galley"])
            #expect(r["status"] == "error" && r["error"]?.stringValue?.contains("turned off for MQTT clients by api.manage") == true, "\(r)")
            #expect(try await b.request("device/options", ["adapter": "virtual", "device": "fan", "options": ["qos": 0]])["status"] == "ok")
            let console = try await b.request("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "galley"], console: true)
            #expect(console["status"] == "ok", "\(console)")
            #expect(b.events("config_changed").last?["data"]?["by"] == "console")
            #expect(try await b.request("config/schema", [:])["data"]?["$schema"] != nil)
        }
    }

    /// The requests that change groups and scenes are changes like the management requests: api.manage limits
    /// them for MQTT clients, the console may make them, each is one edit of the file (every comment kept),
    /// applied at once (the group is listed and its command reaches its members) and announced.
    @Test func groupRequestsAreConfigChangesLikeTheOthers() async throws {
        let yaml = ManagedBridge.config + "\napi:\n  manage: [device/options]\n"
        try await ManagedBridge.with(yaml: yaml) { b in
            let original = b.text
            let add: JSONValue = ["name": "both", "members": ["virtual/kitchen", "virtual/fan"]]
            let refused = try await b.request("group/add", add)
            #expect(refused["status"] == "error", "\(refused)")
            #expect(refused["error"]?.stringValue?.hasPrefix("group/add is turned off for MQTT clients by api.manage (allowed: device/options)") == true, "\(refused)")
            #expect(b.text == original)
            #expect(b.events("config_changed").isEmpty)

            let r = try await b.request("group/add", add, console: true)
            #expect(r["status"] == "ok", "\(r)")
            #expect(r["data"]?["applied"] == ["groups.both"], "\(r)")
            let before = original.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            #expect(before.allSatisfy(b.text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).contains), "\(b.text)")
            let changed = try #require(b.events("config_changed").last)
            #expect(changed["data"]?["by"] == "console" && changed["data"]?["request"] == "group/add" && changed["data"]?["paths"] == ["groups.both"])

            // Applied: listed, and its command reaches both members.
            try await waitUntil("the group listed") { await b.engine.deviceNames("group")["both"] == "both" }
            b.transport.inject(.message(InboundMessage(topic: "b/group/both/set", payload: Array(#"{"state":"ON","transaction":"g"}"#.utf8))))
            try await waitUntil("the group's answer") {
                b.transport.published.contains { $0.topic == "b/group/both/result" && $0.payload.contains(#""status":"ok""#) }
            }
            for device in ["kitchen", "fan"] {
                try await waitUntil("virtual/\(device) on") {
                    b.transport.published.last { $0.topic == "b/virtual/\(device)" }.flatMap { try? JSONValue.parse($0.payload) }?["state"] == "ON"
                }
            }
        }
    }

    /// The requests that change groups and scenes take `plan` and `plan_id` as the management requests do: a plan
    /// answers with the diff and writes, applies and lists nothing; its commit makes exactly it; a plan another
    /// change made stale is refused as a conflict with nothing written; an ill-typed `plan` is refused. Their
    /// payloads have the management requests' bound: 64 KiB is read, one byte more is refused unread and counted.
    @Test func groupRequestsArePlannedAndBoundedLikeTheOthers() async throws {
        try await ManagedBridge.with { b in
            let original = b.text
            let add: [String: JSONValue] = ["name": "both", "members": ["virtual/kitchen", "virtual/fan"]]
            let plan = try await b.request("group/add", .object(add.merging(["plan": true]) { $1 }))
            #expect(plan["status"] == "ok" && plan["data"]?["planned"] == true, "\(plan)")
            #expect(plan["data"]?["diff"]?.stringValue?.contains("+  both:\n") == true, "\(plan)")
            #expect(plan["data"]?["applied"] == ["groups.both"])
            #expect(b.text == original)
            #expect(b.events("config_changed").isEmpty)
            let id = try #require(plan["data"]?["plan_id"])
            let done = try await b.request("group/add", .object(add.merging(["plan_id": id]) { $1 }))
            #expect(done["status"] == "ok" && done["data"]?["planned"] == nil && done["data"]?["plan_id"] == id, "\(done)")
            #expect(done["data"]?["diff"] == plan["data"]?["diff"])
            try await waitUntil("the group listed") { await b.engine.deviceNames("group")["both"] == "both" }
            #expect(b.events("config_changed").count == 1)

            // A scene's store planned: the states it would store in the diff, nothing written.
            let added = b.text
            try await waitUntil("kitchen's state") { b.transport.published.contains { $0.topic == "b/virtual/kitchen" && !$0.payload.isEmpty } }
            let store = try await b.request("scene/store", ["name": "night", "members": ["virtual/kitchen"], "plan": true])
            #expect(store["status"] == "ok" && store["data"]?["planned"] == true, "\(store)")
            #expect(store["data"]?["diff"]?.stringValue?.contains("+  night:\n") == true, "\(store)")
            #expect(b.text == added)
            #expect(await b.manager.config.groups.scene("night") == nil)

            // A plan, then another change of the file: its plan_id no longer names the change.
            let stale = try await b.request("group/members/remove", ["group": "both", "member": "virtual/fan", "plan": true])
            #expect(stale["status"] == "ok", "\(stale)")
            #expect(try await b.request("options", ["options": ["log.level": "debug"]])["status"] == "ok")
            let before = b.text
            let refused = try await b.request("group/members/remove", ["group": "both", "member": "virtual/fan", "plan_id": stale["data"]!["plan_id"]!])
            #expect(refused["status"] == "error" && refused["details"]?["kind"] == "conflict", "\(refused)")
            #expect(refused["error"]?.stringValue?.contains("no longer the one planned") == true, "\(refused)")
            #expect(b.text == before)
            #expect(await b.manager.config.groups.group("both")?.members.count == 2)
            let typo = try await b.request("group/remove", ["name": "both", "plan": "yes"])
            #expect(typo["error"] == "group/remove: plan: expected true or false", "\(typo)")
            let notObject = try await b.request("group/remove", [], raw: Array(#"["both"]"#.utf8))
            #expect(notObject["error"] == "group/remove: expected a JSON object", "\(notObject)")
            #expect(b.text == before)

            // The bound: a payload of 65 536 bytes is read (refused for its name), one of 65 537 is not.
            func padded(_ size: Int) -> [UInt8] {
                let head = Array(#"{"name": "x/set", "transaction": "edge""#.utf8), tail = Array("}".utf8)
                return head + [UInt8](repeating: UInt8(ascii: " "), count: size - head.count - tail.count) + tail
            }
            b.transport.inject(.message(InboundMessage(topic: "b/bridge/request/group/add", payload: padded(ManagementRequests.maxPayload))))
            try await waitUntil("the answer to 64 KiB") {
                b.transport.published.contains { $0.topic == "b/bridge/response/group/add" && $0.payload.contains(#""transaction":"edge""#) }
            }
            let edge = try JSONValue.parse(b.transport.published.last { $0.topic == "b/bridge/response/group/add" }!.payload)
            #expect(edge["error"]?.stringValue?.contains("may not contain the reserved segment 'set'") == true, "\(edge)")
            #expect(b.engine.bounds.snapshot["request_payload"] == nil)
            let over = try await b.request("group/add", [:], raw: padded(ManagementRequests.maxPayload + 1))
            #expect(over["status"] == "error", "\(over)")
            #expect(over["error"]?.stringValue?.contains("payload of 65537 bytes is over the 65536 bytes a management request may have") == true, "\(over)")
            #expect(b.engine.bounds.snapshot["request_payload"] == 1)
            #expect(b.transport.published.contains { $0.topic == "b/bridge/log" && $0.payload.contains("request group/add: payload of 65537 bytes") })
            #expect(b.text == before)
        }
    }

    /// A request that changes groups and scenes as `GroupRequests.change` makes it (what the bridge plans):
    /// `plan` and `plan_id` carried as given, ill-typed ones refused; what it quotes of a hostile body is cut
    /// short; more members than one request may name is refused.
    @Test func aGroupRequestsChangeCarriesItsPlanAndQuotesLittle() throws {
        let groups = GroupsConfig(groups: [GroupDefinition(name: "porch", members: [MemberRef(adapter: "virtual", name: "fan")], stateMode: .any)])
        func change(_ path: String, _ body: JSONValue) throws(AdapterError) -> ConfigChangeRequest {
            try GroupRequests.change(BridgeRequest(path: path, body: body, origin: .console, size: 0), config: groups)
        }
        func refusal(_ path: String, _ body: JSONValue) -> String {
            do { _ = try change(path, body); return "(accepted)" } catch { return error.message }
        }
        let plain = try change("group/add", ["name": "hall", "members": ["virtual/kitchen"]])
        #expect(!plain.planOnly && plain.planID == nil && plain.origin == .console && plain.request == "group/add")
        #expect(plain.edits.map(\.path.description) == ["groups.hall"])
        let plan = try change("group/members/add", ["group": "porch", "member": "virtual/kitchen", "plan": true])
        #expect(plan.planOnly && plan.planID == nil)
        let commit = try change("group/rename", ["from": "porch", "to": "front", "plan": false, "plan_id": "1f2e3d"])
        #expect(!commit.planOnly && commit.planID == "1f2e3d")
        #expect(refusal("group/remove", ["name": "porch", "plan": 1]) == "group/remove: plan: expected true or false")
        #expect(refusal("group/remove", ["name": "porch", "plan_id": 7]) == "group/remove: plan_id: expected the plan_id a plan answered with")
        #expect(refusal("group/remove", ["name": "porch", "plan_id": .string(String(repeating: "f", count: 65))])
                == "group/remove: plan_id: expected the plan_id a plan answered with")
        #expect(refusal("scene/remove", "night") == "scene/remove: expected a JSON object")

        let long = String(repeating: "n", count: 5000)
        let absent = refusal("group/members/remove", ["group": "porch", "members": ["virtual/fan", .string("lifx/" + long)]])
        #expect(absent.hasPrefix("group/members/remove: lifx/nnn") && absent.hasSuffix("… is not a member of group 'porch'"), "\(absent)")
        #expect(absent.utf8.count < 200, "\(absent.utf8.count) bytes")
        let name = refusal("group/add", ["name": .string(long)])
        #expect(name == "group/add: name: a name of 5000 bytes is over 200", "\(name.prefix(300))")
        let many = JSONValue.array((0...GroupEdits.maxMembers).map { .string("virtual/d\($0)") })
        #expect(refusal("group/add", ["name": "big", "members": many]) == "members: 1001 is over the 1000 one request may name")
        #expect(try change("group/add", ["name": "big", "members": .array(many.arrayValue!.dropLast())]).edits.count == 1)
    }

    /// Two renames racing for one name: one gets it, the other is told it is taken (it saw the first).
    @Test func twoChangesRacingAreSerialised() async throws {
        try await ManagedBridge.with { b in
            async let one = b.request("device/rename", ["adapter": "virtual", "device": "kitchen", "to": "lamp"])
            async let two = b.request("device/rename", ["adapter": "virtual", "device": "fan", "to": "lamp"])
            let answers = try await [one, two]
            #expect(answers.filter { $0["status"] == "ok" }.count == 1, "\(answers)")
            #expect(answers.filter { $0["error"]?.stringValue?.contains("is taken") == true }.count == 1, "\(answers)")
            #expect(b.text.components(separatedBy: "name: lamp").count == 2)
        }
    }

    /// Settings at once (log.level, health.interval), and what needs a restart of the bridge says so.
    @Test func optionsApplyAndSayWhatNeedsARestart() async throws {
        try await ManagedBridge.with { b in
            let r = try await b.request("options", ["options": ["health.interval": 30, "mqtt.keepalive": 30]])
            #expect(r["status"] == "ok", "\(r)")
            #expect(r["data"]?["restart_required"] == ["mqtt"])
            #expect(r["data"]?["applied"] == ["health.interval", "mqtt.keepalive"])
            #expect(await b.engine.settings.healthInterval == 30)
            #expect(await b.manager.config.healthInterval == 30)
        }
    }

    /// device/remove: a device the config defines leaves it; `block` disables one, which no listing brings back.
    @Test func removeTakesADeviceOutOfTheConfigAndBlockDisablesIt() async throws {
        try await ManagedBridge.with { b in
            let r = try await b.request("device/remove", ["adapter": "virtual", "device": "fan"])
            #expect(r["status"] == "ok", "\(r)")
            #expect(!b.text.contains("name: fan"))
            try await waitUntil("fan gone") { await b.engine.deviceNames("virtual")["fan"] == nil }
            let blocked = try await b.request("device/remove", ["adapter": "virtual", "device": "kitchen", "block": true])
            #expect(blocked["status"] == "ok", "\(blocked)")
            #expect(b.text.contains("      disabled: true"))
            #expect(await b.engine.deviceNames("virtual")["kitchen"] == nil)
            // Unblocked by its id.
            #expect(try await b.request("device/options", ["adapter": "virtual", "device": "kitchen", "options": ["disabled": .null]])["status"] == "ok")
            try await waitUntil("kitchen back") { await b.engine.deviceNames("virtual")["kitchen"] == "kitchen" }
            #expect(!b.text.contains("\ndevices:"))
        }
    }
}
