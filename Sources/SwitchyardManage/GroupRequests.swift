import SwitchyardConfig
import SwitchyardCore
import SwitchyardManage

/// The requests that change `groups:` and `scenes:` (`bridge/request/group/add`, `remove`, `rename`,
/// `members/add`, `members/remove`, `scene/store`, `scene/remove`; docs/topics.md "Groups and scenes"): each
/// a `ConfigChangeRequest` of `GroupEdits` handed to the config's manager like the management requests, so
/// that it is made from the config in force once the changes before it are applied, planned as a minimal
/// edit of the file (comments kept; or the changes file under `state_dir`), written, applied, logged and
/// announced as `config_changed`.
struct GroupRequests: Sendable {
    let manager: ConfigManager
    /// What `scene/store` stores of each device or group: its state now (`BridgeEngine.captureScene`).
    let capture: @Sendable ([MemberRef]) async -> [(MemberRef, [String: JSONValue]?)]

    /// Answers as `ConfigManager.change` does: the file written and the change as a unified diff, the key
    /// paths applied. Refused for an MQTT client that `api.manage` does not allow it, as the management requests are.
    func handle(_ req: BridgeRequest) async throws -> JSONValue {
        try await ManagementRequests.checkAllowed(req, manager: manager)
        let capture = self.capture
        return try await manager.change { config in
            var captured: [(MemberRef, [String: JSONValue]?)] = []
            if req.path == "scene/store" { captured = await capture(try GroupEdits.toStore(req.body, config: config.groups).members) }
            let edits = try GroupEdits.edits(req.path, req.body, config: config.groups, captured: captured)
            return ConfigChangeRequest(request: req.path, origin: req.origin, edits: edits)
        }
    }
}
