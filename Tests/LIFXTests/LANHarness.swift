import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LIFXAdapter
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// `lifx-emulator` (PyPI, 4.11.0; a LIFX LAN peer we did not write), installed by `make test` into
/// .build/lifx-venv, on 127.0.0.1 with fixed serials; its REST API reads device state and packet
/// counts and turns fault scenarios on (docs/upstreams/lifx-lan.md "The emulator").
final class LIFXEmulator: Sendable {
    let port: Int
    let apiPort: Int
    let child: ChildProcess
    let log: String
    /// The emulator's HOME: with `persistent: true` it writes each device's whole state (infrared, HEV cycle,
    /// zones, firmware effects) to `.lifx-emulator/<serial>.json` there, which its REST API does not show.
    let home: String

    static var binary: String? {
        if let p = ProcessInfo.processInfo.environment["SWITCHYARD_LIFX_EMULATOR"] { return p }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let p = repo.appendingPathComponent(".build/lifx-venv/bin/lifx-emulator").path
        return FileManager.default.isExecutableFile(atPath: p) ? p : nil
    }

    static var unavailableReason: String? {
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
    static func start(devices: String, scenarios: String = "") async throws -> LIFXEmulator {
        let bin = try #require(binary)
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

    static func with<R: Sendable>(devices: String, scenarios: String = "", _ body: (LIFXEmulator) async throws -> R) async throws -> R {
        let e = try await start(devices: devices, scenarios: scenarios)
        return try await withTeardown { try await body(e) } teardown: { await e.child.stop() }
    }

    func call(_ method: String, _ path: String, _ body: String? = nil) async throws -> JSONValue {
        var r = URLRequest(url: URL(string: "http://127.0.0.1:\(apiPort)\(path)")!)
        r.httpMethod = method
        r.timeoutInterval = 5
        if let body { r.httpBody = Data(body.utf8); r.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        let (data, response) = try await URLSession.shared.data(for: r)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else { throw AdapterError("emulator \(method) \(path): HTTP \(status) \(String(decoding: data, as: UTF8.self))") }
        return data.isEmpty ? .null : try JSONValue.parse(Array(data))
    }

    func get(_ path: String) async throws -> JSONValue { try await call("GET", path) }

    func device(_ serial: String) async throws -> JSONValue { try await get("/api/devices/\(serial)") }

    /// Requests the emulator received, by type.
    func received() async throws -> [Int: Int] {
        var out: [Int: Int] = [:]
        for (k, v) in try await get("/api/stats")["packets_received_by_type"]?.objectValue ?? [:] { out[Int(k) ?? -1] = v.intValue ?? 0 }
        return out
    }

    func setScenario(_ serial: String, _ json: String) async throws { _ = try await call("PUT", "/api/scenarios/devices/\(serial)", json) }

    /// The device's state as the emulator last saved it (written 0.1 s after a change).
    func persisted(_ serial: String) -> JSONValue? {
        guard let data = FileManager.default.contents(atPath: "\(home)/.lifx-emulator/\(serial).json") else { return nil }
        return try? JSONValue.parse(Array(data))
    }

    /// Waits until the saved state of a device satisfies `predicate`; returns it.
    @discardableResult
    func waitPersisted(_ serial: String, _ what: String, timeout: Double = 15, _ predicate: @escaping @Sendable (JSONValue) -> Bool) async throws -> JSONValue {
        try await waitUntil("\(serial): \(what)", timeout: timeout) { self.persisted(serial).map(predicate) ?? false }
        return persisted(serial)!
    }

    /// The packet types the emulator received for one device lately (its activity log keeps the last 100 packets).
    func receivedTypes(_ serial: String) async throws -> [Int] {
        (try await get("/api/activity").arrayValue ?? []).filter { $0["direction"] == "rx" && $0["target"]?.stringValue == serial }
            .compactMap { $0["packet_type"]?.intValue }
    }
}

/// Wire values from the user's units, as the LAN protocol documents them (docs/upstreams/lifx-lan.md
/// "Messages used"): what a test expects the emulator to hold.
enum Wire {
    static func hue(_ degrees: Int) -> Int { Int((Double(degrees) * 65536 / 360).rounded()) % 65536 }
    static func level(_ percent: Int) -> Int { Int((Double(percent) * 65535 / 100).rounded()) }
    static func degrees(_ hue: Int) -> Int { Int((Double(hue) * 360 / 65536).rounded()) % 360 }
    static func percent(_ level: Int) -> Int { Int((Double(level) * 100 / 65535).rounded()) }
}

/// The LIFX adapter in-process, LAN only (no token), against the emulator.
enum LANBridge {
    static func settings(_ e: LIFXEmulator, configure: (inout LIFXSettings) -> Void = { _ in }) -> LIFXSettings {
        var s = LIFXSettings()
        s.lan.enabled = true
        s.lan.hosts = ["127.0.0.1:\(e.port)"]
        s.lan.broadcast = []
        s.lan.pollInterval = 3600
        s.minInterval = 0.05
        configure(&s)
        return s
    }

    static func with<R: Sendable>(_ e: LIFXEmulator, configure: (inout LIFXSettings) -> Void = { _ in },
                                  _ body: (BridgeUnderTest) async throws -> R) async throws -> R {
        try await BridgeUnderTest.with(subscribe: { ["\($0)/#"] }, adapter: LIFXAdapter(settings: settings(e, configure: configure)), body)
    }
}

extension BridgeUnderTest {
    func lifxState(_ name: String) -> JSONValue? { probe.last("\(base)/lifx/\(name)").flatMap { try? JSONValue.parse($0) } }

    @discardableResult
    func waitLIFX(_ name: String, timeout: Double = 30, _ what: String = "", _ predicate: @escaping @Sendable (JSONValue) -> Bool) async throws -> JSONValue {
        let t = "\(base)/lifx/\(name)"
        let ms = try await probe.waitFor("\(t) \(what)", timeout: timeout) { ms in
            ms.last { $0.topic == t }.flatMap { try? JSONValue.parse($0.payload) }.map(predicate) ?? false
        }
        return try JSONValue.parse(ms.last { $0.topic == t }!.payload)
    }
}
