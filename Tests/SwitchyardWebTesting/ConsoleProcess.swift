import Foundation
import SwitchyardTestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The `switchyard` executable with its console, as a child process against a real broker: a config file
/// with `lights` virtual lights (kitchen, hall/lamp, fan and l0…), the `web:` section given, and the ports.
public final class ConsoleProcess: Sendable {
    public let bridge: BridgeProcess
    public let webPort: Int
    public let base: String
    public let configPath: String

    public static func config(brokerPort: Int, base: String, web: String, lights: Int = 0, extra: String = "") -> String {
        var devices = "    - {name: kitchen, label: Kitchen, type: light}\n    - {name: hall/lamp, label: Hall Lamp, type: light}\n"
            + "    - {name: fan, label: Fan, type: switch}\n"
        for i in 0..<lights { devices += "    - {name: l\(i), type: light}\n" }
        return """
        log: {level: warning}
        mqtt: {url: "mqtt://127.0.0.1:\(brokerPort)", base_topic: \(base), reconnect: {min_delay: 0.1, max_delay: 0.5}}
        web: \(web)
        virtual:
          devices:
        \(devices)
        \(extra)
        """
    }

    /// Starts the bridge and waits until its console answers `/livez`.
    public init(brokerPort: Int, base: String = uniqueBase(), web: String? = nil, webPort: Int = TestEnvironment.freePort(),
                lights: Int = 0, extra: String = "", environment: [String: String] = [:]) async throws {
        self.webPort = webPort
        self.base = base
        let dir = TestEnvironment.makeTempDir("console")
        configPath = dir.appendingPathComponent("config.yaml").path
        try Self.config(brokerPort: brokerPort, base: base, web: web ?? "{listen: \"127.0.0.1:\(webPort)\"}", lights: lights, extra: extra)
            .writeForTest(toFile: configPath, replacing: true)
        bridge = try BridgeProcess(arguments: ["run", "-c", configPath], environment: environment)
        let port = webPort, bridge = self.bridge
        try await waitUntil("the console answers /livez", timeout: 30) {
            if !bridge.child.isRunning { return true }
            return (try? HTTPProbe.request(port: port, "/livez", timeout: 2))?.status == 200
        }
        if !bridge.child.isRunning { throw TestError("the bridge exited: \(bridge.outputText)") }
    }

    public func get(_ path: String, headers: [(String, String)] = []) throws -> HTTPProbe.Answer {
        try HTTPProbe.request(port: webPort, path, headers: headers)
    }

    public func stop() {
        bridge.signal(SIGTERM)
        _ = bridge.child.exitStatus
    }
}
