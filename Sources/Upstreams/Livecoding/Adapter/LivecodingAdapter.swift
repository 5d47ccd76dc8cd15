#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore
import SwitchyardHTTP

/// Stream status of chosen Livecoding.tv channels (docs/upstreams/imp-livecoding.md §2). Tokens come from the
/// token store written by `switchyard auth livecoding`; the access token is refreshed a minute before
/// expiry and on a 401, and every rotated refresh token is stored at once. Status comes from paging
/// `livestreams/onair/` (following `next`), matched on `user__slug` case-insensitively, completed by
/// the channel's own resource when it is readable (403/404 there mean "no details", not an error).
public actor LivecodingAdapter: Adapter {
    public static let id = "livecoding"
    public nonisolated var id: String { Self.id }
    static let authID = "auth"

    let settings: LivecodingSettings
    /// The client of the current run (opened and closed by `run`).
    var http: (any HTTPTransport)?
    let store: TokenStore
    let clock: any BridgeClock
    var context: AdapterContext?
    var tokens: LivecodingTokens?
    var storeStamp: Date?
    var auth = ""
    var liveSince: [String: String] = [:]
    var scopeLogged = false
    /// One token check (and refresh) at a time.
    let tokenGate = SerialGate()

    public init(settings: LivecodingSettings, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.clock = clock
        self.store = TokenStore(path: settings.tokenStore)
    }


    // MARK: Adapter

    public func run(context: AdapterContext) async throws {
        self.context = context
        try await HTTPClient.withClient(options: .init(userAgent: "switchyard", connectTimeout: min(10, settings.timeout))) { http in
            self.http = http
            defer { self.http = nil }
            try await serve(context)
        }
    }

    func serve(_ context: AdapterContext) async throws {
        var devices = [DeviceDescriptor(
            id: Self.authID, label: "Livecoding authorisation", configuredName: Self.authID, model: "Livecoding OAuth",
            manufacturer: "Livecoding.tv", category: .generic, capabilities: [
                Capability("status", .enumeration(["ok", "missing", "expired", "refresh_failed"]), role: .diagnostic),
                Capability("expires_at", .text(maxLength: 40), role: .hidden),
            ], bareCommands: [:])]
        devices += settings.channels.map { slug in
            DeviceDescriptor(id: slug.lowercased(), label: slug, configuredName: slug, model: "Livecoding channel", manufacturer: "Livecoding.tv",
                             category: .generic, capabilities: [
                                Capability("live", .bool, role: .sensor, deviceClass: "running"),
                                Capability("viewers", .integer(min: 0, max: 10_000_000), role: .sensor),
                                Capability("title", .text(maxLength: 512), role: .hidden),
                                Capability("category", .text(maxLength: 128), role: .hidden),
                                Capability("difficulty", .text(maxLength: 64), role: .hidden),
                                Capability("language", .text(maxLength: 64), role: .hidden),
                                Capability("tags", .text(maxLength: 512), role: .hidden),
                                Capability("url", .text(maxLength: 512), role: .hidden),
                                Capability("thumbnail", .text(maxLength: 512), role: .hidden),
                                Capability("live_since", .text(maxLength: 40), role: .hidden),
                             ], bareCommands: [:])
        }
        var available: [String: Bool] = [:]
        for d in devices { available[d.id] = false }
        await context.setDevices(devices, authoritative: true, available: available)
        while !Task.isCancelled {
            await pollOnce()
            try await clock.sleep(seconds: settings.pollInterval)
        }
    }

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        throw AdapterError("Livecoding channels are read-only")
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws { await pollOnce() }
    public func refreshAll(context: AdapterContext) async throws { await pollOnce() }

    // MARK: tokens

    /// A usable access token, refreshed when it expires within a minute, or when `rejected` (the token a
    /// request was just refused with, 401) is still the current one. One refresh at a time: the refresh
    /// token rotates, so a second refresh with the same one is refused (`invalid_grant`) and the adapter
    /// would say "refresh_failed" with a good token in hand. A caller that comes while a refresh is on its
    /// way (a poll and a `get` at once) waits for it, then uses its token.
    func accessToken(rejected: String? = nil) async -> String? {
        (try? await tokenGate.run { await self.checkedToken(rejected: rejected) }) ?? nil
    }

    /// `accessToken`'s work, run by one caller at a time.
    func checkedToken(rejected: String?) async -> String? {
        reloadIfChanged()
        guard var t = tokens else {
            await setAuth("missing")
            return nil
        }
        if (rejected != nil && rejected == t.accessToken) || t.expiresAt.timeIntervalSinceNow < 60 {
            guard let rt = t.refreshToken else {
                await setAuth("expired")
                return nil
            }
            do throws(AdapterError) {
                guard let http else { throw AdapterError("the adapter is not running") }
                t = try await LivecodingOAuth(settings: settings, http: http).refresh(rt)
                try store.save(t)   // the old refresh token is dead now: store the rotated one at once
                storeStamp = Self.stamp(settings.tokenStore)
                tokens = t
            } catch {
                await setAuth("refresh_failed", reason: error.message)
                return nil
            }
        }
        await setAuth("ok")
        return t.accessToken
    }

    /// Picks up a token file written by `switchyard auth livecoding` while the bridge runs.
    func reloadIfChanged() {
        let stamp = Self.stamp(settings.tokenStore)
        guard stamp != storeStamp || tokens == nil else { return }
        storeStamp = stamp
        tokens = (try? store.load()) ?? nil
    }

    static func stamp(_ path: String) -> Date? {
        (try? FileManager.default.attributesOfItem(atPath: path)[.modificationDate]) as? Date
    }

    func setAuth(_ status: String, reason: String? = nil) async {
        let changed = status != auth
        auth = status
        await context?.report([DeviceReport(Self.authID, fields: ["status": .string(status),
                                                                  "expires_at": tokens.map { .string(Timestamp.rfc3339($0.expiresAt)) } ?? .null],
                                            available: true)])
        guard changed, status != "ok" else { return }
        let hint = "run: switchyard auth livecoding -c <config>"
        switch status {
        case "missing": await context?.setStatus(.error("no Livecoding token in \(settings.tokenStore); \(hint)"))
        case "expired": await context?.setStatus(.error("the Livecoding token expired and there is no refresh token; \(hint)"))
        default: await context?.setStatus(.error("refreshing the Livecoding token failed (\(reason ?? "unknown")); \(hint)"))
        }
    }

    // MARK: polling

    struct Answer {
        var status: Int
        var json: JSONValue?
    }

    /// GET with the bearer token; a 401 refreshes the token and tries once more.
    func get(_ url: String) async throws(AdapterError) -> Answer {
        guard var token = await accessToken() else { throw AdapterError("no usable token") }
        for attempt in 0..<2 {
            let r: HTTPResponse
            do {
                guard let http else { throw AdapterError("the adapter is not running") }
                r = try await http.send(HTTPRequest(url: url, headers: [("Authorization", "Bearer \(token)"), ("Accept", "application/json")],
                                                    timeout: settings.timeout))
            } catch {
                await context?.recordRequest(error: "Livecoding API unreachable: \(error)")
                throw AdapterError("the Livecoding API is unreachable: \(error)")
            }
            await context?.recordRequest(error: r.status < 500 ? nil : "HTTP \(r.status)")
            if r.status == 401 && attempt == 0 {
                guard let fresh = await accessToken(rejected: token) else { throw AdapterError("the Livecoding token was refused and could not be refreshed") }
                token = fresh
                continue
            }
            return Answer(status: r.status, json: try? JSONValue.parse(r.body))
        }
        throw AdapterError("the Livecoding API refused a freshly refreshed token (HTTP 401)")
    }

    /// Every live stream, following `next` (never computing offsets) and only on the API's own host.
    func onAir() async throws(AdapterError) -> [JSONValue] {
        var url: String? = "\(settings.apiURL)/livestreams/onair/?limit=\(settings.pageSize)&offset=0"
        let origin = URLComponents(string: settings.apiURL).map { "\($0.scheme ?? "")://\($0.host ?? ""):\($0.port ?? 0)" }
        var out: [JSONValue] = []
        var pages = 0
        while let u = url {
            pages += 1
            if pages > 200 { throw AdapterError("livestreams/onair/ has more than 200 pages; stopped") }
            let a = try await get(u)
            if a.status == 403 {
                throw AdapterError("HTTP 403 from livestreams/onair/: the token lacks permission (scopes: \(settings.scopes.joined(separator: " ")); "
                    + "`read` is required). \(a.json?["detail"]?.stringValue ?? "")")
            }
            guard a.status == 200, let results = a.json?["results"]?.arrayValue else {
                throw AdapterError("livestreams/onair/ answered HTTP \(a.status)\(a.json?["detail"]?.stringValue.map { ": \($0)" } ?? "")")
            }
            out += results
            url = a.json?["next"]?.stringValue
            if let n = url, URLComponents(string: n).map({ "\($0.scheme ?? "")://\($0.host ?? ""):\($0.port ?? 0)" }) != origin {
                throw AdapterError("livestreams/onair/ pointed `next` at another host; not following it with the token")
            }
        }
        return out
    }

    /// Every channel unavailable: what a poll that cannot read the API reports.
    var channelsUnavailable: [DeviceReport] { settings.channels.map { DeviceReport($0.lowercased(), available: false) } }

    /// Reads every channel, then hands the channels' state over in one report (after an error, with what
    /// was read before it, followed by every channel unavailable).
    func pollOnce() async {
        guard await accessToken() != nil else {
            await context?.report(channelsUnavailable)
            return
        }
        var reports: [DeviceReport] = []
        do {
            let live = try await onAir()
            for slug in settings.channels {
                let key = slug.lowercased()
                let entry = live.first { $0["user__slug"]?.stringValue?.lowercased() == key }
                var details = entry
                let own = try await get("\(settings.apiURL)/livestreams/\(slug.percentEncoded())/")
                if own.status == 200, let j = own.json, case .object = j { details = j }   // 403/404: no details, not an error
                let isLive = entry != nil
                if isLive, liveSince[key] == nil { liveSince[key] = Timestamp.rfc3339(Date()) }
                if !isLive { liveSince[key] = nil }
                reports.append(DeviceReport(key, fields: fields(details, live: isLive, entry: entry, key: key), available: true))
            }
            await context?.report(reports)
            await context?.setStatus(.running)
        } catch {
            await context?.report(reports + channelsUnavailable)
            if error.message.contains("403") {
                if !scopeLogged { await context?.log(.error, "livecoding: \(error.message)") }
                scopeLogged = true
            }
            await context?.setStatus(.error(error.message))
        }
    }

    func fields(_ d: JSONValue?, live: Bool, entry: JSONValue?, key: String) -> [String: JSONValue] {
        func s(_ k: String) -> JSONValue { d?[k]?.stringValue.map(JSONValue.string) ?? .null }
        let viewers = (entry ?? d)?["viewers_live"]?.doubleValue
        return [
            "live": .bool(live), "viewers": live ? JSONValue(Int(viewers ?? 0)) : 0, "title": s("title"), "category": s("coding_category"),
            "difficulty": s("difficulty"), "language": s("language"), "tags": s("tags"),
            "url": .string("\(Self.webBase(settings.apiURL))/\(key)/"), "thumbnail": s("thumbnail_url"),
            "live_since": liveSince[key].map(JSONValue.string) ?? .null,
        ]
    }

    /// `https://www.livecoding.tv/api/v1` → `https://www.livecoding.tv`.
    static func webBase(_ api: String) -> String {
        guard let r = api.firstRange(of: "/api") else { return api }
        return String(api[..<r.lowerBound])
    }
}
