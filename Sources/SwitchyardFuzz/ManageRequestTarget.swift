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
}

/// The config the `manage-request` target plans against: written once to a file of its own (the editor
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
    devices:
      virtual:
        kitchen:
          retain: false

    """

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
