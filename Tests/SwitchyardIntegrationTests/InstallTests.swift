import Foundation
import Testing
import SwitchyardTestSupport

/// `make install` into a temporary DESTDIR, as a packager would run it: the files land where the unit
/// and the docs say, the installed binary accepts the installed example config, and systemd accepts
/// the installed unit.
@Suite struct InstallTests {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// Runs a program to its end (bounded), its output in `log`; returns the exit status.
    func run(_ path: String, _ arguments: [String], log: String, directory: String? = nil) async throws -> Int32? {
        var args = arguments
        var program = path
        if let directory { program = "/bin/sh"; args = ["-c", "cd \"$0\" && exec \"$@\"", directory, path] + arguments }
        let child = try ChildProcess(path: program, arguments: args, outputFile: log)
        return await child.wait(timeout: 120)
    }

    @Test func installIntoADestdirGivesAWorkingBridgeConfigAndUnit() async throws {
        let bin = try #require(TestEnvironment.switchyardBinary(), "the switchyard executable was not built next to the tests")
        let make = try #require(["/usr/bin/make", "/bin/make"].first { FileManager.default.isExecutableFile(atPath: $0) }, "make is not installed")
        let dir = TestEnvironment.makeTempDir("install")
        let dest = dir.appendingPathComponent("root").path
        let log = dir.appendingPathComponent("log").path
        let status = try await run(make, ["--no-print-directory", "install", "DESTDIR=\(dest)", "PREFIX=/usr", "BIN=\(bin)"],
                                   log: log, directory: Self.repo)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "make install failed:\n\(output)")

        let fm = FileManager.default
        func mode(_ p: String) -> Int? { (try? fm.attributesOfItem(atPath: dest + p)[.posixPermissions] as? Int) ?? nil }
        #expect(mode("/usr/bin/switchyard") == 0o755)
        #expect(mode("/etc/switchyard/config.yaml") == 0o640)
        #expect(mode("/etc/switchyard/credentials") == 0o700)
        #expect(mode("/var/lib/switchyard") == 0o700)
        #expect(fm.contentsEqual(atPath: dest + "/usr/share/switchyard/config.example.yaml", andPath: Self.repo + "/config.example.yaml"))
        let unit = try String(contentsOfFile: dest + "/usr/lib/systemd/system/switchyard.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/bin/switchyard run -c /etc/switchyard/config.yaml"))

        // The installed binary accepts the installed config.
        let check = dir.appendingPathComponent("check").path
        #expect(try await run(dest + "/usr/bin/switchyard", ["check-config", "-c", dest + "/etc/switchyard/config.yaml"], log: check) == 0,
                "\((try? String(contentsOfFile: check, encoding: .utf8)) ?? "")")

        // A second install keeps the config the user edited.
        try "# edited\n".appending(String(contentsOfFile: dest + "/etc/switchyard/config.yaml", encoding: .utf8))
            .writeForTest(toFile: dest + "/etc/switchyard/config.yaml", replacing: true)
        #expect(try await run(make, ["--no-print-directory", "install", "DESTDIR=\(dest)", "PREFIX=/usr", "BIN=\(bin)"], log: log, directory: Self.repo) == 0)
        #expect(try String(contentsOfFile: dest + "/etc/switchyard/config.yaml", encoding: .utf8).hasPrefix("# edited\n"))

        // systemd's own check of the unit, with ExecStart pointing at the installed binary in DESTDIR.
        if fm.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            let copy = dir.appendingPathComponent("switchyard.service").path
            try unit.replacingOccurrences(of: "ExecStart=/usr/bin/switchyard", with: "ExecStart=\(dest)/usr/bin/switchyard")
                .writeForTest(toFile: copy, replacing: true)
            let verify = dir.appendingPathComponent("verify").path
            #expect(try await run("/usr/bin/systemd-analyze", ["verify", copy], log: verify) == 0,
                    "systemd-analyze verify: \((try? String(contentsOfFile: verify, encoding: .utf8)) ?? "")")
        }
    }
}
