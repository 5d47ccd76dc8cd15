import Foundation
import Testing
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore

/// Changes written to the files (ConfigEditor): checked before, atomic, refused on a conflict, never
/// writing a secret out, and kept in the changes file under state_dir when that is where they go.
@Suite struct ConfigEditorTests {
    /// A directory with a config file in it (and a state directory beside it).
    struct Home {
        let dir: URL
        var config: String { dir.appendingPathComponent("config.yaml").path }
        var state: String { dir.appendingPathComponent("state").path }
        var changes: String { state + "/config-changes.yaml" }

        init(_ yaml: (String) -> String, mode: Int = 0o640) throws {
            dir = FileManager.default.temporaryDirectory.appendingPathComponent("cfgedit-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            try Data(yaml(dir.appendingPathComponent("state").path).utf8).writeWithoutSync(to: URL(fileURLWithPath: config))
            chmod(config, mode_t(mode))
        }

        func text(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }
        func load(_ env: [String: String] = [:]) throws -> SwitchyardConfig { try SwitchyardConfig.load(path: config, upstreams: upstreams, environment: env) }
        func editor(_ env: [String: String] = [:]) throws -> ConfigEditor {
            ConfigEditor(source: try #require(try load(env).source), upstreams: upstreams, environment: env, schema: ConfigSchemaTests.schema)
        }
        func files() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() }
        func remove() { try? FileManager.default.removeItem(at: dir) }
    }

    static func base(_ state: String) -> String {
        """
        # my bridge
        state_dir: \(state)
        log:
          level: info   # quiet
        health:
          interval: 60
        virtual:
          devices:
            - {name: kitchen, type: light}
            - {name: fan, type: switch}

        """
    }

    @Test func aChangeIsWrittenAtomicallyKeepingTheModeAndIsShownFirst() throws {
        let home = try Home(Self.base(_:))
        defer { home.remove() }
        let editor = try home.editor()
        #expect(editor.target == .main)
        let change = try editor.plan([.set("log.level", "debug"), .set("health.interval", 30)])
        #expect(change.file == home.config && change.restart == [.atOnce])
        #expect(change.diff.contains("-  level: info   # quiet\n+  level: debug   # quiet\n"))
        #expect(change.diff.contains("-  interval: 60\n+  interval: 30\n"))
        #expect(change.config.log.level == "debug" && change.config.healthInterval == 30)
        // Nothing is written before commit.
        #expect(try home.text(home.config) == Self.base(home.state))
        let source = try change.commit()
        #expect(try home.text(home.config) == String(decoding: source.bytes, as: UTF8.self))
        #expect(try home.text(home.config).contains("  level: debug   # quiet\n"))
        var st = stat()
        stat(home.config, &st)
        #expect(st.st_mode & 0o7777 == 0o640)
        #expect(try home.files() == ["config.yaml"], "a temporary file was left behind")
        // The next change starts from the new source; the old one is out of date.
        #expect(throws: ConfigChangeError.self) { try editor.plan([.set("log.level", "error")]) }
        let next = ConfigEditor(source: source, upstreams: upstreams, environment: [:], schema: ConfigSchemaTests.schema)
        _ = try next.plan([.set("log.level", "error")]).commit()
        #expect(try home.load().log.level == "error")
    }

    @Test func aFileChangedOnDiskIsAConflictAndNothingIsWritten() throws {
        let home = try Home(Self.base(_:))
        defer { home.remove() }
        let editor = try home.editor()
        let change = try editor.plan([.set("log.level", "debug")])
        // Someone edits the file between the plan and the write.
        let theirs = try home.text(home.config).replacingOccurrences(of: "interval: 60", with: "interval: 5")
        try Data(theirs.utf8).writeWithoutSync(to: URL(fileURLWithPath: home.config))
        do {
            _ = try change.commit()
            Issue.record("a commit over a changed file was not refused")
        } catch {
            let e = error
            #expect(e.kind == .conflict)
        }
        #expect(try home.text(home.config) == theirs)
        do {
            _ = try editor.plan([.set("log.level", "debug")])
            Issue.record("a plan from an old source was not refused")
        } catch {
            let e = error
            #expect(e.kind == .conflict && e.message.contains("reload"))
        }
    }

    @Test func badChangesAreRefusedWithTheReadersWords() throws {
        let home = try Home(Self.base(_:))
        defer { home.remove() }
        let editor = try home.editor()
        func refusal(_ e: YAMLEdit) -> ConfigChangeError? {
            do throws(ConfigChangeError) { _ = try editor.plan([e]); return nil } catch { return error }
        }
        let unknown = try #require(refusal(.set("log.colour", "red")))
        #expect(unknown.kind == .unknownKey && unknown.message.contains("level, format"))
        let range = try #require(refusal(.set("health.interval", 0)))
        #expect(range.kind == .invalid)
        #expect(range.problems.map(\.description) == ["\(home.config):6:13: health.interval: 0 is out of range 1–86400"])
        let name = try #require(refusal(.set("virtual.devices[name=fan].name", "kitchen")))
        #expect(name.kind == .invalid && name.message.contains("duplicate device name 'kitchen'"))
        #expect(refusal(.set("virtual.devices[name=nope].type", "light"))?.kind == .edit)
        #expect(try home.text(home.config) == Self.base(home.state))
    }

    @Test func aSecretFromTheEnvironmentOrAFileIsNeverWrittenOut() throws {
        let secretFile = FileManager.default.temporaryDirectory.appendingPathComponent("pw-\(UUID().uuidString)").path
        try Data("from-the-file-0123456789\n".utf8).writeWithoutSync(to: URL(fileURLWithPath: secretFile))
        defer { try? FileManager.default.removeItem(atPath: secretFile) }
        let env = ["MQTT_PASSWORD": "hunter22", "LIFX_TOKEN": "tok"]
        let home = try Home { state in
            """
            state_dir: \(state)
            mqtt:
              username: bridge
              password: ${MQTT_PASSWORD}
            web:
              auth_token_file: \(secretFile)
            lifx:
              token: plain-token
            """
        }
        defer { home.remove() }
        let editor = try home.editor(env)
        // The same value, or the redacted form: nothing changes.
        for v: YAMLValue in ["hunter22", "***"] {
            #expect(try editor.plan([.set("mqtt.password", v)]).isEmpty)
        }
        #expect(try editor.plan([.set("web.auth_token", "from-the-file-0123456789")]).isEmpty)
        for (path, value) in [("mqtt.password", "another-secret"), ("web.auth_token", "another-token-1234")] {
            let p = try ConfigPath(parsing: path)
            do throws(ConfigChangeError) {
                _ = try editor.plan([.set(p, .string(value))])
                Issue.record("\(path) was overwritten")
            } catch {
            let e = error
                #expect(e.kind == .secret)
                for s in ["hunter22", "from-the-file", value] { #expect(!e.description.contains(s)) }
            }
        }
        // A secret written as a literal may be replaced by another (the user asked for it).
        let lifx = try editor.plan([.set("lifx.token", "new-token")])
        #expect(lifx.diff.contains("+  token: new-token"))
        #expect(lifx.restart == [.adapter])
    }

    @Test func changesGoToTheChangesFileMergedOverTheMainFile() throws {
        let home = try Home(Self.base(_:))
        defer { home.remove() }
        let editor = try home.editor()
        let change = try editor.plan([
            .set("log.level", "debug"),
            .remove("health.interval"),
            .set("virtual.devices[name=kitchen].name", "galley"),
            .set("devices.virtual.fan.retain", false),
        ], target: .changes)
        #expect(change.file == home.changes && change.target == .changes)
        var source = try change.commit()
        // The main file is untouched; the changes file says what changed, and why it is there.
        #expect(try home.text(home.config) == Self.base(home.state))
        let changes = try home.text(home.changes)
        #expect(changes.hasPrefix("# Changes made to the bridge's config at run time"))
        #expect(changes.contains("  interval: null"))
        let c = try home.load()
        #expect(c.log.level == "debug" && c.healthInterval == 60)
        #expect(c.virtual?.devices.map(\.name) == ["galley", "fan"])
        #expect(c.deviceOptions["virtual"]?["fan"]?.retain == false)
        // Once it is there, the next change goes there too.
        let next = ConfigEditor(source: source, upstreams: upstreams, environment: [:], schema: ConfigSchemaTests.schema)
        #expect(next.target == .changes)
        #expect(next.contains("devices.virtual.fan") && next.contains("virtual.devices[name=galley]") && !next.contains("virtual.devices[name=kitchen]"))
        source = try next.plan([.rename("devices.virtual.fan", to: "ceiling_fan"), .set("virtual.devices[name=fan].name", "ceiling_fan")]).commit()
        #expect(try home.load().deviceOptions["virtual"]?["ceiling_fan"]?.retain == false)
        #expect(try home.load().virtual?.devices.map(\.name) == ["galley", "ceiling_fan"])
    }

    @Test func checkConfigReportsBothFilesWithTheirOwnPositions() throws {
        let home = try Home(Self.base(_:))
        defer { home.remove() }
        try FileManager.default.createDirectory(atPath: home.state, withIntermediateDirectories: true)
        try Data("log:\n  level: loud\nhealthh: {}\n".utf8).writeWithoutSync(to: URL(fileURLWithPath: home.changes))
        var main = try home.text(home.config)
        main = main.replacingOccurrences(of: "interval: 60", with: "interval: fast")
        try Data(main.utf8).writeWithoutSync(to: URL(fileURLWithPath: home.config))
        do {
            _ = try home.load()
            Issue.record("the problems were not found")
        } catch let e as ConfigErrors {
            #expect(e.problems.map(\.description).sorted() == [
                "\(home.changes):2:10: log.level: expected one of trace, debug, info, notice, warning, error, critical, got 'loud'",
                "\(home.changes):3:1: healthh: unknown key (known here: api, devices, groups, ha, health, homeassistant, imp, lifx, livecoding, log, mqtt, nova, scenes, standby, state_dir, virtual, web)",
                "\(home.config):6:13: health.interval: expected a number (seconds unless the key ends in _ms), got 'fast'",
            ].sorted())
        }
        // state_dir cannot move from the file found under it.
        try Data("state_dir: /elsewhere\n".utf8).writeWithoutSync(to: URL(fileURLWithPath: home.changes))
        try Data(Self.base(home.state).utf8).writeWithoutSync(to: URL(fileURLWithPath: home.config))
        #expect(throws: ConfigErrors.self) { try home.load() }
    }
}
