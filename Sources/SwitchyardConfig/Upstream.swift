import SwitchyardCore

/// What the bridge knows of the file beyond one upstream's section, for the sections that depend on it
/// (a token store under `state_dir`, ids that carry the base topic).
public struct BridgeConfigContext: Sendable {
    public var baseTopic: String
    public var stateDir: String
    public init(baseTopic: String, stateDir: String) {
        self.baseTopic = baseTopic
        self.stateDir = stateDir
    }
}

/// How `switchyard auth <upstream>` runs an upstream's authorisation flow.
public struct AuthorizationOptions: Sendable {
    /// Seconds to wait for the user.
    public var timeout: Double
    /// Whether the user may paste an answer (a redirect URL) on standard input.
    public var readStdin: Bool
    /// Text for the user (unbuffered, on standard output).
    public var say: @Sendable (String) -> Void
    public init(timeout: Double, readStdin: Bool, say: @escaping @Sendable (String) -> Void) {
        self.timeout = timeout
        self.readStdin = readStdin
        self.say = say
    }
}

/// An upstream's registration: everything the bridge needs to know of an adapter target. The
/// executables own the one list of these (`SwitchyardCLI/Upstreams.swift`); config reading, the
/// redacted view on `bridge/info`, reload diffs, `check-config`, the demo and the docs all go
/// through it, so adding an upstream is its folder, its tests and one line in that list.
public protocol Upstream: Sendable {
    associatedtype Settings: Sendable & Equatable

    /// The config key, which is also the adapter's id and topic segment (`lifx` → `<base>/lifx/…`): return
    /// the adapter type's `id` (`LIFXAdapter.id`), so that it is written once.
    var key: String { get }

    /// What the section is, one sentence (the schema's description of it).
    var summary: String { get }

    /// Keys of the section that hold secrets (paths relative to it; a list's items without their
    /// index, `devices.agent_id`). They show as `***` on bridge/info whichever getter read them;
    /// `ConfigSection.secret` also reads the `<key>_file` form.
    var secretKeys: Set<String> { get }

    /// Reads the section: every problem goes to the section (with its position), none stops the
    /// reading, and every key read is recorded for bridge/info. Call `finish()` on what you read.
    func read(_ section: ConfigSection, bridge: BridgeConfigContext) -> Settings

    /// Whether a reload that changes the section from `old` to `new` restarts the adapter. The
    /// default restarts on any change; an unchanged section never restarts.
    func needsRestart(from old: Settings, to new: Settings) -> Bool

    /// The adapter for these settings. Nothing may start here: threads, sockets and clients open in the
    /// adapter's `run` and close when it returns.
    func makeAdapter(_ settings: Settings) -> any Adapter

    /// `switchyard auth <key>`: an authorisation the user must give once (OAuth consent). Returns what
    /// to tell the user at the end; nil when the upstream needs none.
    func authorize(_ settings: Settings, options: AuthorizationOptions) async throws -> String?

    /// Where the section defines the device with this stable id (a list item with its name), when it does:
    /// `device/remove` removes it there, or the next listing would bring it back. Nil (the default): the
    /// upstream finds its devices itself.
    func configEntry(ofDevice id: String, in settings: Settings) -> ConfigPath?
}

extension Upstream {
    public var summary: String { "" }
    public var secretKeys: Set<String> { [] }
    public func needsRestart(from old: Settings, to new: Settings) -> Bool { old != new }
    public func authorize(_ settings: Settings, options: AuthorizationOptions) async throws -> String? { nil }
    public func configEntry(ofDevice id: String, in settings: Settings) -> ConfigPath? { nil }

    /// Reads this upstream's section of a file into a configured upstream.
    func configure(_ section: ConfigSection, bridge: BridgeConfigContext) -> ConfiguredUpstream {
        section.secretKeys = secretKeys
        section.restart = .adapter
        let settings = read(section, bridge: bridge)
        return configured(settings)
    }

    /// These settings as a configured upstream (also for building a configuration in code).
    public func configured(_ settings: Settings) -> ConfiguredUpstream {
        ConfiguredUpstream(
            key: key, settings: settings,
            same: { other in (other.settings as? Settings) == settings },
            restartFrom: { old in (old.settings as? Settings).map { needsRestart(from: $0, to: settings) } ?? true },
            make: { makeAdapter(settings) },
            authorize: { options in try await authorize(settings, options: options) },
            entry: { id in configEntry(ofDevice: id, in: settings) })
    }
}

/// One upstream section as read, with its settings type erased: what the runtime builds, compares on
/// reload and authorises without knowing the adapter's module.
public struct ConfiguredUpstream: Sendable {
    public let key: String
    public let settings: any Sendable
    let same: @Sendable (ConfiguredUpstream) -> Bool
    let restartFrom: @Sendable (ConfiguredUpstream) -> Bool
    let make: @Sendable () -> any Adapter
    let authorize: @Sendable (AuthorizationOptions) async throws -> String?
    let entry: @Sendable (String) -> ConfigPath?

    /// Where the section defines the device with this stable id, if it does (`Upstream.configEntry`).
    public func configEntry(ofDevice id: String) -> ConfigPath? { entry(id) }

    /// Builds the adapter (which starts nothing until the engine runs it).
    public func makeAdapter() -> any Adapter { make() }

    /// Whether going from `old` (the same key's previous section) to this one needs a restart.
    public func needsRestart(from old: ConfiguredUpstream) -> Bool { restartFrom(old) }

    public func authorize(options: AuthorizationOptions) async throws -> String? { try await authorize(options) }

    func isSame(as other: ConfiguredUpstream) -> Bool { key == other.key && same(other) }
}
