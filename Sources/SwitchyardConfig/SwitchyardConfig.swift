#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import HomeAssistantMirror
import ImpAdapter
import LIFXAdapter
import LivecodingAdapter
import NovaAdapter
import SwitchyardCore

/// The whole configuration, read once from one YAML file. Defaults are documented in
/// `config.example.yaml`; every key there is read here and nowhere else.
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
        public var reconnectMinDelay = 1.0
        public var reconnectMaxDelay = 30.0
        public var connectTimeout = 10.0
        public var stuckAfter = 120.0
        public var tls = TLS()
    }

    public struct HomeAssistant: Sendable, Equatable {
        public var discovery = true
        public var prefix = "homeassistant"
        public var statusTopic = "homeassistant/status"
    }

    public struct VirtualDevice: Sendable, Equatable {
        public var name: String
        public var label: String
        public var type: String
        public init(name: String, label: String, type: String) {
            self.name = name
            self.label = label
            self.type = type
        }
    }

    public struct Virtual: Sendable, Equatable {
        public var devices: [VirtualDevice] = []
        public var sensorInterval = 30.0
        public init(devices: [VirtualDevice] = [], sensorInterval: Double = 30) {
            self.devices = devices
            self.sensorInterval = sensorInterval
        }
    }

    public var file = "config.yaml"
    public var stateDir = "/var/lib/switchyard"
    public var log = Log()
    public var mqtt = MQTT()
    public var homeassistant = HomeAssistant()
    public var healthInterval = 60.0
    public var virtual: Virtual?
    /// `lifx:` (the LIFX cloud API). Present without a token = the adapter runs disabled, saying why.
    public var lifx: LIFXSettings?
    /// `imp:` (Electric Imp agents).
    public var imp: ImpSettings?
    /// `livecoding:` (Livecoding.tv stream status).
    public var livecoding: LivecodingSettings?
    /// `ha:` (the Home Assistant mirror).
    public var ha: HAMirrorSettings?
    /// `nova:` (Nova Bluetooth LE flashes).
    public var nova: NovaAdapterSettings?
    /// Every secret value read (for leak checks in tests); never printed.
    public var secretValues: [String] = []

    public init() {}

    /// Reads and validates a config file. Throws every problem at once.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigErrors) -> SwitchyardConfig {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ConfigErrors(problems: [ConfigProblem(file: path, line: 1, column: 1, path: "", message: "cannot read the config file")])
        }
        return try parse(yaml: text, file: path, environment: environment)
    }

    public static func parse(yaml: String, file: String, environment: [String: String] = [:]) throws(ConfigErrors) -> SwitchyardConfig {
        let root: YAMLNode?
        do {
            root = try YAMLDocument.compose(yaml)
        } catch {
            throw ConfigErrors(problems: [ConfigProblem(file: file, line: error.mark.line, column: error.mark.column, path: "", message: error.message)])
        }
        let reader = ConfigReader(file: file, environment: environment)
        var c = SwitchyardConfig()
        c.file = file
        let top = ConfigReader.Section(reader: reader, path: "", node: root)

        c.stateDir = top.string("state_dir") ?? environment["STATE_DIRECTORY"] ?? "/var/lib/switchyard"

        let log = top.section("log")
        c.log.level = log.choice("level", "info", ["trace", "debug", "info", "notice", "warning", "error", "critical"])
        c.log.format = log.choice("format", "text", ["text", "json"])
        log.finish()

        readMQTT(top.section("mqtt"), into: &c.mqtt)

        let ha = top.section("homeassistant")
        c.homeassistant.discovery = ha.bool("discovery", true)
        c.homeassistant.prefix = topicPrefix(ha, "prefix", "homeassistant")
        c.homeassistant.statusTopic = topicPrefix(ha, "status_topic", "homeassistant/status")
        ha.finish()

        let health = top.section("health")
        c.healthInterval = health.double("interval", 60, min: 1, max: 86_400)
        health.finish()

        if top.has("virtual") {
            let v = top.section("virtual")
            var virtual = Virtual()
            virtual.sensorInterval = v.double("sensor_interval", 30, min: 0.1, max: 86_400)
            var seen: Set<String> = []
            for d in v.list("devices") {
                let name = deviceName(d, seen: &seen, missing: "every device needs a name")
                let type = d.choice("type", "light", ["light", "switch", "sensor"])
                let label = d.string("label", name)
                d.finish()
                virtual.devices.append(VirtualDevice(name: name, label: label, type: type))
            }
            v.finish()
            c.virtual = virtual
        }
        if top.has("lifx") { c.lifx = readLIFX(top.section("lifx")) }
        if top.has("imp") { c.imp = readImp(top.section("imp")) }
        if top.has("ha") { c.ha = readHA(top.section("ha"), base: c.mqtt.baseTopic) }
        if top.has("livecoding") { c.livecoding = readLivecoding(top.section("livecoding"), stateDir: c.stateDir) }
        if top.has("nova") { c.nova = readNova(top.section("nova")) }
        top.finish()
        c.secretValues = reader.secrets
        if !reader.problems.isEmpty { throw ConfigErrors(problems: reader.problems) }
        return c
    }

    static func readLIFX(_ s: ConfigReader.Section) -> LIFXSettings {
        var l = LIFXSettings()
        l.token = s.secret("token")
        l.apiURL = cloudURL(s, "api_url", l.apiURL, secret: "the token")
        l.pollInterval = s.double("poll_interval", 30, min: 2, max: 86_400)
        l.defaultTransition = s.double("default_transition", 0.5, min: 0, max: 3600)
        l.minInterval = s.double("min_interval", 0.5, min: 0, max: 60)
        l.groups = s.bool("groups", true)
        l.locations = s.bool("locations", true)
        var seen: [String: String] = [:]
        for (id, name, mark) in s.stringMap("names") {
            let path = s.key("names.\(id)")
            if id.count != 12 || !id.allSatisfy(\.isHexDigit) {
                s.reader.problem(mark, path, "'\(id)' is not a LIFX light id (12 hex digits, e.g. d073d5014c49)")
            }
            if let p = Naming.problem(withName: name, reservedPrefixes: ["group/", "location/", "scene/"]) {
                s.reader.problem(mark, path, p)
            } else if let other = seen[name] {
                s.reader.problem(mark, path, "name '\(name)' is already given to \(other)")
            }
            seen[name] = id
            l.names[id.lowercased()] = name
        }
        s.finish()
        return l
    }

    static func readHA(_ s: ConfigReader.Section, base: String) -> HAMirrorSettings {
        var h = HAMirrorSettings()
        if let (url, mark) = s.scalar("url") {
            if let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), ["ws", "wss"].contains(scheme), c.host?.isEmpty == false {
                h.url = url
            } else {
                s.reader.problem(mark, s.key("url"), "expected ws://host:8123/api/websocket or wss://…, got '\(url)'")
            }
        }
        h.token = s.secret("token")
        let entities = s.section("entities")
        h.include = entities.stringList("include").map(\.0)
        h.exclude = entities.stringList("exclude").map(\.0)
        entities.finish()
        h.events = s.stringList("events").map(\.0)
        for (e, mark) in s.stringList("events") where e.isEmpty || e.contains("/") || e.contains("+") || e.contains("#") {
            s.reader.problem(mark, s.key("events"), "'\(e)' cannot be an event topic segment")
        }
        h.publishAttributes = s.bool("publish_attributes", true)
        h.publishTimestamps = s.bool("publish_timestamps", false)
        let services = s.section("services")
        h.allow = services.stringList("allow").map(\.0)
        services.finish()
        h.feed = HAMirrorSettings.Feed(rawValue: s.choice("feed", "entities", HAMirrorSettings.Feed.allCases.map(\.rawValue))) ?? .entities
        h.ownUniqueIDPrefix = "switchyard_\(Naming.normaliseID(base))_"
        s.finish()
        return h
    }

    static func readLivecoding(_ s: ConfigReader.Section, stateDir: String) -> LivecodingSettings {
        var l = LivecodingSettings()
        l.apiURL = cloudURL(s, "api_url", l.apiURL, secret: "the token")
        l.oauthURL = cloudURL(s, "oauth_url", l.oauthURL, secret: "the client secret")
        l.clientID = s.string("client_id") ?? ""
        if l.clientID.isEmpty { s.reader.problem(s.mark, s.key("client_id"), "the client id of the app registered with Livecoding is required") }
        l.clientSecret = s.secret("client_secret")
        let scopes = s.stringList("scopes").map(\.0)
        if s.has("scopes") { l.scopes = scopes }
        let known = ["read", "read:viewer", "read:user", "read:channel", "chat"]
        for sc in l.scopes where !known.contains(sc) {
            s.reader.problem(s.mark(of: "scopes"), s.key("scopes"), "unknown scope '\(sc)' (known: \(known.joined(separator: ", ")))")
        }
        if !l.scopes.contains("read") { s.reader.problem(s.mark(of: "scopes"), s.key("scopes"), "the read scope is required") }
        l.tokenStore = s.string("token_store") ?? (stateDir.hasSuffix("/") ? stateDir : stateDir + "/") + "livecoding-token.json"
        l.redirectPort = s.int("redirect_port", 8080, min: 1, max: 65_535)
        l.redirectURI = s.string("redirect_uri") ?? "http://localhost:\(l.redirectPort)/oauth-callback"
        l.pollInterval = s.double("poll_interval", 60, min: 5, max: 86_400)
        var seen: Set<String> = []
        for (slug, mark) in s.stringList("channels") {
            if let p = Naming.problem(withName: slug) {
                s.reader.problem(mark, s.key("channels"), "'\(slug)': \(p)")
            } else if slug.lowercased() == "auth" || slug.contains("/") {
                s.reader.problem(mark, s.key("channels"), "'\(slug)' cannot be a channel name (auth is the authorisation topic; no /)")
            } else if !seen.insert(slug.lowercased()).inserted {
                s.reader.problem(mark, s.key("channels"), "duplicate channel '\(slug)'")
            }
            l.channels.append(slug)
        }
        s.finish()
        return l
    }

    static func readNova(_ s: ConfigReader.Section) -> NovaAdapterSettings {
        var n = NovaAdapterSettings()
        n.adapter = s.string("adapter", "hci0")
        if !n.adapter.hasPrefix("hci") || Int(n.adapter.dropFirst(3)) == nil {
            s.reader.problem(s.mark(of: "adapter"), s.key("adapter"), "expected an adapter name like hci0, got '\(n.adapter)'")
        }
        let scan = s.section("scan")
        n.scanDuration = scan.double("duration", 0.9, min: 0.02, max: 60)
        n.scanPeriod = scan.double("period", 4, min: 0.1, max: 3600)
        n.scanIntervalMs = scan.double("interval_ms", 10, min: 2.5, max: 10_240)
        n.scanWindowMs = scan.double("window_ms", 10, min: 2.5, max: 10_240)
        if n.scanWindowMs > n.scanIntervalMs {
            scan.reader.problem(scan.mark(of: "window_ms"), scan.key("window_ms"), "the scan window (\(n.scanWindowMs) ms) cannot exceed the interval (\(n.scanIntervalMs) ms)")
        }
        if n.scanDuration >= n.scanPeriod {
            scan.reader.problem(scan.mark(of: "duration"), scan.key("duration"), "the scan duration (\(n.scanDuration) s) must be shorter than the period (\(n.scanPeriod) s), or nothing else gets the radio")
        }
        scan.finish()
        let auto = s.section("auto_connect")
        n.autoConnect = auto.bool("enabled", true)
        n.maxFlashes = auto.int("max_flashes", 1, min: 0, max: 20)
        n.minSignal = auto.int("min_signal", 10, min: 0, max: 100)
        n.whitelist = auto.stringList("whitelist").compactMap { bluetoothAddress(auto, "whitelist", $0.0, $0.1) }
        n.blacklist = auto.stringList("blacklist").compactMap { bluetoothAddress(auto, "blacklist", $0.0, $0.1) }
        auto.finish()
        n.defaultTimeoutMs = s.int("default_timeout_ms", 10_000, min: 1, max: 65_535)
        n.connectTimeout = s.double("connect_timeout", 10, min: 1, max: 120)
        n.allowLowPWM = s.bool("allow_low_pwm", false)
        var seen: [String: String] = [:]
        for (address, name, mark) in s.stringMap("names") {
            guard let a = bluetoothAddress(s, "names.\(address)", address, mark) else { continue }
            let path = s.key("names.\(address)")
            if let p = Naming.problem(withName: name) {
                s.reader.problem(mark, path, p)
            } else if let other = seen[name] {
                s.reader.problem(mark, path, "name '\(name)' is already given to \(other)")
            }
            seen[name] = a
            n.names[a] = name
        }
        s.finish()
        return n
    }

    /// `AA:BB:CC:DD:EE:FF` (either case), returned upper case.
    static func bluetoothAddress(_ s: ConfigReader.Section, _ key: String, _ value: String, _ mark: YAMLMark?) -> String? {
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else {
            s.reader.problem(mark, s.key(key), "'\(value)' is not a Bluetooth address (six hex pairs, e.g. D0:39:72:AA:BB:CC)")
            return nil
        }
        return value.uppercased()
    }

    /// An upstream URL that carries a secret: https, or http only to a loopback simulator.
    static func cloudURL(_ s: ConfigReader.Section, _ key: String, _ def: String, secret: String) -> String {
        guard let (url, mark) = s.scalar(key) else { return def }
        if let comps = URLComponents(string: url), let scheme = comps.scheme?.lowercased(), let host = comps.host, !host.isEmpty,
           scheme == "https" || (scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host)) {
            return url.hasSuffix("/") ? String(url.dropLast()) : url
        }
        s.reader.problem(mark, s.key(key), "expected an https:// URL (http:// only for a loopback simulator: \(secret) must not travel in clear), got '\(url)'")
        return def
    }

    /// A device's `name`: present, a valid topic name, unique in its list.
    static func deviceName(_ d: ConfigReader.Section, seen: inout Set<String>, missing: String) -> String {
        let name = d.string("name") ?? ""
        if name.isEmpty {
            d.reader.problem(d.mark, d.path + ".name", missing)
        } else if let p = Naming.problem(withName: name) {
            d.reader.problem(d.mark(of: "name"), d.path + ".name", p)
        } else if !seen.insert(name).inserted {
            d.reader.problem(d.mark(of: "name"), d.path + ".name", "duplicate device name '\(name)'")
        }
        return name
    }

    static func readImp(_ s: ConfigReader.Section) -> ImpSettings {
        let r = s.reader
        var m = ImpSettings()
        m.baseURL = cloudURL(s, "base_url", m.baseURL, secret: "agent ids")
        m.pollInterval = s.double("poll_interval", 60, min: 5, max: 86_400)
        m.timeout = s.double("timeout", 60, min: 1, max: 600)
        for (name, ps) in s.sections("profiles") {
            if let p = readImpProfile(name, ps) { m.profiles.append(p) }
        }
        let known = Set(ImpProfile.builtIn.map(\.name) + m.profiles.map { $0.name.lowercased() })
        let knownList = known.sorted().joined(separator: ", ")
        for (code, profile, mark) in s.stringMap("apps") {
            if !known.contains(profile.lowercased()) {
                r.problem(mark, s.key("apps.\(code)"), "unknown profile '\(profile)' (known: \(knownList))")
            }
            m.apps[code] = profile
        }
        var seen: Set<String> = []
        for d in s.list("devices") {
            let name = deviceName(d, seen: &seen, missing: "every imp device needs a name (its stable id)")
            let agent = d.secret("agent_id")
            if agent == nil, !d.has("agent_id_file") {
                r.problem(d.mark, d.path, "give agent_id (or agent_id_file, or ${ENV}): the agent URL's last part")
            }
            if let agent, agent.count != 12 || !agent.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
                // The value is a secret: the message does not repeat it.
                r.problem(d.mark(of: d.has("agent_id") ? "agent_id" : "agent_id_file"), d.path + ".agent_id",
                          "an agent id is 12 characters of A-Z, a-z, 0-9, _ and - (the last part of https://agent.electricimp.com/<id>)")
            }
            var app: String?
            if let (a, mark) = d.scalar("app") {
                if known.contains(a.lowercased()) { app = a } else { r.problem(mark, d.path + ".app", "unknown profile '\(a)' (known: \(knownList))") }
            }
            d.finish()
            m.devices.append(.init(name: name, agentID: agent ?? "", app: app))
        }
        s.finish()
        return m
    }

    static func readImpProfile(_ name: String, _ ps: ConfigReader.Section) -> ImpProfile? {
        let r = ps.reader
        var p = ImpProfile(name: name.lowercased())
        p.statePath = impPath(ps, "state", "/controller/state")
        p.format = ImpProfile.Format(rawValue: ps.choice("format", "json", ImpProfile.Format.allCases.map(\.rawValue))) ?? .json
        p.connected = ps.string("connected")
        let reserved = ["agent", "device_connected", "app", "appcode", "action"]
        for f in ps.list("fields") {
            let fname = f.string("name") ?? ""
            if fname.isEmpty || reserved.contains(fname) || Naming.slug(fname) != fname {
                r.problem(f.mark(of: "name"), f.path + ".name", "a field name is lower-case [a-z0-9_] and not one of \(reserved.joined(separator: ", "))")
            }
            let from = f.string("from") ?? ""
            if p.format == .dotted ? Int(from) == nil : !(from.isEmpty || from.hasPrefix("/")) {
                r.problem(f.mark(of: "from"), f.path + ".from",
                          p.format == .dotted ? "an index into the dotted string (0, 1, …)" : "a JSON Pointer such as /on or /world/utc")
            }
            let kind: ImpProfile.Kind
            switch f.choice("type", "integer", ["power", "bool", "brightness", "integer", "text"]) {
            case "power": kind = .power
            case "bool": kind = .bool
            case "brightness": kind = .brightness(rawMax: f.int("raw_max", 15, min: 1, max: 65_535))
            case "text": kind = .text
            default: kind = .integer(min: f.int("min", 0), max: f.int("max", 100))
            }
            var field = ImpProfile.Field(fname, from: from, kind, readOffset: f.int("read_offset", 0), setOffset: f.int("set_offset", 0))
            if f.has("set") { field.set = impRequest(f.section("set")) }
            f.finish()
            p.fields.append(field)
        }
        for a in ps.list("actions") {
            let aname = a.string("name") ?? ""
            if aname.isEmpty { r.problem(a.mark, a.path + ".name", "every action needs a name") }
            if let req = impRequest(a) { p.actions.append(ImpProfile.Action(aname, req, repoll: a.bool("repoll", true))) }
            a.finish()
        }
        ps.finish()
        return p
    }

    static func impPath(_ s: ConfigReader.Section, _ key: String, _ def: String) -> String {
        guard let (v, mark) = s.scalar(key) else { return def }
        if !v.hasPrefix("/") { s.reader.problem(mark, s.key(key), "a path on the agent, starting with /, got '\(v)'") }
        return v
    }

    /// `{path, body}`: body is JSON text in which the string "{{value}}" stands for the value.
    static func impRequest(_ s: ConfigReader.Section) -> ImpProfile.Request? {
        let path = impPath(s, "path", "")
        if path.isEmpty { s.reader.problem(s.mark, s.key("path"), "a request needs a path") }
        var body: JSONValue = .object([:])
        if let (text, mark) = s.scalar("body") {
            do {
                body = try JSONValue.parse(text)
            } catch {
                s.reader.problem(mark, s.key("body"), "not JSON (\(error.description)); write it as JSON text, e.g. '{\"setlight\": \"{{value}}\"}'")
            }
        }
        if s.path.hasSuffix(".set") { s.finish() }
        return path.isEmpty ? nil : ImpProfile.Request(path: path, body: body)
    }

    static func topicPrefix(_ s: ConfigReader.Section, _ key: String, _ def: String) -> String {
        guard let (v, mark) = s.scalar(key) else { return def }
        if v.isEmpty || v.contains("+") || v.contains("#") || v.hasPrefix("/") || v.hasSuffix("/") {
            s.reader.problem(mark, s.key(key), "'\(v)' is not a valid topic (no + or #, no leading or trailing /)")
            return def
        }
        return v
    }

    static func readMQTT(_ m: ConfigReader.Section, into c: inout MQTT) {
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
        c.baseTopic = topicPrefix(m, "base_topic", "switchyard")
        switch m.choice("protocol", "3.1.1", ["3.1.1", "5", "5.0"]) {
        case "5", "5.0": c.protocolVersion = 5
        default: c.protocolVersion = 4
        }
        c.clientID = m.string("client_id") ?? "switchyard-\(c.baseTopic.replacing("/", with: "-"))"
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
        outbox.finish()
        let rc = m.section("reconnect")
        c.reconnectMinDelay = rc.double("min_delay", 1, min: 0.01, max: 3600)
        c.reconnectMaxDelay = rc.double("max_delay", 30, min: 0.01, max: 86_400)
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

    /// The effective config for bridge/info, every secret replaced by "***".
    public var redactedJSON: JSONValue {
        var mqtt: [String: JSONValue] = [
            "url": .string("\(mqtt.useTLS ? "mqtts" : "mqtt")://\(mqtt.host):\(mqtt.port)"),
            "base_topic": .string(mqtt.baseTopic), "protocol": .string(mqtt.protocolVersion == 5 ? "5" : "3.1.1"),
            "client_id": .string(mqtt.clientID), "keepalive": JSONValue(mqtt.keepalive), "session_expiry": JSONValue(mqtt.sessionExpiry),
            "command_max_age": .number(mqtt.commandMaxAge), "max_payload": JSONValue(mqtt.maxPayload),
            "max_inflight": JSONValue(mqtt.maxInflight), "outbox": ["max_events": JSONValue(mqtt.outboxMaxEvents)],
            "reconnect": ["min_delay": .number(mqtt.reconnectMinDelay), "max_delay": .number(mqtt.reconnectMaxDelay),
                          "connect_timeout": .number(mqtt.connectTimeout), "stuck_after": .number(mqtt.stuckAfter)],
            "tls": ["ca_file": mqtt.tls.caFile.map(JSONValue.string) ?? .null, "cert_file": mqtt.tls.certFile.map(JSONValue.string) ?? .null,
                    "key_file": mqtt.tls.keyFile.map(JSONValue.string) ?? .null, "verify": .bool(mqtt.tls.verify)],
        ]
        mqtt["username"] = self.mqtt.username.map(JSONValue.string) ?? .null
        mqtt["password"] = self.mqtt.password == nil ? .null : "***"
        var o: [String: JSONValue] = [
            "state_dir": .string(stateDir),
            "log": ["level": .string(log.level), "format": .string(log.format)],
            "mqtt": .object(mqtt),
            "homeassistant": ["discovery": .bool(homeassistant.discovery), "prefix": .string(homeassistant.prefix),
                              "status_topic": .string(homeassistant.statusTopic)],
            "health": ["interval": .number(healthInterval)],
        ]
        if let virtual {
            o["virtual"] = ["sensor_interval": .number(virtual.sensorInterval),
                            "devices": .array(virtual.devices.map { ["name": .string($0.name), "label": .string($0.label), "type": .string($0.type)] })]
        }
        if let lifx {
            o["lifx"] = ["token": lifx.token == nil ? .null : "***", "api_url": .string(lifx.apiURL),
                         "poll_interval": .number(lifx.pollInterval), "default_transition": .number(lifx.defaultTransition),
                         "min_interval": .number(lifx.minInterval), "groups": .bool(lifx.groups), "locations": .bool(lifx.locations),
                         "names": .object(lifx.names.mapValues(JSONValue.string))]
        }
        if let imp {
            o["imp"] = ["base_url": .string(imp.baseURL), "poll_interval": .number(imp.pollInterval), "timeout": .number(imp.timeout),
                        "apps": .object(imp.apps.mapValues(JSONValue.string)),
                        "profiles": .array(imp.profiles.map { .string($0.name) }),
                        "devices": .array(imp.devices.map { d in
                            ["name": .string(d.name), "agent_id": "***", "app": d.app.map(JSONValue.string) ?? .null]
                        })]
        }
        if let ha {
            o["ha"] = ["url": .string(ha.url), "token": ha.token == nil ? .null : "***",
                       "entities": ["include": .array(ha.include.map(JSONValue.string)), "exclude": .array(ha.exclude.map(JSONValue.string))],
                       "events": .array(ha.events.map(JSONValue.string)), "publish_attributes": .bool(ha.publishAttributes),
                       "publish_timestamps": .bool(ha.publishTimestamps), "services": ["allow": .array(ha.allow.map(JSONValue.string))],
                       "feed": .string(ha.feed.rawValue)]
        }
        if let lc = livecoding {
            o["livecoding"] = ["api_url": .string(lc.apiURL), "oauth_url": .string(lc.oauthURL), "client_id": .string(lc.clientID),
                               "client_secret": lc.clientSecret == nil ? .null : "***", "scopes": .array(lc.scopes.map(JSONValue.string)),
                               "token_store": .string(lc.tokenStore), "redirect_port": JSONValue(lc.redirectPort),
                               "redirect_uri": .string(lc.redirectURI), "channels": .array(lc.channels.map(JSONValue.string)),
                               "poll_interval": .number(lc.pollInterval)]
        }
        if let nova {
            o["nova"] = ["adapter": .string(nova.adapter),
                         "scan": ["duration": .number(nova.scanDuration), "period": .number(nova.scanPeriod),
                                  "interval_ms": .number(nova.scanIntervalMs), "window_ms": .number(nova.scanWindowMs)],
                         "auto_connect": ["enabled": .bool(nova.autoConnect), "max_flashes": JSONValue(nova.maxFlashes),
                                          "min_signal": JSONValue(nova.minSignal), "whitelist": .array(nova.whitelist.map(JSONValue.string)),
                                          "blacklist": .array(nova.blacklist.map(JSONValue.string))],
                         "default_timeout_ms": JSONValue(nova.defaultTimeoutMs), "connect_timeout": .number(nova.connectTimeout),
                         "allow_low_pwm": .bool(nova.allowLowPWM), "names": .object(nova.names.mapValues(JSONValue.string))]
        }
        return .object(o)
    }

    /// The broker URL without credentials, for bridge/info.
    public var brokerURL: String { "\(mqtt.useTLS ? "mqtts" : "mqtt")://\(mqtt.host):\(mqtt.port)" }
}
