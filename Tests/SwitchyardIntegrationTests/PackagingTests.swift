import Foundation
import Testing
import SwitchyardTestSupport

/// The bridge as people install it (docs/operations.md "Installing"), from what `make deb` leaves:
/// the stripped release binary with its symbols beside it, the Debian package installed into a clean
/// Debian 12 root and removed again, the container image with its health check, and the Home Assistant
/// add-on's image. The clean roots are containers (podman) of a Debian 12 image the tests make
/// (Tests/packaging/debian-base.sh: debootstrap, slimmed like bookworm-slim, kept between runs).
/// `make test` builds the package first; without it, or without root and the tools, the suite is
/// skipped and says why.
@Suite(.serialized, .enabled(if: Packaging.unavailable == nil, Comment(rawValue: Packaging.unavailable ?? "")))
struct PackagingTests {
    @Test func theReleaseBinaryIsStrippedWithItsSymbolsBeside() async throws {
        let bin = Packaging.dist + "/switchyard", debug = Packaging.dist + "/switchyard.debug"
        let sections = try await Packaging.sh("readelf -SW '\(bin)'").output
        #expect(!sections.contains(" .symtab ") && !sections.contains(" .debug_info "), "the shipped binary is not stripped:\n\(sections)")
        #expect(sections.contains(" .gnu_debuglink "), "the shipped binary names no debug file")
        let link = try await Packaging.sh("readelf -p .gnu_debuglink '\(bin)'").output
        #expect(link.contains("switchyard.debug"), "\(link)")
        let debugSections = try await Packaging.sh("readelf -SW '\(debug)'").output
        #expect(debugSections.contains(" .debug_info ") && debugSections.contains(" .symtab "), "the .debug file has no symbols:\n\(debugSections)")
        // Both carry one build id, and gdb finds the symbols and source lines through the link.
        let ids = try await Packaging.sh("readelf -n '\(bin)' '\(debug)' 2>/dev/null | sed -n 's/.*Build ID: //p'").output.split(separator: "\n")
        #expect(ids.count == 2 && ids[0] == ids[1], "build ids: \(ids)")
        let gdb = try await Packaging.sh("gdb -batch -nx -ex 'info line switchyard_build_commit' '\(bin)'")
        #expect(gdb.output.contains("buildinfo.c"), "gdb did not find the source line through the debug link:\n\(gdb.output)")
        // --version names the commit the package was built from.
        let head = try await Packaging.sh("git -C '\(Packaging.repo)' rev-parse --short=12 HEAD").output.trimmingCharacters(in: .whitespacesAndNewlines)
        let version = try await Packaging.sh("'\(bin)' --version").output
        #expect(version.hasPrefix(Packaging.version + " (commit ") && version.contains("commit \(head)"), "\(version) (HEAD is \(head))")
        let stripped = Packaging.size(bin), full = Packaging.size(Packaging.repo + "/.build/static/release/switchyard")
        print("release binary: \(stripped) bytes stripped, \(full) unstripped")
        #expect(stripped > 0 && stripped < full / 2)
    }

    @Test func theDebianPackagePassesLintianAndInstallsIntoACleanDebian12() async throws {
        let deb = try #require(Packaging.deb, "no package in .build/deb (make deb)")
        let lintian = try await Packaging.sh("lintian --fail-on error --display-level '>=warning' --info '\(deb)' 2>&1")
        print("lintian:\n\(lintian.output)")
        #expect(lintian.status == 0 && !lintian.output.contains("\nE: ") && !lintian.output.hasPrefix("E: "), "\(lintian.output)")
        let info = try await Packaging.sh("dpkg-deb -f '\(deb)' Depends; dpkg-deb --ctrl-tarfile '\(deb)' | tar -xO ./conffiles").output
        #expect(info.contains("libmosquitto1") && info.contains("libyaml-0-2") && info.contains("libc6"), "\(info)")
        #expect(info.contains("/etc/switchyard/config.yaml"), "\(info)")

        // A second revision of the same build, to upgrade to.
        let dir = TestEnvironment.makeTempDir("deb")
        let upgrade = try await Packaging.sh("'\(Packaging.repo)/deploy/deb/build.sh' --binary '\(Packaging.dist)/switchyard' --version \(Packaging.version) "
                                             + "--revision 2 --out '\(dir.path)' >/dev/null && ls '\(dir.path)'/*.deb")
        #expect(upgrade.status == 0, "\(upgrade.output)")
        let second = upgrade.output.trimmingCharacters(in: .whitespacesAndNewlines)
        try FileManager.default.copyItem(atPath: deb, toPath: dir.appendingPathComponent("first.deb").path)

        let base = try await Packaging.baseImage()
        let script = #"""
        set -eu
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        echo "== install"
        apt-get install -y -qq --no-install-recommends /pkg/first.deb >/dev/null
        echo "version: $(switchyard --version)"
        echo "config: $(stat -c '%U:%G %a' /etc/switchyard/config.yaml)"
        echo "credentials: $(stat -c '%U:%G %a' /etc/switchyard/credentials)"
        echo "state: $(stat -c '%U:%G %a' /var/lib/switchyard)"
        echo "user: $(getent passwd switchyard | cut -d: -f1,6,7)"
        echo "enabled: $(readlink /etc/systemd/system/multi-user.target.wants/switchyard.service)"
        echo "running: $(grep -lx switchyard /proc/[0-9]*/comm 2>/dev/null | wc -l)"
        # The bridge's own user reads the installed config, as the unit runs it.
        setpriv --reuid=switchyard --regid=switchyard --clear-groups switchyard check-config -c /etc/switchyard/config.yaml
        systemd-analyze verify /lib/systemd/system/switchyard.service && echo "verify: ok"
        echo "== upgrade"
        echo "# edited" >> /etc/switchyard/config.yaml
        echo secret > /etc/switchyard/credentials/mqtt-password
        touch /var/lib/switchyard/livecoding-token.json
        apt-get install -y -qq --no-install-recommends "/pkg/$(basename "$1")" >/dev/null
        echo "upgraded: $(dpkg-query -W -f='${Version}' switchyard)"
        tail -n 1 /etc/switchyard/config.yaml
        echo "== remove"
        apt-get remove -y -qq switchyard >/dev/null
        echo "left: $(find /etc/switchyard /var/lib/switchyard /usr/bin/switchyard /lib/systemd/system/switchyard.service 2>/dev/null | sort | tr '\n' ' ')"
        echo "== purge"
        apt-get purge -y -qq switchyard >/dev/null
        echo "purged: $(find / -xdev \( -path /proc -o -path /sys -o -path /pkg -o -path /var/cache/apt \) -prune -o -name '*switchyard*' -print | sort | tr '\n' ' ')"
        echo "== done"
        """#
        try script.write(to: dir.appendingPathComponent("test.sh"), atomically: true, encoding: .utf8)
        // The packages apt fetches are kept between runs (.build/packaging/apt).
        let archives = Packaging.repo + "/.build/packaging/apt"
        try FileManager.default.createDirectory(atPath: archives + "/partial", withIntermediateDirectories: true)
        let run = try await Packaging.podman(["run", "--rm", "--network", "host", "-v", "\(dir.path):/pkg:ro", "-v", "\(archives):/var/cache/apt/archives",
                                              base, "sh", "/pkg/test.sh", second],
                                             timeout: 600)
        let o = run.output
        print(o)
        #expect(run.status == 0 && o.contains("== done"), "\(o)")
        #expect(o.contains("version: \(Packaging.version) (commit "))
        #expect(o.contains("config: root:switchyard 640") && o.contains("credentials: root:root 700") && o.contains("state: switchyard:switchyard 700"))
        #expect(o.contains("user: switchyard:/var/lib/switchyard:/usr/sbin/nologin"))
        #expect(o.contains("enabled: /lib/systemd/system/switchyard.service") && o.contains("running: 0"), "enabled, not started")
        #expect(o.contains("config OK") && o.contains("verify: ok"))
        #expect(o.contains("upgraded: \(Packaging.version)-2\n# edited\n"), "an upgrade keeps the edited config")
        #expect(o.contains("left: /etc/switchyard /etc/switchyard/config.yaml /etc/switchyard/credentials /etc/switchyard/credentials/mqtt-password "
                           + "/var/lib/switchyard /var/lib/switchyard/livecoding-token.json \n"), "a removal leaves config, credentials and state")
        #expect(o.contains("purged: \n"), "a purge leaves nothing")
    }

    @Test func theContainerIsHealthyWithItsConsoleOnAnotherPort() async throws {
        let base = try await Packaging.baseImage()
        let tag = "localhost/switchyard-test:\(UUID().uuidString.prefix(8).lowercased())"
        let build = try await Packaging.podman(["build", "--format", "docker", "--build-arg", "BASE=\(base)", "-f", "deploy/Containerfile", "-t", tag, "."],
                                               timeout: 900, directory: Packaging.repo)
        defer { Task { _ = try? await Packaging.podman(["rmi", "-f", tag]) } }
        #expect(build.status == 0, "\(build.output)")
        #expect(!build.output.contains("HEALTHCHECK is not supported"), "\(build.output)")
        let check = try await Packaging.podman(["image", "inspect", "--format", "{{json .Config.Healthcheck}}", tag]).output
        #expect(check.contains("switchyard") && check.contains("healthcheck"), "\(check)")
        let size = Int(try await Packaging.podman(["image", "inspect", "--format", "{{.Size}}", tag]).output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        let baseSize = Int(try await Packaging.podman(["image", "inspect", "--format", "{{.Size}}", base]).output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        print("image: \(size) bytes (base \(baseSize), added \(size - baseSize))")
        #expect(size > 0 && size <= 130_000_000, "the image is \(size) bytes")

        // The console on 9300, beyond loopback with a token, in a network of the container's own (no broker:
        // the core answers without one). The check must follow the config there.
        let dir = TestEnvironment.makeTempDir("container")
        try """
        mqtt: {url: "mqtt://127.0.0.1:1"}
        web: {listen: "0.0.0.0:9300", auth_token: "${SWITCHYARD_WEB_TOKEN}"}
        virtual: {devices: [{name: lamp, type: light}]}
        """.write(to: dir.appendingPathComponent("config.yaml"), atomically: true, encoding: .utf8)
        chmod(dir.path, 0o755)
        chmod(dir.appendingPathComponent("config.yaml").path, 0o644)
        let name = "switchyard-test-\(UUID().uuidString.prefix(8).lowercased())"
        let started = try await Packaging.podman(["run", "-d", "--name", name, "--network", "none", "-e", "SWITCHYARD_WEB_TOKEN=container-test-token-0123456789",
                                                  "-v", "\(dir.path)/config.yaml:/etc/switchyard/config.yaml:ro", tag])
        defer { Task { _ = try? await Packaging.podman(["rm", "-f", "-t", "2", name]) } }
        #expect(started.status == 0, "\(started.output)")
        var healthy = false
        for _ in 0..<30 where !healthy {
            let h = try await Packaging.podman(["healthcheck", "run", name])
            healthy = h.status == 0
            if !healthy { await TestEnvironment.sleep(1) }
        }
        let state = try await Packaging.podman(["inspect", "--format", "{{.State.Health.Status}}", name]).output
        let logs = try await Packaging.podman(["logs", name]).output
        #expect(healthy && state.contains("healthy"), "health: \(state)\n\(logs)")
        let said = try await Packaging.podman(["exec", name, "switchyard", "healthcheck"]).output
        #expect(said.contains("http://127.0.0.1:9300/livez: 200 alive"), "\(said)")

        // A core that does not answer (the process stopped) turns the check unhealthy.
        let pid = try await Packaging.podman(["inspect", "--format", "{{.State.Pid}}", name]).output.trimmingCharacters(in: .whitespacesAndNewlines)
        _ = try await Packaging.sh("kill -STOP \(pid)")
        let stuck = try await Packaging.podman(["healthcheck", "run", name], timeout: 60)
        _ = try await Packaging.sh("kill -CONT \(pid)")
        #expect(stuck.status != 0, "a stopped bridge passed its health check: \(stuck.output)")
        let stop = try await Packaging.podman(["stop", "-t", "15", name])
        let exit = try await Packaging.podman(["inspect", "--format", "{{.State.ExitCode}}", name]).output
        #expect(stop.status == 0 && exit.trimmingCharacters(in: .whitespacesAndNewlines) == "0", "\(stop.output) exit \(exit)")
        _ = try await Packaging.podman(["rm", "-f", name])
        _ = try await Packaging.podman(["rmi", "-f", tag])
    }

    /// The add-on's image from its folder as the Supervisor builds it (BUILD_FROM: here the test's Debian 12
    /// image, Home Assistant's own being out of reach), run with options: the bridge starts with the mapped
    /// config, and the ingress gate serves the console.
    @Test func theAddonImageBuildsAndServesTheConsoleThroughItsGate() async throws {
        let deb = try #require(Packaging.deb, "no package in .build/deb (make deb)")
        let base = try await Packaging.baseImage()
        let dir = TestEnvironment.makeTempDir("addon")
        let folder = dir.appendingPathComponent("switchyard").path
        let copy = try await Packaging.sh("cp -r '\(Packaging.repo)/deploy/home-assistant-addon' '\(folder)' && cp '\(deb)' '\(folder)/switchyard.deb'")
        #expect(copy.status == 0, "\(copy.output)")
        let tag = "localhost/switchyard-addon-test:\(UUID().uuidString.prefix(8).lowercased())"
        let build = try await Packaging.podman(["build", "--format", "docker", "--build-arg", "BUILD_FROM=\(base)", "-t", tag, "."],
                                               timeout: 900, directory: folder)
        defer { Task { _ = try? await Packaging.podman(["rmi", "-f", tag]) } }
        #expect(build.status == 0, "\(build.output)")

        let data = dir.appendingPathComponent("data").path
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try #"{"base_topic": "addon", "log_level": "info", "mqtt": {"url": "mqtt://127.0.0.1:1"}, "lifx": {}, "home_assistant_mirror": false, "imp_devices": [], "virtual_devices": true}"#
            .write(toFile: data + "/options.json", atomically: true, encoding: .utf8)
        let name = "switchyard-addon-test-\(UUID().uuidString.prefix(8).lowercased())"
        // The Supervisor's address is the only one the gate lets in; inside this test's network of its own,
        // the test asks from loopback, so the gate is told to let loopback in.
        let started = try await Packaging.podman(["run", "-d", "--name", name, "--network", "none", "-e", "SWITCHYARD_INGRESS_ALLOW=127.0.0.1",
                                                  "-v", "\(data):/data", tag])
        defer { Task { _ = try? await Packaging.podman(["rm", "-f", "-t", "2", name]) } }
        #expect(started.status == 0, "\(started.output)")
        var page = ""
        for _ in 0..<30 where !page.contains("console.js") {
            page = try await Packaging.podman(["exec", name, "curl", "-s", "-H", "Host: homeassistant.local:8123", "http://127.0.0.1:8099/"]).output
            if !page.contains("console.js") { await TestEnvironment.sleep(1) }
        }
        let logs = try await Packaging.podman(["logs", name]).output
        #expect(page.contains(#"src="console.js""#), "the console through the gate:\n\(page)\n\(logs)")
        let livez = try await Packaging.podman(["exec", name, "curl", "-s", "http://127.0.0.1:8099/livez"]).output
        #expect(livez == "alive\n", "\(livez)")
        let config = try await Packaging.podman(["exec", name, "cat", "/run/switchyard/config.yaml"]).output
        #expect(config.contains(#""base_topic": "addon""#) && config.contains(#""name": "kitchen""#), "\(config)")
        _ = try await Packaging.podman(["rm", "-f", "-t", "2", name])
        _ = try await Packaging.podman(["rmi", "-f", tag])
    }
}

/// The add-on's mapping of its options onto the bridge's config (switchyard-addon-config), with the
/// broker asked from a stand-in Supervisor (a loopback HTTP server answering /services/mqtt as the
/// Supervisor does): the config it writes is one the bridge takes, and no secret is in it.
@Suite(.serialized, .enabled(if: Packaging.addonToolsMissing == nil, Comment(rawValue: Packaging.addonToolsMissing ?? "")))
struct AddonConfigTests {
    static let script = Packaging.repo + "/deploy/home-assistant-addon/rootfs/usr/bin/switchyard-addon-config"

    func map(_ options: String, supervisor: Int?, token: String? = "supervisor-token") async throws -> (Int32?, String, String) {
        let dir = TestEnvironment.makeTempDir("addon-config")
        try options.write(to: dir.appendingPathComponent("options.json"), atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["SWITCHYARD_SUPERVISOR"] = supervisor.map { "http://127.0.0.1:\($0)" } ?? "http://127.0.0.1:1"
        env["SWITCHYARD_STATE_DIR"] = dir.appendingPathComponent("state").path
        env["SUPERVISOR_TOKEN"] = token
        let out = dir.appendingPathComponent("run").path
        let child = try ChildProcess(path: Self.script, arguments: [dir.appendingPathComponent("options.json").path, out], environment: env,
                                     outputFile: dir.appendingPathComponent("log").path)
        let status = await child.wait(timeout: 60)
        let log = (try? String(contentsOfFile: dir.appendingPathComponent("log").path, encoding: .utf8)) ?? ""
        return (status, log, out)
    }

    /// A stand-in Supervisor serving `answer` at /services/mqtt.
    func supervisor(_ answer: String) async throws -> (ChildProcess, Int) {
        let dir = TestEnvironment.makeTempDir("supervisor")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("services"), withIntermediateDirectories: true)
        try answer.write(to: dir.appendingPathComponent("services/mqtt"), atomically: true, encoding: .utf8)
        let port = TestEnvironment.freePort()
        let child = try ChildProcess(path: "/usr/bin/python3", arguments: ["-m", "http.server", "--bind", "127.0.0.1", "--directory", dir.path, "\(port)"],
                                     outputFile: dir.appendingPathComponent("log").path)
        try await waitUntil("the stand-in Supervisor listens", timeout: 20) { TestEnvironment.canConnect(port: port) }
        return (child, port)
    }

    func checkConfig(_ path: String) async throws -> (Int32, String) {
        let check = try BridgeProcess(arguments: ["check-config", "-c", path], environment: ["SUPERVISOR_TOKEN": "supervisor-token"])
        return (try await check.waitForExit(), check.outputText)
    }

    @Test func theBrokerComesFromTheSupervisorAndSecretsGoToFiles() async throws {
        let (server, port) = try await supervisor(#"{"result": "ok", "data": {"host": "127.0.0.1", "port": 1884, "ssl": true, "protocol": "3.1.1", "username": "addons", "password": "mqtt-secret-from-supervisor"}}"#)
        defer { server.terminateAndReap() }
        let options = #"{"base_topic": "home", "log_level": "debug", "mqtt": {}, "lifx": {"token": "lifx-secret-token", "lan": true, "lan_hosts": ["127.0.0.2"]}, "home_assistant_mirror": true, "imp_devices": [{"name": "hall_clock", "agent_id": "impSecret012"}], "virtual_devices": true}"#
        let (status, log, out) = try await map(options, supervisor: port)
        #expect(status == 0, "\(log)")
        let config = try String(contentsOfFile: out + "/config.yaml", encoding: .utf8)
        #expect(config.contains(#""url": "mqtts://127.0.0.1:1884""#) && config.contains(#""username": "addons""#), "\(config)")
        #expect(config.contains(#""base_topic": "home""#) && config.contains(#""level": "debug""#))
        #expect(config.contains(#""url": "ws://supervisor/core/websocket""#) && config.contains(#""token": "${SUPERVISOR_TOKEN}""#))
        for secret in ["mqtt-secret-from-supervisor", "lifx-secret-token", "impSecret012", "supervisor-token"] {
            #expect(!config.contains(secret), "\(secret) is in the config")
        }
        #expect(try String(contentsOfFile: out + "/secrets/mqtt-password", encoding: .utf8) == "mqtt-secret-from-supervisor")
        let mode = try FileManager.default.attributesOfItem(atPath: out + "/secrets/lifx-token")[.posixPermissions] as? Int
        #expect(mode == 0o600)
        let (ok, said) = try await checkConfig(out + "/config.yaml")
        #expect(ok == 0 && said.contains("config OK (upstreams: virtual, lifx, imp, ha)"), "\(said)")
    }

    @Test func theOptionsBrokerWinsAndNoBrokerAtAllIsSaid() async throws {
        // A broker in the options: the Supervisor is not asked (none answers here).
        let (status, log, out) = try await map(#"{"base_topic": "switchyard", "log_level": "info", "mqtt": {"url": "mqtt://10.0.0.5:1883", "username": "me", "password": "pw-from-options"}, "lifx": {}, "home_assistant_mirror": false, "imp_devices": [], "virtual_devices": false}"#,
                                               supervisor: nil)
        #expect(status == 0, "\(log)")
        let config = try String(contentsOfFile: out + "/config.yaml", encoding: .utf8)
        #expect(config.contains(#""url": "mqtt://10.0.0.5:1883""#) && !config.contains("pw-from-options") && !config.contains("lifx"), "\(config)")
        let (ok, said) = try await checkConfig(out + "/config.yaml")
        #expect(ok == 0, "\(said)")

        // None in the options and none from the Supervisor: one clear line, exit 1.
        let (server, port) = try await supervisor(#"{"result": "error", "message": "No mqtt service"}"#)
        defer { server.terminateAndReap() }
        let (failed, why, _) = try await map(#"{"base_topic": "switchyard", "mqtt": {}}"#, supervisor: port)
        #expect(failed == 1 && why.contains("names no host"), "\(why)")
        let (unreached, unreachedWhy, _) = try await map(#"{"base_topic": "switchyard", "mqtt": {}}"#, supervisor: nil)
        #expect(unreached == 1 && unreachedWhy.contains("install the Mosquitto broker add-on"), "\(unreachedWhy)")
    }
}

enum Packaging {
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let dist = repo + "/.build/dist"
    static let baseTag = "localhost/switchyard-test/debian:bookworm-slim"
    static let podmanFlags = ["--runtime", "runc", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]

    /// The version the package was built with: `switchyard --version`'s first word.
    static var version: String {
        let text = (try? String(contentsOfFile: repo + "/Sources/SwitchyardRuntime/BridgeRuntime.swift", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix("public let switchyardVersion = ") } ?? ""
        return line.split(separator: "\"").dropFirst().first.map(String.init) ?? "?"
    }

    static var deb: String? {
        let dir = repo + "/.build/deb"
        let name = (try? FileManager.default.contentsOfDirectory(atPath: dir))?.first { $0.hasPrefix("switchyard_\(version)_") && $0.hasSuffix(".deb") }
        return name.map { dir + "/" + $0 }
    }

    static func size(_ path: String) -> Int { (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0 }

    static var unavailable: String? {
        if geteuid() != 0 { return "the packaging tests need root (podman, debootstrap): they run in `make test` as root" }
        for tool in ["podman", "runc", "debootstrap", "lintian", "dpkg-deb", "gdb", "readelf"] where TestEnvironment.which(tool) == nil {
            return "\(tool) is not installed (make test installs it)"
        }
        if !FileManager.default.isExecutableFile(atPath: dist + "/switchyard") || deb == nil {
            return "no release build and package in .build/dist and .build/deb: `make deb` makes them (make test does)"
        }
        return nil
    }

    static var addonToolsMissing: String? {
        for tool in ["jq", "curl", "python3"] where TestEnvironment.which(tool) == nil { return "\(tool) is not installed (make test installs it)" }
        return nil
    }

    /// A shell command to its end (at most `timeout` seconds): its status and its output (stderr too).
    static func sh(_ command: String, timeout: Double = 120, directory: String? = nil) async throws -> (status: Int32?, output: String) {
        let log = TestEnvironment.makeTempDir("sh").appendingPathComponent("out").path
        let child = try ChildProcess(path: "/bin/sh", arguments: ["-c", (directory.map { "cd '\($0)' && " } ?? "") + command], outputFile: log)
        let status = await child.wait(timeout: timeout)
        if status == nil { child.terminateAndReap() }
        // Decoded leniently: readelf -p prints the debug link's CRC, whose bytes need not be UTF-8.
        return (status, String(decoding: (try? Data(contentsOf: URL(fileURLWithPath: log))) ?? Data(), as: UTF8.self))
    }

    /// podman with the flags this machine needs (runc; limits a rootful container may set).
    static func podman(_ arguments: [String], timeout: Double = 120, directory: String? = nil) async throws -> (status: Int32?, output: String) {
        var args = arguments
        if let verb = args.first, ["run", "build"].contains(verb) { args.insert(contentsOf: podmanFlags, at: 1) }
        return try await sh("podman " + args.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ") + " 2>&1",
                            timeout: timeout, directory: directory)
    }

    /// The Debian 12 image the tests use as a clean root and as the containers' base (made once). What an
    /// earlier run left behind (its removal is not awaited when a test ends) goes first.
    static func baseImage() async throws -> String {
        _ = try await sh("podman ps -a -q --filter name=switchyard-test- --filter name=switchyard-addon-test- | xargs -r podman rm -f -t 2; "
                         + "podman images --format '{{.Repository}}:{{.Tag}}' --filter reference='localhost/switchyard-test:*' "
                         + "--filter reference='localhost/switchyard-addon-test:*' "
                         + "| xargs -r podman rmi -f")
        let made = try await sh("'\(repo)/Tests/packaging/debian-base.sh' '\(baseTag)' '\(repo)/.build/packaging' 2>&1", timeout: 900)
        guard made.status == 0 else { throw TestError("no Debian 12 base image: \(made.output)") }
        return baseTag
    }
}
