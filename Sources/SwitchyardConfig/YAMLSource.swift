import CYAML

/// What a YAML file means, without its formatting: what an edit must change and nothing else. Scalars
/// are their text as written (before `${ENV}` expansion); aliases are resolved; plain null (`~`, `null`,
/// nothing) is `.null`, so that `key:` and `key: ~` mean the same.
enum YAMLTree: Sendable, Equatable {
    case null
    case scalar(String)
    case mapping([Pair])
    case sequence([YAMLTree])

    struct Pair: Sendable, Equatable {
        var key: String
        var value: YAMLTree
    }
}

/// A YAML file with the byte range of every node, for editing it in place: the positions libyaml's
/// events give (start and end marks, scalar styles, anchors), turned into byte offsets, plus the few
/// that events do not give (a mapping value's `:`, a list item's `-`), found by reading the bytes
/// between two nodes, where only white space, comments and that indicator can be.
struct YAMLSource: Sendable {
    /// A node and where it is. `start..<end` covers its properties (anchor, tag) and content;
    /// `content..<end` the content alone. A block collection ends where its last item's value ends
    /// (comments after it are not part of it). An empty value (`key:`) is empty at the place where its
    /// text would be.
    struct Node: Sendable {
        enum Kind: Sendable {
            case scalar(String, YAMLScalarStyle)
            case mapping([Pair], flow: Bool)
            case sequence([Item], flow: Bool)
            case alias(String)
        }
        var kind: Kind
        var start: Int
        var content: Int
        var end: Int
        var anchor: String?
        var tagged: Bool

        var isEmptyScalar: Bool {
            if case .scalar(let s, .plain) = kind, s.isEmpty { return true }
            return false
        }

        var isNull: Bool {
            if case .scalar(let s, .plain) = kind, ["", "~", "null", "Null", "NULL"].contains(s) { return true }
            return false
        }

        var isFlow: Bool {
            switch kind {
            case .mapping(_, let flow), .sequence(_, let flow): flow
            default: false
            }
        }
    }

    struct Pair: Sendable {
        var key: Node
        /// The `:` after the key; nil when the key has none (`{a, b: 1}`).
        var colon: Int?
        var value: Node
    }

    struct Item: Sendable {
        /// The `-` of a block list's item; nil in a flow list.
        var dash: Int?
        var node: Node
    }

    let bytes: [UInt8]
    let root: Node?
    /// The anchors some alias refers to: a node holding one cannot be edited (the alias would change too).
    let aliased: Set<String>
    /// `\r\n` when the file's first line break is one.
    let lineBreak: String

    struct Failure: Error, Sendable {
        var message: String
        var line: Int
        var column: Int
        /// Valid YAML this editor does not edit (complex keys), rather than invalid YAML.
        var unsupported = false
    }

    init(_ bytes: [UInt8]) throws(Failure) {
        self.bytes = bytes
        var crlf = false
        if let nl = bytes.firstIndex(of: 0x0A), nl > 0, bytes[nl - 1] == 0x0D { crlf = true }
        lineBreak = crlf ? "\r\n" : "\n"
        var builder = Builder(bytes: bytes)
        root = try builder.run()
        aliased = builder.aliasesUsed
    }

    // MARK: the tree without formatting

    func tree(_ node: Node?) -> YAMLTree {
        var anchors: [String: YAMLTree] = [:]
        return tree(node, &anchors)
    }

    private func tree(_ node: Node?, _ anchors: inout [String: YAMLTree]) -> YAMLTree {
        guard let node else { return .null }
        let t: YAMLTree
        switch node.kind {
        case .scalar(let s, let style):
            if style == .plain, ["", "~", "null", "Null", "NULL"].contains(s) {
                t = .null
            } else if style == .plain, let b = Self.booleans[s] {
                // `yes`, `On`, `TRUE`… are one boolean to the reader: an edit may keep their spelling.
                t = .scalar(b ? "true" : "false")
            } else {
                t = .scalar(s)
            }
        case .mapping(let pairs, _):
            var out: [YAMLTree.Pair] = []
            for p in pairs {
                // Keys as written: `y` and `yes` are keys, not booleans, to the reader.
                let key: String
                if case .scalar(let s, _) = p.key.kind { key = s } else { key = "\u{FFFD}complex" }
                out.append(.init(key: key, value: tree(p.value, &anchors)))
            }
            t = .mapping(out)
        case .sequence(let items, _):
            t = .sequence(items.map { tree($0.node, &anchors) })
        case .alias(let name):
            t = anchors[name] ?? .null
        }
        if let a = node.anchor { anchors[a] = t }
        return t
    }

    static let booleans: [String: Bool] = {
        var d: [String: Bool] = [:]
        for w in ["y", "yes", "true", "on"] { for v in [w, w.uppercased(), w.prefix(1).uppercased() + w.dropFirst()] { d[v] = true } }
        for w in ["n", "no", "false", "off"] { for v in [w, w.uppercased(), w.prefix(1).uppercased() + w.dropFirst()] { d[v] = false } }
        return d
    }()

    // MARK: bytes

    /// Offset of the start of the line holding `i`.
    func lineStart(_ i: Int) -> Int {
        var j = min(i, bytes.count)
        while j > 0, bytes[j - 1] != 0x0A, bytes[j - 1] != 0x0D { j -= 1 }
        return j
    }

    /// Offset of the line break ending the line holding `i` (bytes.count at the end of the file).
    func lineEnd(_ i: Int) -> Int {
        var j = i
        while j < bytes.count, bytes[j] != 0x0A, bytes[j] != 0x0D { j += 1 }
        return j
    }

    /// Offset of the start of the next line (bytes.count when there is none).
    func nextLineStart(_ i: Int) -> Int {
        var j = lineEnd(i)
        if j < bytes.count, bytes[j] == 0x0D { j += 1 }
        if j < bytes.count, bytes[j] == 0x0A { j += 1 }
        return j
    }

    /// Whether only spaces stand between the start of `i`'s line and `i`.
    func firstOnLine(_ i: Int) -> Bool {
        var j = lineStart(i)
        while j < i { if bytes[j] != 0x20 { return false }; j += 1 }
        return true
    }

    /// The column (0-based, in bytes: indentation is ASCII) of `i`.
    func column(_ i: Int) -> Int { i - lineStart(i) }

    /// Whether the line holding `i` is blank or a comment only; its comment's column if it has one.
    func commentOnly(lineAt i: Int) -> (blank: Bool, commentColumn: Int?) {
        var j = lineStart(i)
        let s = j
        while j < bytes.count, bytes[j] == 0x20 || bytes[j] == 0x09 { j += 1 }
        if j >= bytes.count || bytes[j] == 0x0A || bytes[j] == 0x0D { return (true, nil) }
        if bytes[j] == 0x23 { return (false, j - s) }
        return (false, nil)
    }

    /// The offset after white space, line breaks and comments from `i`.
    func skipSpace(_ i: Int, comments: Bool = true) -> Int {
        var j = i
        while j < bytes.count {
            let b = bytes[j]
            if b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { j += 1; continue }
            if comments, b == 0x23, j == 0 || [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j - 1]) {
                j = lineEnd(j)
                continue
            }
            break
        }
        return j
    }

    /// The end of a block-context value's last line, past continuation comment lines: comment-only lines
    /// right after it (no blank line between) indented deeper than `column`, which a person wrote as the
    /// rest of that line's comment.
    func entryEnd(_ valueEnd: Int, column: Int) -> Int {
        var next = nextLineStart(valueEnd)
        while next < bytes.count {
            let (blank, comment) = commentOnly(lineAt: next)
            guard !blank, let c = comment, c > column else { break }
            next = nextLineStart(next)
        }
        return next
    }

    // MARK: composing

    private struct Builder {
        let bytes: [UInt8]
        /// Byte offset of each character, when the text is not all ASCII (libyaml counts characters).
        var offsets: [Int]?
        var base = 0
        var aliasesUsed: Set<String> = []

        struct Open {
            var mapping: Bool
            var flow: Bool
            var start: Int
            var anchor: String?
            var tagged: Bool
            var items: [Node] = []
        }
        var stack: [Open] = []
        var root: Node?

        init(bytes: [UInt8]) {
            self.bytes = bytes
            if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF { base = 3 }
            if bytes.contains(where: { $0 >= 0x80 }) {
                var o: [Int] = []
                o.reserveCapacity(bytes.count)
                var i = base
                while i < bytes.count {
                    o.append(i)
                    let b = bytes[i]
                    i += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4
                }
                o.append(bytes.count)
                offsets = o
            }
        }

        func offset(_ m: yaml_mark_t) -> Int {
            let index = Int(m.index)
            guard let offsets else { return min(base + index, bytes.count) }
            return index < offsets.count ? offsets[index] : bytes.count
        }

        static func text(_ p: UnsafePointer<yaml_char_t>?) -> String? { p.map { String(cString: $0) } }

        mutating func run() throws(Failure) -> Node? {
            var parser = yaml_parser_t()
            guard yaml_parser_initialize(&parser) == 1 else { throw Failure(message: "YAML parser could not start", line: 1, column: 1, unsupported: false) }
            defer { yaml_parser_delete(&parser) }
            if bytes.isEmpty { return nil }
            var copy = bytes
            return try copy.withUnsafeMutableBufferPointer { (buf) throws(Failure) -> Node? in
                yaml_parser_set_input_string(&parser, buf.baseAddress, buf.count)
                var event = yaml_event_t()
                var documents = 0
                while true {
                    guard yaml_parser_parse(&parser, &event) == 1 else {
                        let problem = parser.problem.map { String(cString: $0) } ?? "unreadable YAML"
                        throw Failure(message: "YAML syntax: \(problem)", line: Int(parser.problem_mark.line) + 1, column: Int(parser.problem_mark.column) + 1)
                    }
                    defer { yaml_event_delete(&event) }
                    let start = offset(event.start_mark), end = offset(event.end_mark)
                    switch event.type {
                    case YAML_STREAM_END_EVENT:
                        return root
                    case YAML_DOCUMENT_START_EVENT:
                        documents += 1
                        if documents > 1 {
                            throw Failure(message: "YAML syntax: expected a single document", line: Int(event.start_mark.line) + 1,
                                          column: Int(event.start_mark.column) + 1)
                        }
                    case YAML_SCALAR_EVENT:
                        let s = event.data.scalar
                        let value = s.value.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(s.length)), as: UTF8.self) } ?? ""
                        let style: YAMLScalarStyle
                        switch s.style {
                        case YAML_SINGLE_QUOTED_SCALAR_STYLE: style = .single
                        case YAML_DOUBLE_QUOTED_SCALAR_STYLE: style = .double
                        case YAML_LITERAL_SCALAR_STYLE: style = .literal
                        case YAML_FOLDED_SCALAR_STYLE: style = .folded
                        default: style = .plain
                        }
                        let anchor = Self.text(s.anchor)
                        let tagged = s.tag != nil
                        var node: Node
                        if style == .plain, value.isEmpty {
                            // An empty value: libyaml places it at the next token; the container places it.
                            let at = anchor != nil || tagged ? afterProperties(start) : -1
                            node = Node(kind: .scalar("", .plain), start: anchor != nil || tagged ? start : -1, content: at,
                                        end: anchor != nil || tagged ? at : -1, anchor: anchor, tagged: tagged)
                            if at >= 0 { node.content = at; node.end = at }
                        } else {
                            var e = end
                            if style == .literal || style == .folded { e = blockScalarEnd(end) }
                            node = Node(kind: .scalar(value, style), start: start,
                                        content: anchor != nil || tagged ? afterProperties(start) : start, end: e, anchor: anchor, tagged: tagged)
                        }
                        try add(node)
                    case YAML_ALIAS_EVENT:
                        let name = Self.text(event.data.alias.anchor) ?? ""
                        aliasesUsed.insert(name)
                        try add(Node(kind: .alias(name), start: start, content: start, end: end, anchor: nil, tagged: false))
                    case YAML_SEQUENCE_START_EVENT:
                        let d = event.data.sequence_start
                        stack.append(Open(mapping: false, flow: d.style == YAML_FLOW_SEQUENCE_STYLE, start: start, anchor: Self.text(d.anchor),
                                          tagged: d.tag != nil))
                    case YAML_MAPPING_START_EVENT:
                        let d = event.data.mapping_start
                        stack.append(Open(mapping: true, flow: d.style == YAML_FLOW_MAPPING_STYLE, start: start, anchor: Self.text(d.anchor),
                                          tagged: d.tag != nil))
                    case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                        let open = stack.removeLast()
                        try add(try close(open, endEvent: start, endEventEnd: end))
                    default:
                        break
                    }
                }
            }
        }

        /// The content's first byte after a node's anchor and tag.
        func afterProperties(_ i: Int) -> Int {
            var j = i
            while true {
                while j < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j]) { j += 1 }
                guard j < bytes.count else { return j }
                if bytes[j] == 0x23, j > 0, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j - 1]) {
                    while j < bytes.count, bytes[j] != 0x0A, bytes[j] != 0x0D { j += 1 }
                    continue
                }
                guard bytes[j] == 0x26 || bytes[j] == 0x21 else { return j }   // & or !
                if bytes[j] == 0x21, j + 1 < bytes.count, bytes[j + 1] == 0x3C {   // !<verbatim>
                    while j < bytes.count, bytes[j] != 0x3E { j += 1 }
                    j += 1
                    continue
                }
                while j < bytes.count, ![0x20, 0x09, 0x0A, 0x0D, 0x2C, 0x5B, 0x5D, 0x7B, 0x7D].contains(bytes[j]) { j += 1 }
            }
        }

        /// libyaml ends a block scalar after the line breaks that follow it (and the next line's
        /// indentation): its content ends at the end of its last line that is not blank.
        func blockScalarEnd(_ end: Int) -> Int {
            var j = end
            while j > 0, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j - 1]) { j -= 1 }
            while j < bytes.count, bytes[j] != 0x0A, bytes[j] != 0x0D { j += 1 }
            return j
        }

        /// The offset of the first byte that is not white space or a comment from `i`.
        func skip(_ i: Int) -> Int {
            var j = i
            while j < bytes.count {
                let b = bytes[j]
                if b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D { j += 1; continue }
                if b == 0x23 {
                    while j < bytes.count, bytes[j] != 0x0A, bytes[j] != 0x0D { j += 1 }
                    continue
                }
                break
            }
            return j
        }

        mutating func close(_ open: Open, endEvent: Int, endEventEnd: Int) throws(Failure) -> Node {
            let contentStart = open.anchor != nil || open.tagged ? afterProperties(open.start) : open.start
            if open.mapping {
                var pairs: [Pair] = []
                var keys: Set<String> = []
                var cursor = open.flow ? contentStart + 1 : contentStart
                for i in stride(from: 0, to: open.items.count - 1, by: 2) {
                    let key = open.items[i]
                    var value = open.items[i + 1]
                    guard key.start >= 0, case .scalar(let name, _) = key.kind else {
                        throw Failure(message: "a mapping key that is empty or not a single value", line: 0, column: 0, unsupported: true)
                    }
                    // A `?` before the key: an explicit (complex) key.
                    let before = skip(cursor)
                    if before < key.start, bytes[before] == 0x3F {
                        throw Failure(message: "an explicit key (?)", line: 0, column: 0, unsupported: true)
                    }
                    if !keys.insert(name).inserted {
                        throw Failure(message: "duplicate key '\(name)' in a mapping", line: 0, column: 0)
                    }
                    var colon: Int? = nil
                    var j = key.end
                    while j < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[j]) { j += 1 }
                    if j < bytes.count, bytes[j] == 0x3A { colon = j }
                    if value.start < 0 {
                        let at = colon.map { $0 + 1 } ?? key.end
                        value.start = at
                        value.content = at
                        value.end = at
                    }
                    pairs.append(Pair(key: key, colon: colon, value: value))
                    cursor = value.end
                }
                let end = open.flow ? endEventEnd : (pairs.last?.value.end ?? contentStart)
                return Node(kind: .mapping(pairs, flow: open.flow), start: open.start, content: contentStart, end: end, anchor: open.anchor, tagged: open.tagged)
            }
            var items: [Item] = []
            var cursor = contentStart + (open.flow ? 1 : 0)
            for var node in open.items {
                var dash: Int? = nil
                if !open.flow {
                    let d = skip(cursor)
                    if d < bytes.count, bytes[d] == 0x2D { dash = d }
                    cursor = (dash ?? cursor) + 1
                } else {
                    cursor = skip(cursor)
                    if cursor < bytes.count, bytes[cursor] == 0x2C { cursor = skip(cursor + 1) }
                }
                if node.start < 0 {
                    let at = dash.map { $0 + 1 } ?? cursor
                    node.start = at
                    node.content = at
                    node.end = at
                }
                items.append(Item(dash: dash, node: node))
                cursor = node.end
            }
            let end = open.flow ? endEventEnd : (items.last?.node.end ?? contentStart)
            return Node(kind: .sequence(items, flow: open.flow), start: open.start, content: contentStart, end: end, anchor: open.anchor, tagged: open.tagged)
        }

        mutating func add(_ node: Node) throws(Failure) {
            if stack.isEmpty { root = node } else { stack[stack.count - 1].items.append(node) }
        }
    }
}
