#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// The whole configuration, read once from one YAML file: the bridge's own sections here, each
/// upstream's section by its registration (`Upstream`). Defaults are documented in
/// `config.example.yaml`; every key there is read here or by its upstream, and nowhere else.
public struct SwitchyardConfig: Sendable, Equatable {
    public struct Log: Sendable, Equatable {
        public var level = "info"
        public var format = "text"
    }

    public struct TLS: Sendable, Equatable {
        public var caFile: String?
        public var caPath: String?
        public var certFile: String?
        public var keyFile: String?
        public var verify = true
    }

    public struct MQTT: Sendable, Equatable {
        public var url = "mqtt://127.0.0.1:1883"
        public var host = "127.0.0.1"
        public var port = 1883
        public var useTLS = false
        public var baseTopic = "switchyard"
        /// 4 (MQTT 3.1.1) or 5.
        public var protocolVersion = 4
        public var clientID = "switchyard-switchyard"
        public var username: String?
        public var password: String?
        public var keepalive = 60
        public var sessionExpiry = 3600
        public var commandMaxAge = 30.0
        public var maxPayload = 256 * 1024
        public var maxInflight = 100
        public var outboxMaxEvents = 10_000
        public var outboxMaxEventBytes = 8 << 20
        public var inboundMaxMessages = 1_000
        public var inboundMaxBytes = 4 << 20
        public var reconnectMinDelay = 0.1
        public var reconnectMaxDelay = 1.0
        public var connectTimeout = 10.0
        public var stuckAfter = 120.0
        public var tls = TLS()
    }

    public struct HomeAssistant: Sendable, Equatable {
        public var discovery = true
        public var prefix = "homeassistant"
        public var statusTopic = "homeassistant/status"
        /// `origin.support_url` in every discovery config; none unless configured.
        public var supportURL: String?
        /// `device` (one config per device, Home Assistant 2024.11 and later) or `entity` (one per entity).
        public var discoveryMode = "device"
    }

    public var file = "config.yaml"
    public var stateDir = "/var/lib/switchyard"
    public var log = Log()
    public var mqtt = MQTT()
    public var homeassistant = HomeAssistant()
    public var healthInterval = 60.0
    public var web = Web()
    /// Every upstream section present in the file, in the order of the registration list.
    public var upstreams: [ConfiguredUpstream] = []
    /// The effective config for bridge/info, every secret replaced by "***" (derived from the reading).
    public var redactedJSON: JSONValue = .object([:])
    /// Every secret value read (for leak checks in tests); never printed.
    public var secretValues: [String] = []

    public init() {}

    public static func == (a: SwitchyardConfig, b: SwitchyardConfig) -> Bool {
        a.file == b.file && a.stateDir == b.stateDir && a.log == b.log && a.mqtt == b.mqtt && a.homeassistant == b.homeassistant
            && a.healthInterval == b.healthInterval && a.web == b.web && a.upstreams.count == b.upstreams.count
            && zip(a.upstreams, b.upstreams).allSatisfy { $0.isSame(as: $1) }
    }

    /// The configured upstream with this key, if its section is in the file.
    public func upstream(_ key: String) -> ConfiguredUpstream? { upstreams.first { $0.key == key } }

    /// The settings of a registered upstream, if its section is in the file.
    public func settings<U: Upstream>(_ u: U) -> U.Settings? { upstream(u.key)?.settings as? U.Settings }

    /// Reads and validates a config file. Throws every problem at once.
    public static func load(path: String, upstreams: [any Upstream],
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigErrors) -> SwitchyardConfig {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigErrors(problems: [ConfigProblem(file: path, line: 1, column: 1, path: "", message: "cannot read the config file")])
        }
        return try parse(yaml: text, file: path, upstreams: upstreams, environment: environment)
    }

    public static func parse(yaml: String, file: String, upstreams: [any Upstream],
                             environment: [String: String] = [:]) throws(ConfigErrors) -> SwitchyardConfig {
        let root: YAMLNode?
        do {
            root = try YAMLDocument.compose(yaml)
        } catch {
            throw ConfigErrors(problems: [ConfigProblem(file: file, line: error.mark.line, column: error.mark.column, path: "", message: error.message)])
        }
        let reader = ConfigReader(file: file, environment: environment)
        var c = SwitchyardConfig()
        c.file = file
        let top = ConfigSection(reader: reader, path: "", node: root)

        c.stateDir = top.string("state_dir", environment["STATE_DIRECTORY"] ?? "/var/lib/switchyard")

        let log = top.section("log")
        c.log.level = log.choice("level", "info", ["trace", "debug", "info", "notice", "warning", "error", "critical"])
        c.log.format = log.choice("format", "text", ["text", "json"])
        log.finish()

        readMQTT(top.section("mqtt"), into: &c.mqtt)

        let ha = top.section("homeassistant")
        c.homeassistant.discovery = ha.bool("discovery", true)
        c.homeassistant.prefix = topicPrefix(ha, "prefix", "homeassistant")
        c.homeassistant.statusTopic = topicPrefix(ha, "status_topic", "homeassistant/status")
        c.homeassistant.discoveryMode = ha.choice("discovery_mode", "device", ["device", "entity"])
        if let (url, _) = ha.scalar("support_url") {
            if url.hasPrefix("https://") || url.hasPrefix("http://") { c.homeassistant.supportURL = url } else {
                ha.problem(at: "support_url", "expected an http(s):// URL, got '\(url)'")
            }
        }
        ha.finish()

        let health = top.section("health")
        c.healthInterval = health.double("interval", 60, min: 1, max: 86_400)
        health.finish()

        readWeb(top.section("web"), into: &c.web)

        let bridge = BridgeConfigContext(baseTopic: c.mqtt.baseTopic, stateDir: c.stateDir)
        for u in upstreams where top.has(u.key) {
            c.upstreams.append(u.configure(top.section(u.key), bridge: bridge))
        }
        top.finish()
        c.redactedJSON = top.redacted
        c.secretValues = reader.secrets
        if !reader.problems.isEmpty { throw ConfigErrors(problems: reader.problems) }
        return c
    }

    static func topicPrefix(_ s: ConfigSection, _ key: String, _ def: String) -> String {
        guard let (v, mark) = s.scalar(key) else { s.record(key, .string(def)); return def }
        if v.isEmpty || v.contains("+") || v.contains("#") || v.hasPrefix("/") || v.hasSuffix("/") {
            s.reader.problem(mark, s.key(key), "'\(v)' is not a valid topic (no + or #, no leading or trailing /)")
            s.record(key, .string(def))
            return def
        }
        return v
    }

    static func readMQTT(_ m: ConfigSection, into c: inout MQTT) {
        let r = m.reader
        if let (url, mark) = m.scalar("url") {
            c.url = url
            if let comps = URLComponents(string: url), let scheme = comps.scheme?.lowercased(), ["mqtt", "mqtts"].contains(scheme),
               let host = comps.host, !host.isEmpty {
                if comps.user != nil || comps.password != nil {
                    r.problem(mark, m.key("url"), "credentials in the URL are not allowed: use mqtt.username and mqtt.password (or password_file)")
                }
                c.useTLS = scheme == "mqtts"
                c.host = host
                c.port = comps.port ?? (c.useTLS ? 8883 : 1883)
            } else {
                r.problem(mark, m.key("url"), "expected mqtt://host[:port] or mqtts://host[:port], got '\(url)'")
            }
        }
        // Shown normalised: never anything of the URL but its scheme, host and port.
        m.record("url", .string("\(c.useTLS ? "mqtts" : "mqtt")://\(c.host):\(c.port)"))
        c.baseTopic = topicPrefix(m, "base_topic", "switchyard")
        switch m.choice("protocol", "3.1.1", ["3.1.1", "5", "5.0"]) {
        case "5", "5.0": c.protocolVersion = 5
        default: c.protocolVersion = 4
        }
        c.clientID = m.string("client_id", "switchyard-\(c.baseTopic.replacing("/", with: "-"))")
        if c.clientID.isEmpty || c.clientID.utf8.count > 65_535 { r.problem(m.mark(of: "client_id"), m.key("client_id"), "must not be empty") }
        c.username = m.string("username")
        c.password = m.secret("password")
        if c.password != nil && c.username == nil {
            r.problem(m.mark(of: "password"), m.key("password"), "a password needs mqtt.username")
        }
        c.keepalive = m.int("keepalive", 60, min: 5, max: 65_535)
        c.sessionExpiry = m.int("session_expiry", 3600, min: 0, max: 4_294_967_295)
        c.commandMaxAge = m.double("command_max_age", 30, min: 0)
        c.maxPayload = m.int("max_payload", 256 * 1024, min: 1, max: 268_435_455)
        c.maxInflight = m.int("max_inflight", 100, min: 1, max: 65_535)
        let outbox = m.section("outbox")
        c.outboxMaxEvents = outbox.int("max_events", 10_000, min: 0, max: 10_000_000)
        c.outboxMaxEventBytes = outbox.int("max_event_bytes", 8 << 20, min: 0, max: 1 << 40)
        outbox.finish()
        let inbound = m.section("inbound")
        c.inboundMaxMessages = inbound.int("max_messages", 1_000, min: 1, max: 1_000_000)
        c.inboundMaxBytes = inbound.int("max_bytes", 4 << 20, min: 1, max: 1 << 40)
        inbound.finish()
        let rc = m.section("reconnect")
        c.reconnectMinDelay = rc.double("min_delay", 0.1, min: 0.01, max: 3600)
        c.reconnectMaxDelay = rc.double("max_delay", 1, min: 0.01, max: 86_400)
        c.connectTimeout = rc.double("connect_timeout", 10, min: 0.1, max: 3600)
        c.stuckAfter = rc.double("stuck_after", 120, min: 1, max: 86_400)
        if c.reconnectMaxDelay < c.reconnectMinDelay {
            r.problem(rc.mark(of: "max_delay"), rc.key("max_delay"), "must not be smaller than min_delay")
        }
        rc.finish()
        let tls = m.section("tls")
        c.tls.caFile = tls.string("ca_file")
        c.tls.caPath = tls.string("ca_path")
        c.tls.certFile = tls.string("cert_file")
        c.tls.keyFile = tls.string("key_file")
        c.tls.verify = tls.bool("verify", true)
        for (k, v) in [("ca_file", c.tls.caFile), ("cert_file", c.tls.certFile), ("key_file", c.tls.keyFile)] {
            if let v, !FileManager.default.isReadableFile(atPath: v) {
                r.problem(tls.mark(of: k), tls.key(k), "file '\(v)' cannot be read")
            }
        }
        if (c.tls.certFile == nil) != (c.tls.keyFile == nil) {
            r.problem(tls.mark, tls.path, "cert_file and key_file go together")
        }
        if tls.has("ca_file") || tls.has("cert_file"), !c.useTLS {
            r.problem(tls.mark, tls.path, "TLS settings need an mqtts:// url")
        }
        tls.finish()
        m.finish()
    }


    /// The broker URL without credentials, for bridge/info.
    public var brokerURL: String { "\(mqtt.useTLS ? "mqtts" : "mqtt")://\(mqtt.host):\(mqtt.port)" }
}
