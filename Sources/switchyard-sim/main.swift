import ArgumentParser
import Foundation
import HomeAssistantSimulators
import ImpSimulators
import LIFXSimulators
import LivecodingAdapter
import LivecodingSimulators
import NovaAdapter
import NovaSimulators
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardHTTP
import SwitchyardRuntime

// The simulators' executable: the bridge against built-in simulated upstreams (`demo`), and a Nova flash
// played on a Bluetooth adapter (`nova`). Kept out of `switchyard`, so that the daemon links neither
// them nor Foundation.
@main
struct SwitchyardSim: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchyard-sim",
        abstract: "Simulated upstreams for trying and testing Switchyard.",
        version: switchyardVersion,
        subcommands: [Demo.self, SimulateNova.self])
}

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the bridge against built-in simulated devices on a local broker.")

    @Option(help: "Broker host.") var host = "127.0.0.1"
    @Option(help: "Broker port.") var port = 1883
    @Option(help: "Base topic.") var baseTopic = "switchyard"
    @OptionGroup var log: LogOptions

    func run() async throws {
        let stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("switchyard-demo").path
        try FileManager.default.createDirectory(atPath: stateDir, withIntermediateDirectories: true)
        // A simulated LIFX cloud on loopback: five lights (one offline), four groups, a location, two scenes.
        let lifx = try await LIFXCloudSimulator.start(token: "demo-token", lights: LIFXCloudSimulator.demoLights(),
                                                      scenes: LIFXCloudSimulator.demoScenes())
        // Simulated LIFX lights on the LAN (one loopback UDP port, the real protocol): a bulb, a LIFX Z strip of
        // 16 zones, a Candle (matrix), a Night Vision bulb (infrared) and a Clean (HEV); the cloud's lights stay.
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
        // Simulated Nova flashes in range of a simulated radio (the real one needs a Bluetooth adapter):
        // the strongest is auto-connected; the ATT conversation and acks are the real protocol.
        let nova = SimulatedNovaRadio(flashes: ["D0:39:72:00:00:01": -52, "D0:39:72:00:00:02": -71], ackDelay: 0.12)
        // The demo's config is a config file like any other, read through the same registration list;
        // only the Nova radio is the simulated one.
        let yaml = """
        state_dir: \(stateDir)
        mqtt: {url: "mqtt://\(host):\(port)", base_topic: \(baseTopic), client_id: "switchyard-demo-\(baseTopic)", reconnect: {max_delay: 5}}
        health: {interval: 30}
        virtual:
          sensor_interval: 10
          devices:
            - {name: kitchen, label: Kitchen, type: light}
            - {name: hall/lamp, label: Hall Lamp, type: light}
            - {name: fan, label: Fan, type: switch}
            - {name: outside, label: Outside, type: sensor}
        lifx:
          token: demo-token
          api_url: "\(lifx.apiURL)"
          poll_interval: 10
          lan: {enabled: true, hosts: ["127.0.0.1:\(lan.port)"], broadcast: [], poll_interval: 5}
        imp:
          base_url: "\(imp.baseURL)"
          poll_interval: 15
          apps: {E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA: matrixclock, DCD2B79C-4467-433C-B0D3-7448EDA17575: bigclock}
          devices:
            - {name: hall_clock, agent_id: demoMatrix01}
            - {name: big_clock, agent_id: demoBigClk02}
            - {name: weather, agent_id: demoWeathr03}
        livecoding:
          api_url: "\(lc.apiURL)"
          oauth_url: "\(lc.oauthURL)"
          client_id: demo-client
          client_secret: demo-secret
          channels: [karrmarr, alice, bob]
          poll_interval: 15
        ha:
          url: "\(ha.url)"
          token: demo-token
          services: {allow: ["input_boolean.*", "light.*", "input_number.set_value"]}
        nova:
          names: {"D0:39:72:00:00:01": key_light, "D0:39:72:00:00:02": fill_light}
        """
        let list = upstreams.map { $0.key == "nova" ? NovaUpstream(radio: nova) : $0 }
        let c: SwitchyardConfig
        do {
            c = try SwitchyardConfig.parse(yaml: yaml, file: "(demo)", upstreams: list)
        } catch {
            throw ValidationError("the demo's own config is invalid: \(error.description)")
        }
        if let lcs = c.settings(LivecodingUpstream()) { try await demoAuthorise(lcs) }
        let logger = try log.bootstrap(config: c)
        let b = baseTopic
        let p = port == 1883 ? "" : " -p \(port)"
        let banner = """
        Switchyard demo: virtual devices, a simulated LIFX cloud (\(lifx.apiURL)) and LIFX LAN lights
        (udp://127.0.0.1:\(lan.port)), simulated Electric Imp
        agents (\(imp.baseURL)), a simulated Livecoding.tv (\(lc.apiURL)) and a simulated Home Assistant
        (\(ha.url)) and two simulated Nova flashes on mqtt://\(host):\(port), base topic '\(b)'. Try, in another terminal:

          mosquitto_sub\(p) -v -t '\(b)/#'
          mosquitto_pub\(p) -t \(b)/virtual/kitchen/set -m ON
          mosquitto_pub\(p) -t \(b)/virtual/kitchen/set -m '{"brightness": 40, "color_temp": 2700, "transaction": 1}'
          mosquitto_pub\(p) -t \(b)/virtual/kitchen/set/brightness -m 75
          mosquitto_pub\(p) -t \(b)/virtual/hall/lamp/set -m '{"color": {"h": 240, "s": 100}}'
          mosquitto_pub\(p) -t \(b)/virtual/fan/set -m TOGGLE
          mosquitto_pub\(p) -t \(b)/virtual/kitchen/set -m '{"brightness": 150}'    # rejected: see \(b)/bridge/log
          mosquitto_pub\(p) -t \(b)/bridge/request/health_check -m '{"transaction": 7}'

          mosquitto_pub\(p) -t \(b)/lifx/kitchen/set -m '{"brightness": 30, "color": "#ff8800", "transition": 2}'
          mosquitto_pub\(p) -t \(b)/lifx/lounge_left/set -m '{"color": "blue saturation:0.5"}'
          mosquitto_pub\(p) -t \(b)/lifx/group/lounge/set -m TOGGLE
          mosquitto_pub\(p) -t \(b)/lifx/location/home/set -m '{"brightness_step": -10}'
          mosquitto_pub\(p) -t \(b)/lifx/kitchen/set -m '{"effect": {"name": "breathe", "color": "red", "cycles": 3}}'
          mosquitto_pub\(p) -t \(b)/lifx/scene/night_time/set -m ACTIVATE
          mosquitto_pub\(p) -t \(b)/lifx/kitchen/set -m '{"color": "mauve"}'    # rejected before any request: see \(b)/bridge/log
          mosquitto_pub\(p) -t \(b)/bridge/request/lifx/scenes -m ''

          mosquitto_pub\(p) -t \(b)/lifx/desk/set -m '{"state": "ON", "color": "#00ff88", "transition": 1}'     # over the LAN ("via": "lan")
          mosquitto_pub\(p) -t \(b)/lifx/shelf_strip/set -m '{"zones": [{"start": 0, "end": 7, "color": {"h": 240, "s": 100}}, {"start": 8, "end": 15, "color": "red", "brightness": 60}]}'
          mosquitto_pub\(p) -t \(b)/lifx/shelf_strip/set -m '{"effect": {"name": "move", "period": 2, "direction": "backward"}}'
          mosquitto_pub\(p) -t \(b)/lifx/candle/set/effect -m flame
          mosquitto_pub\(p) -t \(b)/lifx/desk/set -m '{"effect": {"name": "pulse", "color": "green", "cycles": 3}}'
          mosquitto_pub\(p) -t \(b)/lifx/porch/set/infrared -m 60
          mosquitto_pub\(p) -t \(b)/lifx/clean/set -m '{"clean_cycle": "ON", "clean_duration": 3600}'
          mosquitto_pub\(p) -t \(b)/lifx/desk/set/effect -m move    # refused: a bulb has no zones, see \(b)/bridge/log

          mosquitto_pub\(p) -t \(b)/imp/hall_clock/set -m '{"brightness": 100, "mode_24h": false}'
          mosquitto_pub\(p) -t \(b)/imp/big_clock/set -m TOGGLE
          mosquitto_pub\(p) -t \(b)/imp/weather/set/action -m update

          mosquitto_sub\(p) -v -t '\(b)/livecoding/#'

          mosquitto_sub\(p) -v -t '\(b)/ha/#'
          mosquitto_pub\(p) -t \(b)/ha/input_boolean/guest_mode/set -m TOGGLE
          mosquitto_pub\(p) -t \(b)/ha/input_number/target_temp/set -m '{"service": "set_value", "data": {"value": 21}}'
          mosquitto_pub\(p) -t \(b)/ha/sensor/outside/set -m ON     # refused: not in ha.services.allow, see \(b)/bridge/log

          mosquitto_pub\(p) -t \(b)/nova/key_light/set -m '{"state": "ON", "preset": "warm", "timeout_ms": 3000, "transaction": "n1"}'
          mosquitto_pub\(p) -t \(b)/nova/key_light/set -m OFF
          mosquitto_pub\(p) -t \(b)/nova/fill_light/set -m '{"connect": true}'    # max_flashes 1: key_light stays, fill_light joins by hand
          mosquitto_pub\(p) -t \(b)/bridge/request/nova/scan -m '{"enabled": false}'

        Ctrl-C stops the bridge (it publishes 'offline' first).


        """
        Console.out(banner)   // unbuffered, also when piped
        try await BridgeRuntime.run(config: c, configPath: nil, upstreams: list, logger: logger)
        await lifx.stop()
        lan.stop()
        await imp.stop()
        await lc.stop()
        await ha.stop()
    }
}

/// The demo plays the user's browser once against the simulated provider, so that Livecoding shows
/// channels at once (for real: `switchyard auth livecoding -c FILE`).
func demoAuthorise(_ s: LivecodingSettings) async throws {
    try await HTTPClient.withClient { http in
        let oauth = LivecodingOAuth(settings: s, http: http)
        let r = try await http.send(HTTPRequest(url: oauth.authorizeURL(state: "demo")))
        guard let location = r.headers["location"],
              let code = URLComponents(string: location)?.queryItems?.first(where: { $0.name == "code" })?.value
        else { throw AdapterError("demo: the simulated provider did not redirect") }
        try TokenStore(path: s.tokenStore).save(try await oauth.exchange(code: code))
    }
}

struct SimulateNova: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "nova",
        abstract: "Advertise as a Nova flash on a Bluetooth adapter and answer its protocol (needs CAP_NET_RAW or root).",
        discussion: "Run it on a second adapter (e.g. a btvirt virtual controller) and the bridge on the first.")

    @Option(help: "The adapter to advertise on.")
    var adapter = "hci1"
    @Option(help: "Seconds before each ack (the real flash takes 100-300 ms).")
    var ackDelay = 0.05
    @Option(name: .customLong("for"), help: "Seconds to run.")
    var duration = 600.0

    func run() async throws {
        let line = { @Sendable (s: String) in
            Console.out("nova-sim: \(s)\n")
        }
        do {
            try NovaHCIPeripheral.serve(adapter: adapter, ackDelay: ackDelay, duration: duration, log: line)
        } catch {
            Console.err("nova-sim: \(error)\n")
            throw ExitCode(1)
        }
    }
}

