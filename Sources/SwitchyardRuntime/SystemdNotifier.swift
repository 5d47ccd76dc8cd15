#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// sd_notify(3) without libsystemd: READY=1, WATCHDOG=1, RELOADING=1, STOPPING=1 on $NOTIFY_SOCKET.
/// A no-op when the process was not started by systemd with Type=notify.
public struct SystemdNotifier: Sendable {
    let path: String?

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        path = environment["NOTIFY_SOCKET"]
    }

    /// Half of WATCHDOG_USEC, the interval at which to send WATCHDOG=1, if the unit has a watchdog.
    public static func watchdogInterval(environment: [String: String] = ProcessInfo.processInfo.environment) -> Double? {
        guard let s = environment["WATCHDOG_USEC"], let usec = Double(s), usec > 0 else { return nil }
        if let pid = environment["WATCHDOG_PID"], pid != String(getpid()) { return nil }
        return usec / 2_000_000
    }

    public var enabled: Bool { path != nil }

    public func notify(_ state: String) {
        guard var p = path, !p.isEmpty else { return }
        if p.hasPrefix("@") { p = "\0" + p.dropFirst() }   // abstract namespace
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(p.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { return }
        withUnsafeMutableBytes(of: &addr.sun_path) { buf in
            for (i, b) in bytes.enumerated() { buf[i] = b }
        }
        let len = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count)
        let msg = Array(state.utf8)
        _ = withUnsafePointer(to: &addr) { ap in
            ap.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                msg.withUnsafeBytes { mb in sendto(fd, mb.baseAddress, mb.count, 0, sa, len) }
            }
        }
    }
}
