import Foundation
import Glibc
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Groups and scenes as the daemon runs them (`switchyard run -c FILE`) over a real broker, against the home's
/// simulators and lifx-emulator: the requests that write the config file, a member removed from the config and
/// added again, a scene stored, the bridge restarted, the scene recalled.
@Suite(.serialized, .enabled(if: LIFXEmulator.unavailableReason == nil, Comment(rawValue: LIFXEmulator.unavailableReason ?? "")))
struct GroupProcessTests {
    /// A config file for the daemon (`groups`, then the home's upstreams), its directory the state directory.
    struct Daemon {
        let dir: URL
        let port: Int
        let base: String
        var path: String { dir.appendingPathComponent("config.yaml").path }

        init(port: Int) {
            dir = TestEnvironment.makeTempDir("groups-daemon")
            self.port = port
            base = uniqueBase()
        }

        func write(_ home: GroupHome, virtual: String? = nil, groups: String = GroupHome.groups) throws {
            let text = """
            # the house, for the group tests
            state_dir: \(dir.path)
            log:
              level: warning
            mqtt:
              url: mqtt://127.0.0.1:\(port)
              base_topic: \(base)
              reconnect: {min_delay: 0.1, max_delay: 1}
            web:
              enabled: false
            \(groups)
            """ + (virtual.map { home.upstreams(virtual: $0) } ?? home.upstreams())
            try text.writeForTest(toFile: path, replacing: true)
        }

        func text() throws -> String { try String(contentsOfFile: path, encoding: .utf8) }

        func start() throws -> BridgeProcess { try BridgeProcess(arguments: ["run", "-c", path]) }
    }

    /// Sends a bridge request (`body` with `transaction` added) and returns its response.
    static func request(_ probe: MQTTProbe, _ base: String, _ path: String, _ body: String, _ transaction: String,
                        timeout: Double = 30) async throws -> JSONValue {
        var o = try JSONValue.parse(Array(body.utf8)).objectValue ?? [:]
        o["transaction"] = .string(transaction)
        probe.publish("\(base)/bridge/request/\(path)", String(decoding: JSONValue.object(o).bytes, as: UTF8.self))
        return try await probe.result("\(base)/bridge/response/\(path)", transaction, timeout: timeout)
    }

    static func online(_ probe: MQTTProbe, _ base: String, members: Int = 8) async throws {
        try await probe.waitState("\(base)/group/house", "every member online", timeout: 90) { s in
            (s["members"]?.objectValue ?? [:]).count == members && s["members"]?.objectValue?.values.allSatisfy { $0 == "online" } == true
        }
    }

    /// group/add, members/add and members/remove, rename and remove write the file (its comment kept), are
    /// applied by the reload they make, and a cycle is refused with its path and nothing written.
    @Test func theRequestsWriteTheFileAndTheBridgeFollows() async throws {
        try await GroupHome.with { home in
            let broker = try await Broker.start()
            defer { broker.stop() }
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            let d = Daemon(port: broker.port)
            try await probe.subscribe("\(d.base)/#")
            try d.write(home)
            let original = try d.text()
            let bridge = try d.start()
            defer { bridge.signal(SIGTERM) }
            try await Self.online(probe, d.base)

            var r = try await Self.request(probe, d.base, "group/add", #"{"name": "upstairs", "members": ["virtual/hall", "lifx/cloud_three"]}"#, "a")
            #expect(r["status"] == "ok", "\(r)")
            #expect(r["data"]?["diff"]?.stringValue?.contains("+  upstairs:") == true, "\(r)")
            try await probe.waitState("\(d.base)/group/upstairs", "listed") { $0["members"] == ["virtual/hall": "online", "lifx/cloud_three": "online"] }
            probe.publish("\(d.base)/group/upstairs/set", #"{"state": "ON", "transaction": "u1"}"#)
            #expect(try await probe.result("\(d.base)/group/upstairs/result", "u1")["status"] == "ok")
            #expect(home.cloud.light(GroupHome.cloudIDs[2])?.power == "on")

            r = try await Self.request(probe, d.base, "group/members/add", #"{"group": "upstairs", "member": "group/porch"}"#, "b")
            #expect(r["status"] == "ok", "\(r)")
            r = try await Self.request(probe, d.base, "group/members/remove", #"{"group": "upstairs", "member": "virtual/hall"}"#, "c")
            #expect(r["status"] == "ok", "\(r)")
            try await probe.waitState("\(d.base)/group/upstairs", "its new members") { $0["members"] == ["lifx/cloud_three": "online", "group/porch": "online"] }

            // porch is in upstairs now: upstairs in porch would be a cycle.
            let before = try d.text()
            r = try await Self.request(probe, d.base, "group/members/add", #"{"group": "porch", "member": "group/upstairs"}"#, "cy")
            #expect(r["status"] == "error")
            #expect(r["error"]?.stringValue?.contains("config.yaml:15:49: groups.porch.members: a group may not contain itself: group/porch → group/upstairs → group/porch") == true, "\(r)")
            #expect(try d.text() == before)

            r = try await Self.request(probe, d.base, "group/rename", #"{"from": "upstairs", "to": "first_floor"}"#, "d")
            #expect(r["status"] == "ok", "\(r)")
            try await probe.waitFor(topic: "\(d.base)/group/upstairs", payload: "")
            try await probe.waitState("\(d.base)/group/first_floor", "renamed") { $0["members"]?["group/porch"] == "online" }
            r = try await Self.request(probe, d.base, "group/remove", #"{"name": "first_floor"}"#, "e")
            #expect(r["status"] == "ok", "\(r)")
            try await probe.waitFor(topic: "\(d.base)/group/first_floor", payload: "")
            // Added, changed, renamed and removed: the file is as it was, comments and all.
            #expect(try d.text() == original)
        }
    }

    /// A member removed from its adapter's config is kept by the group and shown as missing (a command to the
    /// group fails it, by name); added again, it is a member again.
    @Test func aMemberRemovedAndAddedAgainIsMissingThenBack() async throws {
        try await GroupHome.with { home in
            let broker = try await Broker.start()
            defer { broker.stop() }
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            let d = Daemon(port: broker.port)
            try await probe.subscribe("\(d.base)/#")
            try d.write(home)
            let bridge = try d.start()
            defer { bridge.signal(SIGTERM) }
            try await Self.online(probe, d.base)

            try d.write(home, virtual: "    - {name: hall, type: light}\n    - {name: plug, type: switch}\n")
            bridge.signal(SIGHUP)
            try await probe.waitState("\(d.base)/group/porch", "the lamp missing") { $0["members"]?["virtual/porch_lamp"] == "missing" }
            probe.publish("\(d.base)/group/porch/set", #"{"state": "ON", "transaction": "m1"}"#)
            let r = try await probe.result("\(d.base)/group/porch/result", "m1")
            #expect(r["failed"] == [["member": "virtual/porch_lamp", "error": "missing: virtual does not list it"]], "\(r)")
            // The file still names it: nothing dropped it.
            #expect(try d.text().contains("virtual/porch_lamp"))

            try d.write(home)
            bridge.signal(SIGHUP)
            try await probe.waitState("\(d.base)/group/porch", "the lamp back") { $0["members"]?["virtual/porch_lamp"] == "online" }
            probe.publish("\(d.base)/group/porch/set", #"{"state": "ON", "brightness": 55, "transaction": "m2"}"#)
            #expect(try await probe.result("\(d.base)/group/porch/result", "m2") == ["status": "ok", "transaction": "m2"])
            try await probe.waitState("\(d.base)/virtual/porch_lamp", "on") { $0["state"] == "ON" && $0["brightness"] == 55 }
        }
    }

    /// scene/store writes the states into the file; after a restart the bridge reads the scene back and a
    /// recall sets every device as stored, on its own upstream.
    @Test func aSceneStoredIsRecalledAfterARestart() async throws {
        try await GroupHome.with { home in
            let broker = try await Broker.start()
            defer { broker.stop() }
            let probe = try await MQTTProbe.connect(port: broker.port)
            defer { probe.close() }
            let d = Daemon(port: broker.port)
            try await probe.subscribe("\(d.base)/#")
            try d.write(home)
            var bridge = try d.start()
            try await Self.online(probe, d.base)

            probe.publish("\(d.base)/virtual/hall/set", #"{"state": "ON", "brightness": 60, "color_temp": 2700, "transaction": "h"}"#)
            probe.publish("\(d.base)/lifx/lan_one/set", #"{"state": "ON", "brightness": 30, "color_temp": 4000, "transition": 0, "transaction": "l"}"#)
            probe.publish("\(d.base)/lifx/cloud_one/set", #"{"state": "ON", "color": {"h": 120, "s": 100}, "transaction": "c"}"#)
            for (rel, t) in [("virtual/hall", "h"), ("lifx/lan_one", "l"), ("lifx/cloud_one", "c")] {
                #expect(try await probe.result("\(d.base)/\(rel)/result", t)["status"] == "ok")
            }
            var r = try await Self.request(probe, d.base, "scene/store",
                                           #"{"name": "evening", "members": ["virtual/hall", "lifx/lan_one", "lifx/cloud_one", "group/porch"], "transition": 0}"#, "s")
            #expect(r["status"] == "ok", "\(r)")
            let stored = try d.text()
            #expect(stored.contains("virtual/hall:") && stored.contains("group/porch:"), "\(stored)")
            try await probe.waitState("\(d.base)/scene/evening", "listed") { $0["members"]?.arrayValue?.count == 4 }

            // Everything off, then a restart.
            probe.publish("\(d.base)/group/house/set", #"{"state": "OFF", "transition": 0, "transaction": "off"}"#)
            #expect(try await probe.result("\(d.base)/group/house/result", "off")["status"] == "ok")
            bridge.signal(SIGTERM)
            #expect(try await bridge.waitForExit() == 0)
            probe.clear()
            bridge = try d.start()
            defer { bridge.signal(SIGTERM) }
            try await Self.online(probe, d.base)

            r = try await Self.request(probe, d.base, "scene/recall", #"{"name": "evening"}"#, "rc")
            #expect(r == ["status": "ok", "data": ["scene": "evening", "status": "ok"], "transaction": "rc"], "\(r)")
            let hall = try await probe.waitState("\(d.base)/virtual/hall", "as stored") { $0["state"] == "ON" }
            #expect(hall["brightness"] == 60 && hall["color_temp"] == 2700)
            try await waitUntil("lan_one as stored", timeout: 10) {
                (try? await home.emulator.light(GroupHome.lanIDs[0])).map { $0 == (65535, wireLevel(30), 4000) } ?? false
            }
            #expect(home.cloud.light(GroupHome.cloudIDs[0]).map { $0.power == "on" && abs($0.hue - 120) < 1 && abs($0.saturation - 1) < 0.01 } == true)
            // porch was stored off: its devices stay off.
            #expect(probe.state("\(d.base)/virtual/porch_lamp")?["state"] == "OFF")
            try await probe.waitState("\(d.base)/scene/evening", "activated") { $0["last_activated"]?.stringValue != nil }
        }
    }
}
