import Foundation
import Glibc
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Home Assistant discovery as Home Assistant reads it, for every adapter at once: the demo
/// (`switchyard-sim demo`: every upstream against its simulator) on a real broker, every retained
/// discovery config checked against the state payloads it points at.
@Suite struct DiscoveryProcessTests {
    struct Announced {
        var topic: String
        var component: String
        var config: JSONValue
    }

    /// The paths a template reads from `value_json`, each with whether it has a `| default(…)`.
    static func paths(in template: String) -> [(path: [String], hasDefault: Bool)] {
        var out: [(path: [String], hasDefault: Bool)] = []
        var rest = Substring(template)
        while let r = rest.range(of: "value_json") {
            var path: [String] = []
            var i = r.upperBound
            while i < rest.endIndex {
                if rest[i] == "." {
                    let start = rest.index(after: i)
                    let end = rest[start...].firstIndex { !($0.isLetter || $0.isNumber || $0 == "_") } ?? rest.endIndex
                    path.append(String(rest[start..<end]))
                    i = end
                } else if rest[i...].hasPrefix("['") {
                    let start = rest.index(i, offsetBy: 2)
                    guard let end = rest[start...].range(of: "']") else { break }
                    path.append(String(rest[start..<end.lowerBound]))
                    i = end.upperBound
                } else { break }
            }
            let after = rest[i...].drop { $0 == " " }
            out.append((path, after.hasPrefix("| default(")))
            rest = rest[i...]
        }
        return out
    }

    static func value(_ json: JSONValue, _ path: [String]) -> JSONValue?? {
        var v: JSONValue? = json
        for p in path {
            guard case .object(let o)? = v else { return .none }
            guard let next = o[p] else { return .none }
            v = next
        }
        return .some(v)
    }

    /// A device name a person would give: not an address, not a hex id, not a topic name.
    static func looksLikeAnID(_ name: String) -> Bool {
        let hex = name.filter(\.isHexDigit).count
        return name.contains(":") && hex >= 12 || name.range(of: "[0-9a-fA-F]{10,}", options: .regularExpression) != nil
            || name.contains("_")
    }

    @Test func everyAdaptersDiscoveryReadsOnlyWhatItsStateCarriesAndNamesDevicesForPeople() async throws {
        guard let sim = TestEnvironment.simulatorBinary() else { throw TestError("switchyard-sim not found next to the tests") }
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#", "homeassistant/#")
        let out = TestEnvironment.makeTempDir("demo").appendingPathComponent("out.log").path
        let demo = try ChildProcess(path: sim, arguments: ["demo", "--port", "\(broker.port)", "--base-topic", base, "--log-level", "warning"],
                                    outputFile: out)
        defer { demo.terminate() }
        // Every adapter running and every device with a state: the demo has settled.
        try await probe.waitFor("every adapter running", timeout: 60) { ms in
            guard let info = ms.last(where: { $0.topic == "\(base)/bridge/info" }).flatMap({ try? JSONValue.parse($0.payload) }),
                  let adapters = info["adapters"]?.objectValue else { return false }
            // The six upstreams and the core's own groups and scenes (the demo has both).
            return Set(adapters.keys) == ["virtual", "lifx", "nova", "imp", "livecoding", "ha", "group", "scene"]
                && adapters.values.allSatisfy { $0 == "running" }
        }
        let listed = { (ms: [MQTTProbe.Message]) -> [JSONValue] in
            ms.last(where: { $0.topic == "\(base)/bridge/devices" }).flatMap { try? JSONValue.parse($0.payload) }?.arrayValue ?? []
        }
        try await probe.waitFor("the devices' states", timeout: 60) { ms in
            let devices = listed(ms)
            return devices.count >= 20 && devices.allSatisfy { d in ms.contains { $0.topic == d["topic"]?.stringValue } }
                && ms.contains { $0.topic == "\(base)/nova/key_light" && $0.payload.contains(#""status":"ready""#) }
        }
        // Device configs go out once the sweep has found nothing to migrate: wait for every device's.
        let node = "switchyard_\(Naming.normaliseID(base))_"
        try await probe.waitFor("every device's config", timeout: 60) { ms in
            let topics = Set(ms.filter { !$0.payload.isEmpty }.map(\.topic))
            return listed(ms).allSatisfy { d in
                topics.contains("homeassistant/device/\(node)\(Naming.normaliseID(d["adapter"]?.stringValue ?? ""))_\(Naming.normaliseID(d["id"]?.stringValue ?? ""))/config")
            }
        }
        // A sentinel through the broker: every retained config announced so far has arrived.
        probe.publish("\(base)/sentinel", "s")
        let messages = try await probe.waitFor("the sentinel") { $0.contains { $0.topic == "\(base)/sentinel" } }
        var last: [String: String] = [:]
        for m in messages { last[m.topic] = m.payload }
        // The demo announces one config per device (`discovery_mode: device`, the default): each of its
        // components as Home Assistant reads it (what the device config shares merged in), under the
        // per-entity topic it stands for (the same discovery id: `<node> <key>`).
        let ours = last.filter { topic, payload in
            let parts = topic.split(separator: "/")
            return parts.first == "homeassistant" && parts.count >= 4 && parts[2].hasPrefix(node) && !payload.isEmpty
        }
        #expect(ours.keys.allSatisfy { $0.hasPrefix("homeassistant/device/") }, "per-entity configs in device mode: \(ours.keys.sorted())")
        let announced = ours.flatMap { topic, payload -> [Announced] in
            let parts = topic.split(separator: "/").map(String.init)
            guard parts.count == 4, let config = try? JSONValue.parse(payload), let components = config["components"]?.objectValue else { return [] }
            return components.map { key, c in
                var o = c.objectValue ?? [:]
                let platform = o.removeValue(forKey: "platform")?.stringValue ?? "?"
                for k in ["device", "origin", "availability", "availability_mode"] where o[k] == nil { o[k] = config[k] }
                return Announced(topic: "homeassistant/\(platform)/\(parts[2])/\(key)/config", component: platform, config: .object(o))
            }
        }
        #expect(ours.count >= 20, "only \(ours.count) device configs")
        #expect(announced.count > 60, "only \(announced.count) entities")
        // Each device's own name, from the configs of its own node (a part names another node's device).
        var deviceNames: [String: String] = [:]
        for a in announced {
            let topicNode = String(a.topic.split(separator: "/")[2])
            if a.config["device"]?["identifiers"] == [.string(topicNode)], let n = a.config["device"]?["name"]?.stringValue { deviceNames[topicNode] = n }
        }
        let bridgeNode = "\(node)bridge"
        var problems: [String] = []
        for a in announced {
            let c = a.config
            func problem(_ p: String) { problems.append("\(a.topic): \(p)") }
            if c["origin"]?["support_url"] != nil { problem("support_url without configuration") }
            // Device: named for people, linked to the bridge.
            let device = c["device"]
            let isBridge = device?["identifiers"] == [.string(bridgeNode)]
            guard let deviceName = device?["name"]?.stringValue, !deviceName.isEmpty else { problem("device without a name"); continue }
            if Self.looksLikeAnID(deviceName) { problem("device named '\(deviceName)'") }
            if !isBridge, device?["via_device"] != .string(bridgeNode) { problem("not linked to the bridge device") }
            // Names: the main entity takes the device's name; the others have a short one of their own. A part
            // of another device (a Ceiling's uplight, whose configs name that device) is named for the part.
            let main = ["light", "switch", "scene"].contains(a.component) && a.topic.hasSuffix("/\(a.component)/config")
            let ownNode = String(a.topic.split(separator: "/")[2])
            let isPart = !isBridge && device?["identifiers"] != [.string(ownNode)]
            if isPart {
                // A part names another announced device, as that device names itself.
                let other = device?["identifiers"]?.arrayValue?.first?.stringValue ?? ""
                if deviceNames[other] == nil { problem("names device \(other), which is not announced") }
                else if deviceNames[other] != deviceName { problem("names device \(other) '\(deviceName)', which calls itself '\(deviceNames[other]!)'") }
            }
            if main && !isPart { if c["name"] != .null { problem("main entity named \(c["name"]!.serialized)") } }
            else if (c["name"]?.stringValue ?? "").isEmpty { problem("entity without a name") }
            if c["entity_category"] == "config", !["number", "select", "switch", "button", "text"].contains(a.component) {
                problem("entity_category config on a read-only \(a.component)")
            }
            // What the entity reads must be in its state, and known (HA shows "unknown" otherwise).
            guard let stateTopic = c["state_topic"]?.stringValue else { continue }
            guard let payload = last[stateTopic] else { problem("nothing on its state topic \(stateTopic)"); continue }
            if let template = c["value_template"]?.stringValue {
                let state = try? JSONValue.parse(payload)
                for (path, hasDefault) in Self.paths(in: template) where !hasDefault {
                    switch state.map({ Self.value($0, path) }) ?? .none {
                    case .none: problem("template reads \(path.joined(separator: ".")), which \(stateTopic) does not carry")
                    case .some(let v) where v == nil || v == .null: problem("\(path.joined(separator: ".")) is null: the entity would be unknown")
                    default: break
                    }
                }
            } else if c["schema"] == "json" {
                let state = try JSONValue.parse(payload)
                if state["state"] == nil { problem("JSON light without state") }
                if c["brightness"] == true, state["brightness"] == nil { problem("JSON light without brightness") }
                let modes = c["supported_color_modes"]?.arrayValue ?? []
                if modes.contains("hs") || modes.contains("color_temp"), state["color_mode"] == nil { problem("JSON light without color_mode") }
            } else if a.component == "binary_sensor", ![c["payload_on"]?.stringValue, c["payload_off"]?.stringValue].contains(payload) {
                problem("state '\(payload)' is neither payload_on nor payload_off")
            }
        }
        #expect(problems.isEmpty, "\(problems.count) problems:\n\(problems.sorted().joined(separator: "\n"))")
        // No write-only field is an entity: steps and transitions are commands, not states.
        #expect(!announced.contains { $0.topic.contains("_step/") || $0.topic.hasSuffix("/transition/config") })
        // The bridge's own device: its connection state, version, republish button and adapter statuses.
        let bridgeTopics = Set(announced.filter { $0.topic.contains("/\(bridgeNode)/") }.map(\.topic))
        for object in ["binary_sensor/\(bridgeNode)/connection_state", "sensor/\(bridgeNode)/version", "button/\(bridgeNode)/republish",
                       "sensor/\(bridgeNode)/lifx_status", "sensor/\(bridgeNode)/nova_status"] {
            #expect(bridgeTopics.contains("homeassistant/\(object)/config"), "\(object)")
        }
        // Every device of bridge/devices is announced under its stable id.
        for d in listed(messages) {
            let id = "\(node)\(Naming.normaliseID(d["adapter"]?.stringValue ?? ""))_\(Naming.normaliseID(d["id"]?.stringValue ?? ""))"
            #expect(announced.contains { $0.topic.contains("/\(id)/") }, "\(d["topic"]?.stringValue ?? "?") is not announced")
        }
        // The republish button works: discovery comes again, live.
        probe.clear()
        probe.publish("\(base)/bridge/request/republish", "")
        try await probe.waitFor("a live republish") { $0.contains { $0.topic == "homeassistant/device/\(bridgeNode)/config" && !$0.retain } }
        demo.signal(SIGTERM)
        #expect(await demo.wait(timeout: 30) == 0)
    }

    /// Configs an earlier run (or version) left retained for what no longer exists are cleared once the
    /// adapters have listed their devices; what still exists, and other bridges' configs, are not touched.
    @Test func orphanedDiscoveryConfigsAreClearedAndNothingElse() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let node = "switchyard_\(Naming.normaliseID(base))_"
        let other = "switchyard_someoneelse_virtual_kitchen"
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        // Left from before: an entity the device no longer has (an old version's step number), a device
        // removed from the config while the bridge was down, an adapter no longer configured, and another
        // bridge's config.
        let stale = [
            "homeassistant/number/\(node)virtual_kitchen/brightness_step/config",
            "homeassistant/light/\(node)virtual_porch/light/config",
            "homeassistant/light/\(node)lifx_d073d5000001/light/config",
        ]
        let kept = "homeassistant/light/\(other)/light/config"
        // A bridge whose base extends ours: its nodes start with our prefix, its payloads name its own base.
        let extended = "homeassistant/light/\(node)x_virtual_porch/light/config"
        func config(_ base: String) -> String { #"{"name":null,"availability":[{"topic":"\#(base)/bridge/state"}]}"# }
        for t in stale { try await probe.publishAcknowledged(t, config(base), retain: true) }
        try await probe.publishAcknowledged(kept, config("someoneelse"), retain: true)
        try await probe.publishAcknowledged(extended, config("\(base)_x"), retain: true)
        try await probe.subscribe("homeassistant/#", "\(base)/bridge/state")
        let path = TestEnvironment.makeTempDir("sweep").appendingPathComponent("config.yaml").path
        try """
        mqtt: {url: "mqtt://127.0.0.1:\(broker.port)", base_topic: \(base)}
        virtual:
          devices:
            - {name: kitchen, type: light}
        """.writeForTest(toFile: path, replacing: true)
        let bridge = try BridgeProcess(arguments: ["run", "-c", path])
        defer { bridge.signal(SIGKILL) }
        for t in stale { try await probe.waitFor(topic: t, payload: "") }
        // The kitchen light itself is announced (one config for the device), and the foreign config was left alone.
        try await probe.waitFor(topic: "homeassistant/device/\(node)virtual_kitchen/config")
        #expect(!probe.messages.contains { $0.topic == "homeassistant/device/\(node)virtual_kitchen/config" && $0.payload.isEmpty })
        #expect(!probe.messages.contains { ($0.topic == kept || $0.topic == extended) && $0.payload.isEmpty })
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
        #expect(bridge.outputText.contains("cleared orphaned discovery configs"), "\(bridge.outputText)")
        // The cleared ones are gone from the broker; the rest are still there.
        let fresh = try await MQTTProbe.connect(port: broker.port)
        defer { fresh.close() }
        try await fresh.subscribe("homeassistant/#", "\(base)/sentinel")
        fresh.publish("\(base)/sentinel", "x")   // after the retained copies of the subscription before it
        try await fresh.waitFor(topic: "\(base)/sentinel")
        let retained = Set(fresh.messages.filter(\.retain).map(\.topic))
        #expect(retained.contains(kept) && retained.contains(extended) && retained.isDisjoint(with: stale))
    }
}
