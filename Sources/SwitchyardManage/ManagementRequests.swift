import SwitchyardConfig
import SwitchyardCore

/// The management requests (docs/topics.md "Management"): `device/rename`, `device/options`, `device/remove`,
/// `options` and `config/schema`, each a `ConfigChangeRequest` made from the request's body and handed to
/// the `ConfigManager` (which plans, writes, applies, logs and answers), from MQTT or the console alike.
/// Bad input is refused before anything is planned, with words that name what is wrong.
public struct ManagementRequests: Sendable {
    /// The requests served, and the largest payload one may have (refused unread past it, counted as
    /// `request_payload`).
    public static let paths = ["device/rename", "device/options", "device/remove", "options", "config/schema"]
    public static let maxPayload = 64 * 1024
    /// Keys one `options` request may set.
    public static let maxKeys = 100

    public let manager: ConfigManager

    public init(manager: ConfigManager) { self.manager = manager }

    /// Answers one request (the engine's handler, `BridgeEngine.setRequestHandler`).
    public func handle(_ req: BridgeRequest, engine: BridgeEngine) async throws -> JSONValue {
        if req.path == "config/schema" { return await manager.schema.json }
        try await Self.checkAllowed(req, manager: manager)
        guard case .object(let body) = req.body else { throw AdapterError("\(req.path): expected a JSON object") }
        let common = ["plan", "plan_id", "transaction"]
        let known: [String]
        switch req.path {
        case "device/rename": known = ["adapter", "device", "to", "homeassistant_rename"]
        case "device/options": known = ["adapter", "device", "options"]
        case "device/remove": known = ["adapter", "device", "block"]
        default: known = ["options"]
        }
        if let unknown = body.keys.sorted().first(where: { !known.contains($0) && !common.contains($0) }) {
            throw AdapterError("\(req.path): unknown key '\(unknown.excerpt(80))' (known: \((known + ["plan", "plan_id"]).joined(separator: ", ")))")
        }
        let (plan, planID) = try Self.planOptions(req.path, body)
        let path = req.path, origin = req.origin
        return try await manager.change { config in
            var r: ConfigChangeRequest
            switch path {
            case "device/rename": r = try await Self.rename(body, config: config, engine: engine, origin: origin, manager: manager)
            case "device/options": r = try await Self.options(body, config: config, engine: engine, origin: origin, manager: manager)
            case "device/remove": r = try await Self.remove(body, config: config, engine: engine, origin: origin, manager: manager)
            default: r = try await Self.settings(body, origin: origin, manager: manager)
            }
            r.planOnly = plan
            r.planID = planID
            return r
        }
    }

    /// `plan` and `plan_id` of a request that changes the config (these, and those that change groups and
    /// scenes: `GroupRequests`): `plan: true` asks for the plan only; `plan_id` names the plan a commit must
    /// still be (else it is refused as a conflict by `ConfigManager.change`).
    public static func planOptions(_ path: String, _ body: [String: JSONValue]) throws(AdapterError) -> (plan: Bool, planID: String?) {
        if let p = body["plan"], p.boolValue == nil { throw AdapterError("\(path): plan: expected true or false") }
        if let p = body["plan_id"], p.stringValue.map({ $0.utf8.count > 64 }) ?? true {
            throw AdapterError("\(path): plan_id: expected the plan_id a plan answered with")
        }
        return (body["plan"]?.boolValue ?? false, body["plan_id"]?.stringValue)
    }

    /// Refuses a request that changes the config when it comes from an MQTT client and `api.manage` does not
    /// allow it (the console is not limited by it); also for the requests that change groups and scenes.
    public static func checkAllowed(_ req: BridgeRequest, manager: ConfigManager) async throws {
        guard req.origin == .mqtt else { return }
        let allowed = await manager.config.api.manage
        guard allowed.contains(req.path) else {
            throw AdapterError("\(req.path) is turned off for MQTT clients by api.manage (allowed: "
                + (allowed.isEmpty ? "none" : allowed.sorted().joined(separator: ", ")) + "); nothing was changed",
                               details: ["kind": "forbidden"])
        }
    }

    // MARK: the requests

    static func rename(_ body: [String: JSONValue], config: SwitchyardConfig, engine: BridgeEngine, origin: RequestOrigin,
                       manager: ConfigManager) async throws -> ConfigChangeRequest {
        let (a, id, current) = try await device(body, "device/rename", config: config, engine: engine)
        guard case .string(let to)? = body["to"] else { throw AdapterError("device/rename: to: expected the new name (a string)") }
        var anew = false
        if let h = body["homeassistant_rename"] {
            guard case .bool(let b) = h else { throw AdapterError("device/rename: homeassistant_rename: expected true or false") }
            anew = b
        }
        guard to.utf8.count <= 200 else { throw AdapterError("device/rename: to: a name of \(to.utf8.count) bytes is over 200") }
        if let p = Naming.problem(withName: to, reservedPrefixes: a.reservedPrefixes) {
            throw AdapterError("device/rename: \(p): not a valid topic name; nothing was changed", details: problem("to", p))
        }
        guard let current else {
            throw AdapterError("device/rename: \(a.id) device '\(id)' is disabled: enable it first (device/options {\"disabled\": false})")
        }
        let namespace = a.namespaces[id] ?? ""
        let full = to.hasPrefix(namespace) ? to : namespace + to
        let option = String(full.dropFirst(namespace.count))
        if let other = a.devices.first(where: { $0.value == full && $0.key != id }) {
            throw AdapterError("device/rename: the name '\(full)' is taken by \(a.id) device '\(other.key)'; nothing was changed",
                               details: problem("to", "the name '\(full)' is taken by \(a.id) device '\(other.key)'"))
        }
        let scheme = await engine.settings.scheme
        var r = ConfigChangeRequest(request: "device/rename", origin: origin, edits: [], answer: [
            "adapter": .string(a.id), "id": .string(id), "from": .string(current), "to": .string(full),
            "topic": .string(scheme.device(adapter: a.id, name: full)), "homeassistant_rename": .bool(anew),
        ])
        guard full != current else { return r }
        let key = ConfigPath([.key("devices"), .key(a.id), .key(id), .key("name")])
        if full == (a.plainNames[id] ?? current), let editor = await manager.editor, editor.contains(key) {
            // Back to the name it has without the option: the option goes.
            r.edits = removing(key, editor: editor)
        } else {
            r.edits = [.set(key, .string(option))]
        }
        if anew { r.anew = [a.id: [id]] }
        return r
    }

    static func options(_ body: [String: JSONValue], config: SwitchyardConfig, engine: BridgeEngine, origin: RequestOrigin,
                        manager: ConfigManager) async throws -> ConfigChangeRequest {
        let (a, id, _) = try await device(body, "device/options", config: config, engine: engine)
        guard case .object(let options)? = body["options"], !options.isEmpty else {
            throw AdapterError("device/options: options: expected an object of options (\(settable.joined(separator: ", ")))")
        }
        guard let editor = await manager.editor else { throw AdapterError("device/options: the bridge was started without a config file") }
        var edits: [YAMLEdit] = []
        if let k = options.keys.sorted().first(where: { !settable.contains($0) }) {
            let hint = k == "name" ? " (a device is renamed with device/rename)" : ""
            throw AdapterError("device/options: unknown option '\(k.excerpt(80))'\(hint) (valid: \(settable.joined(separator: ", "))); nothing was changed",
                               details: problem("options.\(k.excerpt(80))", "unknown option (valid: \(settable.joined(separator: ", ")))"))
        }
        // In the order the file documents them, as a person would write them.
        for k in settable where options[k] != nil {
            // An object (`homeassistant`) is set key by key: a null inside it removes that key alone.
            for (path, value) in leaves(ConfigPath([.key("devices"), .key(a.id), .key(id), .key(k)]), options[k]!) {
                if value == .null {
                    guard editor.contains(path) else { continue }
                    edits += removing(path, editor: editor, also: edits)
                } else {
                    edits.append(.set(path, YAMLValue(value, order: editor.schema.order(at:), at: path)))
                }
            }
        }
        return ConfigChangeRequest(request: "device/options", origin: origin, edits: edits, answer: [
            "adapter": .string(a.id), "id": .string(id), "options": .array(options.keys.sorted().map(JSONValue.string)),
        ])
    }

    static func remove(_ body: [String: JSONValue], config: SwitchyardConfig, engine: BridgeEngine, origin: RequestOrigin,
                       manager: ConfigManager) async throws -> ConfigChangeRequest {
        let (a, id, name) = try await device(body, "device/remove", config: config, engine: engine)
        var block = false
        if let b = body["block"] {
            guard case .bool(let v) = b else { throw AdapterError("device/remove: block: expected true or false") }
            block = v
        }
        guard let editor = await manager.editor else { throw AdapterError("device/remove: the bridge was started without a config file") }
        var edits: [YAMLEdit] = []
        let options = ConfigPath([.key("devices"), .key(a.id), .key(id)])
        let entry = config.upstream(a.id)?.configEntry(ofDevice: id)
        if block {
            // Blocked: disabled, so that no listing brings it back until `disabled` is false again.
            edits = [.set(options.appending(key: "disabled"), .bool(true))]
        } else {
            if editor.contains(options) { edits += removing(options, editor: editor) }
            if let entry, editor.contains(entry) { edits.append(.remove(entry)) }
        }
        var r = ConfigChangeRequest(request: "device/remove", origin: origin, edits: edits, answer: [
            "adapter": .string(a.id), "id": .string(id), "name": name.map(JSONValue.string) ?? .null, "block": .bool(block),
        ])
        if !block && entry == nil {
            // A device its upstream found: forgotten now (its next listing may bring it back).
            let adapter = a.id
            r.afterwards = { [weak engine] in _ = await engine?.removeDevice(adapter: adapter, id: id, reason: "removed by request") }
        }
        return r
    }

    static func settings(_ body: [String: JSONValue], origin: RequestOrigin, manager: ConfigManager) async throws -> ConfigChangeRequest {
        guard case .object(let options)? = body["options"], !options.isEmpty else {
            throw AdapterError("options: expected {\"options\": {\"<key.path>\": value, …}}")
        }
        guard let editor = await manager.editor else { throw AdapterError("options: the bridge was started without a config file") }
        return ConfigChangeRequest(request: "options", origin: origin, edits: try settingsEdits(options, editor: editor), answer: [:])
    }

    /// The edits an `options` request's `{"<key.path>": value | null}` asks of the config `editor` reads: pure
    /// (the fuzz target `manage-request` runs it, then plans them). What it quotes of the request is cut short.
    public static func settingsEdits(_ options: [String: JSONValue], editor: ConfigEditor) throws(AdapterError) -> [YAMLEdit] {
        guard options.count <= maxKeys else { throw AdapterError("options: \(options.count) keys is over the \(maxKeys) one request may set") }
        var edits: [YAMLEdit] = []
        for k in options.keys.sorted() {
            let path: ConfigPath
            do { path = try ConfigPath(parsing: k) } catch {
                throw AdapterError("options: '\(k.excerpt(80))' is not a key path: \(error.message.excerpt(200)); nothing was changed",
                                   details: problem(k.excerpt(80), error.message.excerpt(200)))
            }
            let value = options[k]!
            if value == .null {
                if editor.contains(path) { edits.append(.remove(path)) }
            } else {
                edits.append(.set(path, YAMLValue(value, order: editor.schema.order(at:), at: path)))
            }
        }
        return edits
    }

    // MARK: helpers

    /// How many times (every 0.1 s) a request asks whether its adapter has listed: past the settle time.
    static let listingPolls = 170

    /// The options `device/options` sets (`name` goes through `device/rename`).
    static let settable = DeviceOptions.keys.filter { $0 != "name" }

    /// The device a request names: by its name, else by its stable id (a disabled device, or one only the
    /// config's options know, by its id only). Its adapter, id and name (nil: it has none now).
    static func device(_ body: [String: JSONValue], _ request: String, config: SwitchyardConfig,
                       engine: BridgeEngine) async throws -> (BridgeEngine.ManagedAdapter, String, String?) {
        guard case .string(let adapter)? = body["adapter"] else { throw AdapterError("\(request): adapter: expected the adapter's id (a string)") }
        guard case .string(let device)? = body["device"] else { throw AdapterError("\(request): device: expected the device's name or id (a string)") }
        // Right after a start or a standby takeover the adapter may not have listed yet: the request waits for
        // its first listing, which its settle time (15 s) bounds, instead of refusing a device about to be listed.
        var polls = 0
        while polls < Self.listingPolls, await !engine.hasListed(adapter) {
            polls += 1
            try await Task.sleep(for: .milliseconds(100))
        }
        let adapters = await engine.managedAdapters()
        guard let a = adapters.first(where: { $0.id == adapter }) else {
            throw AdapterError("\(request): unknown adapter '\(adapter.excerpt(80))' (running: \(adapters.map(\.id).joined(separator: ", ")))")
        }
        if let id = a.devices.first(where: { $0.value == device })?.key { return (a, id, device) }
        if let name = a.devices[device] { return (a, device, name) }
        if a.disabled.contains(device) || config.deviceOptions[adapter]?[device] != nil { return (a, device, nil) }
        throw AdapterError("\(request): unknown device '\(device.excerpt(80))' for adapter '\(adapter.excerpt(80))'; nothing was changed")
    }

    /// Removes `path`, and with it the mappings it leaves empty up to `devices` (a device's options that had
    /// only that one key go whole). `also`: edits already made before it in the same request.
    static func removing(_ path: ConfigPath, editor: ConfigEditor, also: [YAMLEdit] = []) -> [YAMLEdit] {
        let gone = Set(also.compactMap { e -> ConfigPath? in if case .remove(let p) = e { p } else { nil } })
        var target = path
        while let parent = target.parent, parent.components.count >= 1 {
            let left = (editor.keys(at: parent) ?? []).filter { k in !gone.contains(parent.appending(key: k)) }
            guard left.count == 1, left.first.map({ parent.appending(key: $0) }) == target else { break }
            target = parent
        }
        return [.remove(target)]
    }

    /// A value's leaves by path: an object's members (recursively), anything else as it is. An empty object is a leaf.
    static func leaves(_ path: ConfigPath, _ value: JSONValue) -> [(ConfigPath, JSONValue)] {
        guard case .object(let o) = value, !o.isEmpty else { return [(path, value)] }
        return o.keys.sorted().flatMap { leaves(path.appending(key: $0), o[$0]!) }
    }

    static func problem(_ path: String, _ message: String) -> JSONValue {
        ["kind": "invalid", "problems": [["path": .string(path), "message": .string(message), "text": .string("\(path): \(message)")]]]
    }
}
