#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Process figures for bridge/health.
public enum ProcessStats {
    /// Resident set size in bytes (VmRSS), or nil where /proc is not available.
    public static func residentBytes() -> Int? { statusField("VmRSS:") }
    /// Peak resident set size in bytes (VmHWM).
    public static func peakResidentBytes() -> Int? { statusField("VmHWM:") }

    static func statusField(_ name: String) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix(name) {
            let parts = line.split(separator: " ", omittingEmptySubsequences: true)
            if parts.count >= 2, let kb = Int(parts[1]) { return kb * 1024 }
        }
        return nil
    }
}
