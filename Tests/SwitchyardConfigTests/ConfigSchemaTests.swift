import Foundation
import Testing
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore

/// The schema (`config/schema`) against the reader it is made from, key by key both ways, and the example
/// config against the schema with a real JSON Schema validator (Python's jsonschema).
@Suite struct ConfigSchemaTests {
    /// Built once for every test of this module that edits a config (an editor without a schema builds its
    /// own: a read of every section, seconds under AddressSanitizer on a shared cooperative thread).
    static let schema = ConfigSchema(upstreams: upstreams)
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every object of the schema, with its path (items of lists and entries of maps included).
    static func objects(_ s: JSONValue, _ path: ConfigPath, _ out: inout [(ConfigPath, JSONValue)]) {
        if s["type"] == "object" {
            out.append((path, s))
            for (k, p) in s["properties"]?.objectValue ?? [:] { objects(p, path.appending(key: k), &out) }
            if let a = s["additionalProperties"], a.objectValue != nil { objects(a, path.appending(key: "entry"), &out) }
        }
        if let items = s["items"] { objects(items, path.appending(.index(0)), &out) }
    }

    /// A file with `leaf` at `path` (list items made as lists of one).
    static func nest(_ path: ConfigPath, _ leaf: YAMLValue) -> YAMLValue {
        var v = leaf
        for c in path.components.reversed() {
            switch c {
            case .key(let k): v = .map([.init(k, v)])
            case .index, .item: v = .list([v])
            }
        }
        return v
    }

    static func text(_ v: YAMLValue) throws -> String {
        var e = try YAMLEditor(text: "")
        guard case .map(let entries) = v else { return "" }
        for x in entries { try e.apply(.set(ConfigPath([.key(x.key)]), x.value)) }
        return e.text
    }

    /// The keys the reader says it knows at a path, from its own "unknown key" message.
    static func knownKeys(at path: ConfigPath, with extra: [YAMLValue.Entry] = []) throws -> [String]? {
        let yaml = try text(nest(path, .map(extra + [.init("zz_not_a_key", 1)])))
        do {
            _ = try SwitchyardConfig.parse(yaml: yaml, file: "probe.yaml", upstreams: upstreams, environment: [:])
        } catch {
            let want = (path.isEmpty ? "" : path.description + ".") + "zz_not_a_key"
            guard let p = error.problems.first(where: { $0.path == want || $0.path.hasSuffix("zz_not_a_key") && $0.message.hasPrefix("unknown key") }),
                  let r = p.message.range(of: "known here: ") else { return nil }
            return p.message[r.upperBound...].dropLast().split(separator: ", ").map(String.init)
        }
        return nil
    }

    @Test func everyKeyTheReaderKnowsIsInTheSchemaAndNothingElse() throws {
        var all: [(ConfigPath, JSONValue)] = []
        Self.objects(Self.schema.json, ConfigPath([]), &all)
        #expect(all.count > 30)
        var checked = 0
        for (path, object) in all {
            let props = object["properties"]?.objectValue ?? [:]
            guard !props.isEmpty else { continue }
            // Keys that depend on a choice: each value of the choice in turn.
            var variants: [(key: String, value: String)?] = [nil]
            for (_, p) in props {
                if let w = p["x-switchyard-when"]?.objectValue, let (k, _) = w.first, let values = props[k]?["enum"]?.arrayValue {
                    for v in values.compactMap(\.stringValue) where !variants.contains(where: { $0?.key == k && $0?.value == v }) { variants.append((k, v)) }
                }
            }
            for variant in variants {
                let extra = variant.map { [YAMLValue.Entry($0.key, .string($0.value))] } ?? []
                let known = try #require(try Self.knownKeys(at: path, with: extra), "no unknown-key problem at \(path)")
                let expected = props.filter { k, p in
                    guard let w = p["x-switchyard-when"]?.objectValue, let (key, values) = w.first else { return true }
                    let chosen = variant?.key == key ? variant!.value : props[key]?["default"]?.stringValue
                    return values.arrayValue?.contains(.string(chosen ?? "")) == true
                }.keys
                #expect(Set(known) == Set(expected), "at \(path) \(variant.map { "\($0.key)=\($0.value)" } ?? ""): reader \(known.sorted()), schema \(expected.sorted())")
                checked += 1
            }
        }
        #expect(checked > 30)
    }

    @Test func everyKeySaysWhatItIsAndWhatAChangeTakes() throws {
        var all: [(ConfigPath, JSONValue)] = []
        Self.objects(Self.schema.json, ConfigPath([]), &all)
        for (path, object) in all {
            for (k, p) in object["properties"]?.objectValue ?? [:] {
                #expect(p["description"]?.stringValue?.isEmpty == false, "\(path.appending(key: k)) has no description")
                #expect(p["x-switchyard-restart"] != nil, "\(path.appending(key: k)) does not say what a change takes")
            }
        }
        let s = Self.schema
        #expect(s.restart(for: "log.level") == .atOnce && s.restart(for: "log.format") == .bridge)
        #expect(s.restart(for: "health.interval") == .atOnce && s.restart(for: "mqtt.keepalive") == .bridge)
        #expect(s.restart(for: "web.listen") == .console && s.restart(for: "lifx.lan.enabled") == .adapter)
        #expect(s.restart(for: "devices.virtual.kitchen.retain") == .atOnce && s.restart(for: "state_dir") == .bridge)
        for secret: ConfigPath in ["mqtt.password", "web.auth_token", "lifx.token", "imp.devices[0].agent_id", "livecoding.client_secret", "ha.token"] {
            #expect(s.isSecret(secret), "\(secret)")
            #expect(s.schema(at: secret)?["writeOnly"] == true)
        }
        #expect(!s.isSecret("mqtt.password_file") && !s.isSecret("mqtt.username"))
        #expect(s.schema(at: "mqtt.keepalive")?["minimum"] == 5 && s.schema(at: "mqtt.keepalive")?["default"] == 60)
        #expect(s.schema(at: "log.level")?["enum"]?.arrayValue?.count == 7)
        #expect(s.order(at: "log") == ["level", "format"])
        #expect(s.schema(at: "imp.profiles.lamp.fields[0].raw_max")?["x-switchyard-when"] == ["type": ["brightness"]])
    }

    // MARK: a real validator

    /// Debian's python3 with its python3-jsonschema (which `make test` installs), or nil. Found by its files:
    /// a trait's condition is read synchronously, and starting a Python to ask would hold a pool thread.
    static let python: String? = FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/jsonschema/__init__.py")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : nil

    /// The file as JSON, typed as YAML's core schema types plain values (the way a YAML loader would).
    static func json(_ v: YAMLValue) -> JSONValue {
        switch v {
        case .null: return .null
        case .raw(let s):
            if s == "true" || s == "false" { return .bool(s == "true") }
            if let i = Int(s) { return JSONValue(i) }
            if let d = Double(s), d.isFinite, s.contains(".") { return .number(d) }
            return .string(s)
        case .list(let a): return .array(a.map(json))
        case .map(let m): return .object(Dictionary(m.map { ($0.key, json($0.value)) }, uniquingKeysWith: { _, b in b }))
        default: return v.json
        }
    }

    /// The validator's verdict on each instance: nil when valid, else its first message.
    static func validate(_ instances: [JSONValue]) async throws -> [String?] {
        let python = try #require(python)
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        try Data(Self.schema.json.serialized.utf8).writeWithoutSync(to: dir.appendingPathComponent("schema.json"))
        try Data(JSONValue.array(instances).serialized.utf8).writeWithoutSync(to: dir.appendingPathComponent("instances.json"))
        let script = """
        import json, sys, jsonschema
        schema = json.load(open(sys.argv[1]))
        jsonschema.Draft202012Validator.check_schema(schema)
        v = jsonschema.Draft202012Validator(schema)
        for i in json.load(open(sys.argv[2])):
            errors = sorted(v.iter_errors(i), key=lambda e: list(e.absolute_path))
            print(json.dumps(None if not errors else "/".join(map(str, errors[0].absolute_path)) + ": " + errors[0].message))
        """
        let (status, output) = try await Spawn.run([python, "-c", script, dir.appendingPathComponent("schema.json").path,
                                              dir.appendingPathComponent("instances.json").path])
        #expect(status == 0, "the validator failed (is the schema itself valid draft 2020-12?)")
        return output.split(separator: "\n").map { line in
            (try? JSONValue.parse(String(line)))?.stringValue
        }
    }

    /// config.example.yaml with every commented upstream block uncommented, and a devices section.
    static func wholeExample() throws -> String {
        let text = try String(contentsOf: root.appendingPathComponent("config.example.yaml"), encoding: .utf8)
        var out: [String] = []
        var inBlock = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if upstreams.contains(where: { line == "# \($0.key):" }) || line == "# devices:" { inBlock = true }
            if inBlock, line.hasPrefix("#") { out.append(String(line.dropFirst(2))); continue }
            inBlock = false
            out.append(line)
        }
        return out.joined(separator: "\n")
    }

    @Test(.enabled(if: python != nil, "needs python3 with jsonschema 4 (make test installs python3-jsonschema)"))
    func theExampleIsValidAgainstTheSchemaAndBadFilesAreNot() async throws {
        let example = try Self.wholeExample()
        // The reader takes it (so the schema is checked against a file the bridge accepts).
        _ = try SwitchyardConfig.parse(yaml: example, file: "example", upstreams: upstreams,
                                       environment: ["LIFX_TOKEN": "x", "IMP_HALL_CLOCK": "abcdefABCDEF", "LIVECODING_SECRET": "s", "HA_TOKEN": "t"])
        let good = Self.json(try YAMLEditor(text: example).value)
        #expect(good["nova"] != nil && good["imp"]?["profiles"] != nil && good["devices"]?["virtual"]?["kitchen"]?["qos"] == 1)
        let bad: [(String, String)] = [
            ("log: {level: loud}", "log/level"),
            ("mqtt: {keepalive: 1}", "mqtt/keepalive"),
            ("nope: 1", ""),
            ("mqtt: {password: a, password_file: /x}", "mqtt"),
            ("imp: {profiles: {p: {fields: [{name: x, raw_max: 3}]}}}", "imp/profiles/p/fields/0"),
            ("devices: {virtual: {kitchen: {qos: 3}}}", "devices/virtual/kitchen/qos"),
            ("devices: {toaster: {x: {}}}", "devices"),
            ("lifx: {lan: {hosts: 5}}", "lifx/lan/hosts"),
        ]
        let fine = ["imp: {profiles: {p: {fields: [{name: x, type: brightness, raw_max: 3}]}}}", "health: {interval: 2.5}"]
        let instances = try [good] + (bad.map(\.0) + fine).map { Self.json(try YAMLEditor(text: $0).value) }
        let verdicts = try await Self.validate(instances)
        try #require(verdicts.count == instances.count)
        #expect(verdicts[0] == nil, "config.example.yaml: \(verdicts[0] ?? "")")
        for (i, (yaml, at)) in bad.enumerated() {
            let v = verdicts[i + 1]
            // Refused at that path or under it (validators differ in how deep they point: Debian's jsonschema
            // 4.10 names the key a `false` schema refuses, 4.26 its object).
            #expect(v.map { $0.hasPrefix(at + ":") || $0.hasPrefix(at + "/") } == true, "\(yaml): \(v ?? "accepted")")
        }
        for (i, yaml) in fine.enumerated() { #expect(verdicts[bad.count + 1 + i] == nil, "\(yaml): \(verdicts[bad.count + 1 + i] ?? "")") }
    }

    /// Outside the unit tier the validator must be there: `make test` installs it.
    @Test func theValidatorIsThereForTheFullRun() {
        if ProcessInfo.processInfo.environment["SWITCHYARD_TEST_TIER"] != "unit" {
            #expect(Self.python != nil, "python3 with jsonschema is missing: make test installs python3-jsonschema")
        }
    }
}
