import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import LIFXAdapter
import SwitchyardCore
import SwitchyardTestSupport
import Testing

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
