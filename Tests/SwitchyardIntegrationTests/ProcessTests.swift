import Foundation
import Glibc
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// The `switchyard` executable as a child process against a real Mosquitto.
@Suite struct ProcessTests {
    func writeConfig(_ text: String) throws -> String {
        let path = TestEnvironment.makeTempDir("cfg").appendingPathComponent("config.yaml").path
        try text.writeForTest(toFile: path, replacing: true)
        return path
    }

    func config(port: Int, base: String, devices: String = "    - {name: kitchen, type: light}\n") -> String {
        """
        log:
          level: warning
        mqtt:
          url: mqtt://127.0.0.1:\(port)
          base_topic: \(base)
          reconnect: {min_delay: 0.1, max_delay: 1}
        virtual:
          devices:
        \(devices)
        """
    }

    /// Whether this kernel lacks Bluetooth sockets (the build machines do; docs/upstreams/nova.md §4.1).
    static var kernelLacksBluetooth: Bool {
        let fd = socket(31 /* AF_BLUETOOTH */, Int32(SOCK_RAW.rawValue), 1 /* BTPROTO_HCI */)
        let e = errno
        if fd >= 0 { close(fd) }
        return fd < 0 && e == EAFNOSUPPORT
    }

    @Test(.enabled(if: kernelLacksBluetooth, "this kernel has Bluetooth sockets: the EAFNOSUPPORT path cannot be shown here"))
    func novaWithoutKernelBluetoothIsDisabledWithTheFixAndTheRestRuns() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let bridge = try BridgeProcess(arguments: ["run", "-c", try writeConfig(config(port: broker.port, base: base) + "nova: {adapter: hci0}\n")])
        defer { bridge.signal(SIGTERM) }
        let info = try await probe.waitFor("nova disabled in bridge/info") { ms in
            ms.contains { $0.topic == "\(base)/bridge/info" && $0.payload.contains("nova\":\"disabled: the kernel has no Bluetooth support") }
        }
        let text = info.last { $0.topic == "\(base)/bridge/info" }!.payload
        #expect(text.contains("--network host") && text.contains("load the bluetooth module"))
        try await probe.waitFor("the error on bridge/log") { ms in
            ms.contains { $0.topic == "\(base)/bridge/log" && $0.payload.contains("nova: disabled: the kernel has no Bluetooth support") }
        }
        // The rest of the bridge works.
        probe.publish("\(base)/virtual/kitchen/set", #"{"state":"ON","transaction":"k"}"#)
        try await probe.waitFor("the virtual light's result") { ms in
            ms.contains { $0.topic == "\(base)/virtual/kitchen/result" && $0.payload.contains(#""status":"ok""#) }
        }
    }

    /// The daemon maps libcurl (and the libraries it pulls in) only when an HTTP adapter needs it, and
    /// never Foundation's NSString/CoreFoundation layer or FoundationNetworking (FoundationEssentials only).
    @Test func libcurlIsLoadedOnlyForAnHTTPAdapterAndFoundationNever() async throws {
        let broker = try await Broker.start()
        let probe = try await MQTTProbe.connect(port: broker.port)
        /// The bridge's mappings once it is online and, if `until` is given, once one contains it (≤ 10 s).
        func mapped(_ extra: String, base: String, until: String? = nil) async throws -> String {
            try await probe.subscribe("\(base)/bridge/state")
            let bridge = try BridgeProcess(arguments: ["run", "-c", try writeConfig(config(port: broker.port, base: base) + extra)])
            try await probe.waitFor(topic: "\(base)/bridge/state", payload: "online")
            var maps = ""
            for _ in 0..<200 {
                // Read to the end: /proc files report size 0, and String(contentsOfFile:) stops short.
                let data = try #require(FileHandle(forReadingAtPath: "/proc/\(bridge.child.pid)/maps")).readDataToEndOfFile()
                maps = String(decoding: data, as: UTF8.self)
                guard let until, !maps.contains(until) else { break }
                await TestEnvironment.sleep(0.05)
            }
            bridge.signal(SIGTERM)
            _ = try await bridge.waitForExit()
            if let until, !maps.contains(until) { Issue.record("no \(until) mapped; the bridge said:\n\(bridge.outputText)") }
            return maps
        }
        let plain = try await mapped("", base: "t\(UInt32.random(in: 0...UInt32.max))")
        #expect(!plain.contains("libcurl"))
        for lib in ["libFoundation.so", "libFoundationNetworking", "libCoreFoundation", "lib_FoundationICU"] {
            #expect(!plain.contains(lib), "\(lib) is mapped")
        }
        // A LIFX light needs HTTP: now libcurl is there (the cloud URL need not answer for that).
        let lifx = try await mapped("lifx: {token: t, api_url: \"http://127.0.0.1:9\"}\n", base: "t\(UInt32.random(in: 0...UInt32.max))",
                                    until: "libcurl")
        #expect(lifx.contains("libcurl"))
    }

    @Test func lastWillIsPublishedWhenTheProcessIsKilled() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/bridge/state")
        let bridge = try BridgeProcess(arguments: ["run", "-c", try writeConfig(config(port: broker.port, base: base))])
        try await probe.waitFor(topic: "\(base)/bridge/state", payload: "online")
        bridge.signal(SIGKILL)
        _ = try await bridge.waitForExit()
        let will = try await probe.waitFor(topic: "\(base)/bridge/state", payload: "offline")
        #expect(!will.retain)
        // The Will is retained: a new subscriber reads it from the broker.
        let later = try await MQTTProbe.connect(port: broker.port)
        try await later.subscribe("\(base)/bridge/state")
        try await later.waitFor("retained offline") { $0.contains { $0.payload == "offline" && $0.retain } }
    }

    @Test func sigtermPublishesOfflineForEveryDeviceThenTheBridgeBeforeExiting() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let bridge = try BridgeProcess(arguments: ["run", "-c", try writeConfig(config(port: broker.port, base: base,
            devices: "    - {name: kitchen, type: light}\n    - {name: fan, type: switch}\n"))])
        try await probe.waitFor(topic: "\(base)/virtual/fan/availability", payload: "online")
        try await probe.waitFor(topic: "\(base)/virtual/kitchen/availability", payload: "online")
        bridge.signal(SIGTERM)
        let status = try await bridge.waitForExit()
        #expect(status == 0, "output: \(bridge.outputText)")
        let ms = try await probe.waitFor("offline everywhere") { ms in ms.contains { $0.topic == "\(base)/bridge/state" && $0.payload == "offline" } }
        let order = ms.filter { $0.payload == "offline" }.map(\.topic)
        #expect(Set(order.prefix(2)) == ["\(base)/virtual/kitchen/availability", "\(base)/virtual/fan/availability"])
        #expect(order.last == "\(base)/bridge/state")
    }

    @Test func aBadConfigExitsNonZeroWithPositionsAndStartsNothing() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let path = try writeConfig("""
        mqtt:
          url: mqtt://127.0.0.1:\(broker.port)
          base_topic: \(base)
          keepalive: soon
          pasword: x
        """)
        let run = try BridgeProcess(arguments: ["run", "-c", path])
        #expect(try await run.waitForExit() == 2)
        #expect(run.outputText.contains("\(path):4:14: mqtt.keepalive: expected a whole number, got 'soon'"))
        #expect(run.outputText.contains("\(path):5:3: mqtt.pasword: unknown key"))
        let check = try BridgeProcess(arguments: ["check-config", "-c", path])
        #expect(try await check.waitForExit() == 2)
        let good = try BridgeProcess(arguments: ["check-config", "-c", try writeConfig(config(port: broker.port, base: base))])
        #expect(try await good.waitForExit() == 0)
        #expect(good.outputText.contains("config OK"))
        // A sentinel published after the processes exited: whatever they had published reached the broker before.
        probe.publish("\(base)/sentinel", "s")
        try await probe.waitFor(topic: "\(base)/sentinel")
        #expect(probe.messages.map(\.topic) == ["\(base)/sentinel"])
    }

    @Test func configReloadKeepsTheOldConfigWhenTheNewOneIsInvalid() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        // The file says `info`, the command line `error`: the command line's level holds through reloads.
        let info = { (devices: String) in config(port: broker.port, base: base, devices: devices).replacingOccurrences(of: "level: warning", with: "level: info") }
        let path = try writeConfig(info("    - {name: kitchen, type: light}\n"))
        #expect(try String(contentsOfFile: path, encoding: .utf8).contains("level: info"))
        let bridge = try BridgeProcess(arguments: ["run", "-c", path, "--log-level", "error"])
        try await probe.waitFor(topic: "\(base)/virtual/kitchen/availability", payload: "online")

        try "mqtt: [broken\n".writeForTest(toFile: path, replacing: true)
        probe.publish("\(base)/bridge/request/config/reload", #"{"transaction": 1}"#)
        let bad = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/response/config/reload").payload)
        #expect(bad["status"] == "error")
        #expect(bad["transaction"] == 1)
        #expect(bad["error"]?.stringValue?.contains("the old one keeps running") == true)
        probe.publish("\(base)/virtual/kitchen/set", "ON")   // still serving
        try await probe.waitFor("kitchen ON") { $0.contains { $0.topic == "\(base)/virtual/kitchen" && $0.payload.contains(#""state":"ON""#) } }

        try info("    - {name: kitchen, type: light}\n    - {name: porch, type: switch}\n").writeForTest(toFile: path, replacing: true)
        probe.clear()
        bridge.signal(SIGHUP)
        let ok = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/response/config/reload").payload)
        #expect(ok["status"] == "ok")
        try await probe.waitFor(topic: "\(base)/virtual/porch/availability", payload: "online")
        // bridge/info says which level is in force, beside the config as written.
        let bridgeInfo = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/info").payload)
        #expect(bridgeInfo["log_level"] == "error" && bridgeInfo["config"]?["log"]?["level"] == "info")
        bridge.signal(SIGTERM)
        #expect(try await bridge.waitForExit() == 0)
        let infoLines = bridge.outputText.split(separator: "\n").filter { $0.contains(" info ") }
        #expect(infoLines.isEmpty, "--log-level error, yet after the reload: \(infoLines.prefix(3))")
    }

    @Test func secretsNeverReachBridgeInfoOrTheLog() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let secret = "pw-\(UUID().uuidString)"
        let probe = try await MQTTProbe.connect(port: broker.port)
        try await probe.subscribe("\(base)/#")
        let path = try writeConfig("""
        log:
          level: debug
        mqtt:
          url: mqtt://127.0.0.1:\(broker.port)
          base_topic: \(base)
          username: bridge
          password: ${SY_TEST_PASSWORD}
        """)
        let bridge = try BridgeProcess(arguments: ["run", "-c", path], environment: ["SY_TEST_PASSWORD": secret])
        let info = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/info").payload)
        #expect(info["config"]?["mqtt"]?["password"] == "***")
        bridge.signal(SIGTERM)
        _ = try await bridge.waitForExit()
        #expect(!probe.messages.contains { $0.payload.contains(secret) })
        #expect(!bridge.outputText.contains(secret))
        #expect(!bridge.outputText.isEmpty)
    }
}

/// The test harness itself: a child started by a test gets stdin, stdout and stderr and nothing else.
@Suite struct ChildProcessTests {
    @Test func aChildInheritsNoOtherDescriptor() async throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)   // no CLOEXEC, as many libraries open them
        defer { close(fd) }
        #expect(fd >= 3)
        let out = TestEnvironment.makeTempDir("fds").appendingPathComponent("out").path
        // The shell lists what its descriptors point at (its stdin, stdout, stderr, the directory the
        // glob reads, and nothing of ours).
        let child = try ChildProcess(path: "/bin/sh", arguments: ["-c", "for f in /proc/$$/fd/*; do echo ${f##*/} $(readlink $f); done"],
                                     outputFile: out)
        #expect(await child.wait(timeout: 30) == 0)
        let lines = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.hasPrefix("1 ") } && lines.contains { $0.hasPrefix("2 ") })
        #expect(!lines.contains { $0.contains("socket:") }, "\(lines)")
    }
}
