#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// RFC 3339 UTC timestamps with `Z`, the only timestamp format in payloads (design.md §2).
public enum Timestamp {
    /// Years 0001–9999: a date outside, from a peer's nonsense timestamp, is clamped, because converting
    /// it to time_t would trap (the ha fuzz target's corpus has such a timestamp).
    public static func rfc3339(_ date: Date) -> String {
        let secs = date.timeIntervalSince1970
        let t = time_t((secs.isNaN ? 0 : min(max(secs, -62_135_596_800), 253_402_300_799)).rounded(.down))
        var tmv = tm()
        var tt = t
        gmtime_r(&tt, &tmv)
        var out = ""
        out.reserveCapacity(20)
        func put(_ v: Int32, _ width: Int, _ sep: Character?) {
            let digits = String(v)
            if digits.count < width { out += String(repeating: "0", count: width - digits.count) }
            out += digits
            if let sep { out.append(sep) }
        }
        put(tmv.tm_year + 1900, 4, "-"); put(tmv.tm_mon + 1, 2, "-"); put(tmv.tm_mday, 2, "T")
        put(tmv.tm_hour, 2, ":"); put(tmv.tm_min, 2, ":"); put(tmv.tm_sec, 2, "Z")
        return out
    }

    /// Parses RFC 3339 (`2026-11-22T20:10:14Z`, fractional seconds and offsets allowed) or epoch seconds.
    /// By hand rather than with ISO8601DateFormatter, which starts ICU's calendars for one timestamp.
    public static func parse(_ s: String) -> Date? {
        if let secs = Double(s) { return secs.isFinite ? Date(timeIntervalSince1970: secs) : nil }
        let b = Array(s.utf8)
        var i = 0
        func number(_ n: Int) -> Int? {
            guard i + n <= b.count else { return nil }
            var v = 0
            for k in i..<(i + n) {
                guard b[k] >= 48 && b[k] <= 57 else { return nil }
                v = v * 10 + Int(b[k] - 48)
            }
            i += n
            return v
        }
        func expect(_ chars: String) -> Bool {
            guard i < b.count, chars.utf8.contains(b[i]) else { return false }
            i += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2), expect("Tt"),
              let hour = number(2), expect(":"), let minute = number(2), expect(":"), let second = number(2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60 else { return nil }
        var fraction = 0.0
        if i < b.count && b[i] == UInt8(ascii: ".") {
            i += 1
            var scale = 0.1
            let start = i
            while i < b.count, b[i] >= 48 && b[i] <= 57 {
                fraction += Double(b[i] - 48) * scale
                scale /= 10
                i += 1
            }
            guard i > start else { return nil }
        }
        var offset = 0
        if expect("Zz") {
            offset = 0
        } else if i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            guard let oh = number(2), expect(":"), let om = number(2), oh < 24, om < 60 else { return nil }
            offset = sign * (oh * 3600 + om * 60)
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        var tmv = tm()
        tmv.tm_year = Int32(year - 1900); tmv.tm_mon = Int32(month - 1); tmv.tm_mday = Int32(day)
        tmv.tm_hour = Int32(hour); tmv.tm_min = Int32(minute); tmv.tm_sec = Int32(second)
        let t = timegm(&tmv)
        // timegm normalises 31 February into March: such a date is not a date.
        guard tmv.tm_mday == Int32(day), tmv.tm_mon == Int32(month - 1) else { return nil }
        return Date(timeIntervalSince1970: Double(t - offset) + fraction)
    }
}
