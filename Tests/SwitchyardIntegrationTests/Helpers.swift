import Foundation
import Logging
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardTestSupport

extension InProcessBridge {
    /// The bridge in-process with one scripted adapter.
    @discardableResult
    static func with<R: Sendable>(port: Int, base: String, adapter: ScriptedAdapter, options: Options = Options(),
                                  _ body: (InProcessBridge) async throws -> R) async throws -> R {
        var o = options
        o.info = ["broker": .string("mqtt://127.0.0.1:\(port)")]
        return try await with(port: port, base: base, adapters: [adapter], options: o, body)
    }
}

extension MQTTProbe {
    /// bridge/log errors received so far.
    func logErrors(_ base: String) -> [JSONValue] {
        messages(on: "\(base)/bridge/log").compactMap { try? JSONValue.parse($0.payload) }.filter { $0["level"] == "error" }
    }
}
