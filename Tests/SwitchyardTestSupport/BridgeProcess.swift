import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The `switchyard` executable run as a child process, for what only a real process shows
/// (Last Will after SIGKILL, SIGTERM handling, exit codes).
public final class BridgeProcess: @unchecked Sendable {
    public let process = Process()
    let output: URL

    public init(arguments: [String], environment: [String: String] = [:]) throws {
        guard let bin = TestEnvironment.switchyardBinary() else { throw TestError("switchyard executable not found next to the tests") }
        output = TestEnvironment.makeTempDir("bridge-out").appendingPathComponent("output.log")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        process.executableURL = URL(fileURLWithPath: bin)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        process.environment = env
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
    }

    public var outputText: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    public func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for the process to exit (at most `timeout` seconds); returns its status.
    public func waitForExit(timeout: Double = 30) async throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { await TestEnvironment.sleep(0.05) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            throw TestError("switchyard did not exit in \(timeout) s; output:\n\(outputText)")
        }
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
