import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs a program to its end (posix_spawnp, waitpid) with its standard output in a file, read afterwards.
/// Not Foundation's Process: its waitUntilExit busy-waits on a Swift-concurrency thread on Linux
/// (Tests/SwitchyardTestSupport/ChildProcess.swift), which stalls a parallel test run; nor a blocking
/// waitpid, which holds one of the cooperative pool's two threads for as long as the program runs (a
/// Python starting jsonschema takes seconds on a loaded machine: docs/testing.md "A run that starves"). The
/// wait polls with `Task.sleep`.
enum Spawn {
    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    static func run(_ argv: [String]) async throws -> (status: Int32, output: String) {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("spawn-\(UUID().uuidString)").path
        defer { unlink(out) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attr = posix_spawnattr_t()
        posix_spawnattr_init(&attr)
        defer { posix_spawnattr_destroy(&attr) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attr, &empty)
        posix_spawnattr_setflags(&attr, Int16(POSIX_SPAWN_SETSIGMASK))
        let args = argv.map { strdup($0) } + [nil]
        defer { args.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawnp(&pid, argv[0], &actions, &attr, args, environ)
        guard rc == 0 else { throw Failed(description: "cannot start \(argv[0]): \(String(cString: strerror(rc)))") }
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if r < 0 && errno != EINTR { throw Failed(description: "waitpid: \(String(cString: strerror(errno)))") }
            try? await Task.sleep(for: .milliseconds(10))
        }
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        return (code, text)
    }
}

extension Data {
    /// Writes the bytes without the fsync Foundation's `write(to:)` makes (docs/testing.md "A run that starves":
    /// on a machine busy writing, one fsync held a pool thread for seconds). A test's files need no durability.
    func writeWithoutSync(to url: URL) throws {
        guard let f = fopen(url.path, "w") else { throw Spawn.Failed(description: "cannot write \(url.path)") }
        let written = withUnsafeBytes { fwrite($0.baseAddress, 1, $0.count, f) }
        guard fclose(f) == 0, written == count else { throw Spawn.Failed(description: "cannot write \(url.path)") }
    }
}
