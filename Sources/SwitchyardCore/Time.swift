import Foundation

/// RFC 3339 UTC timestamps with `Z`, the only timestamp format in payloads (TOPICS.md Decision 2).
public enum Timestamp {
    public static func rfc3339(_ date: Date) -> String {
        let t = time_t(date.timeIntervalSince1970.rounded(.down))
        var tmv = tm()
        var tt = t
        gmtime_r(&tt, &tmv)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ",
                      Int(tmv.tm_year) + 1900, Int(tmv.tm_mon) + 1, Int(tmv.tm_mday),
                      Int(tmv.tm_hour), Int(tmv.tm_min), Int(tmv.tm_sec))
    }

    /// Parses RFC 3339 (`2026-11-22T20:10:14Z`, fractional seconds and offsets allowed) or epoch seconds.
    public static func parse(_ s: String) -> Date? {
        if let secs = Double(s) { return Date(timeIntervalSince1970: secs) }
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: s) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: s)
    }
}

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
