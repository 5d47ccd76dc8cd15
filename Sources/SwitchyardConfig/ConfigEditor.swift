#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// Changes to the running bridge's config, written into the user's own file (`YAMLEditor`: only the
/// changed lines change) or, when that file cannot be written or a changes file already exists, into
/// `<state_dir>/config-changes.yaml` (`ConfigSource`). Two steps, so that a caller can show the change
/// before making it:
///
///     let editor = ConfigEditor(source: running.source!, upstreams: upstreams, environment: env)
///     let change = try editor.plan([.set("log.level", "debug")])   // checked: the new config is read
///     print(change.diff)                                            // the exact text change
///     let source = try change.commit()                              // atomic; refused if a file changed
///
/// `plan` refuses (`ConfigChangeError`) an edit the file cannot take, a key the schema does not know, a
/// secret given as `${ENV}` or `<key>_file` overwritten with a literal, a result that does not read as a
/// valid config (with `check-config`'s messages), and a file that changed on disk since `source` was read.
public struct ConfigEditor: Sendable {
    public let source: ConfigSource
    public let upstreams: [any Upstream]
    public let environment: [String: String]
    public let schema: ConfigSchema

    public init(source: ConfigSource, upstreams: [any Upstream], environment: [String: String], schema: ConfigSchema? = nil) {
        self.source = source
        self.upstreams = upstreams
        self.environment = environment
        self.schema = schema ?? ConfigSchema(upstreams: upstreams)
    }

    /// Which file a change goes to.
    public enum Target: Sendable, Equatable {
        /// The main file (`-c FILE`).
        case main
        /// `<state_dir>/config-changes.yaml`.
        case changes
    }

    /// Where the next change goes: the changes file when there is one or the main file cannot be replaced
    /// (with its mode and owner kept), else the main file.
    public var target: Target {
        if source.changes != nil || source.changesPath.isEmpty == false && !ConfigFiles.canReplace(source.path) { return .changes }
        return .main
    }

    /// Whether the config (the main file with its changes merged over it) has something at `path`: e.g.
    /// whether a renamed device has options under `devices.<adapter>.<name>` to rename with it.
    public func contains(_ path: ConfigPath) -> Bool {
        guard let main = try? YAMLEditor(source.bytes), let merged = try? mergedEditor(main) else { return false }
        return merged.contains(path)
    }

    /// The keys of the mapping at `path` in the config (both files merged), in the file's order; nil when
    /// there is no mapping there.
    public func keys(at path: ConfigPath) -> [String]? {
        guard let main = try? YAMLEditor(source.bytes), let merged = try? mergedEditor(main) else { return nil }
        return merged.keys(at: path)
    }

    /// The change the edits make (applied in order, each seeing the ones before), checked, not yet written.
    public func plan(_ requested: [YAMLEdit], target: Target? = nil) throws(ConfigChangeError) -> ConfigChange {
        try checkUnchanged()
        for e in requested { try checkKnown(e) }
        let target = target ?? self.target
        let main = try editor(source.bytes, file: source.path)
        let merged = try mergedEditor(main)
        // A secret set to what it already is (or to `***`) stays as it is written.
        var edits: [YAMLEdit] = []
        for e in requested where try !secretUnchanged(e, merged: merged) { edits.append(e) }
        var newSource = source
        let file: String
        let before: [UInt8]
        let after: [UInt8]
        switch target {
        case .main:
            var m = main
            try apply(edits, to: &m, file: source.path)
            file = source.path
            before = source.bytes
            after = m.bytes
            newSource.bytes = after
        case .changes:
            guard !source.changesPath.isEmpty else {
                throw ConfigChangeError(kind: .unwritable, path: "", message: "this config has no changes file")
            }
            var c = try editor(source.changes ?? Array(Self.changesHeader(main: source.path).utf8), file: source.changesPath)
            file = source.changesPath
            before = source.changes ?? []
            if edits.isEmpty {
                after = before
            } else {
                try apply(overlayEdits(edits, merged: merged, main: main, changes: c), to: &c, file: source.changesPath)
                after = c.bytes
                newSource.changes = after
            }
        }
        let config: SwitchyardConfig
        do {
            config = try SwitchyardConfig.read(newSource, upstreams: upstreams, environment: environment)
        } catch {
            throw ConfigChangeError(kind: .invalid, path: "", message: error.description, problems: error.problems)
        }
        var restart: [ConfigRestart] = []
        for e in edits {
            let r = schema.restart(for: e.path) ?? .bridge
            if !restart.contains(r) { restart.append(r) }
        }
        return ConfigChange(file: file, target: target, edits: edits, before: before, after: after, config: config,
                            restart: restart.sorted { ConfigRestart.allCases.firstIndex(of: $0)! < ConfigRestart.allCases.firstIndex(of: $1)! },
                            base: source, result: newSource)
    }

    /// The changes file's first lines, when the bridge makes it.
    static func changesHeader(main: String) -> String {
        """
        # Changes made to the bridge's config at run time (management requests, the console), kept here
        # because \(main) could not be written, or because this file was already here. Read after that
        # file, key by key: a key here replaces the same key there (mappings merge, a list is replaced
        # whole) and `key: null` removes it. `switchyard check-config` checks both files. To fold these
        # changes into the main file, copy them there and delete this file.

        """
    }

    // MARK: checks

    func checkUnchanged() throws(ConfigChangeError) {
        guard let now = ConfigFiles.read(source.path), now == source.bytes else {
            throw ConfigChangeError(kind: .conflict, path: "",
                                    message: "\(source.path) changed on disk since the bridge read it: reload the config first; nothing was written")
        }
        guard !source.changesPath.isEmpty else { return }
        var same = false
        switch ConfigFiles.readIfPresent(source.changesPath) {
        case .absent: same = source.changes == nil
        case .bytes(let b): same = source.changes == b
        case .unreadable: same = false
        }
        if !same {
            throw ConfigChangeError(kind: .conflict, path: "",
                                    message: "\(source.changesPath) changed on disk since the bridge read it: reload the config first; nothing was written")
        }
    }

    /// The key must be one the config has (a new top-level section must be known to the reader too: the
    /// result is read before anything is written).
    func checkKnown(_ e: YAMLEdit) throws(ConfigChangeError) {
        var path = e.path
        if case .rename(let p, let to) = e, let parent = p.parent { path = parent.appending(key: to) }
        if case .append(let p, _) = e { path = p.appending(.index(0)) }
        guard schema.contains(path) else {
            let parent = path.parent ?? ConfigPath([])
            let known = schema.order(at: parent)
            throw ConfigChangeError(kind: .unknownKey, path: path.description,
                                    message: "is not a key of the config" + (known.isEmpty ? "" : " (known here: \(known.joined(separator: ", ")))"))
        }
    }

    /// A secret given as `${ENV}` or through `<key>_file` is never written out: setting it to the value it
    /// already has (or to `***`, the redacted form) changes nothing; another value is refused.
    /// Whether the edit sets a secret to what it already is; throws when it would write out one that is
    /// given by reference.
    func secretUnchanged(_ e: YAMLEdit, merged: YAMLEditor) throws(ConfigChangeError) -> Bool {
        guard case .set(let path, let value) = e, schema.isSecret(path), case .key(let k)? = path.last, let parent = path.parent else { return false }
        if value == .string("***") { return true }
        let fileKey = parent.appending(key: "\(k)_file")
        let current = merged.scalar(at: path)
        let byFile = merged.scalar(at: fileKey) != nil
        let byEnv = current?.contains("${") == true
        guard byFile || byEnv else { return false }
        if case .reference(let name) = value, current == "${\(name)}" { return true }
        let effective: String?
        if byFile {
            let r = ConfigReader(files: [source.path], environment: environment)
            effective = merged.scalar(at: fileKey).flatMap { r.expand($0, mark: nil, path: "") }.flatMap { ConfigFiles.read($0) }
                .map { var t = String(decoding: $0, as: UTF8.self); while t.hasSuffix("\n") || t.hasSuffix("\r") { t.removeLast() }; return t }
        } else {
            effective = current.flatMap { ConfigReader(files: [source.path], environment: environment).expand($0, mark: nil, path: "") }
        }
        if case .string(let s) = value, s == effective { return true }
        throw ConfigChangeError(kind: .secret, path: path.description,
                                message: byFile ? "is read from \(k)_file: change that file (or remove \(k)_file first); it is never written out here"
                                    : "is given as an ${ENV} reference: change the environment variable (or write another reference); it is never written out here")
    }

    // MARK: editing

    func editor(_ bytes: [UInt8], file: String) throws(ConfigChangeError) -> YAMLEditor {
        do { return try YAMLEditor(bytes) } catch {
            throw ConfigChangeError(kind: .edit, path: error.path, message: "\(file): \(error.message)")
        }
    }

    func apply(_ edits: [YAMLEdit], to e: inout YAMLEditor, file: String) throws(ConfigChangeError) {
        var copy = e
        for edit in edits {
            do { try copy.apply(edit) } catch {
                throw ConfigChangeError(kind: error.kind == .unverified ? .internalError : .edit, path: error.path.isEmpty ? edit.path.description : error.path,
                                        message: "\(file): \(error.message)")
            }
        }
        e = copy
    }

    /// The main file with the changes file merged over it, as one text to read values from.
    func mergedEditor(_ main: YAMLEditor) throws(ConfigChangeError) -> YAMLEditor {
        guard let changes = source.changes else { return main }
        let c = try editor(changes, file: source.changesPath)
        let merged = Self.merge(main.tree, c.tree)
        var e = try editor([], file: "")
        if case .mapping(let pairs) = merged {
            for p in pairs { try? e.apply(.set(ConfigPath([.key(p.key)]), YAMLValue(tree: p.value))) }
        }
        return e
    }

    static func merge(_ base: YAMLTree, _ over: YAMLTree) -> YAMLTree {
        guard case .mapping(let bp) = base, case .mapping(let op) = over else { return over == .null ? base : over }
        var out: [YAMLTree.Pair] = []
        for p in bp {
            if let o = op.first(where: { $0.key == p.key }) {
                if o.value == .null { continue }
                if case .mapping = p.value, case .mapping = o.value { out.append(.init(key: p.key, value: merge(p.value, o.value))) } else { out.append(o) }
            } else {
                out.append(p)
            }
        }
        for o in op where o.value != .null && !bp.contains(where: { $0.key == o.key }) { out.append(o) }
        return .mapping(out)
    }

    /// The edits, translated for the changes file: a list that an edit goes into is first copied there
    /// whole (a list there replaces the main file's); a key of the main file is removed with `key: null`;
    /// a mapping set over one drops the main file's other keys with nulls.
    func overlayEdits(_ edits: [YAMLEdit], merged: YAMLEditor, main: YAMLEditor, changes: YAMLEditor) throws(ConfigChangeError) -> [YAMLEdit] {
        var out: [YAMLEdit] = []
        var copied: Set<ConfigPath> = []
        var mergedNow = merged
        for e in edits {
            // The first list on the way: copied whole into the changes file.
            let comps = e.path.components
            var listPath: ConfigPath?
            for i in comps.indices {
                switch comps[i] {
                case .index, .item: listPath = ConfigPath(Array(comps[..<i]))
                case .key: break
                }
                if listPath != nil { break }
            }
            if case .append(let p, _) = e, listPath == nil { listPath = p }
            if let lp = listPath, !copied.contains(lp), changes.count(at: lp) == nil, let list = mergedNow.tree(at: lp) {
                out.append(.set(lp, YAMLValue(tree: list)))
                copied.insert(lp)
            }
            let inList = listPath.map { copied.contains($0) } ?? false
            switch e {
            case .remove(let p) where !inList:
                out.append(main.contains(p) ? .set(p, .null) : e)
            case .rename(let p, let to) where !inList:
                guard let value = mergedNow.tree(at: p), let parent = p.parent else { out.append(e); continue }
                out.append(.set(parent.appending(key: to), YAMLValue(tree: value)))
                out.append(main.contains(p) ? .set(p, .null) : .remove(p))
            case .set(let p, .map(let entries)) where !inList:
                // Keys of the main file the new mapping leaves out: removed with nulls.
                var v = entries
                for k in main.keys(at: p) ?? [] where !entries.contains(where: { $0.key == k }) { v.append(.init(k, .null)) }
                out.append(.set(p, .map(v)))
            default:
                out.append(e)
            }
            try? mergedNow.apply(e)
        }
        return out
    }
}

/// A checked change, ready to be written.
public struct ConfigChange: Sendable {
    /// The file it is written to, and which one that is.
    public let file: String
    public let target: ConfigEditor.Target
    public let edits: [YAMLEdit]
    /// The file's bytes before (empty for a changes file that is not there yet) and after.
    public let before: [UInt8]
    public let after: [UInt8]
    /// The config the bridge reads once it is written (what a reload applies).
    public let config: SwitchyardConfig
    /// What the change takes to apply, from the schema, least first (`none` … `bridge`).
    public let restart: [ConfigRestart]
    let base: ConfigSource
    let result: ConfigSource

    /// The change as a unified diff of the file (`--- a/<file>`, `+++ b/<file>`, 3 lines of context).
    public var diff: String { LineDiff.unified(before, after, name: file) }

    /// Whether the file would be any different.
    public var isEmpty: Bool { before == after }

    /// Writes the file atomically (a temporary file in the same directory, fsync, rename; its mode and
    /// owner kept) unless either file changed on disk since the source was read; returns the new source,
    /// which the next change must start from.
    public func commit() throws(ConfigChangeError) -> ConfigSource {
        if isEmpty { return result }
        // The other file must be unchanged too: the change was checked against both.
        let other = target == .main ? (base.changesPath, base.changes) : (base.path, Optional(base.bytes))
        if !other.0.isEmpty {
            var same = false
            switch ConfigFiles.readIfPresent(other.0) {
            case .absent: same = other.1 == nil
            case .bytes(let b): same = other.1 == b
            case .unreadable: same = false
            }
            if !same { throw ConfigChangeError(kind: .conflict, path: "", message: "\(other.0) changed on disk since the bridge read it: reload first; nothing was written") }
        }
        do {
            try ConfigFiles.replace(file, with: after, expected: target == .main ? base.bytes : base.changes)
        } catch {
            switch error {
            case .changed:
                throw ConfigChangeError(kind: .conflict, path: "", message: "\(file) changed on disk since the bridge read it: reload first; nothing was written")
            case .failed(let why):
                throw ConfigChangeError(kind: .unwritable, path: "", message: why)
            }
        }
        return result
    }
}

/// Why a change was refused; nothing was written.
public struct ConfigChangeError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// A file changed on disk since the config was read: reload, then try again.
        case conflict
        /// The key path is not a key of the config (the message names the known ones).
        case unknownKey
        /// The file cannot take the edit (`YAMLEditError`: not there, not a mapping, shared by an anchor…).
        case edit
        /// A secret given as `${ENV}` or `_file` would be overwritten.
        case secret
        /// The changed file would not be a valid config: `problems`, as check-config words them.
        case invalid
        /// The file could not be written.
        case unwritable
        /// The editor's check of its own work failed (a bug): nothing was written.
        case internalError
    }

    public var kind: Kind
    public var path: String
    public var message: String
    public var problems: [ConfigProblem] = []

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

extension YAMLEditor {
    /// The tree at a path, if the path is there.
    func tree(at path: ConfigPath) -> YAMLTree? { subtree(path) }
}
