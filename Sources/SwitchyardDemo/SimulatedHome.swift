import Foundation
import HomeAssistantSimulators
import ImpSimulators
import LIFXSimulators
import LivecodingAdapter
import LivecodingSimulators
import NovaSimulators
import SwitchyardCore
import SwitchyardHTTP

/// The demo's home: every upstream played by its simulator on loopback (a LIFX cloud and LAN lights,
/// Electric Imp agents, Livecoding.tv, Home Assistant) and two Nova flashes on a simulated radio, with the
/// config that points the bridge at them. `make run` shows it; the soak run (`switchyard-bench --scenario
/// soak`) runs it for hours, stopping and starting each simulator on its schedule.
public final class SimulatedHome: @unchecked Sendable {
    public var lifx: LIFXCloudSimulator
    public var lan: LIFXLANSimulator
    public var imp: ImpAgentSimulator
    public var livecoding: LivecodingSimulator
    public var ha: HomeAssistantSimulator
    /// The flashes in range of the simulated radio and their signal strength (`SimulatedNovaRadio`).
    public static let novaFlashes: [String: Int?] = ["D0:39:72:00:00:01": -52, "D0:39:72:00:00:02": -71]
    public static let novaAckDelay = 0.12

    init(lifx: LIFXCloudSimulator, lan: LIFXLANSimulator, imp: ImpAgentSimulator, livecoding: LivecodingSimulator, ha: HomeAssistantSimulator) {
        self.lifx = lifx
        self.lan = lan
        self.imp = imp
        self.livecoding = livecoding
        self.ha = ha
    }

    /// Starts every simulator on a free loopback port.
    public static func start() async throws -> SimulatedHome {
        // A simulated LIFX cloud on loopback: five lights (one offline), four groups, a location, two scenes.
        let lifx = try await LIFXCloudSimulator.start(token: "demo-token", lights: LIFXCloudSimulator.demoLights(),
                                                      scenes: LIFXCloudSimulator.demoScenes())
        // Simulated LIFX lights on the LAN (one loopback UDP port, the real protocol): a bulb, a LIFX Z strip of
        // 16 zones, a Candle (matrix), a Night Vision bulb (infrared), a Clean (HEV) and a Ceiling (uplight and
        // downlight), all in the cloud's location; the cloud's lights stay.
        let lan = try LIFXLANSimulator.start(devices: LIFXLANSimulator.demoDevices())
        // Simulated Electric Imp agents: a MatrixClock, a BigClock and a Weather station.
        let imp = try await ImpAgentSimulator.start(agents: [
            .init(id: "demoMatrix01", app: .matrixClock, appcode: "E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA"),
            .init(id: "demoBigClk02", app: .bigClock, appcode: "DCD2B79C-4467-433C-B0D3-7448EDA17575"),
            .init(id: "demoWeathr03", app: .weather, appcode: "Weather"),
        ])
        // A simulated Livecoding.tv: three channels, two live; the demo authorises itself against it.
        let lc = try await LivecodingSimulator.start(clientID: "demo-client", clientSecret: "demo-secret", channels: [
            .init(slug: "karrmarr", live: true, viewers: 12, title: "Swift on Linux"),
            .init(slug: "alice", live: false, title: "MQTT bridges"),
            .init(slug: "bob", live: true, viewers: 3, title: "Home automation"),
        ])
        // A simulated Home Assistant: a few helpers and lights to mirror; switches may be called.
        let ha = try await HomeAssistantSimulator.start(token: "demo-token", entities: [
            .init("input_boolean.guest_mode", "off", ["editable": false, "friendly_name": "Guest mode"]),
            .init("light.porch", "on", ["brightness": 128, "friendly_name": "Porch", "supported_color_modes": ["brightness"]]),
            .init("input_number.target_temp", "20.5", ["min": 10, "max": 30, "step": 0.5, "friendly_name": "Target temperature"]),
            .init("sensor.outside", "7.5", ["unit_of_measurement": "°C", "friendly_name": "Outside"]),
        ])
        return SimulatedHome(lifx: lifx, lan: lan, imp: imp, livecoding: lc, ha: ha)
    }

    /// Stops every simulator, the HTTP ones together: each waits up to a second for its connections, so
    /// one after the other a demo took four seconds to end after its bridge had (and a test stopping it
    /// with a deadline killed it before it could remove its directory).
    public func stop() async {
        lan.stop()
        async let lifxStopped: Void = lifx.stop()
        async let impStopped: Void = imp.stop()
        async let livecodingStopped: Void = livecoding.stop()
        async let haStopped: Void = ha.stop()
        _ = await (lifxStopped, impStopped, livecodingStopped, haStopped)
    }

    /// What the demo's config can vary (the soak's reloads change each adapter's setting).
    public struct Tuning: Sendable {
        public var virtualSensorInterval = 10
        public var lifxPoll = 10
        public var lanPoll = 5
        public var lanOfflineAfter = 90
        public var impPoll = 15
        public var livecodingPoll = 15
        public var novaTimeoutMs = 10000
        public var healthInterval = 30
        /// A virtual light that is in the config or not (a device removed by a reload).
        public var extraVirtual = false
        /// The `web:` section (the operator console), as a YAML flow mapping; off unless given.
        public var web = "{enabled: false}"
        /// `homeassistant.discovery_mode` (the config's default, `device`, unless given).
        public var discoveryMode = "device"
        /// `mqtt.keepalive` (the config's default unless given).
        public var keepalive: Int?
        /// The `standby:` section (hot standby, design.md §18), as a YAML flow mapping; none unless given.
        public var standby: String?
        /// Whether the config has the `nova:` section. A standby group leaves it to a bridge of its own on the
        /// radio's host (`novaYAML`): a flash is reached through one host's radio and cannot fail over.
        public var nova = true
        public init() {}
    }

    /// The bridge's config for this home: a config file like any other, read through the registration list
    /// (only the Nova radio is the simulated one).
    public func yaml(host: String, port: Int, base: String, stateDir: String, tuning t: Tuning = Tuning(), log: String? = nil) -> String {
        """
        \(Self.bridgeSection(host: host, port: port, base: base, stateDir: stateDir, tuning: t, log: log, keepalive: t.keepalive))
        \(t.standby.map { "standby: \($0)" } ?? "")
        web: \(t.web)
        virtual:
          sensor_interval: \(t.virtualSensorInterval)
          devices:
            - {name: kitchen, label: Kitchen, type: light}
            - {name: hall/lamp, label: Hall Lamp, type: light}
            - {name: fan, label: Fan, type: switch}
            - {name: outside, label: Outside, type: sensor}
        \(t.extraVirtual ? "    - {name: extra, label: Extra, type: light}" : "")
        lifx:
          token: demo-token
          api_url: "\(lifx.apiURL)"
          poll_interval: \(t.lifxPoll)
          lan: {enabled: true, hosts: ["127.0.0.1:\(lan.port)"], broadcast: [], poll_interval: \(t.lanPoll), offline_after: \(t.lanOfflineAfter)}
        imp:
          base_url: "\(imp.baseURL)"
          poll_interval: \(t.impPoll)
          apps: {E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA: matrixclock, DCD2B79C-4467-433C-B0D3-7448EDA17575: bigclock}
          devices:
            - {name: hall_clock, agent_id: demoMatrix01}
            - {name: big_clock, agent_id: demoBigClk02}
            - {name: weather, agent_id: demoWeathr03}
        livecoding:
          api_url: "\(livecoding.apiURL)"
          oauth_url: "\(livecoding.oauthURL)"
          client_id: demo-client
          client_secret: demo-secret
          channels: [karrmarr, alice, bob]
          poll_interval: \(t.livecodingPoll)
        ha:
          url: "\(ha.url)"
          token: demo-token
          services: {allow: ["input_boolean.*", "light.*", "input_number.set_value"]}
        \(t.nova ? Self.novaSection(t) : "")
        groups:
          downstairs:
            members: [virtual/kitchen, virtual/fan, lifx/kitchen, lifx/lounge_left, lifx/lounge_right, lifx/desk, imp/hall_clock, group/porch]
          porch:
            members: [lifx/porch, virtual/hall/lamp]
            state_mode: all
        scenes:
          movie:
            transition: 1
            states:
              group/downstairs: {state: OFF}
              lifx/lounge_left: {state: ON, brightness: 20, color: {h: 240, s: 100}}
              virtual/hall/lamp: {state: ON, brightness: 35, color_temp: 2700}
        """
    }

    static func novaSection(_ t: Tuning) -> String {
        """
        nova:
          default_timeout_ms: \(t.novaTimeoutMs)
          names: {"D0:39:72:00:00:01": key_light, "D0:39:72:00:00:02": fill_light}
        """
    }

    /// A bridge of the Nova flashes alone, on the host whose radio reaches them, beside a standby group
    /// that serves the rest of the home (docs/operations.md "Two bridges, one home"): its own base topic
    /// and client id.
    public func novaYAML(host: String, port: Int, base: String, stateDir: String, tuning t: Tuning = Tuning(), log: String? = nil) -> String {
        """
        \(Self.bridgeSection(host: host, port: port, base: base, stateDir: stateDir, tuning: t, log: log, keepalive: nil))
        web: {enabled: false}
        \(Self.novaSection(t))
        """
    }

    /// What every bridge of the home says of itself: its state directory, log level, broker, health
    /// interval and discovery mode.
    static func bridgeSection(host: String, port: Int, base: String, stateDir: String, tuning t: Tuning, log: String?, keepalive: Int?) -> String {
        """
        state_dir: \(stateDir)
        \(log.map { "log: {level: \($0)}" } ?? "")
        mqtt: {url: "mqtt://\(host):\(port)", base_topic: \(base), client_id: "switchyard-demo-\(base)", reconnect: {max_delay: 5}\(keepalive.map { ", keepalive: \($0)" } ?? "")}
        health: {interval: \(t.healthInterval)}
        homeassistant: {discovery_mode: \(t.discoveryMode)}
        """
    }

    /// Plays the user's browser once against the simulated provider, so that Livecoding shows channels at
    /// once (for real: `switchyard auth livecoding -c FILE`).
    public static func authorise(_ s: LivecodingSettings) async throws {
        try await HTTPClient.withClient { http in
            let oauth = LivecodingOAuth(settings: s, http: http)
            let r = try await http.send(HTTPRequest(url: oauth.authorizeURL(state: "demo")))
            guard let location = r.headers["location"],
                  let code = URLComponents(string: location)?.queryItems?.first(where: { $0.name == "code" })?.value
            else { throw AdapterError("demo: the simulated provider did not redirect") }
            try TokenStore(path: s.tokenStore).save(try await oauth.exchange(code: code))
        }
    }
}
