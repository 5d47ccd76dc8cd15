#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardManage

extension FuzzTargets {
    /// An `options` management request's body (docs/topics.md "Management"), as a client sends it: its key
    /// paths and values made into edits and planned against a small config (nothing is written). Whatever
    /// the input, nothing crashes, and every refusal quotes what it was given cut short (at most `maxMessage`
    /// bytes), whether the request, the editor or the re-read config refuses it.
    static let manageRequest: Target = { bytes in
        guard case .object(let body)? = try? JSONValue.parse(bytes), case .object(let options)? = body["options"] else { return }
        guard let editor = ManageFuzz.editor else { return }
        do throws(AdapterError) {
            let edits = try ManagementRequests.settingsEdits(options, editor: editor)
            do throws(ConfigChangeError) {
                _ = try editor.plan(edits)
            } catch {
                let r = ConfigManager.refusal("options", error)
                check(r.message.utf8.count <= maxMessage * 4, "a refusal of \(r.message.utf8.count) bytes")
            }
        } catch {
            check(error.message.utf8.count <= maxMessage, "an error message of \(error.message.utf8.count) bytes")
        }
    }

    /// A request that changes groups and scenes (docs/topics.md "Groups and scenes") as the engine hands it on:
    /// the first line its path (one of `GroupRequests.paths`), the rest its payload, at most the bytes the engine
    /// reads of one (`GroupRequests.maxPayload`), with its transaction checked as the engine checks it. Made into
    /// a change of the small config's groups and scenes (for `scene/store`, a state captured for each device
    /// and group the config has, none for another) and planned (nothing is written). Whatever the input, nothing
    /// crashes; the change is a plan exactly when the body says `"plan": true`, and carries the body's `plan_id`;
    /// every refusal, the request's, the editor's or the re-read config's, quotes what it was given cut short.
    static let groupRequest: Target = { bytes in
        guard bytes.count <= GroupRequests.maxPayload, let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) else { return }
        let path = String(decoding: bytes[..<newline], as: UTF8.self)
        guard GroupRequests.paths.contains(path), let editor = ManageFuzz.editor, let groups = ManageFuzz.groups else { return }
        guard case .success(let (body, _)) = BridgeAPI.parse(Array(bytes[(newline + 1)...])) else { return }
        let request = BridgeRequest(path: path, body: body, origin: .mqtt, size: bytes.count)
        do throws(AdapterError) {
            var captured: [(MemberRef, [String: JSONValue]?)] = []
            if path == "scene/store" {
                captured = try GroupEdits.toStore(body, config: groups).members.map { m in
                    let known = m.isGroup ? groups.group(m.name) != nil : ManageFuzz.devices.contains(m.description)
                    return (m, known ? ["state": "ON", "brightness": 40, "color_temp": 2700] : nil)
                }
            }
            let change = try GroupRequests.change(request, config: groups, captured: captured)
            check(change.planOnly == (body["plan"] == .bool(true)), "plan \(body["plan"]?.excerpt ?? "absent") made planOnly \(change.planOnly)")
            check(change.planID == body["plan_id"]?.stringValue, "the plan_id given is not the change's")
            check(change.request == path && !change.edits.isEmpty, "\(path) made no edit")
            do throws(ConfigChangeError) {
                _ = try editor.plan(change.edits)
            } catch {
                let r = ConfigManager.refusal(path, error)
                check(r.message.utf8.count <= maxMessage * 4, "a refusal of \(r.message.utf8.count) bytes")
            }
        } catch {
            check(error.message.utf8.count <= maxMessage, "an error message of \(error.message.utf8.count) bytes")
        }
    }
}

/// The config the `manage-request` and `group-request` targets plan against: written once to a file of its own (the editor
/// checks the file on disk is what it read).
enum ManageFuzz {
    static let text = """
    # a config
    log:
      level: info          # the level
    mqtt:
      base_topic: fuzz
    health:
      interval: 60
    web:
      enabled: false
    virtual:
      devices:
        - {name: kitchen, type: light}
        - {name: hall, type: switch}
    devices:
      virtual:
        kitchen:
          retain: false
    groups:
      downstairs:              # the ground floor
        members: [virtual/kitchen, group/porch]
      porch:
        members: [virtual/hall]
        state_mode: all
    scenes:
      evening:
        transition: 2
        states:
          group/downstairs: {state: ON, brightness: 30}
          virtual/hall: {state: OFF}

    """

    /// The devices the config lists (`adapter/name`), and its groups and scenes as read.
    static let devices: Set<String> = ["virtual/kitchen", "virtual/hall"]
    static let groups: GroupsConfig? = (try? SwitchyardConfig.parse(yaml: text, file: "fuzz.yaml", upstreams: upstreams, environment: [:]))?.groups

    static let editor: ConfigEditor? = {
        var template = Array("/tmp/switchyard-fuzz-manage.XXXXXX".utf8CString)
        guard let dir = mkdtemp(&template) else { return nil }
        let path = String(cString: dir) + "/config.yaml"
        guard let f = fopen(path, "w") else { return nil }
        fputs(text, f)
        fclose(f)
        let bytes = Array(text.utf8)
        let source = ConfigSource(path: path, bytes: bytes, changesPath: "", changes: nil)
        return ConfigEditor(source: source, upstreams: upstreams, environment: [:])
    }()
}
