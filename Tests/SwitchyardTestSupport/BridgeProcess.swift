import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The `switchyard` executable run as a child process, for what only a real process shows
/// (Last Will after SIGKILL, SIGTERM handling, exit codes).
public final class BridgeProcess: @unchecked Sendable {
    public let child: ChildProcess
    let output: URL

    public init(arguments: [String], environment: [String: String] = [:]) throws {
        guard let bin = TestEnvironment.switchyardBinary() else { throw TestError("switchyard executable not found next to the tests") }
        output = TestEnvironment.makeTempDir("bridge-out").appendingPathComponent("output.log")
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        child = try ChildProcess(path: bin, arguments: arguments, environment: env, outputFile: output.path)
    }

    public var outputText: String { (try? String(contentsOf: output, encoding: .utf8)) ?? "" }

    public func signal(_ sig: Int32) { child.signal(sig) }

    /// Waits for the process to exit (at most `timeout` seconds); returns its status.
    public func waitForExit(timeout: Double = 30) async throws -> Int32 {
        guard let s = await child.wait(timeout: timeout) else {
            throw TestError("switchyard did not exit in \(timeout) s; output:\n\(outputText)")
        }
        return s
    }

    deinit {
        if child.isRunning { kill(child.pid, SIGKILL); _ = child.exitStatus }
    }
}
