import Foundation
import ImpSimulators
import LIFXSimulators
import LivecodingSimulators
import SimulatorSupport
import SwitchyardCore
import SwitchyardDemo
import SwitchyardTestSupport

/// One instance of the soak's standby group (design.md §18): a `switchyard-sim bridge --instance <name>`
/// process of the group's config, with its console on a port of its own (the config's `web.listen` reads it
/// from `SOAK_WEB_PORT`: one file for every instance, as on two hosts), and the process now running it (a
/// killed instance is started again, under the same name, as a new process).
final class SoakInstance: Sendable {
    let name: String
    let webPort: Int
    let sim: String
    let configPath: String
    let logPath: String
    let state = Locked<(process: ChildProcess?, generation: Int)>((nil, 0))

    init(name: String, sim: String, configPath: String, dir: URL) {
        self.name = name
        self.sim = sim
        self.configPath = configPath
        webPort = TestEnvironment.freePort()
        logPath = dir.appendingPathComponent("bridge-\(name).log").path
    }

    var process: ChildProcess? { state.withLock { $0.process } }
    /// How many processes have run this instance (1 for the first).
    var generation: Int { state.withLock { $0.generation } }
    /// The process's name in the checker's figures: `east#2`.
    var label: String { "\(name)#\(generation)" }
    var isRunning: Bool { process?.isRunning == true }

    func start() throws {
        var env = ProcessInfo.processInfo.environment
        env["SOAK_WEB_PORT"] = "\(webPort)"
        // At info, its log says when it took over and what it carried out again (for a breach's story).
        let p = try ChildProcess(path: sim, arguments: ["bridge", "-c", configPath, "--instance", name, "--log-level", "info"], environment: env,
                                 outputFile: logPath)
        state.withLock { $0 = (p, $0.generation + 1) }
    }

    func signal(_ sig: Int32) { process?.signal(sig) }
}

/// The upstream simulators' requests as they come, each with the instance it named
/// (`X-Switchyard-Instance`) and its time on the run's clock, read by index per simulator (an outage replaces
/// a simulator with a new one: the old one is read to its end first). Used from the schedule's task only.
final class RequestTap {
    /// Run-clock seconds at the monotonic clock's zero (the simulators stamp requests with it).
    let origin: Double
    let since: Double
    var read: [ObjectIdentifier: (object: AnyObject, count: Int)] = [:]

    /// `since`: requests before it (the soak's own, authorising Livecoding) are not the bridge's.
    init(started: Date, since: Double) {
        let upt = Double(DispatchTime.now().uptimeNanoseconds) / 1e9
        origin = Date().timeIntervalSince(started) - upt
        self.since = since
    }

    func take(_ object: AnyObject, _ kind: String, _ requests: [LoopbackHTTPServer.Received]) -> [(instance: String?, at: Double, what: String)] {
        let id = ObjectIdentifier(object)
        let from = read[id]?.count ?? 0
        read[id] = (object, requests.count)
        guard requests.count > from else { return [] }
        return requests[from...].compactMap { r in
            let at = origin + Double(r.at) / 1e9
            return at < since ? nil : (r.headers["x-switchyard-instance"], at, "\(kind) \(r.method) \(r.path)")
        }
    }

    /// What the home's HTTP simulators received since the last look.
    func take(_ home: SimulatedHome) -> [(instance: String?, at: Double, what: String)] {
        take(home.lifx, "lifx", home.lifx.requests) + take(home.imp, "imp", home.imp.requests) + take(home.livecoding, "livecoding", home.livecoding.requests)
    }
}
