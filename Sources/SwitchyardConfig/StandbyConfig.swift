#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

extension SwitchyardConfig {
    /// `standby:` (design.md §18, docs/operations.md "Two bridges, one home"): instances started with the same
    /// base topic and client id form one group, one of which is active.
    public struct Standby: Sendable, Equatable {
        public var enabled = false
        /// This instance's name in the group: `standby.instance`, else `--instance`, else the host name.
        public var instance = ""
        /// How long nobody must be active before a standby takes over (seconds).
        public var takeoverDelay = 1.0
        /// How long an `active` claim found on the broker (retained) is believed before its instance says it
        /// again (seconds).
        public var confirmWithin = 3.0
        public init() {}
    }

    /// The host name, for an instance with no name of its own.
    public static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "switchyard" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "switchyard" : name
    }

    static func readStandby(_ s: ConfigSection, into c: inout Standby) {
        c.enabled = s.bool("enabled", false, doc: "Run as one instance of a standby group: active while it holds the bridge's client id, else watching.")
        if let (name, mark) = s.scalar("instance", doc: "This instance's name in the group (bridge/instances/<name>); empty: --instance, else the host name.",
                                       shownDefault: .string("")) {
            if Self.validInstanceName(name) {
                c.instance = name
            } else {
                s.reader.problem(mark, s.key("instance"), "'\(name)' is not a valid instance name (letters, digits, '-', '_' and '.', at most 64)")
            }
        } else {
            s.record("instance", .string(""))
        }
        c.takeoverDelay = s.double("takeover_delay", 1, min: 0, max: 3600,
                                   doc: "Seconds nobody must be active before a standby takes the client id.")
        c.confirmWithin = s.double("confirm_within", 3, min: 0.1, max: 3600,
                                   doc: "Seconds an 'active' claim found retained on the broker is believed before its instance says it again.")
        s.finish()
    }

    /// A topic level: `bridge/instances/<name>`.
    public static func validInstanceName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.unicodeScalars.allSatisfy { $0.properties.isAlphabetic && $0.isASCII || ("0"..."9").contains($0) || "-_.".unicodeScalars.contains($0) }
    }
}
