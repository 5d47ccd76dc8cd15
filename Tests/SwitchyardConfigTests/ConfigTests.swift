import Foundation
import Testing
import HomeAssistantMirror
import ImpAdapter
import LIFXAdapter
import LivecodingAdapter
import NovaAdapter
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import VirtualAdapter

extension SwitchyardConfig {
    /// A config read with the bridge's own registration list.
    static func parse(yaml: String, file: String, environment: [String: String] = [:]) throws(ConfigErrors) -> SwitchyardConfig {
        try parse(yaml: yaml, file: file, upstreams: SwitchyardCLI.upstreams, environment: environment)
    }
    var virtual: VirtualUpstream.Settings? { settings(VirtualUpstream()) }
    var lifx: LIFXSettings? { settings(LIFXUpstream()) }
    var imp: ImpSettings? { settings(ImpUpstream()) }
    var livecoding: LivecodingSettings? { settings(LivecodingUpstream()) }
    var ha: HAMirrorSettings? { settings(HomeAssistantUpstream()) }
    var nova: NovaAdapterSettings? { settings(NovaUpstream()) }
}

@Suite struct ConfigTests {
    func problems(_ yaml: String, env: [String: String] = [:]) -> [ConfigProblem] {
        do {
            _ = try SwitchyardConfig.parse(yaml: yaml, file: "test.yaml", environment: env)
            return []
        } catch {
            return error.problems
        }
    }

    @Test func typeErrorHasLineColumnAndKeyPath() {
        let p = problems("""
        mqtt:
          url: mqtt://127.0.0.1:1883
          keepalive: fast
        """)
        #expect(p.map(\.description) == ["test.yaml:3:14: mqtt.keepalive: expected a whole number, got 'fast'"])
    }

    @Test func unknownKeyIsAnError() {
        let p = problems("""
        mqtt:
          base_topic: home
          bse_topic: typo
        """)
        #expect(p.count == 1)
        #expect(p[0].line == 3 && p[0].column == 3)
        #expect(p[0].path == "mqtt.bse_topic")
        #expect(p[0].message.hasPrefix("unknown key"))
    }

    @Test func missingEnvironmentVariable() {
        let p = problems("""
        mqtt:
          username: bridge
          password: ${NOT_SET_ANYWHERE}
        """)
        #expect(p.map(\.description) == ["test.yaml:3:13: mqtt.password: environment variable NOT_SET_ANYWHERE is not set"])
    }

    @Test func allProblemsAreReportedAtOnce() {
        let p = problems("""
        log:
          level: loud
        mqtt:
          url: http://broker
          keepalive: 1
        healthh: {}
        virtual:
          devices:
            - name: "bad/name/"
              type: lamp
            - name: set
        """)
        let paths = p.map(\.path)
        #expect(paths == ["log.level", "mqtt.url", "mqtt.keepalive", "virtual.devices[0].name", "virtual.devices[0].type",
                          "virtual.devices[1].name", "healthh"])
        #expect(p.first { $0.path == "mqtt.keepalive" }?.message == "1 is out of range 5–65535")
    }

    @Test func syntaxErrorHasPosition() {
        let p = problems("mqtt:\n  url: [unclosed\n")
        #expect(p.count == 1)
        #expect(p[0].line >= 2)
        #expect(p[0].message.hasPrefix("YAML syntax"))
    }

    @Test func duplicateKeysAndSecondDocumentsAreErrorsAtTheirPlace() {
        let dup = problems("mqtt:\n  url: mqtt://a\n  url: mqtt://b\n")
        #expect(dup.map(\.description) == ["test.yaml:3:3: duplicate key 'url' in this mapping"])
        let two = problems("mqtt: {url: mqtt://a}\n---\nlog: {level: info}\n")
        #expect(two.count == 1 && two[0].line == 2 && two[0].message.contains("single document"))
        let alias = problems("log: *nothing\n")
        #expect(alias.count == 1 && alias[0].line == 1 && alias[0].message.contains("undefined alias"))
    }

    @Test func anchorsQuotingAndNullsAreReadAsYAMLMeansThem() throws {
        let c = try SwitchyardConfig.parse(yaml: """
        mqtt: &m
          url: 'mqtt://broker:1884'
          base_topic: "null"
        virtual:
          devices:
            - {name: a, type: light}
            - &dev {name: b, type: switch}
        log: {level: ~}
        """, file: "t.yaml")
        #expect(c.mqtt.port == 1884)
        // Quoted, "null" is a string; plain `~` is null, so the default level applies.
        #expect(c.mqtt.baseTopic == "null")
        #expect(c.log.level == "info")
        #expect(c.virtual?.devices.map(\.name) == ["a", "b"])
    }

    @Test func environmentAndDefaults() throws {
        let c = try SwitchyardConfig.parse(yaml: """
        mqtt:
          url: mqtts://${BROKER_HOST}
          base_topic: ${BASE:-home}
          protocol: 5
        """, file: "t.yaml", environment: ["BROKER_HOST": "broker.example"])
        #expect(c.mqtt.host == "broker.example")
        #expect(c.mqtt.port == 8883)
        #expect(c.mqtt.useTLS)
        #expect(c.mqtt.tls.verify)
        #expect(c.mqtt.baseTopic == "home")
        #expect(c.mqtt.clientID == "switchyard-home")
        #expect(c.mqtt.protocolVersion == 5)
        #expect(c.mqtt.outboxMaxEvents == 10_000)
        #expect(c.mqtt.commandMaxAge == 30)
    }

    @Test func secretsComeFromFilesAndAreRedacted() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cfg-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let secret = "s3cr3t-\(UUID().uuidString)"
        try (secret + "\n").write(to: dir.appendingPathComponent("pw"), atomically: true, encoding: .utf8)
        let c = try SwitchyardConfig.parse(yaml: """
        mqtt:
          username: bridge
          password_file: \(dir.path)/pw
        """, file: "t.yaml")
        #expect(c.mqtt.password == secret)
        let info = c.redactedJSON.serialized
        #expect(!info.contains(secret))
        #expect(c.redactedJSON["mqtt"]?["password"] == "***")

        let both = problems("""
        mqtt:
          username: bridge
          password: x
          password_file: \(dir.path)/pw
        """)
        #expect(both.map(\.path) == ["mqtt.password_file"])
        let missing = problems("""
        mqtt:
          username: bridge
          password_file: \(dir.path)/nope
        """)
        #expect(missing.first?.message.contains("cannot read secret file") == true)
    }

    @Test func credentialsInURLAreRefused() {
        let p = problems("mqtt:\n  url: mqtt://user:pw@host\n")
        #expect(p.count == 1)
        #expect(p[0].message.contains("credentials in the URL are not allowed"))
        #expect(!p[0].description.contains("pw@"))
    }

    @Test func theExampleConfigIsValidAndItsDefaultsAreTheCodeDefaults() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let example = try SwitchyardConfig.load(path: root.appendingPathComponent("config.example.yaml").path, upstreams: upstreams,
                                                environment: [:])
        var defaults = try SwitchyardConfig.parse(yaml: "", file: "empty.yaml", environment: [:])
        defaults.file = example.file
        #expect(example == defaults)
        #expect(example.redactedJSON == defaults.redactedJSON)
    }

    /// Every registered upstream is documented: a commented block in config.example.yaml that is valid.
    @Test func everyRegisteredUpstreamHasAValidExampleBlock() throws {
        let env = ["LIFX_TOKEN": "x", "IMP_HALL_CLOCK": "abcdefABCDEF", "LIVECODING_SECRET": "s", "HA_TOKEN": "t"]
        for u in upstreams {
            let c = try SwitchyardConfig.parse(yaml: try exampleBlock(u.key), file: "example", environment: env)
            #expect(c.upstreams.map(\.key) == [u.key])
        }
    }

    /// One source for an adapter's id: what each registered upstream's adapter calls itself (its topic
    /// segment, the id the engine keeps it by) is the upstream's config key.
    @Test func everyUpstreamsAdapterIDIsItsKey() throws {
        let env = ["LIFX_TOKEN": "x", "IMP_HALL_CLOCK": "abcdefABCDEF", "LIVECODING_SECRET": "s", "HA_TOKEN": "t"]
        #expect(upstreams.count == 6)
        for u in upstreams {
            let c = try SwitchyardConfig.parse(yaml: try exampleBlock(u.key), file: "example", environment: env)
            let configured = try #require(c.upstreams.first)
            #expect(configured.makeAdapter().id == u.key, "\(u.key)")
        }
    }

    /// The README's examples are valid config, read by the bridge's own registration list.
    @Test func theREADMEsConfigExamplesAreValid() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let blocks = readme.components(separatedBy: "```yaml\n").dropFirst().map { $0.components(separatedBy: "\n```")[0] }
        #expect(blocks.count >= 5)
        let env = ["LIFX_TOKEN": "x", "IMP_HALL_CLOCK": "abcdefABCDEF", "HA_TOKEN": "t"]
        for yaml in blocks {
            let c = try SwitchyardConfig.parse(yaml: yaml, file: "README.md", environment: env)
            #expect(c.upstreams.count == 1, "\(yaml)")
        }
    }

    /// The effective config on bridge/info is derived from the reading: nothing is written by hand, so a
    /// key that holds a secret must show as `***` (or null) however it was read. The whole example, every
    /// upstream at once, with a value for every secret.
    @Test func everyKeyNamedLikeASecretIsRedacted() throws {
        let env = ["LIFX_TOKEN": "lifx-\(UUID())", "IMP_HALL_CLOCK": "abcdefABCDEF", "LIVECODING_SECRET": "lc-\(UUID())",
                   "HA_TOKEN": "ha-\(UUID())"]
        var yaml = "mqtt: {username: u, password: \"mq-\(UUID())\"}\n"
        for u in upstreams { yaml += try exampleBlock(u.key) + "\n" }
        let c = try SwitchyardConfig.parse(yaml: yaml, file: "all", environment: env)
        #expect(c.upstreams.count == upstreams.count)
        var checked: [String] = []
        func walk(_ v: JSONValue, _ path: String) {
            switch v {
            case .object(let o):
                for (k, x) in o {
                    let p = path.isEmpty ? k : "\(path).\(k)"
                    if Self.looksSecret(k) {
                        checked.append(p)
                        #expect(x == "***" || x == .null, "\(p) is shown as \(x.serialized)")
                    }
                    walk(x, p)
                }
            case .array(let a): for x in a { walk(x, path) }
            default: break
            }
        }
        walk(c.redactedJSON, "")
        #expect(Set(checked).isSuperset(of: ["mqtt.password", "lifx.token", "imp.devices.agent_id", "livecoding.client_secret", "ha.token"]))
        let text = c.redactedJSON.serialized
        #expect(c.secretValues.count >= 5)
        for secret in c.secretValues { #expect(!text.contains(secret)) }
        // And every key an upstream declares secret is shown as *** (its example gives it a value).
        for u in upstreams {
            for key in u.secretKeys {
                var v: JSONValue? = c.redactedJSON[u.key]
                for part in key.split(separator: ".") { v = v?.arrayValue?.first?[String(part)] ?? v?[String(part)] }
                #expect(v == "***", "\(u.key).\(key) is declared secret but shows \(v?.serialized ?? "nothing")")
            }
        }
    }

    static func looksSecret(_ key: String) -> Bool {
        let k = key.lowercased()
        return ["token", "secret", "password", "passwd", "agent_id", "api_key", "apikey", "credential", "private_key"].contains { k.contains($0) }
            && !k.hasSuffix("_file") && k != "token_store"
    }

    @Test func theLIFXSectionIsReadWithItsSecretAndNames() throws {
        let c = try SwitchyardConfig.parse(yaml: """
        lifx:
          token: ${LIFX_TOKEN}
          api_url: http://127.0.0.1:8080/v1/
          poll_interval: 10
          names:
            D073D5014C49: kitchen/ceiling
        """, file: "t.yaml", environment: ["LIFX_TOKEN": "tok-123"])
        let l = try #require(c.lifx)
        #expect(l.token == "tok-123" && l.apiURL == "http://127.0.0.1:8080/v1" && l.pollInterval == 10)
        #expect(l.names == ["d073d5014c49": "kitchen/ceiling"])
        #expect(c.secretValues.contains("tok-123"))
        #expect(c.redactedJSON["lifx"]?["token"] == "***")
        #expect(!c.redactedJSON.serialized.contains("tok-123"))
    }

    @Test func lifxProblemsAreEachReportedWithTheirKey() {
        let p = problems("""
        lifx:
          token: t
          api_url: http://api.lifx.com/v1
          min_interval: -1
          names:
            nothex: kitchen
            d073d5014c49: group/kitchen
          colour: red
        """)
        let paths = p.map(\.path)
        #expect(paths.contains("lifx.api_url") && paths.contains("lifx.min_interval") && paths.contains("lifx.colour"))
        #expect(paths.contains("lifx.names.nothex") && paths.contains("lifx.names.d073d5014c49"))
        #expect(p.first { $0.path == "lifx.api_url" }?.message.contains("https") == true)
        #expect(p.allSatisfy { $0.line > 1 })
    }

    @Test func theExampleLIFXBlockShowsTheCodeDefaults() throws {
        let block = try exampleBlock("lifx")
        let c = try SwitchyardConfig.parse(yaml: block, file: "example", environment: ["LIFX_TOKEN": "x"])
        var l = try #require(c.lifx)
        l.token = nil
        l.names = [:]
        #expect(l == LIFXSettings())
    }

    @Test func theExampleImpBlockIsValidWithTheCodeDefaults() throws {
        let block = try exampleBlock("imp")
        let c = try SwitchyardConfig.parse(yaml: block, file: "example", environment: ["IMP_HALL_CLOCK": "abcdefABCDEF"])
        let imp = try #require(c.imp)
        let defaults = ImpSettings()
        #expect(imp.baseURL == defaults.baseURL && imp.pollInterval == defaults.pollInterval && imp.timeout == defaults.timeout)
        #expect(imp.devices == [.init(name: "hall_clock", agentID: "abcdefABCDEF", app: "matrixclock")])
        #expect(imp.profiles.first?.fields.map(\.name) == ["power", "brightness"])
        #expect(c.redactedJSON["imp"]?["devices"]?.arrayValue?.first?["agent_id"] == "***")
    }

    @Test func theExampleLivecodingBlockShowsTheCodeDefaults() throws {
        let c = try SwitchyardConfig.parse(yaml: "state_dir: /srv/sy\n" + (try exampleBlock("livecoding")), file: "example",
                                           environment: ["LIVECODING_SECRET": "s3cr3t"])
        var l = try #require(c.livecoding)
        #expect(l.tokenStore == "/srv/sy/livecoding-token.json" && l.clientSecret == "s3cr3t" && l.channels == ["karrmarr"])
        #expect(c.redactedJSON["livecoding"]?["client_secret"] == "***")
        l.clientID = ""
        l.clientSecret = nil
        l.channels = []
        l.tokenStore = LivecodingSettings().tokenStore
        #expect(l == LivecodingSettings())
    }

    @Test func livecodingChannelsMayNotBeNamedAuth() {
        let p = problems("livecoding:\n  client_id: x\n  scopes: [chat]\n  channels: [ok, auth]\n")
        #expect(p.contains { $0.path == "livecoding.channels" && $0.message.contains("'auth' cannot be a channel name") })
        #expect(p.contains { $0.path == "livecoding.scopes" && $0.message.contains("read scope is required") })
    }

    @Test func theExampleHABlockShowsTheCodeDefaults() throws {
        let c = try SwitchyardConfig.parse(yaml: try exampleBlock("ha"), file: "example", environment: ["HA_TOKEN": "t0k"])
        var h = try #require(c.ha)
        #expect(h.token == "t0k" && c.redactedJSON["ha"]?["token"] == "***")
        h.token = nil
        #expect(h == HAMirrorSettings())
        #expect(problems("ha:\n  url: http://ha:8123\n  feed: rest\n").map(\.path) == ["ha.url", "ha.feed"])
    }

    @Test func theExampleNovaBlockIsTheDefaults() throws {
        let c = try SwitchyardConfig.parse(yaml: try exampleBlock("nova"), file: "example")
        var n = try #require(c.nova)
        #expect(n.names == ["D0:39:72:AA:BB:CC": "key_light"])
        n.names = [:]
        #expect(n == NovaAdapterSettings())
    }

    /// A commented-out section of config.example.yaml, uncommented.
    func exampleBlock(_ key: String) throws -> String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("config.example.yaml"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let start = try #require(lines.firstIndex(of: "# \(key):"))
        return lines[start...].prefix { $0.hasPrefix("#") }.map { String($0.dropFirst(2)) }.joined(separator: "\n")
    }
}
