import ArgumentParser
import Foundation
import LivecodingAdapter
import NovaAdapter
import NovaSimulators
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardDemo
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
        subcommands: [Demo.self, SimulateNova.self, SimulatedNovaBridge.self])
}

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the bridge against built-in simulated devices on a local broker.")

    @Option(help: "Broker host.") var host = "127.0.0.1"
    @Option(help: "Broker port.") var port = 1883
    @Option(help: "Base topic.") var baseTopic = "switchyard"
    @Option(help: "The operator console's address (host:port; port 0: any free port; 'off': no console).") var web = "127.0.0.1:9180"
    @Option(help: "Home Assistant discovery: one config per device or per entity (homeassistant.discovery_mode).") var discoveryMode = "device"
    @OptionGroup var log: LogOptions

    func run() async throws {
        // The demo's state and config live in a directory of its own (0700), removed when it ends: the
        // simulators' ports change each run, and no other user can read or swap what it reloads.
        var template = Array(FileManager.default.temporaryDirectory.appendingPathComponent("switchyard-demo.XXXXXX").path.utf8CString)
        // mkdtemp's answer points into `template`: read while the buffer is held.
        let made = template.withUnsafeMutableBufferPointer { buffer -> Result<String, ArgumentParser.ValidationError> in
            guard let path = mkdtemp(buffer.baseAddress!) else {
                return .failure(ValidationError("cannot make a directory for the demo: \(String(cString: strerror(errno)))"))
            }
            return .success(String(cString: path))
        }
        let stateDir = try made.get()
        defer { try? FileManager.default.removeItem(atPath: stateDir) }
        let home = try await SimulatedHome.start()
        let (lifx, lan, imp, lc, ha) = (home.lifx, home.lan, home.imp, home.livecoding, home.ha)
        // Simulated Nova flashes in range of a simulated radio (the real one needs a Bluetooth adapter):
        // the strongest is auto-connected; the ATT conversation and acks are the real protocol.
        let nova = SimulatedNovaRadio(flashes: SimulatedHome.novaFlashes, ackDelay: SimulatedHome.novaAckDelay)
        var tuning = SimulatedHome.Tuning()
        tuning.web = web == "off" ? "{enabled: false}" : "{listen: \"\(web)\"}"
        tuning.discoveryMode = discoveryMode
        let yaml = home.yaml(host: host, port: port, base: baseTopic, stateDir: stateDir, tuning: tuning)
        let list = upstreams.map { $0.key == NovaAdapter.id ? NovaUpstream(radio: nova) : $0 }
        // A file, so that it can be edited and reloaded like a real config.
        let configPath = "\(stateDir)/config.yaml"
        guard FileManager.default.createFile(atPath: configPath, contents: Data(yaml.utf8)) else {
            throw ValidationError("cannot write the demo's config to \(configPath)")
        }
        let c: SwitchyardConfig
        do {
            c = try SwitchyardConfig.parse(yaml: yaml, file: configPath, upstreams: list, environment: ProcessInfo.processInfo.environment)
        } catch {
            throw ValidationError("the demo's own config is invalid: \(error.description)")
        }
        if let lcs = c.settings(LivecodingUpstream()) { try await SimulatedHome.authorise(lcs) }
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

          mosquitto_pub\(p) -t \(b)/group/downstairs/set -m '{"state": "ON", "brightness": 40, "transaction": "g1"}'   # virtual, LIFX cloud and LAN, Imp at once
          mosquitto_pub\(p) -t \(b)/scene/movie/set -m ACTIVATE
          mosquitto_pub\(p) -t \(b)/bridge/request/scene/store -m '{"name": "evening", "members": ["group/downstairs", "lifx/candle"]}'   # written into the config

        The demo's config is \(configPath) (removed when the demo ends): edit it, then reload it;
        adapter sections apply at once, and only the adapters whose section changed restart:

          mosquitto_pub\(p) -t \(b)/bridge/request/config/reload -m ''

        Ctrl-C stops the bridge (it publishes 'offline' first).


        """
        Console.out(banner)   // unbuffered, also when piped
        // In the demo SIGHUP stops the bridge, as closing its terminal should (and its directory goes).
        try await BridgeRuntime.run(config: c, configPath: configPath, reloadOnHangup: false, upstreams: list, logger: logger) { url in
            Console.out("The console (docs/console.md) is at \(url) : open it in a browser; \(url)/metrics for Prometheus.\n\n")
        }
        await home.stop()
    }
}

/// The bridge as `switchyard run -c FILE` runs it, with the Nova radio simulated (the demo's two flashes):
/// the soak run starts it against simulators it stops and starts itself, and reloads FILE with SIGHUP; under
/// `standby:`, two of them with their own `--instance` names make one standby group.
struct SimulatedNovaBridge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bridge",
        abstract: "Run the bridge from a config file, with the demo's simulated Nova radio instead of a Bluetooth adapter.")

    @Option(name: .shortAndLong, help: "The config file (reloaded on SIGHUP and bridge/request/config/reload).")
    var config: String
    @Option(help: "This instance's name in a standby group (standby.enabled), as `switchyard run --instance`.")
    var instance: String?
    @OptionGroup var log: LogOptions

    func run() async throws {
        let nova = SimulatedNovaRadio(flashes: SimulatedHome.novaFlashes, ackDelay: SimulatedHome.novaAckDelay)
        let list = upstreams.map { $0.key == NovaAdapter.id ? NovaUpstream(radio: nova) : $0 }
        let c = loadOrExit(config, upstreams: list)
        let logger = try log.bootstrap(config: c)
        try await BridgeRuntime.run(config: c, configPath: config, upstreams: list, logger: logger, instance: instance)
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

