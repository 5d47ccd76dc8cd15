#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// The LIFX cloud budget (lifx.md §1.9): 120 requests per 60 s per token, reported in
/// `X-RateLimit-Limit/Remaining/Reset` (Reset is a Unix timestamp). Counted locally too, so the
/// budget holds before the first answer and when a response lacks the headers.
struct RateBudget: Sendable {
    var limit = 120
    var window = 60.0
    var remaining: Int?
    var resetAt: Date?
    var sent: [Date] = []
    var rateLimited = 0

    /// When the next request may go; `reserve` requests are kept back (polls leave room for commands).
    mutating func readyAt(_ now: Date, reserve: Int) -> Date {
        sent.removeAll { now.timeIntervalSince($0) >= window }
        var at = now
        let allowed = max(1, limit - reserve)
        if sent.count >= allowed {
            at = max(at, sent[sent.count - allowed].addingTimeInterval(window))
        }
        if let remaining, remaining <= reserve, let resetAt, resetAt > now {
            at = max(at, resetAt)
        }
        return at
    }

    mutating func record(_ now: Date) { sent.append(now) }

    mutating func update(headers: [String: String], now: Date) {
        if let l = headers["x-ratelimit-limit"].flatMap({ Int($0) }), l > 0 { limit = l }
        if let r = headers["x-ratelimit-remaining"].flatMap({ Int($0) }) { remaining = r }
        if let t = headers["x-ratelimit-reset"].flatMap({ Double($0) }) { resetAt = Date(timeIntervalSince1970: t) }
    }

    /// A 429: nothing more until the reset the server named (or a short pause when it named none).
    mutating func exhausted(headers: [String: String], now: Date) {
        update(headers: headers, now: now)
        remaining = 0
        if resetAt == nil || resetAt! <= now { resetAt = now.addingTimeInterval(1) }
        rateLimited += 1
    }

    func metrics(_ now: Date) -> JSONValue {
        [
            "limit": JSONValue(limit),
            "remaining": remaining.map { JSONValue($0) } ?? .null,
            "reset_at": resetAt.map { .string(Timestamp.rfc3339($0)) } ?? .null,
            "sent_last_window": JSONValue(sent.filter { now.timeIntervalSince($0) < window }.count),
            "rate_limited": JSONValue(rateLimited),
        ]
    }
}
