// The text side of YAMLEditor: which bytes each edit replaces, and the text of new values.
extension YAMLEditor {
    typealias Node = YAMLSource.Node

    /// One replacement of `range` of the old bytes by `text`.
    struct Splice {
        var range: Range<Int>
        var text: String
    }

    mutating func perform(_ edit: YAMLEdit) throws(YAMLEditError) {
        switch edit {
        case .set(let path, let value): try set(path, value)
        case .remove(let path): try remove(path)
        case .rename(let path, let to): try rename(path, to)
        case .append(let path, let value): try append(path, value)
        }
    }

    /// Applies splices (non-overlapping) and reads the result again.
    mutating func splice(_ splices: [Splice]) throws(YAMLEditError) {
        var out = bytes
        for s in splices.sorted(by: { $0.range.lowerBound > $1.range.lowerBound }) {
            out.replaceSubrange(s.range, with: Array(s.text.utf8))
        }
        bytes = out
        do {
            source = try YAMLSource(out)
        } catch {
            throw YAMLEditError(kind: .unverified, path: "", message: "the edited file would not be valid YAML (\(error.message)); nothing was changed")
        }
    }

    /// Reads the indentation step and the list style from the file (for new text).
    mutating func learnStyle() {
        var steps: [Int: Int] = [:]
        var indentlessVotes = 0, indentedVotes = 0
        func walk(_ n: Node, column: Int?) {
            switch n.kind {
            case .mapping(let pairs, let flow):
                guard !flow else { return }
                for p in pairs {
                    let keyCol = source.column(p.key.start)
                    if case .mapping(let inner, false) = p.value.kind, let first = inner.first {
                        let d = source.column(first.key.start) - keyCol
                        if d > 0, source.firstOnLine(first.key.start) { steps[d, default: 0] += 1 }
                    }
                    if case .sequence(let items, false) = p.value.kind, let dash = items.first?.dash, source.firstOnLine(dash) {
                        if source.column(dash) == keyCol { indentlessVotes += 1 } else { indentedVotes += 1 }
                    }
                    walk(p.value, column: keyCol)
                }
            case .sequence(let items, _):
                for i in items { walk(i.node, column: nil) }
            default: break
            }
        }
        if let root { walk(root, column: nil) }
        if let best = steps.max(by: { $0.value < $1.value || ($0.value == $1.value && $0.key > $1.key) }) { unit = min(max(best.key, 1), 8) }
        indentless = indentlessVotes > indentedVotes
    }

    // MARK: set

    mutating func set(_ path: ConfigPath, _ value: YAMLValue) throws(YAMLEditError) {
        guard !path.isEmpty else { throw YAMLEditError(kind: .invalid, path: "", message: "an edit needs a key path") }
        let (chain, rest) = try resolve(path)
        if rest.isEmpty {
            let step = chain[chain.count - 1]
            try checkNotShared(chain, whole: step.node)
            if subtree(path) == value.tree { return }
            // A mapping over a mapping, or a list over a list of the same length: key by key, item by item,
            // so that what stays keeps its comments.
            if case .map(let entries) = value, case .mapping(let pairs, _) = step.node.kind, !pairs.isEmpty, !entries.isEmpty {
                let keep = Set(entries.map(\.key))
                var edits: [YAMLEdit] = []
                for p in pairs {
                    if case .scalar(let k, _) = p.key.kind, !keep.contains(k) { edits.append(.remove(path.appending(key: k))) }
                }
                for e in entries { edits.append(.set(path.appending(key: e.key), e.value)) }
                for e in edits { try apply(e) }
                return
            }
            if case .list(let values) = value, case .sequence(let items, _) = step.node.kind, items.count == values.count, !items.isEmpty {
                for (i, v) in values.enumerated() { try apply(.set(path.appending(.index(i)), v)) }
                return
            }
            try splice(replaceValue(step, value))
            return
        }
        // Keys to create under the deepest node that is there.
        var keys: [String] = []
        for c in rest {
            guard case .key(let k) = c else {
                throw YAMLEditError(kind: .notFound, path: path.description, message: "is not in the file (a list item is added with append)")
            }
            keys.append(k)
        }
        var nested = value
        for k in keys.dropFirst().reversed() { nested = .map([.init(k, nested)]) }
        guard let step = chain.last else {
            try splice([appendToEmptyDocument(keys[0], nested)])
            return
        }
        try checkNotShared(chain, whole: nil)
        switch step.node.kind {
        case .mapping:
            try splice([addPair(to: step.node, key: keys[0], value: nested)])
        default:
            guard step.node.isNull else {
                throw YAMLEditError(kind: .wrongType, path: step.path.description, message: "is \(Self.kind(step.node)), not a mapping")
            }
            if step.container == nil {
                // An empty document that is `~` or `---`: a mapping after it would not parse.
                throw YAMLEditError(kind: .unsupported, path: step.path.description, message: "the file is a single null value")
            }
            try splice(replaceValue(step, .map([.init(keys[0], nested)])))
        }
    }

    /// A document that holds no node at all (comments only, or nothing): the key goes at its end.
    func appendToEmptyDocument(_ key: String, _ value: YAMLValue) -> Splice {
        var text = ""
        if !bytes.isEmpty, bytes.last != 0x0A, bytes.last != 0x0D { text += source.lineBreak }
        text += renderKey(key, flow: false) + ":" + renderAfterKey(value, indent: 0) + source.lineBreak
        return Splice(range: bytes.count..<bytes.count, text: text)
    }

    /// Whether the node at this step is inside a flow collection (its new text must be flow style too).
    func inFlow(_ step: Step) -> Bool { step.container?.isFlow ?? false }

    /// The splices that replace a node's value (the node stays where it is, with its key or `-`).
    func replaceValue(_ step: Step, _ value: YAMLValue) throws(YAMLEditError) -> [Splice] {
        let node = step.node
        guard let container = step.container else {
            throw YAMLEditError(kind: .invalid, path: "", message: "the whole file cannot be replaced")
        }
        let flow = container.isFlow
        // Where the value's text may start: after the key's `:` (or the item's `-`), so that a block
        // collection replaced by something else takes its lines with it.
        var lead: Int
        var keyColumn: Int
        if let p = step.pair, case .mapping(let pairs, _) = container.kind {
            let pair = pairs[p]
            keyColumn = source.column(pair.key.start)
            if pair.colon == nil {
                // `{a}`: a key without a value.
                return [Splice(range: pair.key.end..<pair.key.end, text: ": " + renderFlow(value))]
            }
            lead = pair.colon! + 1
        } else if let i = step.item, case .sequence(let items, _) = container.kind {
            if let dash = items[i].dash {
                lead = dash + 1
                keyColumn = source.column(dash)
            } else {
                lead = node.content
                keyColumn = 0
            }
        } else {
            throw YAMLEditError(kind: .invalid, path: step.path.description, message: "cannot be replaced")
        }
        let isItem = step.item != nil

        if flow {
            let text = renderFlow(value, preferred: scalarStyle(node), old: node)
            if node.isEmptyScalar { return [Splice(range: node.content..<node.end, text: (lead == node.content ? " " : "") + text)] }
            return [Splice(range: node.content..<node.end, text: text)]
        }

        switch node.kind {
        case .scalar where !node.isEmptyScalar:
            if !value.isCollection || isEmpty(value) {
                return [Splice(range: node.content..<node.end, text: renderScalarOrEmpty(value, preferred: scalarStyle(node), old: node, flow: false))]
            }
            // A collection where a single value was: the value goes, its comment stays on the key's line,
            // and the collection's lines follow that line.
            let eol = source.lineEnd(node.end)
            if isItem {
                return [Splice(range: lead..<node.end, text: renderItem(value, dashIndent: keyColumn))]
            }
            var start = node.start
            while start > lead, bytes[start - 1] == 0x20 || bytes[start - 1] == 0x09 { start -= 1 }
            return [Splice(range: start..<node.end, text: ""), Splice(range: eol..<eol, text: renderAfterKey(value, indent: keyColumn))]
        case .scalar:
            // An empty value (`key:` or `-`): text after the `:`, the collection's lines after the line.
            if !value.isCollection || isEmpty(value) {
                return [Splice(range: lead..<lead, text: " " + renderScalarOrEmpty(value, preferred: nil, old: nil, flow: false))]
            }
            if isItem { return [Splice(range: lead..<lead, text: renderItem(value, dashIndent: keyColumn))] }
            let eol = source.lineEnd(lead)
            return [Splice(range: eol..<eol, text: renderAfterKey(value, indent: keyColumn))]
        case .alias:
            let text = value.isCollection && !isEmpty(value)
                ? (isItem ? renderItem(value, dashIndent: keyColumn) : renderAfterKey(value, indent: keyColumn))
                : " " + renderScalarOrEmpty(value, preferred: nil, old: nil, flow: false)
            return [Splice(range: lead..<node.end, text: text)]
        case .mapping, .sequence:
            if node.isFlow {
                // A flow collection stays flow: its text is replaced where it stands.
                return [Splice(range: node.content..<node.end, text: renderFlow(value))]
            }
            let text = value.isCollection && !isEmpty(value)
                ? (isItem ? renderItem(value, dashIndent: keyColumn) : renderAfterKey(value, indent: keyColumn))
                : " " + renderScalarOrEmpty(value, preferred: nil, old: nil, flow: false)
            return [Splice(range: lead..<node.end, text: text)]
        }
    }

    func isEmpty(_ v: YAMLValue) -> Bool {
        switch v {
        case .list(let a): a.isEmpty
        case .map(let m): m.isEmpty
        default: false
        }
    }

    func scalarStyle(_ n: Node) -> YAMLScalarStyle? {
        if case .scalar(_, let style) = n.kind, !n.isEmptyScalar { return style }
        return nil
    }

    /// A new key and value at the end of a mapping.
    func addPair(to m: Node, key: String, value: YAMLValue) throws(YAMLEditError) -> Splice {
        guard case .mapping(let pairs, let flow) = m.kind else {
            throw YAMLEditError(kind: .wrongType, path: "", message: "not a mapping")
        }
        if flow {
            let entry = renderKey(key, flow: true) + ": " + renderFlow(value)
            guard let last = pairs.last else {
                return Splice(range: m.content + 1..<m.content + 1, text: entry)
            }
            return Splice(range: last.value.end..<last.value.end, text: ", " + entry)
        }
        guard let first = pairs.first, let last = pairs.last else {
            throw YAMLEditError(kind: .unsupported, path: "", message: "an empty block mapping")
        }
        let indent = source.column(first.key.start)
        var at = source.entryEnd(last.value.end, column: indent)
        var text = ""
        // A trailing document end marker (`...`) stays last.
        if at >= bytes.count, bytes.last != 0x0A, bytes.last != 0x0D { text += source.lineBreak }
        if m.start == root?.start, value.isCollection, !isEmpty(value), sectionsAreSpaced(pairs) { text += source.lineBreak }
        text += String(repeating: " ", count: indent) + renderKey(key, flow: false) + ":" + renderAfterKey(value, indent: indent) + source.lineBreak
        at = min(at, bytes.count)
        return Splice(range: at..<at, text: text)
    }

    /// Whether the top-level keys whose values are collections are separated by blank lines.
    func sectionsAreSpaced(_ pairs: [YAMLSource.Pair]) -> Bool {
        var spaced = 0, tight = 0
        for p in pairs.dropFirst() {
            let prevLine = source.lineStart(p.key.start) - 1
            guard prevLine > 0 else { continue }
            if source.commentOnly(lineAt: prevLine).blank { spaced += 1 } else { tight += 1 }
        }
        return spaced > 0 && spaced >= tight
    }

    // MARK: append

    mutating func append(_ path: ConfigPath, _ value: YAMLValue) throws(YAMLEditError) {
        let (chain, rest) = try resolve(path)
        guard rest.isEmpty, let step = chain.last, !step.node.isNull else {
            try set(path, .list([value]))
            return
        }
        try checkNotShared(chain, whole: nil)
        guard case .sequence(let items, let flow) = step.node.kind else {
            throw YAMLEditError(kind: .wrongType, path: path.description, message: "is \(Self.kind(step.node)), not a list")
        }
        if flow {
            guard let last = items.last else {
                try splice([Splice(range: step.node.content + 1..<step.node.content + 1, text: renderFlow(value))])
                return
            }
            try splice([Splice(range: last.node.end..<last.node.end, text: ", " + renderFlow(value))])
            return
        }
        guard let dash = items.first?.dash, let last = items.last else {
            throw YAMLEditError(kind: .unsupported, path: path.description, message: "an empty block list")
        }
        let column = source.column(dash)
        let at = source.entryEnd(last.node.end, column: column)
        var text = ""
        if at >= bytes.count, bytes.last != 0x0A, bytes.last != 0x0D { text += source.lineBreak }
        text += String(repeating: " ", count: column) + "-" + renderItem(value, dashIndent: column) + source.lineBreak
        try splice([Splice(range: at..<at, text: text)])
    }

    // MARK: remove

    mutating func remove(_ path: ConfigPath) throws(YAMLEditError) {
        guard !path.isEmpty else { throw YAMLEditError(kind: .invalid, path: "", message: "an edit needs a key path") }
        let (chain, rest) = try resolve(path)
        guard rest.isEmpty, chain.count >= 2 else {
            throw YAMLEditError(kind: .notFound, path: path.description, message: "is not in the file")
        }
        let step = chain[chain.count - 1]
        try checkNotShared(Array(chain.dropLast()), whole: step.node)
        let parentStep = chain[chain.count - 2]
        let container = parentStep.node
        switch container.kind {
        case .mapping(let pairs, let flow):
            let p = step.pair!
            let pair = pairs[p]
            if pairs.count == 1 {
                try splice(emptyCollection(parentStep, chain: chain, text: "{}"))
                return
            }
            if flow {
                if p + 1 < pairs.count {
                    try splice([Splice(range: pair.key.start..<pairs[p + 1].key.start, text: "")])
                } else {
                    try splice([Splice(range: pairs[p - 1].value.end..<pair.value.end, text: "")])
                }
                return
            }
            if source.firstOnLine(pair.key.start) {
                let column = source.column(pair.key.start)
                let from = source.lineStart(pair.key.start)
                let to = source.entryEnd(pair.value.end, column: column)
                try splice([Splice(range: from..<to, text: "")])
            } else {
                // The first key of a list item, on the `-` line: the next key takes its place.
                guard p + 1 < pairs.count else { throw YAMLEditError(kind: .unsupported, path: path.description, message: "an unusual layout") }
                try splice([Splice(range: pair.key.start..<pairs[p + 1].key.start, text: "")])
            }
        case .sequence(let items, let flow):
            let i = step.item!
            if items.count == 1 {
                try splice(emptyCollection(parentStep, chain: chain, text: "[]"))
                return
            }
            if flow {
                if i + 1 < items.count {
                    try splice([Splice(range: items[i].node.start..<items[i + 1].node.start, text: "")])
                } else {
                    try splice([Splice(range: items[i - 1].node.end..<items[i].node.end, text: "")])
                }
                return
            }
            guard let dash = items[i].dash else { throw YAMLEditError(kind: .unsupported, path: path.description, message: "a list item without its -") }
            if source.firstOnLine(dash) {
                let to = source.entryEnd(items[i].node.end, column: source.column(dash))
                try splice([Splice(range: source.lineStart(dash)..<to, text: "")])
            } else {
                guard i + 1 < items.count, let next = items[i + 1].dash else {
                    throw YAMLEditError(kind: .unsupported, path: path.description, message: "an unusual layout")
                }
                try splice([Splice(range: dash..<next, text: "")])
            }
        default:
            throw YAMLEditError(kind: .notFound, path: path.description, message: "is not in the file")
        }
    }

    /// The splice that empties a collection whose last key or item goes: `{}` / `[]` in its place.
    func emptyCollection(_ step: Step, chain: [Step], text: String) throws(YAMLEditError) -> [Splice] {
        let node = step.node
        if node.isFlow { return [Splice(range: node.content + 1..<node.end - 1, text: "")] }
        guard step.container != nil else {
            // The whole file's last key: the file keeps its comments and says nothing.
            let from = source.lineStart(node.content)
            let to = source.entryEnd(node.end, column: 0)
            return [Splice(range: from..<to, text: "")]
        }
        return try replaceValue(step, text == "{}" ? .map([]) : .list([]))
    }

    // MARK: rename

    mutating func rename(_ path: ConfigPath, _ to: String) throws(YAMLEditError) {
        guard case .key = path.last else { throw YAMLEditError(kind: .invalid, path: path.description, message: "only a mapping key can be renamed") }
        let (chain, rest) = try resolve(path)
        guard rest.isEmpty, chain.count >= 2, let p = chain.last?.pair, case .mapping(let pairs, let flow) = chain[chain.count - 2].node.kind else {
            throw YAMLEditError(kind: .notFound, path: path.description, message: "is not in the file")
        }
        if pairs.contains(where: { if case .scalar(let s, _) = $0.key.kind { s == to } else { false } }) {
            if case .scalar(let s, _) = pairs[p].key.kind, s == to { return }
            throw YAMLEditError(kind: .exists, path: path.description, message: "the mapping already has a key '\(to)'")
        }
        try checkNotShared(Array(chain.dropLast()), whole: nil)
        let key = pairs[p].key
        let text = YAMLQuoting.render(to, typed: false, preferred: scalarStyle(key) == .single || scalarStyle(key) == .double ? scalarStyle(key) : nil, flow: flow)
        try splice([Splice(range: key.content..<key.end, text: text)])
    }

    // MARK: rendering

    func renderKey(_ k: String, flow: Bool) -> String { YAMLQuoting.render(k, typed: false, preferred: nil, flow: flow) }

    /// A single value's text, in the old value's style when it can.
    func renderScalarOrEmpty(_ v: YAMLValue, preferred: YAMLScalarStyle?, old: Node?, flow: Bool) -> String {
        switch v {
        case .list(let a) where a.isEmpty: return "[]"
        case .map(let m) where m.isEmpty: return "{}"
        case .null: return "null"
        case .bool(let b):
            if let old, case .scalar(let s, .plain) = old.kind { return Self.bool(b, like: s) }
        default: break
        }
        guard let text = v.scalarText else { return renderFlow(v) }
        let typed = v.isTyped
        let style: YAMLScalarStyle? = preferred == .single || preferred == .double ? preferred : nil
        return YAMLQuoting.render(text, typed: typed, preferred: style, flow: flow)
    }

    /// `true`/`false` written as the old value was: `yes`/`no`, `on`/`off`, in its case.
    static func bool(_ b: Bool, like old: String) -> String {
        let lower = old.lowercased()
        let word: String
        switch lower {
        case "yes", "no": word = b ? "yes" : "no"
        case "on", "off": word = b ? "on" : "off"
        default: word = b ? "true" : "false"
        }
        if old == old.uppercased(), old != old.lowercased() { return word.uppercased() }
        if let f = old.first, f.isUppercase { return word.prefix(1).uppercased() + word.dropFirst() }
        return word
    }

    /// A value in flow style: `{a: 1, b: [x, y]}`.
    func renderFlow(_ v: YAMLValue, preferred: YAMLScalarStyle? = nil, old: Node? = nil) -> String {
        switch v {
        case .list(let a): return "[" + a.map { renderFlow($0) }.joined(separator: ", ") + "]"
        case .map(let m): return "{" + m.map { renderKey($0.key, flow: true) + ": " + renderFlow($0.value) }.joined(separator: ", ") + "}"
        default: return renderScalarOrEmpty(v, preferred: preferred, old: old, flow: true)
        }
    }

    /// What follows `key:` for a value in block style: ` value`, or the collection's lines (each
    /// starting with a line break) indented under a key at `indent`.
    func renderAfterKey(_ v: YAMLValue, indent: Int) -> String {
        let nl = source.lineBreak
        switch v {
        case .map(let m) where !m.isEmpty:
            let inner = indent + unit
            return m.map { nl + String(repeating: " ", count: inner) + renderKey($0.key, flow: false) + ":" + renderAfterKey($0.value, indent: inner) }
                .joined()
        case .list(let a) where !a.isEmpty:
            let dash = indentless ? indent : indent + unit
            return a.map { nl + String(repeating: " ", count: dash) + "-" + renderItem($0, dashIndent: dash) }.joined()
        default:
            return " " + renderScalarOrEmpty(v, preferred: nil, old: nil, flow: false)
        }
    }

    /// What follows a list item's `-` at `dashIndent`: ` value`, or a collection starting on the `-` line.
    func renderItem(_ v: YAMLValue, dashIndent: Int) -> String {
        let nl = source.lineBreak
        let inner = dashIndent + 2
        switch v {
        case .map(let m) where !m.isEmpty:
            return " " + m.enumerated().map { i, e in
                (i == 0 ? "" : nl + String(repeating: " ", count: inner)) + renderKey(e.key, flow: false) + ":" + renderAfterKey(e.value, indent: inner)
            }.joined()
        case .list(let a) where !a.isEmpty:
            return " " + a.enumerated().map { i, e in
                (i == 0 ? "" : nl + String(repeating: " ", count: inner)) + "-" + renderItem(e, dashIndent: inner)
            }.joined()
        default:
            return " " + renderScalarOrEmpty(v, preferred: nil, old: nil, flow: false)
        }
    }
}
