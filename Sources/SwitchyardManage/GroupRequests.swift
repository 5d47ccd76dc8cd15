import SwitchyardConfig
import SwitchyardCore

/// The requests that change `groups:` and `scenes:` (`bridge/request/group/add`, `remove`, `rename`,
/// `members/add`, `members/remove`, `scene/store`, `scene/remove`; docs/topics.md "Groups and scenes"): each
/// a `ConfigChangeRequest` of `GroupEdits` handed to the config's manager like the management requests, so
/// that it is made from the config in force once the changes before it are applied, planned as a minimal
/// edit of the file (comments kept; or the changes file under `state_dir`), written, applied, logged and
/// announced as `config_changed`. As theirs: `plan: true` answers with the plan only, a `plan_id` that is
/// no longer the change is a conflict, and a payload over `maxPayload` is refused unread by the engine.
public struct GroupRequests: Sendable {
    /// The requests served, and the largest payload one may have: the management requests' (refused unread
    /// past it, counted as `request_payload`).
    public static let paths = GroupEdits.paths
    public static let maxPayload = ManagementRequests.maxPayload

    let manager: ConfigManager
    /// What `scene/store` stores of each device or group: its state now (`BridgeEngine.captureScene`).
    let capture: @Sendable ([MemberRef]) async -> [(MemberRef, [String: JSONValue]?)]

    public init(manager: ConfigManager, capture: @escaping @Sendable ([MemberRef]) async -> [(MemberRef, [String: JSONValue]?)]) {
        self.manager = manager
        self.capture = capture
    }

    /// Answers as `ConfigManager.change` does: the file written and the change as a unified diff, the key
    /// paths applied (or, for a plan, what would be). Refused for an MQTT client that `api.manage` does not
    /// allow it, as the management requests are; a body that is not an object, or whose `plan` or `plan_id`
    /// is ill-typed, before anything is planned.
    public func handle(_ req: BridgeRequest) async throws -> JSONValue {
        try await ManagementRequests.checkAllowed(req, manager: manager)
        guard case .object(let body) = req.body else { throw AdapterError("\(req.path): expected a JSON object") }
        _ = try ManagementRequests.planOptions(req.path, body)
        let capture = self.capture
        return try await manager.change { config in
            var captured: [(MemberRef, [String: JSONValue]?)] = []
            if req.path == "scene/store" { captured = await capture(try GroupEdits.toStore(req.body, config: config.groups).members) }
            return try Self.change(req, config: config.groups, captured: captured)
        }
    }

    /// The change one request asks of the groups and scenes as they are now: its edits, and whether it is a
    /// plan or the commit of one. `captured`: for `scene/store`, what the bridge read of each member now.
    /// Pure (the fuzz target `group-request` runs it, then plans the edits).
    public static func change(_ req: BridgeRequest, config: GroupsConfig,
                              captured: [(MemberRef, [String: JSONValue]?)] = []) throws(AdapterError) -> ConfigChangeRequest {
        guard case .object(let body) = req.body else { throw AdapterError("\(req.path): expected a JSON object") }
        let (plan, planID) = try ManagementRequests.planOptions(req.path, body)
        let edits = try GroupEdits.edits(req.path, req.body, config: config, captured: captured)
        return ConfigChangeRequest(request: req.path, origin: req.origin, edits: edits, planOnly: plan, planID: planID)
    }
}
