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
