import CYAML

/// A position in a YAML file, 1-based like an editor's.
public struct YAMLMark: Sendable, Equatable {
    public var line: Int
    public var column: Int
    /// Which file of the config it is in: 0 the main file, 1 its changes file (`ConfigSource`).
    var file: UInt8 = 0
}

struct YAMLScalar: Sendable {
    var string: String
    /// Written without quotes or block style: only then can it mean null.
    var plain: Bool
    var mark: YAMLMark
}

/// A composed YAML node: what the config reader walks. Aliases are resolved to a copy of their anchor's
/// node; tags are not interpreted (the reader types every value by the key it belongs to).
indirect enum YAMLNode: Sendable {
    case scalar(YAMLScalar)
    case mapping([(key: YAMLNode, value: YAMLNode)], YAMLMark)
    case sequence([YAMLNode], YAMLMark)

    var mark: YAMLMark {
        switch self {
        case .scalar(let s): s.mark
        case .mapping(_, let m), .sequence(_, let m): m
        }
    }
}

/// A YAML syntax error with libyaml's own wording and position.
struct YAMLSyntaxError: Error, Sendable {
    var message: String
    var mark: YAMLMark
}

/// Composes the single document of a YAML text into nodes over libyaml's event parser (the system
/// library): YAML 1.1 as libyaml reads it, with duplicate mapping keys and a second document reported
/// as errors. Nothing here goes through Foundation: a tag resolver built on NSRegularExpression (as
/// Yams's is) would map ICU's regex engine and data into the daemon for good, for one read at start-up.
enum YAMLDocument {
    static func compose(_ text: String, file: UInt8 = 0) throws(YAMLSyntaxError) -> YAMLNode? {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else {
            throw YAMLSyntaxError(message: "YAML parser could not start (out of memory)", mark: YAMLMark(line: 1, column: 1))
        }
        defer { yaml_parser_delete(&parser) }
        var bytes = Array(text.utf8)
        if bytes.isEmpty { return nil }
        return try bytes.withUnsafeMutableBufferPointer { (buf) throws(YAMLSyntaxError) -> YAMLNode? in
            yaml_parser_set_input_string(&parser, buf.baseAddress, buf.count)
            var composer = Composer(file: file)
            return try composer.run(&parser)
        }
    }

    private struct Composer {
        /// A mapping or sequence being composed, changed in place on the stack: taken off the stack to append
        /// to it, its items would be copied at every append, quadratic in its size (a config lists thousands of
        /// devices in one mapping).
        struct Open {
            let mapping: Bool
            let mark: YAMLMark
            let anchor: String?
            var items: [YAMLNode] = []
            var pairs: [(key: YAMLNode, value: YAMLNode)] = []
            var pendingKey: YAMLNode?
            var keys: Set<String> = []
        }
        let file: UInt8
        var stack: [Open] = []
        var anchors: [String: YAMLNode] = [:]
        var root: YAMLNode?
        var documents = 0

        init(file: UInt8) { self.file = file }

        func mark(_ m: yaml_mark_t) -> YAMLMark { YAMLMark(line: Int(m.line) + 1, column: Int(m.column) + 1, file: file) }

        /// An anchor name (NUL-terminated) or, with its length, a scalar's value.
        static func string(_ p: UnsafePointer<yaml_char_t>?, _ length: Int? = nil) -> String? {
            guard let p else { return nil }
            guard let length else { return String(cString: p) }
            return String(decoding: UnsafeBufferPointer(start: p, count: length), as: UTF8.self)
        }

        mutating func run(_ parser: inout yaml_parser_t) throws(YAMLSyntaxError) -> YAMLNode? {
            var event = yaml_event_t()
            while true {
                guard yaml_parser_parse(&parser, &event) == 1 else { throw syntaxError(parser) }
                defer { yaml_event_delete(&event) }
                let at = mark(event.start_mark)
                switch event.type {
                case YAML_STREAM_END_EVENT:
                    return root
                case YAML_DOCUMENT_START_EVENT:
                    documents += 1
                    if documents > 1 {
                        throw YAMLSyntaxError(message: "YAML syntax: expected a single document, found a second one", mark: at)
                    }
                case YAML_SCALAR_EVENT:
                    let s = event.data.scalar
                    let node = YAMLNode.scalar(YAMLScalar(string: Self.string(s.value, Int(s.length)) ?? "",
                                                          plain: s.style == YAML_PLAIN_SCALAR_STYLE, mark: at))
                    if let a = Self.string(s.anchor) { anchors[a] = node }
                    try add(node)
                case YAML_ALIAS_EVENT:
                    let name = Self.string(event.data.alias.anchor) ?? ""
                    guard let node = anchors[name] else {
                        throw YAMLSyntaxError(message: "YAML syntax: found undefined alias '\(name)'", mark: at)
                    }
                    try add(node)
                case YAML_SEQUENCE_START_EVENT:
                    stack.append(Open(mapping: false, mark: at, anchor: Self.string(event.data.sequence_start.anchor)))
                case YAML_MAPPING_START_EVENT:
                    stack.append(Open(mapping: true, mark: at, anchor: Self.string(event.data.mapping_start.anchor)))
                case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
                    let open = stack.removeLast()
                    let node: YAMLNode = open.mapping ? .mapping(open.pairs, open.mark) : .sequence(open.items, open.mark)
                    if let anchor = open.anchor { anchors[anchor] = node }
                    try add(node)
                default:
                    break
                }
            }
        }

        mutating func add(_ node: YAMLNode) throws(YAMLSyntaxError) {
            guard !stack.isEmpty else {
                root = node
                return
            }
            let top = stack.count - 1
            guard stack[top].mapping else {
                stack[top].items.append(node)
                return
            }
            if let key = stack[top].pendingKey {
                stack[top].pairs.append((key, node))
                stack[top].pendingKey = nil
            } else {
                if case .scalar(let k) = node, !stack[top].keys.insert(k.string).inserted {
                    throw YAMLSyntaxError(message: "duplicate key '\(k.string)' in this mapping", mark: k.mark)
                }
                stack[top].pendingKey = node
            }
        }

        func syntaxError(_ p: yaml_parser_t) -> YAMLSyntaxError {
            let problem = p.problem.map { String(cString: $0) } ?? "unreadable YAML"
            let context = p.context.map { "\(String(cString: $0)) " } ?? ""
            let what: String
            switch p.error {
            case YAML_READER_ERROR: what = "YAML text: "
            case YAML_MEMORY_ERROR: what = "YAML parser ran out of memory: "
            default: what = "YAML syntax: "
            }
            // A reader error (bad UTF-8) has no line/column, only a byte offset.
            let m = p.error == YAML_READER_ERROR ? YAMLMark(line: 1, column: 1, file: file) : mark(p.problem_mark)
            return YAMLSyntaxError(message: "\(what)\(context)\(problem)", mark: m)
        }
    }
}
