import Foundation
import Glibc
import Testing
import SwitchyardCore
import SwitchyardTestSupport

/// The whole Nova path on a real kernel Bluetooth stack: `blevm` (scripts/blevm) boots a throw-away QEMU VM with
/// Debian's kernel (bluetooth + hci_vhci) and two `btvirt` LE controllers, mounting this machine's root
/// read-only and /tmp read-write, so the binaries built here run unchanged inside it. In the VM: a
/// real Mosquitto, `switchyard-sim nova` advertising on hci1, and `switchyard run` on hci0 with
/// a `nova:` config; `mosquitto_pub`/`mosquitto_sub` drive it. The test then reads what came back.
/// Where the VM cannot run here, the test says why (skipped or cancelled with the reason).
enum BleVM {
    static func script() -> String? {
        var candidates: [String] = []
        if let p = ProcessInfo.processInfo.environment["SWITCHYARD_BLEVM"] { candidates.append(p) }
        let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(repo.appendingPathComponent("scripts/blevm/run-in-vm.sh").path)
        return candidates.first { FileManager.default.fileExists(atPath: $0) }
    }

    static var unavailableReason: String? {
        if script() == nil { return "scripts/blevm/run-in-vm.sh is missing from this checkout; set SWITCHYARD_BLEVM" }
        if getuid() != 0 { return "blevm needs root (apt, the VM's root mount)" }
        if TestEnvironment.switchyardBinary() == nil { return "the switchyard executable was not built next to the tests" }
        if TestEnvironment.simulatorBinary() == nil { return "the switchyard-sim executable was not built next to the tests" }
        return nil
    }
}

@Suite(.serialized) struct NovaVMTests {
    @Test(.enabled(if: BleVM.unavailableReason == nil, Comment(rawValue: BleVM.unavailableReason ?? "")))
    func theBridgeOnHci0FindsConnectsLightsAndTurnsOffASimulatedNovaOnHci1() async throws {
        let vm = try #require(BleVM.script())
        let bin = try #require(TestEnvironment.switchyardBinary())
        let sim = try #require(TestEnvironment.simulatorBinary())
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sy-nova-vm-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let guest = "\(dir)/guest.sh"
        try Self.guestScript(dir: dir, bin: bin, sim: sim).writeForTest(toFile: guest, replacing: true)
        // About 2 minutes on a quiet 2-core machine whose KVM cannot boot the guest (a minute's try, then
        // software emulation); slower beside other work. The limits only end a VM that hangs.
        let child = try ChildProcess(path: "/bin/bash", arguments: [vm, guest, dir],
                                     environment: ProcessInfo.processInfo.environment.merging(["VM_TIMEOUT": "1200"]) { $1 },
                                     outputFile: "\(dir)/vm.log")
        let status = await child.wait(timeout: 1300)
        let vmLog = (try? String(contentsOfFile: "\(dir)/vm.log", encoding: .utf8)) ?? ""
        guard vmLog.contains("== guest kernel") else {
            try Test.cancel("the VM could not start here (exit \(status.map(String.init) ?? "timeout")): \(vmLog.split(separator: "\n").suffix(3).joined(separator: " | "))")
        }
        let read = { (name: String) in (try? String(contentsOfFile: "\(dir)/\(name)", encoding: .utf8)) ?? "" }
        let mqtt = read("mqtt.log"), peripheral = read("peripheral.log"), bridge = read("bridge.log")
        let context = "guest:\n\(read("guest.log"))\nbridge:\n\(bridge.suffix(3000))\nperipheral:\n\(peripheral)\nmqtt:\n\(mqtt.suffix(3000))"

        // Found and auto-connected over a real L2CAP LE link.
        #expect(mqtt.contains(#"e2e/nova/lamp {"#) && mqtt.contains(#""status":"ready""#), "\(context)")
        #expect(peripheral.contains("nova-sim: connected"), "\(context)")
        // Lit with the ack, then off with the ack, as the flash's firmware saw it.
        let frames = peripheral.split(separator: "\n").filter { $0.contains("frame ") }.map { String($0.split(separator: " ").last ?? "") }
        #expect(frames == ["(00:L,FF,FF,2710)", "(01:O)"], "\(context)")
        let results = mqtt.split(separator: "\n").filter { $0.hasPrefix("e2e/nova/lamp/result ") }
        #expect(results.contains { $0.contains("e2e-on") && $0.contains(#""status":"ok""#) }, "\(context)")
        #expect(results.contains { $0.contains("e2e-off") && $0.contains(#""status":"ok""#) }, "\(context)")
        let states = mqtt.split(separator: "\n").filter { $0.hasPrefix("e2e/nova/lamp {") }
        let litAt = states.firstIndex { $0.contains(#""lit":true"#) }
        #expect(litAt != nil && states[(litAt ?? 0)...].contains { $0.contains(#""lit":false"#) }, "\(context)")
        #expect(read("status") == "0\n", "\(context)")
        // hci0 down: the link ends and bridge/info says so; hci0 up: running again, no restart.
        let infos = mqtt.split(separator: "\n").filter { $0.hasPrefix("e2e/bridge/info ") }
        let downAt = infos.firstIndex { $0.contains(#""nova":"error: Bluetooth adapter hci0 is down"#) }
        #expect(downAt != nil && infos[(downAt ?? 0)...].contains { $0.contains(#""nova":"running""#) }, "\(context)")
        // Reconnecting after that is not asserted here: btvirt keeps hci1's side of the dropped link open
        // (no supervision timeout between virtual controllers), so the simulated flash never advertises
        // again. The bridge's retry with backoff is covered by NovaBridgeTests.
        // For the closing note: the ack latency the bridge measured (write → ack), under software emulation.
        if let line = mqtt.split(separator: "\n").last(where: { $0.hasPrefix("e2e/bridge/health ") && $0.contains("last_ack_ms") }),
           let health = try? JSONValue.parse(String(line.dropFirst("e2e/bridge/health ".count))) {
            print("nova VM e2e: last ack latency \(health["adapters"]?["nova"]?["last_ack_ms"]?.doubleValue ?? -1) ms (QEMU TCG, for information only)")
        }
        if ProcessInfo.processInfo.environment["SWITCHYARD_KEEP_VM_LOGS"] == nil { try? FileManager.default.removeItem(atPath: dir) } else { print("nova VM e2e: logs in \(dir)") }
    }

    static func guestScript(dir: String, bin: String, sim: String) -> String {
        """
        #!/bin/bash
        # Runs inside the blevm VM (chroot of the host's root). Every wait is bounded.
        set -u
        W=\(dir)
        BIN=\(bin)
        SIM=\(sim)
        exec >"$W/guest.log" 2>&1
        ip link set lo up 2>/dev/null || busybox ip link set lo up
        btvirt -L -l2 >"$W/btvirt.log" 2>&1 &
        for i in $(seq 1 100); do hciconfig hci1 >/dev/null 2>&1 && break; sleep 0.1; done
        hciconfig hci0 up && hciconfig hci1 up || { echo 1 >"$W/status"; exit 1; }
        ADDR=$(hciconfig hci1 | awk '/BD Address/ {print $3}')
        echo "peripheral address $ADDR"
        printf 'listener 1883 127.0.0.1\\nallow_anonymous true\\npersistence false\\n' >"$W/mosquitto.conf"
        mosquitto -c "$W/mosquitto.conf" >"$W/mosquitto.log" 2>&1 &
        for i in $(seq 1 100); do (echo >/dev/tcp/127.0.0.1/1883) 2>/dev/null && break; sleep 0.1; done
        mosquitto_sub -h 127.0.0.1 -v -t 'e2e/#' >"$W/mqtt.log" 2>&1 &
        "$SIM" nova --adapter hci1 --ack-delay 0.05 --for 300 >"$W/peripheral.log" 2>&1 &
        cat >"$W/bridge.yaml" <<EOF
        mqtt: {url: "mqtt://127.0.0.1:1883", base_topic: e2e}
        state_dir: $W/state
        health: {interval: 1}
        nova:
          adapter: hci0
          names: {"$ADDR": lamp}
        EOF
        "$BIN" run -c "$W/bridge.yaml" >"$W/bridge.log" 2>&1 &
        BRIDGE=$!
        waitfor() {
          for i in $(seq 1 "$2"); do
            grep -q "$1" "$W/mqtt.log" && return 0
            kill -0 $BRIDGE 2>/dev/null || { echo "the bridge exited"; return 1; }
            sleep 0.5
          done
          echo "timed out waiting for $1"; return 1
        }
        ok=0
        waitfor '^e2e/nova/lamp {.*"status":"ready"' 180 || ok=1
        mosquitto_pub -h 127.0.0.1 -q 1 -t e2e/nova/lamp/set -m '{"state":"ON","preset":"bright","timeout_ms":10000,"transaction":"e2e-on"}'
        waitfor '^e2e/nova/lamp/result .*e2e-on' 60 || ok=1
        mosquitto_pub -h 127.0.0.1 -q 1 -t e2e/nova/lamp/set -m '{"state":"OFF","transaction":"e2e-off"}'
        waitfor '^e2e/nova/lamp/result .*e2e-off' 60 || ok=1
        waitfor '^e2e/bridge/health .*"last_ack_ms":[0-9]' 20 || ok=1
        # The adapter goes down and comes back: reported, then recovered without a restart
        # (each wait reads only what arrived after its step).
        waitafter() {
          for i in $(seq 1 "$3"); do
            tail -n +"$1" "$W/mqtt.log" | grep -q "$2" && return 0
            kill -0 $BRIDGE 2>/dev/null || { echo "the bridge exited"; return 1; }
            sleep 0.5
          done
          echo "timed out waiting for $2"; return 1
        }
        N=$(wc -l <"$W/mqtt.log"); hciconfig hci0 down
        waitafter "$N" '^e2e/bridge/info .*"nova":"error: Bluetooth adapter hci0 is down' 60 || ok=1
        N=$(wc -l <"$W/mqtt.log"); hciconfig hci0 up
        waitafter "$N" '^e2e/bridge/info .*"nova":"running"' 60 || ok=1
        kill -TERM $BRIDGE; for i in $(seq 1 50); do kill -0 $BRIDGE 2>/dev/null || break; sleep 0.2; done
        sleep 0.5
        echo $ok >"$W/status"
        exit $ok
        """
    }
}
