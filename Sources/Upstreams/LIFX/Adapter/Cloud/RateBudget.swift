#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// The LIFX cloud budget (docs/upstreams/lifx-cloud.md "Rate limit"): 120 requests per 60 s per token,
/// reported in `X-RateLimit-Limit/Remaining/Reset` (Reset is a Unix timestamp). Counted locally too, so
/// the budget holds before the first answer and when a response lacks the headers. Times are on the
/// monotonic clock; the server's reset time is turned into one when it arrives.
struct RateBudget: Sendable {
    var limit = 120
    var window = 60.0
    var remaining: Int?
    var resetAt: MonotonicInstant?
    var sent: [MonotonicInstant] = []
    var rateLimited = 0

    /// When the next request may go; `reserve` requests are kept back (polls leave room for commands).
    mutating func readyAt(_ now: MonotonicInstant, reserve: Int) -> MonotonicInstant {
        sent.removeAll { (now - $0).seconds >= window }
        var at = now
        let allowed = max(1, limit - reserve)
        if sent.count >= allowed {
            at = max(at, sent[sent.count - allowed].adding(seconds: window))
        }
        if let remaining, remaining <= reserve, let resetAt, resetAt > now {
            at = max(at, resetAt)
        }
        return at
    }

    mutating func record(_ now: MonotonicInstant) { sent.append(now) }

    /// Reads the budget headers of an answer received at `now` (`wallNow` on the wall clock, to place
    /// the server's Unix reset time on the monotonic clock).
    mutating func update(headers: [String: String], now: MonotonicInstant, wallNow: Date) {
        if let l = headers["x-ratelimit-limit"].flatMap({ Int($0) }), l > 0 { limit = l }
        if let r = headers["x-ratelimit-remaining"].flatMap({ Int($0) }) { remaining = r }
        if let t = headers["x-ratelimit-reset"].flatMap({ Double($0) }) {
            resetAt = now.adding(seconds: t - wallNow.timeIntervalSince1970)
        }
    }

    /// A 429: nothing more until the reset the server named (or a short pause when it named none).
    mutating func exhausted(headers: [String: String], now: MonotonicInstant, wallNow: Date) {
        update(headers: headers, now: now, wallNow: wallNow)
        remaining = 0
        if resetAt == nil || resetAt! <= now { resetAt = now.adding(seconds: 1) }
        rateLimited += 1
    }

    func metrics(_ now: MonotonicInstant, wallNow: Date) -> JSONValue {
        [
            "limit": JSONValue(limit),
            "remaining": remaining.map { JSONValue($0) } ?? .null,
            "reset_at": resetAt.map { .string(Timestamp.rfc3339(wallNow.addingTimeInterval(($0 - now).seconds))) } ?? .null,
            "sent_last_window": JSONValue(sent.filter { (now - $0).seconds < window }.count),
            "rate_limited": JSONValue(rateLimited),
        ]
    }
}
