#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardConfig
import SwitchyardCore

/// One change of the running bridge's config, as a request asks for it: the edits of the file, who asked
/// and with which request, and whether only its plan is wanted. What every management request hands
/// `ConfigManager.change` (and what a later request kind, groups and scenes, builds the same way).
public struct ConfigChangeRequest: Sendable {
    /// The request (`device/rename`, `options`, …): in the log line, the `config_changed` event, `api.manage`.
    public var request: String
    /// Who asked: an MQTT client or the console.
    public var origin: RequestOrigin
    /// The file's edits, in order (may be none: a change of the running bridge alone, like `device/remove`
    /// of a device the upstream found).
    public var edits: [YAMLEdit]
    /// Only plan it: the answer carries the diff and a `plan_id`, nothing is written or applied.
    public var planOnly = false
    /// The plan the caller was shown (`plan_id`): refused as a conflict when the change would now be another.
    public var planID: String?
    /// Devices renamed whose Home Assistant entities are made anew (`homeassistant_rename`), by adapter.
    public var anew: [String: Set<String>] = [:]
    /// What the answer says besides the change (the request's own fields: the device, its new topic…).
    public var answer: [String: JSONValue] = [:]
    /// Run on the engine once the change is applied (a device forgotten by `device/remove`).
    public var afterwards: (@Sendable () async -> Void)?

    public init(request: String, origin: RequestOrigin, edits: [YAMLEdit], planOnly: Bool = false, planID: String? = nil,
                answer: [String: JSONValue] = [:]) {
        self.request = request
        self.origin = origin
        self.edits = edits
        self.planOnly = planOnly
        self.planID = planID
        self.answer = answer
    }
}

/// What applying a config took (`ConfigManager`'s `apply`, the runtime's reload logic).
public struct AppliedConfig: Sendable, Equatable {
    /// Keys that take a restart of the bridge to apply (`mqtt`, `homeassistant`, `state_dir`, `log.format`).
    public var restartRequired: [String]
    public var adaptersRestarted: [String]
    public var adaptersRemoved: [String]
    public init(restartRequired: [String] = [], adaptersRestarted: [String] = [], adaptersRemoved: [String] = []) {
        self.restartRequired = restartRequired
        self.adaptersRestarted = adaptersRestarted
        self.adaptersRemoved = adaptersRemoved
    }
}

/// The config in force and every change of it, one at a time: a reload (SIGHUP, `config/reload`) and each
/// management request go through here, so that the second of two changes racing sees the first (design.md
/// §19). A change is planned as a minimal edit of the user's YAML (`ConfigEditor`), refused with nothing
/// written when it cannot be made (an unknown key, a value out of range, a secret, a file changed on disk),
/// written atomically, then applied like a reload (only what changed restarts; device options and
/// `log.level` at once), logged on `bridge/log` at info (who, the request, the key paths: never a value) and
/// announced as `config_changed` on `bridge/event`.
///
/// Its API, for every request that changes the config: `change(_:)` with a `ConfigChangeRequest` (the edits,
/// who, the request's name, plan or commit); the answer is the request's `answer` plus `file`, `diff`,
/// `applied` (the key paths), `restart_required`, `plan_id` (and `planned: true` for a plan).
public actor ConfigManager {
    /// The config in force (its `source`: the files as last read or written).
    public private(set) var config: SwitchyardConfig
    public let upstreams: [any Upstream]
    public let environment: [String: String]
    /// The config's JSON Schema, built the first time a request needs it (`config/schema`, a change): every
    /// start would otherwise read every upstream's section once more for nothing.
    public var schema: ConfigSchema {
        if let builtSchema { return builtSchema }
        let s = ConfigSchema(upstreams: upstreams)
        builtSchema = s
        return s
    }
    var builtSchema: ConfigSchema?
    /// The main file, for a reload; nil: the config came from no file (nothing can be changed).
    let path: String?
    weak var engine: BridgeEngine?
    let apply: @Sendable (_ new: SwitchyardConfig, _ old: SwitchyardConfig, _ anew: [String: Set<String>]) async throws -> AppliedConfig
    let gate = SerialGate()

    public init(config: SwitchyardConfig, path: String?, upstreams: [any Upstream], environment: [String: String], engine: BridgeEngine?,
                schema: ConfigSchema? = nil,
                apply: @escaping @Sendable (_ new: SwitchyardConfig, _ old: SwitchyardConfig, _ anew: [String: Set<String>]) async throws -> AppliedConfig) {
        self.config = config
        self.path = path
        self.upstreams = upstreams
        self.environment = environment
        self.engine = engine
        builtSchema = schema
        self.apply = apply
    }

    /// Reads the file again and applies it (SIGHUP, `config/reload`); an invalid file changes nothing.
    public func reload() async throws -> JSONValue {
        try await gate.run { try await self.reloadNow() }
    }

    func reloadNow() async throws -> JSONValue {
        guard let path else { throw AdapterError("config reload is not available: the bridge was started without a config file") }
        let new: SwitchyardConfig
        do {
            new = try SwitchyardConfig.load(path: path, upstreams: upstreams, environment: environment)
        } catch {
            throw AdapterError("config/reload: the new config is invalid, the old one keeps running: "
                + error.problems.map(\.description).joined(separator: "; "))
        }
        let applied = try await apply(new, config, [:])
        config = new
        return ["reloaded": true, "restart_required": .array(applied.restartRequired.map(JSONValue.string)),
                "adapters_restarted": .array(applied.adaptersRestarted.map(JSONValue.string)),
                "adapters_removed": .array(applied.adaptersRemoved.map(JSONValue.string))]
    }

    /// Plans, writes and applies one change, after every change asked for before it; see the type's summary.
    /// Refusals throw an `AdapterError` whose `details` say what kind (`conflict`, `unknown_key`, `invalid`,
    /// …) and, for a value the config would not take, each problem with its key path in check-config's words.
    public func change(_ r: ConfigChangeRequest) async throws -> JSONValue {
        try await gate.run { try await self.changeNow(r) }
    }

    /// The same, with the request made once every change asked for before it is applied, from the config in
    /// force then: what a request checks (is the name taken? is there such a device?) sees the changes before it.
    public func change(_ build: @escaping @Sendable (SwitchyardConfig) async throws -> ConfigChangeRequest) async throws -> JSONValue {
        try await gate.run { try await self.changeNow(try await build(self.config)) }
    }

    /// What a change would be, as an editor of the config in force sees it (for checks before `change`).
    public var editor: ConfigEditor? {
        config.source.map { ConfigEditor(source: $0, upstreams: upstreams, environment: environment, schema: schema) }
    }

    func changeNow(_ r: ConfigChangeRequest) async throws -> JSONValue {
        var answer = r.answer
        let paths = Self.paths(r.edits)
        var planned: ConfigChange?
        if !r.edits.isEmpty {
            guard let editor else { throw AdapterError("\(r.request): the bridge was started without a config file; nothing can be changed") }
            do {
                planned = try editor.plan(r.edits)
            } catch {
                throw Self.refusal(r.request, error)
            }
        }
        let id = planned.map { Self.planID($0) } ?? "none"
        answer["file"] = planned.map { .string($0.file) } ?? .null
        answer["diff"] = .string(planned?.diff ?? "")
        answer["applied"] = .array(paths.map(JSONValue.string))
        answer["plan_id"] = .string(id)
        if r.planOnly {
            // What would take a restart of the bridge, as the schema says of each key changed.
            let bridge = r.edits.filter { schema.restart(for: $0.path) == .bridge }
            answer["planned"] = true
            answer["restart_required"] = .array(Self.paths(bridge).map(JSONValue.string))
            return .object(answer)
        }
        if let want = r.planID, want != id {
            throw AdapterError("\(r.request): the change is no longer the one planned (the config changed since): plan it again; nothing was written",
                               details: ["kind": "conflict"])
        }
        var applied = AppliedConfig()
        if let planned, !planned.isEmpty || !r.anew.isEmpty {
            var new = config
            if !planned.isEmpty {
                let source: ConfigSource
                do { source = try planned.commit() } catch { throw Self.refusal(r.request, error) }
                new = planned.config
                new.source = source
            }
            applied = try await apply(new, config, r.anew)
            config = new
        }
        await r.afterwards?()
        answer["restart_required"] = .array(applied.restartRequired.map(JSONValue.string))
        answer["adapters_restarted"] = .array(applied.adaptersRestarted.map(JSONValue.string))
        let file = planned.flatMap { $0.isEmpty ? nil : $0.file }
        if let engine {
            let words = paths.isEmpty ? "nothing written" : "\(paths.joined(separator: ", ")) in \(file ?? "the config (unchanged)")"
            await engine.log(.info, "config changed by \(r.origin.rawValue): \(r.request): \(words)")
            await engine.publishBridgeEvent("config_changed", [
                "by": .string(r.origin.rawValue), "request": .string(r.request), "paths": .array(paths.map(JSONValue.string)),
                "file": file.map(JSONValue.string) ?? .null, "restart_required": .array(applied.restartRequired.map(JSONValue.string)),
            ])
        }
        return .object(answer)
    }

    /// The key paths the edits touch, as requests and logs name them (never a value).
    static func paths(_ edits: [YAMLEdit]) -> [String] {
        var out: [String] = []
        for e in edits {
            let p: String
            if case .rename(let from, let to) = e, let parent = from.parent { p = parent.appending(key: to).description } else { p = e.path.description }
            if !out.contains(p) { out.append(p) }
        }
        return out
    }

    /// A plan's name: the file and its text before and after (FNV-1a, 64 bits), so that a commit can say it is
    /// the change that was shown.
    static func planID(_ c: ConfigChange) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ bytes: some Sequence<UInt8>) {
            for b in bytes { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
            h = (h ^ 0xff) &* 0x100_0000_01b3
        }
        mix(c.file.utf8)
        mix(c.before)
        mix(c.after)
        return String(h, radix: 16)
    }

    /// A refused change in words, with its kind and problems as `details`. What a request gave is quoted cut
    /// short (a key path 200 bytes, each problem 300, at most 4 problems in the words, 20 in `details`).
    public static func refusal(_ request: String, _ error: ConfigChangeError) -> AdapterError {
        let kind: String
        switch error.kind {
        case .conflict: kind = "conflict"
        case .unknownKey: kind = "unknown_key"
        case .edit: kind = "edit"
        case .secret: kind = "secret"
        case .invalid: kind = "invalid"
        case .unwritable: kind = "unwritable"
        case .internalError: kind = "internal"
        }
        let path = error.path.excerpt(200)
        var details: [String: JSONValue] = ["kind": .string(kind)]
        if !path.isEmpty { details["path"] = .string(path) }
        let said = path.isEmpty ? error.message.excerpt(300) : "\(path): \(error.message.excerpt(300))"
        var problems = error.problems.prefix(20).map { p -> JSONValue in
            ["path": .string(p.path.excerpt(200)), "message": .string(p.message.excerpt(300)), "text": .string(p.description.excerpt(300))]
        }
        if problems.isEmpty && !path.isEmpty {
            problems = [["path": .string(path), "message": .string(error.message.excerpt(300)), "text": .string(said)]]
        }
        details["problems"] = .array(problems)
        var words = said
        if error.kind == .invalid {
            words = "the change would not be a valid config: " + error.problems.prefix(4).map { $0.description.excerpt(300) }.joined(separator: "; ")
            if error.problems.count > 4 { words += "; and \(error.problems.count - 4) more problems" }
        }
        return AdapterError("\(request): \(words)" + (words.hasSuffix("nothing was written") ? "" : "; nothing was written"), details: .object(details))
    }
}
