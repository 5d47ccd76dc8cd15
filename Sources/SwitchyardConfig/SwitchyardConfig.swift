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
        /// MQTT 5 topic aliases the bridge may use on a connection (0: none).
        public var maxTopicAliases = 1_000
        /// MQTT 5 Message Expiry Interval of non-retained events, log lines and results, seconds (0: none).
        public var expiryEvents = 0
        public var expiryLogs = 0
        public var expiryResults = 0
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

    /// The bridge's requests (`api:`).
    public struct API: Sendable, Equatable {
        /// The management requests MQTT clients may make (`api.manage`): every one (true, the default), none
        /// (false) or those listed. The console's are not limited by it (its own token guards it).
        public var manage: Set<String> = Self.verbs
        /// Every request that changes the config (`api.manage` lists some of these): the management requests and
        /// those that change groups and scenes.
        public static let verbs = Set(["device/rename", "device/options", "device/remove", "options"] + GroupEdits.paths)
        public init() {}
    }

    public var file = "config.yaml"
    public var stateDir = "/var/lib/switchyard"
    public var log = Log()
    public var mqtt = MQTT()
    public var homeassistant = HomeAssistant()
    public var api = API()
    public var healthInterval = 60.0
    public var web = Web()
    public var standby = Standby()
    /// Every upstream section present in the file, in the order of the registration list.
    public var upstreams: [ConfiguredUpstream] = []
    /// The effective config for bridge/info, every secret replaced by "***" (derived from the reading).
    public var redactedJSON: JSONValue = .object([:])
    /// Every secret value read (for leak checks in tests); never printed.
    public var secretValues: [String] = []
    /// Per-device options (`devices:`), by adapter and device name.
    public var deviceOptions: [String: [String: DeviceOptions]] = [:]
    /// Groups and scenes (`groups:`, `scenes:`).
    public var groups = GroupsConfig()
    /// The bytes this config was read from (the main file and its changes file), for editing it and for
    /// noticing that the files changed since (`ConfigEditor`). Not part of `==`.
    public var source: ConfigSource?

    public init() {}

    public static func == (a: SwitchyardConfig, b: SwitchyardConfig) -> Bool {
        a.file == b.file && a.stateDir == b.stateDir && a.log == b.log && a.mqtt == b.mqtt && a.homeassistant == b.homeassistant
            && a.healthInterval == b.healthInterval && a.api == b.api && a.web == b.web && a.standby == b.standby && a.deviceOptions == b.deviceOptions
            && a.groups == b.groups
            && a.upstreams.count == b.upstreams.count
            && zip(a.upstreams, b.upstreams).allSatisfy { $0.isSame(as: $1) }
    }

    /// The configured upstream with this key, if its section is in the file.
    public func upstream(_ key: String) -> ConfiguredUpstream? { upstreams.first { $0.key == key } }

    /// The settings of a registered upstream, if its section is in the file.
    public func settings<U: Upstream>(_ u: U) -> U.Settings? { upstream(u.key)?.settings as? U.Settings }

    /// Reads and validates a config file, with its changes file (`ConfigSource.changesFile`) merged over it
    /// when there is one. Throws every problem of both at once, each with its own file's position.
    public static func load(path: String, upstreams: [any Upstream],
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigErrors) -> SwitchyardConfig {
        guard let bytes = ConfigFiles.read(path) else {
            throw ConfigErrors(problems: [ConfigProblem(file: path, line: 1, column: 1, path: "", message: "cannot read the config file")])
        }
        let source = ConfigSource.locate(path: path, bytes: bytes, environment: environment)
        if let p = source.changesProblem {
            throw ConfigErrors(problems: [ConfigProblem(file: source.changesPath, line: 1, column: 1, path: "", message: p)])
        }
        return try read(source, upstreams: upstreams, environment: environment)
    }

    /// One file's text, without a changes file.
    public static func parse(yaml: String, file: String, upstreams: [any Upstream],
                             environment: [String: String] = [:]) throws(ConfigErrors) -> SwitchyardConfig {
        try read(ConfigSource(path: file, bytes: Array(yaml.utf8), changesPath: "", changes: nil), upstreams: upstreams, environment: environment)
    }

    /// Reads the files of `source`: the main file, and its changes merged over it key by key.
    public static func read(_ source: ConfigSource, upstreams: [any Upstream],
                            environment: [String: String] = [:]) throws(ConfigErrors) -> SwitchyardConfig {
        let file = source.path
        var root: YAMLNode?
        var overlay: YAMLNode?
        var syntax: [ConfigProblem] = []
        do {
            root = try YAMLDocument.compose(String(decoding: source.bytes, as: UTF8.self))
        } catch {
            syntax.append(ConfigProblem(file: file, line: error.mark.line, column: error.mark.column, path: "", message: error.message))
        }
        if let changes = source.changes {
            do {
                overlay = try YAMLDocument.compose(String(decoding: changes, as: UTF8.self), file: 1)
            } catch {
                syntax.append(ConfigProblem(file: source.changesPath, line: error.mark.line, column: error.mark.column, path: "", message: error.message))
            }
        }
        if !syntax.isEmpty { throw ConfigErrors(problems: syntax) }
        let reader = ConfigReader(files: [file, source.changesPath], environment: environment)
        if let overlay {
            if case .mapping(let pairs, _) = overlay, let sd = pairs.first(where: { if case .scalar(let k) = $0.key { k.string == "state_dir" } else { false } }) {
                reader.problem(sd.key.mark, "state_dir", "cannot be changed in \(source.changesPath): that file is found under state_dir; change it in \(file)")
            }
            root = YAMLNode.merge(root, overlay)
        }
        var c = try read(root: root, reader: reader, upstreams: upstreams, environment: environment)
        c.source = source
        return c
    }

    static func read(root: YAMLNode?, reader: ConfigReader, upstreams: [any Upstream],
                     environment: [String: String]) throws(ConfigErrors) -> SwitchyardConfig {
        let file = reader.file
        var c = SwitchyardConfig()
        c.file = file
        let top = ConfigSection(reader: reader, path: "", node: root)

        top.restart = .bridge
        c.stateDir = top.string("state_dir", environment["STATE_DIRECTORY"] ?? "/var/lib/switchyard",
                                doc: "Where the bridge writes files (Livecoding tokens, config-changes.yaml); default $STATE_DIRECTORY under systemd.")

        let log = top.section("log", doc: "Logging.")
        log.restart = .atOnce
        log.restart("format", .bridge)
        c.log.level = log.choice("level", "info", ["trace", "debug", "info", "notice", "warning", "error", "critical"],
                                 doc: "The least severe level logged (--log-level outranks it).")
        c.log.format = log.choice("format", "text", ["text", "json"], doc: "text, or json: one object per line.")
        log.finish()

        let mqtt = top.section("mqtt", doc: "The MQTT broker and how the bridge talks to it.")
        mqtt.restart = .bridge
        readMQTT(mqtt, into: &c.mqtt)

        let ha = top.section("homeassistant", doc: "Home Assistant MQTT discovery.")
        ha.restart = .bridge
        c.homeassistant.discovery = ha.bool("discovery", true, doc: "Announce devices to Home Assistant by MQTT discovery.")
        c.homeassistant.prefix = topicPrefix(ha, "prefix", "homeassistant", doc: "Home Assistant's discovery prefix.")
        c.homeassistant.statusTopic = topicPrefix(ha, "status_topic", "homeassistant/status",
                                                  doc: "Home Assistant's birth topic: \"online\" there re-announces every device.")
        c.homeassistant.discoveryMode = ha.choice("discovery_mode", "device", ["device", "entity"],
                                                  doc: "device: one retained config per device (Home Assistant 2024.11 and later); entity: one per entity.")
        if let (url, _) = ha.scalar("support_url", doc: "An http(s):// link shown in Home Assistant as the integration's support link.") {
            if url.hasPrefix("https://") || url.hasPrefix("http://") { c.homeassistant.supportURL = url } else {
                ha.problem(at: "support_url", "expected an http(s):// URL, got '\(url)'")
            }
        }
        ha.finish()

        let health = top.section("health", doc: "The bridge's health report (bridge/health).")
        health.restart = .atOnce
        c.healthInterval = health.double("interval", 60, min: 1, max: 86_400, doc: "Seconds between bridge/health publishes.")
        health.finish()

        let api = top.section("api", doc: "The bridge's requests on <base>/bridge/request/….")
        api.restart = .atOnce
        readAPI(api, into: &c.api)
        api.finish()

        let web = top.section("web", doc: "The operator console (docs/console.md): the page, /metrics, /livez and /readyz.")
        web.restart = .console
        readWeb(web, into: &c.web)
        let standby = top.section("standby", doc: "Hot standby (docs/operations.md \"Two bridges, one home\"): instances with the same base topic and client id, one active at a time.")
        standby.restart = .bridge
        readStandby(standby, into: &c.standby)

        let bridge = BridgeConfigContext(baseTopic: c.mqtt.baseTopic, stateDir: c.stateDir)
        for u in upstreams where top.has(u.key) {
            c.upstreams.append(u.configure(top.section(u.key, doc: u.summary), bridge: bridge))
        }
        c.deviceOptions = DeviceOptions.read(top.section("devices", doc: "Per-device options, by adapter and stable device id."),
                                             adapters: upstreams.map(\.key))
        c.groups = GroupsReader.read(groups: top.section("groups", doc: "Groups of devices of any adapter, each a device at <base>/group/<name>."),
                                     scenes: top.section("scenes", doc: "Scenes, each a device at <base>/scene/<name>: the state each of its devices or groups takes."),
                                     adapters: upstreams.map(\.key))
        top.finish()
        c.redactedJSON = top.redacted
        c.secretValues = reader.secrets
        if !reader.problems.isEmpty { throw ConfigErrors(problems: reader.problems) }
        return c
    }

    static func topicPrefix(_ s: ConfigSection, _ key: String, _ def: String, doc: String) -> String {
        guard let (v, mark) = s.scalar(key, doc: doc, shownDefault: .string(def)) else { s.record(key, .string(def)); return def }
        if v.isEmpty || v.contains("+") || v.contains("#") || v.hasPrefix("/") || v.hasSuffix("/") {
            s.reader.problem(mark, s.key(key), "'\(v)' is not a valid topic (no + or #, no leading or trailing /)")
            s.record(key, .string(def))
            return def
        }
        return v
    }

    static func readMQTT(_ m: ConfigSection, into c: inout MQTT) {
        let r = m.reader
        if let (url, mark) = m.scalar("url", doc: "mqtt://host[:port] or mqtts://host[:port] (default ports 1883 and 8883); no credentials here.",
                                      shownDefault: "mqtt://127.0.0.1:1883") {
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
        c.baseTopic = topicPrefix(m, "base_topic", "switchyard", doc: "Every topic of the bridge starts with this.")
        switch m.choice("protocol", "3.1.1", ["3.1.1", "5", "5.0"], doc: "The MQTT protocol version: 3.1.1 or 5.") {
        case "5", "5.0": c.protocolVersion = 5
        default: c.protocolVersion = 4
        }
        c.clientID = m.string("client_id", "switchyard-\(c.baseTopic.replacing("/", with: "-"))",
                              doc: "The MQTT client id, stable for the persistent session; default switchyard-<base_topic>.")
        if c.clientID.isEmpty || c.clientID.utf8.count > 65_535 { r.problem(m.mark(of: "client_id"), m.key("client_id"), "must not be empty") }
        c.username = m.string("username", doc: "The broker user name.")
        c.password = m.secret("password", doc: "The broker password (needs username).")
        if c.password != nil && c.username == nil {
            r.problem(m.mark(of: "password"), m.key("password"), "a password needs mqtt.username")
        }
        c.keepalive = m.int("keepalive", 60, min: 5, max: 65_535, doc: "Seconds between keepalive pings.")
        c.sessionExpiry = m.int("session_expiry", 3600, min: 0, max: 4_294_967_295,
                                doc: "MQTT 5 session expiry, seconds (3.1.1 uses clean_session=false).")
        c.commandMaxAge = m.double("command_max_age", 30, min: 0,
                                   doc: "Seconds; older commands are dropped when their age is known (MQTT 5 user property timestamp).")
        c.maxPayload = m.int("max_payload", 256 * 1024, min: 1, max: 268_435_455,
                             doc: "Bytes: a larger inbound payload is refused with a bridge/log line.")
        c.maxInflight = m.int("max_inflight", 100, min: 1, max: 65_535, doc: "QoS 1 messages awaiting PUBACK at once; the rest wait in the outbox.")
        c.maxTopicAliases = m.int("max_topic_aliases", 1_000, min: 0, max: 65_535,
                                  doc: "MQTT 5 topic aliases the bridge may use on a connection (0: none; fewer when the broker allows fewer).")
        let expiry = m.section("message_expiry", doc: "MQTT 5 Message Expiry Interval of non-retained messages, seconds (0: never).")
        c.expiryEvents = expiry.int("events", 0, min: 0, max: 4_294_967_295, doc: "Seconds a bridge/event message lives on the broker (0: never expires).")
        c.expiryLogs = expiry.int("logs", 0, min: 0, max: 4_294_967_295, doc: "Seconds a bridge/log message lives on the broker (0: never expires).")
        c.expiryResults = expiry.int("results", 0, min: 0, max: 4_294_967_295,
                                     doc: "Seconds a result or response lives on the broker (0: never expires).")
        expiry.finish()
        let outbox = m.section("outbox", doc: "What is kept while the broker is away.")
        c.outboxMaxEvents = outbox.int("max_events", 10_000, min: 0, max: 10_000_000,
                                       doc: "Non-retained messages kept while disconnected; the oldest is dropped past this.")
        c.outboxMaxEventBytes = outbox.int("max_event_bytes", 8 << 20, min: 0, max: 1 << 40,
                                           doc: "Payload bytes of the non-retained messages kept while disconnected.")
        outbox.finish()
        let inbound = m.section("inbound", doc: "Received messages waiting for the bridge's core; at either bound the socket is not read.")
        c.inboundMaxMessages = inbound.int("max_messages", 1_000, min: 1, max: 1_000_000, doc: "Messages waiting at most.")
        c.inboundMaxBytes = inbound.int("max_bytes", 4 << 20, min: 1, max: 1 << 40, doc: "Payload bytes waiting at most.")
        inbound.finish()
        let rc = m.section("reconnect", doc: "Reconnecting after a lost connection (the first attempt is immediate).")
        c.reconnectMinDelay = rc.double("min_delay", 0.1, min: 0.01, max: 3600, doc: "Seconds before the second attempt; the delay doubles per failure.")
        c.reconnectMaxDelay = rc.double("max_delay", 1, min: 0.01, max: 86_400, doc: "Seconds: the longest delay between attempts (at least min_delay).")
        c.connectTimeout = rc.double("connect_timeout", 10, min: 0.1, max: 3600, doc: "Seconds without a CONNACK that make an attempt fail.")
        c.stuckAfter = rc.double("stuck_after", 120, min: 1, max: 86_400,
                                 doc: "Seconds without a connection after which the MQTT client is destroyed and made anew.")
        if c.reconnectMaxDelay < c.reconnectMinDelay {
            r.problem(rc.mark(of: "max_delay"), rc.key("max_delay"), "must not be smaller than min_delay")
        }
        rc.finish()
        let tls = m.section("tls", doc: "TLS, with an mqtts:// url only.")
        c.tls.caFile = tls.string("ca_file", doc: "A PEM file of CA certificates (default: the system's store).")
        c.tls.caPath = tls.string("ca_path", doc: "A directory of CA certificates.")
        c.tls.certFile = tls.string("cert_file", doc: "The client certificate (with key_file).")
        c.tls.keyFile = tls.string("key_file", doc: "The client certificate's key (with cert_file).")
        c.tls.verify = tls.bool("verify", true, doc: "Verify the broker's certificate and host name; false only for lab brokers.")
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


    /// `api.manage`: true, false, or a list of the requests allowed.
    static func readAPI(_ a: ConfigSection, into c: inout API) {
        let verbs = API.verbs.sorted()
        a.describe("manage", .custom(["oneOf": [["type": "boolean"], ["type": "array", "items": ["enum": .array(verbs.map(JSONValue.string))]]],
                                      "default": true],
                                     doc: "Requests that change the config MQTT clients may make (device/rename, device/options, device/remove, options, and group/… and scene/store, scene/remove for groups and scenes): true (all), false (none) or a list of them. The console is not limited by it."))
        guard let n = a.node("manage") else { a.record("manage", .bool(true)); return }
        switch n {
        case .scalar(let s):
            guard let v = a.reader.expand(s.string, mark: n.mark, path: a.key("manage")) else { break }
            switch v.lowercased() {
            case "true", "yes", "on": c.manage = API.verbs
            case "false", "no", "off": c.manage = []
            default: a.problem(n.mark, key: "manage", "expected true, false or a list of \(verbs.joined(separator: ", ")), got '\(v)'")
            }
        case .sequence(let items, _):
            var allowed: Set<String> = []
            for item in items {
                guard case .scalar(let s) = item, API.verbs.contains(s.string) else {
                    a.problem(item.mark, key: "manage", "expected one of \(verbs.joined(separator: ", ")), got \(ConfigSection.kind(item))")
                    continue
                }
                allowed.insert(s.string)
            }
            c.manage = allowed
        case .mapping:
            a.problem(n.mark, key: "manage", "expected true, false or a list of \(verbs.joined(separator: ", ")), got a mapping")
        }
        let shown: JSONValue = c.manage == API.verbs ? .bool(true) : c.manage.isEmpty ? .bool(false) : .array(c.manage.sorted().map(JSONValue.string))
        a.record("manage", shown)
    }

    /// The per-device options as the engine applies them, by adapter and stable id.
    public var devicePolicies: [String: [String: DevicePolicy]] { deviceOptions.mapValues { $0.mapValues(\.policy) } }

    /// The broker URL without credentials, for bridge/info.
    public var brokerURL: String { "\(mqtt.useTLS ? "mqtts" : "mqtt")://\(mqtt.host):\(mqtt.port)" }
}
