#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SwitchyardConfig
import SwitchyardCore
import SwitchyardManage
import SwitchyardWeb

extension BridgeRuntime {
    /// Hands the engine the config's manager (`ConfigManager`): it serves `config/reload` (and SIGHUP), the
    /// management requests (`ManagementRequests`) and the requests that write groups and scenes
    /// (`GroupRequests`), one change at a time, each applied by `apply`. The engine keeps them; they hold the
    /// engine and the console weakly (else the engine, the console and the transport would keep each other
    /// alive for good). The per-device options, the groups and the scenes apply from the start.
    @discardableResult
    public static func manage(config: SwitchyardConfig, configPath: String?, upstreams: [any Upstream], engine: BridgeEngine,
                              console: ConsoleService? = nil, logger: Logger, notifier: SystemdNotifier = SystemdNotifier(environment: [:]),
                              environment: [String: String] = ProcessInfo.processInfo.environment) async -> ConfigManager {
        await engine.setDevicePolicies(config.devicePolicies)
        await engine.setGroups(config.groups)
        let manager = ConfigManager(config: config, path: configPath, upstreams: upstreams, environment: environment,
                                    engine: engine) { [weak engine, weak console] new, old, anew in
            guard let engine else { throw AdapterError("the bridge has stopped") }
            notifier.notify("RELOADING=1")
            defer { notifier.notify("READY=1") }
            return await apply(new, old: old, engine: engine, console: console, logger: logger, anew: anew)
        }
        if configPath != nil { await engine.setReloader { try await manager.reload() } }
        let requests = ManagementRequests(manager: manager)
        await engine.setRequestHandler(paths: ManagementRequests.paths, maxPayload: ManagementRequests.maxPayload) { [weak engine] req in
            guard let engine else { throw AdapterError("the bridge has stopped") }
            return try await requests.handle(req, engine: engine)
        }
        let groups = GroupRequests(manager: manager) { [weak engine] in await engine?.captureScene($0) ?? [] }
        await engine.setGroupEditor(maxPayload: GroupRequests.maxPayload) { try await groups.handle($0) }
        return manager
    }

    /// Applies a config read anew (a reload, a management change) to the running bridge: only what changed
    /// restarts (an adapter whose section changed; the console for `web:`), the device options, the groups
    /// and scenes, `log.level` and `health.interval` at once; what only a restart of the bridge applies is listed.
    public static func apply(_ new: SwitchyardConfig, old: SwitchyardConfig, engine: BridgeEngine, console: ConsoleService?, logger: Logger,
                             anew: [String: Set<String>] = [:]) async -> AppliedConfig {
        var restart: [String] = []
        if new.mqtt != old.mqtt { restart.append("mqtt") }
        if new.homeassistant != old.homeassistant { restart.append("homeassistant") }
        if new.stateDir != old.stateDir { restart.append("state_dir") }
        if new.log.format != old.log.format { restart.append("log.format") }
        // A changed web section restarts the console alone; one disabled at start was never built.
        if new.web != old.web {
            if let console { console.apply(new.web) } else { restart.append("web") }
        }
        if let level = Logger.Level(rawValue: new.log.level) { SwitchyardLogHandler.applyConfigLevel(level) }
        await engine.updateHealthInterval(new.healthInterval)
        // Only what starts is built: an unchanged section keeps its running adapter, untouched.
        var start: [any Adapter] = []
        var restarted: [String] = []
        for u in new.upstreams {
            guard let before = old.upstream(u.key) else { start.append(u.makeAdapter()); continue }
            if u.needsRestart(from: before) {
                start.append(u.makeAdapter())
                restarted.append(u.key)
            }
        }
        let removed = Set(old.upstreams.map(\.key)).subtracting(new.upstreams.map(\.key))
        // The options first: a restarted adapter's devices are named and published by the new ones from its first listing.
        await engine.setDevicePolicies(new.devicePolicies, anew: anew)
        await engine.replaceAdapters(start: start, remove: removed)
        await engine.setGroups(new.groups)
        await engine.setInfo(info(new, restartRequired: restart))
        logger.info("config applied", metadata: ["restart_required": "\(restart)", "adapters_restarted": "\(restarted)"])
        return AppliedConfig(restartRequired: restart, adaptersRestarted: restarted, adaptersRemoved: removed.sorted())
    }
}
