/// One change to a YAML file, by key path (`ConfigPath`).
public enum YAMLEdit: Sendable, Equatable, CustomStringConvertible {
    /// The value at the path: replaced when there, created with any missing mappings on the way when
    /// not (list items are not created: `append` them). A mapping over a mapping changes key by key, so
    /// the comments of the keys that stay are kept.
    case set(ConfigPath, YAMLValue)
    /// A key and its value, or a list item, removed with the lines they stand on.
    case remove(ConfigPath)
    /// A mapping key renamed in place; its value, comments and place stay.
    case rename(ConfigPath, to: String)
    /// A new last item of the list at the path (the list is created when there is none).
    case append(ConfigPath, YAMLValue)

    public var path: ConfigPath {
        switch self {
        case .set(let p, _), .remove(let p), .rename(let p, _), .append(let p, _): p
        }
    }

    public var description: String {
        switch self {
        case .set(let p, let v): "set \(p) = \(v)"
        case .remove(let p): "remove \(p)"
        case .rename(let p, let to): "rename \(p) to \(to)"
        case .append(let p, let v): "append \(v) to \(p)"
        }
    }
}

/// Why an edit was not made (the file is then unchanged).
public struct YAMLEditError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The file is not valid YAML (or not a single document).
        case syntax
        /// Valid YAML this editor does not edit: an explicit `?` key, a key that is not a single value.
        case unsupported
        /// Nothing at the path (a list item selected by index or value, or a key to remove or rename).
        case notFound
        /// A rename to a key the mapping already has.
        case exists
        /// The path goes through a single value where a mapping or list is needed, or the like.
        case wrongType
        /// The value is shared through an anchor (`&a` … `*a`): changing it would change the alias too.
        case shared
        /// The edit itself makes no sense (an empty path, a list selector that matches two items).
        case invalid
        /// The edited text would not read back as the intended tree: a bug of this editor, caught before
        /// anything is written.
        case unverified
    }

    public var kind: Kind
    public var path: String
    public var message: String

    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// Edits a YAML file as text, the way a person would: only the bytes of what changes are touched, so
/// comments, key order, quoting, blank lines, `${ENV}` references, anchors, flow or block style and line
/// breaks (LF or CRLF) stay as they were. A new key goes after the last key of its mapping, indented like
/// it (a new top-level section after the last one, with a blank line when sections are separated so); a
/// new list item after the last item. Every edit is checked before it is kept: the new text is parsed
/// again and must be the old tree with exactly that change, or the edit fails (`.unverified`) and the
/// text stays as it was.
///
///     var e = try YAMLEditor(Array(text.utf8))
///     try e.apply([.set("log.level", "debug"), .rename("devices.virtual.kitchen", to: "galley")])
///     let edited = e.bytes
public struct YAMLEditor: Sendable {
    public internal(set) var bytes: [UInt8]
    var source: YAMLSource
    /// Spaces per nesting level, and whether lists under a key start at the key's column (`key:\n- a`):
    /// both read from the file, for new text.
    var unit = 2
    var indentless = false

    public init(_ bytes: [UInt8]) throws(YAMLEditError) {
        self.bytes = bytes
        source = try Self.parse(bytes)
        learnStyle()
    }

    public init(text: String) throws(YAMLEditError) { try self.init(Array(text.utf8)) }

    public var text: String { String(decoding: bytes, as: UTF8.self) }

    static func parse(_ bytes: [UInt8]) throws(YAMLEditError) -> YAMLSource {
        guard String(validating: bytes, as: UTF8.self) != nil else {
            throw YAMLEditError(kind: .syntax, path: "", message: "the file is not UTF-8 text")
        }
        do {
            return try YAMLSource(bytes)
        } catch {
            throw YAMLEditError(kind: error.unsupported ? .unsupported : .syntax, path: "",
                                message: error.line > 0 ? "\(error.message) (line \(error.line), column \(error.column))" : error.message)
        }
    }

    /// Applies the edits in order, each seeing the ones before; all or none.
    public mutating func apply(_ edits: [YAMLEdit]) throws(YAMLEditError) {
        var copy = self
        for e in edits { try copy.apply(e) }
        self = copy
    }

    public mutating func apply(_ edit: YAMLEdit) throws(YAMLEditError) {
        let before = tree
        let planned = Result { () throws(YAMLEditError) -> YAMLTree in try Self.intended(before, edit) }
        if case .success(let t) = planned, t == before { return }
        var copy = self
        // The text edit's own checks first: they name the problem more precisely than the tree's.
        try copy.perform(edit)
        let intended = try planned.get()
        guard copy.tree == intended else {
            throw YAMLEditError(kind: .unverified, path: edit.path.description,
                                message: "the edited file would not read back as intended; nothing was changed")
        }
        self = copy
    }

    // MARK: reading

    /// The whole file as a tree (an empty file is an empty mapping).
    var tree: YAMLTree {
        let t = source.tree(root)
        return t == .null ? .mapping([]) : t
    }

    var root: YAMLSource.Node? {
        guard let r = source.root, r.start >= 0 else { return nil }
        return r
    }

    /// Whether something (a null included) is at the path.
    public func contains(_ path: ConfigPath) -> Bool {
        guard let (chain, rest) = try? resolve(path) else { return false }
        return rest.isEmpty && !chain.isEmpty
    }

    /// The single value at the path as written (quotes removed, `${ENV}` not expanded); nil when there is
    /// none or it is a mapping or list.
    public func scalar(at path: ConfigPath) -> String? {
        guard let (chain, rest) = try? resolve(path), rest.isEmpty, let n = chain.last?.node, case .scalar(let s, _) = n.kind else { return nil }
        return n.isNull ? nil : s
    }

    /// The keys of the mapping at the path, in file order; nil when it is not a mapping.
    public func keys(at path: ConfigPath) -> [String]? {
        guard let (chain, rest) = try? resolve(path), rest.isEmpty, let n = chain.last?.node else { return path.isEmpty && root == nil ? [] : nil }
        guard case .mapping(let pairs, _) = n.kind else { return nil }
        return pairs.compactMap { if case .scalar(let s, _) = $0.key.kind { s } else { nil } }
    }

    /// The number of items of the list at the path; nil when it is not a list.
    public func count(at path: ConfigPath) -> Int? {
        guard let (chain, rest) = try? resolve(path), rest.isEmpty, let n = chain.last?.node, case .sequence(let items, _) = n.kind else { return nil }
        return items.count
    }

    /// The file's content without its formatting: mappings in file order, single values as their text
    /// (`.raw`), plain nulls as `.null`, aliases resolved.
    public var value: YAMLValue { YAMLValue(tree: tree) }

    /// The lines (1-based) an entry stands on: from its key (or a list item's `-`) to the end of its value.
    public func lines(of path: ConfigPath) -> ClosedRange<Int>? {
        guard let (chain, rest) = try? resolve(path), rest.isEmpty, let step = chain.last else { return nil }
        var start = step.node.start
        if let p = step.pair, case .mapping(let pairs, _)? = step.container?.kind { start = pairs[p].key.start }
        if let i = step.item, case .sequence(let items, _)? = step.container?.kind, let dash = items[i].dash { start = dash }
        func line(_ offset: Int) -> Int { bytes[0..<min(max(offset, 0), bytes.count)].reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) } }
        let first = line(start)
        return first...max(first, line(max(step.node.end - 1, start)))
    }

    /// The line (1-based) where the value at the path starts, for messages.
    public func line(of path: ConfigPath) -> Int? {
        guard let (chain, rest) = try? resolve(path), rest.isEmpty, let n = chain.last?.node else { return nil }
        return bytes[0..<min(n.content, bytes.count)].reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) }
    }

    // MARK: resolving a path

    /// One step from the root to a node: the node, how it is held (the pair's index in a mapping, the
    /// item's in a list), and its container.
    struct Step {
        var node: YAMLSource.Node
        var container: YAMLSource.Node?
        var pair: Int?
        var item: Int?
        var path: ConfigPath
    }

    /// The steps to the deepest node the path reaches, and the components that lead on from it to what
    /// is not there. Aliases are not followed.
    func resolve(_ path: ConfigPath) throws(YAMLEditError) -> (chain: [Step], rest: ArraySlice<ConfigPath.Component>) {
        guard let root else { return ([], path.components[...]) }
        var chain = [Step(node: root, container: nil, pair: nil, item: nil, path: ConfigPath([]))]
        var i = 0
        let comps = path.components
        while i < comps.count {
            let here = chain[chain.count - 1]
            let node = here.node
            let next = here.path.appending(comps[i])
            if case .alias(let name) = node.kind {
                throw YAMLEditError(kind: .shared, path: here.path.description,
                                    message: "is an alias of &\(name): change the anchored value, or write this one out in full first")
            }
            switch comps[i] {
            case .key(let k):
                guard case .mapping(let pairs, _) = node.kind else {
                    if node.isNull { return (chain, comps[i...]) }
                    throw YAMLEditError(kind: .wrongType, path: here.path.description, message: "is \(Self.kind(node)), not a mapping: it has no key '\(k)'")
                }
                guard let p = pairs.firstIndex(where: { if case .scalar(let s, _) = $0.key.kind { s == k } else { false } }) else {
                    return (chain, comps[i...])
                }
                chain.append(Step(node: pairs[p].value, container: node, pair: p, item: nil, path: next))
            case .index(let n):
                guard case .sequence(let items, _) = node.kind else {
                    if node.isNull { return (chain, comps[i...]) }
                    throw YAMLEditError(kind: .wrongType, path: here.path.description, message: "is \(Self.kind(node)), not a list")
                }
                guard n < items.count else { return (chain, comps[i...]) }
                chain.append(Step(node: items[n].node, container: node, pair: nil, item: n, path: next))
            case .item(let k, let v):
                guard case .sequence(let items, _) = node.kind else {
                    if node.isNull { return (chain, comps[i...]) }
                    throw YAMLEditError(kind: .wrongType, path: here.path.description, message: "is \(Self.kind(node)), not a list")
                }
                let matches = items.indices.filter { j in
                    guard case .mapping(let pairs, _) = items[j].node.kind else { return false }
                    return pairs.contains { p in
                        if case .scalar(let ks, _) = p.key.kind, ks == k, case .scalar(let vs, _) = p.value.kind { return vs == v }
                        return false
                    }
                }
                if matches.count > 1 {
                    throw YAMLEditError(kind: .invalid, path: next.description, message: "\(matches.count) items of the list have \(k) = \(v)")
                }
                guard let j = matches.first else { return (chain, comps[i...]) }
                chain.append(Step(node: items[j].node, container: node, pair: nil, item: j, path: next))
            }
            i += 1
        }
        return (chain, comps[comps.count...])
    }

    static func kind(_ n: YAMLSource.Node) -> String {
        switch n.kind {
        // Never the value itself: it may be a secret.
        case .scalar: n.isNull ? "empty" : "a single value"
        case .mapping: "a mapping"
        case .sequence: "a list"
        case .alias(let a): "an alias of &\(a)"
        }
    }

    /// Refuses to change a node that an alias shares, or one holding an anchor an alias uses.
    func checkNotShared(_ chain: [Step], whole node: YAMLSource.Node?) throws(YAMLEditError) {
        for s in chain {
            if let a = s.node.anchor, source.aliased.contains(a) {
                throw YAMLEditError(kind: .shared, path: s.path.description,
                                    message: "is shared through the anchor &\(a) (used by an alias elsewhere): changing it would change that too")
            }
        }
        if let node, let a = Self.anchors(in: node).first(where: source.aliased.contains) {
            throw YAMLEditError(kind: .shared, path: chain.last?.path.description ?? "",
                                message: "holds the anchor &\(a), which an alias elsewhere uses")
        }
    }

    static func anchors(in n: YAMLSource.Node) -> [String] {
        var out = n.anchor.map { [$0] } ?? []
        switch n.kind {
        case .mapping(let pairs, _): for p in pairs { out += anchors(in: p.key) + anchors(in: p.value) }
        case .sequence(let items, _): for i in items { out += anchors(in: i.node) }
        default: break
        }
        return out
    }

    /// The tree at a path (aliases resolved as in the whole file); nil when nothing is there.
    func subtree(_ path: ConfigPath) -> YAMLTree? {
        var t = tree
        for c in path.components {
            switch (t, c) {
            case (.mapping(let pairs), .key(let k)):
                guard let p = pairs.first(where: { $0.key == k }) else { return nil }
                t = p.value
            case (.sequence(let items), _):
                guard let i = Self.index(in: items, c) else { return nil }
                t = items[i]
            default:
                return nil
            }
        }
        return t
    }

    // MARK: the intended tree

    static func intended(_ tree: YAMLTree, _ edit: YAMLEdit) throws(YAMLEditError) -> YAMLTree {
        let comps = edit.path.components
        if comps.isEmpty { throw YAMLEditError(kind: .invalid, path: "", message: "an edit needs a key path") }
        switch edit {
        case .set(_, let v):
            return try change(tree, comps[...], edit) { _ in v.tree }
        case .append(_, let v):
            return try change(tree, comps[...], edit) { old in
                if case .sequence(let items)? = old { return .sequence(items + [v.tree]) }
                return .sequence([v.tree])
            }
        case .remove:
            return try change(tree, comps.dropLast(), edit, create: false) { old throws(YAMLEditError) in
                switch (old, comps.last!) {
                case (.mapping(let pairs)?, .key(let k)):
                    guard let i = pairs.firstIndex(where: { $0.key == k }) else { throw notFound(edit) }
                    var p = pairs
                    p.remove(at: i)
                    return .mapping(p)
                case (.sequence(let items)?, let c):
                    guard let i = index(in: items, c) else { throw notFound(edit) }
                    var a = items
                    a.remove(at: i)
                    return .sequence(a)
                default: throw notFound(edit)
                }
            }
        case .rename(_, let to):
            guard case .key(let k) = comps.last! else {
                throw YAMLEditError(kind: .invalid, path: edit.path.description, message: "only a mapping key can be renamed")
            }
            return try change(tree, comps.dropLast(), edit, create: false) { old throws(YAMLEditError) in
                guard case .mapping(let pairs)? = old, let i = pairs.firstIndex(where: { $0.key == k }) else { throw notFound(edit) }
                if k == to { return .mapping(pairs) }
                if pairs.contains(where: { $0.key == to }) {
                    throw YAMLEditError(kind: .exists, path: edit.path.description, message: "the mapping already has a key '\(to)'")
                }
                var p = pairs
                p[i].key = to
                return .mapping(p)
            }
        }
    }

    static func notFound(_ edit: YAMLEdit) -> YAMLEditError {
        YAMLEditError(kind: .notFound, path: edit.path.description, message: "is not in the file")
    }

    static func index(in items: [YAMLTree], _ c: ConfigPath.Component) -> Int? {
        switch c {
        case .index(let n): return n < items.count ? n : nil
        case .item(let k, let v):
            return items.firstIndex { t in
                if case .mapping(let pairs) = t { return pairs.contains { $0.key == k && $0.value == .scalar(v) } }
                return false
            }
        case .key: return nil
        }
    }

    /// `tree` with the node at `comps` replaced by `f(old node)`; missing keys are created (as mappings)
    /// when `create`.
    static func change(_ tree: YAMLTree, _ comps: ArraySlice<ConfigPath.Component>, _ edit: YAMLEdit, create: Bool = true,
                       _ f: (YAMLTree?) throws(YAMLEditError) -> YAMLTree) throws(YAMLEditError) -> YAMLTree {
        guard let c = comps.first else { return try f(tree) }
        let rest = comps.dropFirst()
        switch (tree, c) {
        case (.mapping(let pairs), .key(let k)):
            var p = pairs
            if let i = p.firstIndex(where: { $0.key == k }) {
                p[i].value = try change(p[i].value, rest, edit, create: create, f)
            } else {
                guard create, rest.allSatisfy({ if case .key = $0 { true } else { false } }) else { throw notFound(edit) }
                p.append(.init(key: k, value: try change(.null, rest, edit, create: create, f)))
            }
            return .mapping(p)
        case (.null, .key(let k)):
            guard create, rest.allSatisfy({ if case .key = $0 { true } else { false } }) else { throw notFound(edit) }
            return .mapping([.init(key: k, value: try change(.null, rest, edit, create: create, f))])
        case (.sequence(let items), _):
            guard let i = index(in: items, c) else { throw notFound(edit) }
            var a = items
            a[i] = try change(a[i], rest, edit, create: create, f)
            return .sequence(a)
        default:
            throw notFound(edit)
        }
    }
}
