#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import ServiceLifecycle
import SwitchyardConfig
import SwitchyardCore
import SwitchyardManage
import SwitchyardMQTT
import SwitchyardWeb
import UnixSignals

public let switchyardVersion = "0.1.0"

/// Wires config → transport + engine + adapters, each a Service under one ServiceGroup.
/// The transport is first in the group so it stops last: `bridge/state offline` is the final message.
public enum BridgeRuntime {
    public static func mqttSettings(_ c: SwitchyardConfig) -> MQTTSettings {
        let m = c.mqtt
        return MQTTSettings(
            host: m.host, port: m.port,
            tls: m.useTLS ? .init(caFile: m.tls.caFile, caPath: m.tls.caPath, certFile: m.tls.certFile, keyFile: m.tls.keyFile, verify: m.tls.verify) : nil,
            protocolVersion: m.protocolVersion, clientID: m.clientID, username: m.username, password: m.password,
            keepalive: m.keepalive, sessionExpiry: m.sessionExpiry, stateTopic: "\(m.baseTopic)/bridge/state",
            maxInflight: m.maxInflight, maxTopicAliases: m.maxTopicAliases, maxEvents: m.outboxMaxEvents, maxEventBytes: m.outboxMaxEventBytes,
            maxInbound: m.inboundMaxMessages, maxInboundBytes: m.inboundMaxBytes, maxPayload: m.maxPayload,
            reconnectMinDelay: m.reconnectMinDelay,
            reconnectMaxDelay: m.reconnectMaxDelay, connectTimeout: m.connectTimeout, stuckAfter: m.stuckAfter)
    }

    public static func engineSettings(_ c: SwitchyardConfig) -> EngineSettings {
        var s = EngineSettings(
            scheme: TopicScheme(base: c.mqtt.baseTopic, discoveryPrefix: c.homeassistant.prefix, haStatusTopic: c.homeassistant.statusTopic),
            discovery: c.homeassistant.discovery, version: switchyardVersion, commandMaxAge: c.mqtt.commandMaxAge,
            maxPayload: c.mqtt.maxPayload, healthInterval: c.healthInterval, supportURL: c.homeassistant.supportURL,
            discoveryMode: DiscoveryMode(rawValue: c.homeassistant.discoveryMode) ?? .device)
        s.expiry = MessageExpiry(events: UInt32(c.mqtt.expiryEvents), logs: UInt32(c.mqtt.expiryLogs), results: UInt32(c.mqtt.expiryResults))
        return s
    }

    public static func info(_ c: SwitchyardConfig, restartRequired: [String] = []) -> JSONValue {
        [
            "broker": .string(c.brokerURL),
            "mqtt": ["protocol": .string(c.mqtt.protocolVersion == 5 ? "5" : "3.1.1"), "client_id": .string(c.mqtt.clientID),
                     "base_topic": .string(c.mqtt.baseTopic)],
            "config": c.redactedJSON,
            // The level in force: `--log-level` outranks the config's `log.level`, which `config` shows as written.
            "log_level": .string(SwitchyardLogHandler.processLevel.withLock { $0 }.rawValue),
            "restart_required": .array(restartRequired.map(JSONValue.string)),
        ]
    }

    /// Runs the bridge until SIGTERM/SIGINT. `configPath` enables `config/reload` and (with
    /// `reloadOnHangup`) SIGHUP, which re-read the file with the same `upstreams` (the registration list
    /// the config was read with). Without `reloadOnHangup`, SIGHUP stops the bridge as SIGTERM does.
    /// `consoleListening` is told the console's address each time it starts listening.
    public static func run(config: SwitchyardConfig, configPath: String?, reloadOnHangup: Bool = true, upstreams: [any Upstream], logger: Logger,
                           extraServices: [any Service] = [], consoleListening: (@Sendable (String) -> Void)? = nil,
                           instance: String? = nil) async throws {
        if config.standby.enabled {
            try await runStandby(config: config, configPath: configPath, reloadOnHangup: reloadOnHangup, upstreams: upstreams, logger: logger,
                                 extraServices: extraServices, consoleListening: consoleListening,
                                 instance: instance ?? (config.standby.instance.isEmpty ? SwitchyardConfig.hostName() : config.standby.instance))
            return
        }
        let transport = MosquittoTransport(settings: mqttSettings(config), logger: Logger(label: "switchyard.mqtt"))
        // The console sees what the engine publishes through the transport it is given (docs/console.md).
        let feed = config.web.enabled ? ConsoleFeed(scheme: engineSettings(config).scheme, store: transport) : nil
        let engine = BridgeEngine(settings: engineSettings(config), transport: feed.map { ObservedTransport(transport, observer: $0) } ?? transport,
                                  logger: Logger(label: "switchyard.core"))
        let console = feed.map {
            ConsoleService(settings: config.web, engine: engine, feed: $0, transportStats: { transport.stats() },
                           logger: Logger(label: "switchyard.web"), listening: consoleListening)
        }
        if let feed { await engine.observe(feed) }
        let notifier = SystemdNotifier()
        await engine.setInfo(info(config))
        // Reloads and management requests, one at a time, through the config's manager (Management.swift).
        await manage(config: config, configPath: configPath, upstreams: upstreams, engine: engine, console: console,
                                   logger: logger, notifier: notifier)
        var services: [any Service] = [TransportService(transport: transport),
                                       EngineService(engine: engine, adapters: config.upstreams.map { $0.makeAdapter() }, notifier: notifier)]
        if configPath != nil && reloadOnHangup { services.append(ReloadOnHangupService(engine: engine)) }
        if let interval = SystemdNotifier.watchdogInterval(), notifier.enabled {
            services.append(WatchdogService(engine: engine, notifier: notifier, interval: interval))
        }
        try await runGroup(services, extra: extraServices, console: console, reloadOnHangup: reloadOnHangup, logger: logger)
    }

    /// The bridge's own services, then the memory trim, the caller's and the console, as one `ServiceGroup`
    /// until SIGTERM/SIGINT (and SIGHUP when it does not reload).
    static func runGroup(_ services: [any Service], extra: [any Service], console: ConsoleService?, reloadOnHangup: Bool,
                         logger: Logger) async throws {
        var services = services
        if ProcessInfo.processInfo.environment["SWITCHYARD_MALLOC_TRIM"] != "0" { services.append(MemoryTrimService()) }
        services += extra
        // Last in the group, so stopped first: the pages go before the engine does.
        if let console { services.append(console) }
        let group = ServiceGroup(configuration: .init(
            services: services.map { .init(service: $0) },
            gracefulShutdownSignals: [.sigterm, .sigint] + (reloadOnHangup ? [] : [.sighup]),
            logger: logger))
        try await group.run()
    }

    /// The bridge as one instance of a standby group (design.md §18): a `StandbyService` instead of the
    /// transport and the engine, which it builds for each active phase; the console follows whichever runs.
    static func runStandby(config: SwitchyardConfig, configPath: String?, reloadOnHangup: Bool, upstreams: [any Upstream], logger: Logger,
                           extraServices: [any Service], consoleListening: (@Sendable (String) -> Void)?, instance: String) async throws {
        guard SwitchyardConfig.validInstanceName(instance) else {
            throw AdapterError("'\(instance)' is not a valid standby instance name (letters, digits, '-', '_' and '.', at most 64): set --instance")
        }
        let settings = engineSettings(config)
        let view = StandbyEngineView(version: switchyardVersion, scheme: settings.scheme)
        let store = StandbyStore()
        let feed = config.web.enabled ? ConsoleFeed(scheme: settings.scheme, store: store) : nil
        let console = feed.map {
            ConsoleService(settings: config.web, engine: view, feed: $0, transportStats: { store.stats() },
                           logger: Logger(label: "switchyard.web"), listening: consoleListening)
        }
        let notifier = SystemdNotifier()
        var services: [any Service] = [StandbyService(config: config, instance: instance, configPath: configPath, upstreams: upstreams, logger: logger,
                                                      view: view, store: store, feed: feed, notifier: notifier)]
        if configPath != nil && reloadOnHangup { services.append(StandbyReloadService(view: view)) }
        try await runGroup(services, extra: extraServices, console: console, reloadOnHangup: reloadOnHangup, logger: logger)
    }
}

/// Starts the network thread; on graceful shutdown (which reaches it last) publishes `offline`,
/// waits for the broker's acknowledgements and disconnects cleanly.
struct TransportService: Service {
    let transport: MosquittoTransport
    func run() async throws {
        transport.start()
        try? await gracefulShutdown()
        await transport.stop(timeout: 5)
    }
}

/// The core and its adapters, as the engine's children. On graceful shutdown the engine is cancelled:
/// its adapters stop (each `run` returns, releasing what it opened), then every device goes `offline`.
struct EngineService: Service {
    let engine: BridgeEngine
    let adapters: [any Adapter]
    let notifier: SystemdNotifier
    func run() async throws {
        notifier.notify("READY=1")
        await cancelWhenGracefulShutdown { await engine.run(adapters: adapters) }
        notifier.notify("STOPPING=1")
    }
}

/// SIGHUP = `config/reload` (design.md §11).
struct ReloadOnHangupService: Service {
    let engine: BridgeEngine
    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        for await _ in signals.cancelOnGracefulShutdown() {
            await engine.reloadFromSignal()
        }
    }
}

/// SIGHUP under hot standby: the active phase's engine reloads; a standby instance reads the file again when
/// it next takes over.
struct StandbyReloadService: Service {
    let view: StandbyEngineView
    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        for await _ in signals.cancelOnGracefulShutdown() {
            await view.current?.reloadFromSignal()
        }
    }
}

/// WATCHDOG=1 while the core answers: a wedged actor stops the pings and systemd restarts us.
struct WatchdogService: Service {
    let engine: BridgeEngine
    let notifier: SystemdNotifier
    let interval: Double
    func run() async throws {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(interval))
            if Task.isCancelled || Task.isShuttingDownGracefully { return }
            if await engine.isAlive() { notifier.notify("WATCHDOG=1") }
        }
    }
}
