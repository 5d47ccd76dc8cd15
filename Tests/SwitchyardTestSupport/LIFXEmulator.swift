import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import SwitchyardCore

/// `lifx-emulator` (PyPI, 4.11.0; a LIFX LAN peer we did not write), installed by `make test` into
/// .build/lifx-venv, on 127.0.0.1 with fixed serials; its REST API reads device state and packet
/// counts and turns fault scenarios on (docs/upstreams/lifx-lan.md "The emulator").
public final class LIFXEmulator: Sendable {
    public let port: Int
    public let apiPort: Int
    public let child: ChildProcess
    public let log: String
    /// The emulator's HOME: with `persistent: true` it writes each device's whole state (infrared, HEV cycle,
    /// zones, firmware effects) to `.lifx-emulator/<serial>.json` there, which its REST API does not show.
    public let home: String

    public static var binary: String? {
        if let p = ProcessInfo.processInfo.environment["SWITCHYARD_LIFX_EMULATOR"] { return p }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let p = repo.appendingPathComponent(".build/lifx-venv/bin/lifx-emulator").path
        return FileManager.default.isExecutableFile(atPath: p) ? p : nil
    }

    public static var unavailableReason: String? {
        binary == nil ? "lifx-emulator is not installed (make test installs it into .build/lifx-venv; or set SWITCHYARD_LIFX_EMULATOR)" : nil
    }

    private init(port: Int, apiPort: Int, child: ChildProcess, log: String, home: String) {
        self.port = port
        self.apiPort = apiPort
        self.child = child
        self.log = log
        self.home = home
    }

    /// `devices`: the YAML list items (indented two spaces), `scenarios`: an optional YAML block.
    public static func start(devices: String, scenarios: String = "") async throws -> LIFXEmulator {
        guard let bin = binary else { throw TestError(unavailableReason ?? "lifx-emulator is not installed") }
        let dir = TestEnvironment.makeTempDir("lifx-emu")
        let port = TestEnvironment.freePort(), apiPort = TestEnvironment.freePort()
        let config = dir.appendingPathComponent("emulator.yaml").path
        try """
        bind: 127.0.0.1
        port: \(port)
        api: true
        api_port: \(apiPort)
        api_host: 127.0.0.1
        persistent: true
        devices:
        \(devices.replacingOccurrences(of: "PORT", with: "\(port)"))
        \(scenarios)
        """.writeForTest(toFile: config, replacing: true)
        let log = dir.appendingPathComponent("emulator.log").path
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = dir.path
        let child = try ChildProcess(path: bin, arguments: ["--config", config], environment: env, outputFile: log)
        let e = LIFXEmulator(port: port, apiPort: apiPort, child: child, log: log, home: dir.path)
        try await waitUntil("the emulator's API", timeout: 30) { (try? await e.get("/api/stats")) != nil }
        return e
    }

    public static func with<R: Sendable>(devices: String, scenarios: String = "", _ body: (LIFXEmulator) async throws -> R) async throws -> R {
        let e = try await start(devices: devices, scenarios: scenarios)
        return try await withTeardown { try await body(e) } teardown: { await e.child.stop() }
    }

    public func call(_ method: String, _ path: String, _ body: String? = nil) async throws -> JSONValue {
        var r = URLRequest(url: URL(string: "http://127.0.0.1:\(apiPort)\(path)")!)
        r.httpMethod = method
        r.timeoutInterval = 5
        if let body { r.httpBody = Data(body.utf8); r.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let (data, response) = try await URLSession.shared.data(for: r)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else { throw AdapterError("emulator \(method) \(path): HTTP \(status) \(String(decoding: data, as: UTF8.self))") }
        return data.isEmpty ? .null : try JSONValue.parse(Array(data))
    }

    public func get(_ path: String) async throws -> JSONValue { try await call("GET", path) }

    public func device(_ serial: String) async throws -> JSONValue { try await get("/api/devices/\(serial)") }

    /// Requests the emulator received, by type.
    public func received() async throws -> [Int: Int] {
        var out: [Int: Int] = [:]
        for (k, v) in try await get("/api/stats")["packets_received_by_type"]?.objectValue ?? [:] { out[Int(k) ?? -1] = v.intValue ?? 0 }
        return out
    }

    public func setScenario(_ serial: String, _ json: String) async throws { _ = try await call("PUT", "/api/scenarios/devices/\(serial)", json) }

    /// The device's state as the emulator last saved it (written 0.1 s after a change).
    public func persisted(_ serial: String) -> JSONValue? {
        guard let data = FileManager.default.contents(atPath: "\(home)/.lifx-emulator/\(serial).json") else { return nil }
        return try? JSONValue.parse(Array(data))
    }

    /// Waits until the saved state of a device satisfies `predicate`; returns it.
    @discardableResult
    public func waitPersisted(_ serial: String, _ what: String, timeout: Double = 15, _ predicate: @escaping @Sendable (JSONValue) -> Bool) async throws -> JSONValue {
        try await waitUntil("\(serial): \(what)", timeout: timeout) { self.persisted(serial).map(predicate) ?? false }
        return persisted(serial)!
    }

    /// The packet types the emulator received for one device lately (its activity log keeps the last 100 packets).
    public func receivedTypes(_ serial: String) async throws -> [Int] {
        (try await get("/api/activity").arrayValue ?? []).filter { $0["direction"] == "rx" && $0["target"]?.stringValue == serial }
            .compactMap { $0["packet_type"]?.intValue }
    }
}
