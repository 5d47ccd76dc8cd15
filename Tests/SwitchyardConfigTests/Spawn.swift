import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs a program to its end (posix_spawnp, waitpid) with its standard output in a file, read afterwards.
/// Not Foundation's Process: its waitUntilExit busy-waits on a Swift-concurrency thread on Linux
/// (Tests/SwitchyardTestSupport/ChildProcess.swift), which stalls a parallel test run.
enum Spawn {
    struct Failed: Error, CustomStringConvertible {
        var description: String
    }

    static func run(_ argv: [String]) throws -> (status: Int32, output: String) {
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
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { throw Failed(description: "waitpid: \(String(cString: strerror(errno)))") }
        }
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        return (code, text)
    }
}
