#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// OAuth tokens as the bridge keeps them (`livecoding.token_store`, design.md §13).
public struct LivecodingTokens: Sendable, Equatable {
    public var accessToken: String
    public var refreshToken: String?
    public var tokenType: String
    public var scope: String
    public var expiresAt: Date

    public init(accessToken: String, refreshToken: String?, tokenType: String = "Bearer", scope: String, expiresAt: Date) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.tokenType = tokenType
        self.scope = scope
        self.expiresAt = expiresAt
    }

    /// A token endpoint answer: `{"access_token","token_type","expires_in","refresh_token","scope"}`.
    public static func from(response j: JSONValue, now: Date = Date()) -> LivecodingTokens? {
        guard case .string(let access)? = j["access_token"], !access.isEmpty else { return nil }
        let expiresIn = j["expires_in"]?.doubleValue ?? 36_000
        return LivecodingTokens(accessToken: access, refreshToken: j["refresh_token"]?.stringValue,
                                tokenType: j["token_type"]?.stringValue ?? "Bearer", scope: j["scope"]?.stringValue ?? "",
                                expiresAt: now.addingTimeInterval(expiresIn))
    }

    var json: JSONValue {
        ["access_token": .string(accessToken), "refresh_token": refreshToken.map(JSONValue.string) ?? .null,
         "token_type": .string(tokenType), "scope": .string(scope), "expires_at": .string(Timestamp.rfc3339(expiresAt))]
    }

    static func from(stored j: JSONValue) -> LivecodingTokens? {
        guard case .string(let access)? = j["access_token"], case .string(let exp)? = j["expires_at"], let at = Timestamp.parse(exp) else {
            return nil
        }
        return LivecodingTokens(accessToken: access, refreshToken: j["refresh_token"]?.stringValue,
                                tokenType: j["token_type"]?.stringValue ?? "Bearer", scope: j["scope"]?.stringValue ?? "", expiresAt: at)
    }
}

/// The token file: JSON, mode 0600, replaced atomically (a temporary file in the same directory,
/// fsync, rename), so a crash never leaves a half-written or world-readable token.
public struct TokenStore: Sendable {
    public let path: String
    public init(path: String) { self.path = path }

    public func load() throws(AdapterError) -> LivecodingTokens? {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else { throw AdapterError("cannot read the token store \(path)") }
        guard let j = try? JSONValue.parse(Array(data)), let t = LivecodingTokens.from(stored: j) else {
            throw AdapterError("the token store \(path) is not a token file; run: switchyard auth livecoding -c FILE")
        }
        return t
    }

    public func save(_ tokens: LivecodingTokens) throws(AdapterError) {
        let dir = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? ""
        // mkdir -p, new directories private to the bridge's user.
        var prefix = dir.hasPrefix("/") ? "/" : ""
        for part in dir.split(separator: "/") {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + part
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw AdapterError("cannot create \(prefix) for the token store: \(String(cString: strerror(errno)))")
            }
        }
        let tmp = "\(path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard fd >= 0 else { throw AdapterError("cannot write the token store \(tmp): \(String(cString: strerror(errno)))") }
        let bytes = Array((tokens.json.serialized + "\n").utf8)
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        let synced = fsync(fd) == 0
        close(fd)
        guard written == bytes.count, synced, rename(tmp, path) == 0 else {
            unlink(tmp)
            throw AdapterError("cannot write the token store \(path): \(String(cString: strerror(errno)))")
        }
    }
}
