import ArgumentParser
import Foundation
import ImpAdapter
import Logging
import SwitchyardConfig
import SwitchyardCore
import SwitchyardRuntime
import SwitchyardSimulators

struct LogOptions: ParsableArguments {
    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (overrides log.level).")
    var logLevel: String?

    @Option(help: "Log format: text or json (overrides log.format).")
    var logFormat: String?

    func bootstrap(config: SwitchyardConfig?) throws -> Logger {
        let levelName = logLevel ?? config?.log.level ?? "info"
        guard let level = Logger.Level(rawValue: levelName) else { throw ValidationError("unknown log level '\(levelName)'") }
        let formatName = logFormat ?? config?.log.format ?? "text"
        guard let format = SwitchyardLogHandler.Format(rawValue: formatName) else { throw ValidationError("unknown log format '\(formatName)'") }
        SwitchyardLogHandler.bootstrap(format: format, level: level)
        return Logger(label: "switchyard")
    }
}

@main
struct Switchyard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchyard",
        abstract: "Bridges LIFX, Nova, Electric Imp, Home Assistant and Livecoding onto MQTT.",
        version: switchyardVersion,
        subcommands: [Run.self, CheckConfig.self, Demo.self])
}

func loadOrExit(_ path: String) -> SwitchyardConfig {
    do {
        return try SwitchyardConfig.load(path: path)
    } catch {
        let text = error.problems.map(\.description).joined(separator: "\n") + "\n"
        FileHandle.standardError.write(Data(text.utf8))
        let n = error.problems.count
        FileHandle.standardError.write(Data("\(n) problem\(n == 1 ? "" : "s") in \(path); nothing started\n".utf8))
        Foundation.exit(2)
    }
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the bridge with a config file.")

    @Option(name: .shortAndLong, help: "The YAML config file.")
    var config: String

    @OptionGroup var log: LogOptions

    func run() async throws {
        let c = loadOrExit(config)
        let logger = try log.bootstrap(config: c)
        logger.info("starting", metadata: ["version": "\(switchyardVersion)", "config": "\(config)", "broker": "\(c.brokerURL)"])
        try await BridgeRuntime.run(config: c, configPath: config, logger: logger)
        logger.info("stopped")
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config", abstract: "Validate a config file and exit.")

    @Option(name: .shortAndLong, help: "The YAML config file.")
    var config: String

    func run() throws {
        _ = loadOrExit(config)
        print("config OK")
    }
}

struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the bridge against built-in simulated devices on a local broker.")

    @Option(help: "Broker host.") var host = "127.0.0.1"
    @Option(help: "Broker port.") var port = 1883
    @Option(help: "Base topic.") var baseTopic = "switchyard"
    @OptionGroup var log: LogOptions

    func run() async throws {
        var c = SwitchyardConfig()
        c.file = "(demo)"
        c.stateDir = FileManager.default.temporaryDirectory.appendingPathComponent("switchyard-demo").path
        c.mqtt.url = "mqtt://\(host):\(port)"
        c.mqtt.host = host
        c.mqtt.port = port
        c.mqtt.baseTopic = baseTopic
        c.mqtt.clientID = "switchyard-demo-\(baseTopic)"
        c.mqtt.reconnectMaxDelay = 5
        c.healthInterval = 30
        c.virtual = .init(devices: [
            .init(name: "kitchen", label: "Kitchen", type: "light"),
            .init(name: "hall/lamp", label: "Hall Lamp", type: "light"),
            .init(name: "fan", label: "Fan", type: "switch"),
            .init(name: "outside", label: "Outside", type: "sensor"),
        ], sensorInterval: 10)
        // A simulated LIFX cloud on loopback: five lights (one offline), four groups, a location, two scenes.
        let lifx = try await LIFXCloudSimulator.start(token: "demo-token", lights: LIFXCloudSimulator.demoLights(),
                                                      scenes: LIFXCloudSimulator.demoScenes())
        var l = SwitchyardConfig.LIFX()
        l.token = "demo-token"
        l.apiURL = lifx.apiURL
        l.pollInterval = 10
        c.lifx = l
        // Simulated Electric Imp agents: a MatrixClock, a BigClock and a Weather station.
        let imp = try await ImpAgentSimulator.start(agents: [
            .init(id: "demoMatrix01", app: .matrixClock, appcode: "E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA"),
            .init(id: "demoBigClk02", app: .bigClock, appcode: "DCD2B79C-4467-433C-B0D3-7448EDA17575"),
            .init(id: "demoWeathr03", app: .weather, appcode: "Weather"),
        ])
        var i = ImpSettings()
        i.baseURL = imp.baseURL
        i.pollInterval = 15
        i.apps = ["E967EC6D-C1BD-48B7-B9E0-F9BE2A780EAA": "matrixclock", "DCD2B79C-4467-433C-B0D3-7448EDA17575": "bigclock"]
        i.devices = [.init(name: "hall_clock", agentID: "demoMatrix01"), .init(name: "big_clock", agentID: "demoBigClk02"),
                     .init(name: "weather", agentID: "demoWeathr03")]
        c.imp = i
        let logger = try log.bootstrap(config: c)
        let b = baseTopic
        let p = port == 1883 ? "" : " -p \(port)"
        let banner = """
        Switchyard demo: virtual devices, a simulated LIFX cloud (\(lifx.apiURL)) and simulated Electric Imp
        agents (\(imp.baseURL)) on mqtt://\(host):\(port), base topic '\(b)'. Try, in another terminal:

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

          mosquitto_pub\(p) -t \(b)/imp/hall_clock/set -m '{"brightness": 100, "mode_24h": false}'
          mosquitto_pub\(p) -t \(b)/imp/big_clock/set -m TOGGLE
          mosquitto_pub\(p) -t \(b)/imp/weather/set/action -m update

        Ctrl-C stops the bridge (it publishes 'offline' first).


        """
        FileHandle.standardOutput.write(Data(banner.utf8))   // unbuffered, also when piped
        try await BridgeRuntime.run(config: c, configPath: nil, logger: logger)
        await lifx.stop()
        await imp.stop()
    }
}
