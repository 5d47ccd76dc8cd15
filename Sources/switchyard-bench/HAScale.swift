import Foundation
import SwitchyardTestSupport

extension SwitchyardBench {
    /// `ha-scale`: `haDevices` virtual devices of `haDeviceKind` (lights: one entity each; multisensors: four)
    /// announced to a real Home Assistant (Core 2025.4.4, the venv of `make test-ha`), per entity and per device
    /// in the same run, after a fresh start and after a restart of Home Assistant: time until its state machine
    /// holds every entity available, its CPU time meanwhile, the discovery messages sent, what the broker
    /// dropped (Tests/homeassistant/ha_scale.py drives it; each measurement has a broker of its own,
    /// configured as Mosquitto ships).
    func haScaleFigures() async throws -> [Figure] {
        let python = ".build/ha-venv/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python) else {
            throw BenchError("ha-scale needs Home Assistant in \(python): run `make .build/ha-venv/bin/python` (or `make test-ha`) first")
        }
        guard let bin = TestEnvironment.switchyardBinary() else { throw BenchError("switchyard executable not found next to switchyard-bench") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: python)
        p.arguments = ["-B", "Tests/homeassistant/ha_scale.py", "--devices", "\(haDevices)", "--kind", haDeviceKind]
        var env = ProcessInfo.processInfo.environment
        env["SWITCHYARD_BIN_DIR"] = URL(fileURLWithPath: bin).deletingLastPathComponent().path
        p.environment = env
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw BenchError("ha-scale: ha_scale.py exited with \(p.terminationStatus)") }
        struct Measured: Decodable { var name: String; var value: Double; var unit: String }
        let measured = try JSONDecoder().decode([Measured].self, from: data)
        return measured.map { Figure(scenario: "ha-scale", name: $0.name, value: $0.value, unit: $0.unit) }
    }
}
