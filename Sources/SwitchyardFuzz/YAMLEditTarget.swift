import SwitchyardConfig
import SwitchyardCore

/// The YAML editor (`YAMLEditor`, what management requests write the user's config with) over any file
/// and any edit: the first three bytes pick the edit, the value and which key or item of the file it
/// goes to; the rest is the file. When the editor takes the edit, the result must read back as the old
/// content with exactly that change (worked out here, apart from the editor), and every line outside the
/// entry it concerns must be byte for byte as it was. The editor refusing an edit is fine, unless it
/// refuses because its own check of its work failed (`.unverified`): that is a bug it caught.
extension FuzzTargets {
    static let values: [YAMLValue] = [
        "plain", "needs: quotes # here", "yes", "123", "two\nlines", "${HOME} and $$", "ünïcödé ✓", "'\"", " padded ", "- dash", "",
        7, -3, 0.25, true, false, nil, ["a", "b c"], ["k": "v", "n": [1, 2]], [:], [], [["deep": ["x"]]], .reference("TOKEN"),
    ]

    static let yamlEdit: Target = { bytes in
        guard bytes.count >= 3 else { return }
        let text = Array(bytes.dropFirst(3))
        guard var editor = try? YAMLEditor(text) else { return }
        let before = editor.value
        // Every path of the file (bounded), then a made-up key under each mapping.
        var paths: [ConfigPath] = []
        var queue: [ConfigPath] = [ConfigPath([])]
        while let p = queue.first, paths.count < 300 {
            queue.removeFirst()
            if !p.isEmpty { paths.append(p) }
            if let keys = editor.keys(at: p) {
                for k in keys.prefix(50) { queue.append(p.appending(key: k)) }
                paths.append(p.appending(key: "new_key"))
            } else if let n = editor.count(at: p) {
                for i in 0..<min(n, 50) { queue.append(p.appending(.index(i))) }
            }
        }
        guard !paths.isEmpty else { return }
        let path = paths[Int(bytes[1]) % paths.count]
        let value = values[Int(bytes[2]) % values.count]
        let edit: YAMLEdit
        switch bytes[0] % 4 {
        case 0: edit = .set(path, value)
        case 1: edit = .remove(path)
        case 2: edit = .rename(path, to: ["renamed", "new_key", "with space", "a: b"][Int(bytes[0] / 4) % 4])
        default: edit = .append(path, value)
        }
        let anchorLines = allowedLines(editor, edit)
        do throws(YAMLEditError) {
            try editor.apply(edit)
        } catch {
            check(error.kind != .unverified, "the editor's own check failed for \(edit): \(error)")
            return
        }
        // The intended content, worked out on the old content.
        let intended = apply(edit, to: before)
        check(intended == nil || editor.value == intended, "\(edit) read back as something else")
        // Lines outside the entry are untouched.
        let old = lines(text), new = lines(editor.bytes)
        var prefix = 0
        while prefix < old.count, prefix < new.count, old[prefix] == new[prefix] { prefix += 1 }
        var suffix = 0
        while suffix < old.count - prefix, suffix < new.count - prefix, old[old.count - 1 - suffix] == new[new.count - 1 - suffix] { suffix += 1 }
        if let allowed = anchorLines, prefix < old.count - suffix {
            // Old lines prefix+1 … count-suffix (1-based) changed: all within the entry.
            check(prefix + 1 >= allowed.lowerBound && old.count - suffix <= allowed.upperBound,
                  "\(edit) changed lines \(prefix + 1)…\(old.count - suffix), outside \(allowed)")
        }
    }

    static func lines(_ b: [UInt8]) -> [ArraySlice<UInt8>] {
        var out: [ArraySlice<UInt8>] = []
        var start = 0
        for i in b.indices where b[i] == 0x0A {
            out.append(b[start...i])
            start = i + 1
        }
        out.append(b[start...])
        return out
    }

    /// The old lines an edit may change: its entry's, or the nearest one that is there (a new key goes at
    /// the end of its mapping), with the comment lines right after it; nil when that is the whole file.
    static func allowedLines(_ e: YAMLEditor, _ edit: YAMLEdit) -> ClosedRange<Int>? {
        var p = edit.path
        // Removing the last key or item empties its container, which changes where it stands.
        if case .remove = edit, let parent = p.parent, (e.keys(at: parent)?.count ?? e.count(at: parent) ?? 2) <= 1 { p = parent }
        while !e.contains(p), let parent = p.parent { p = parent }
        guard !p.isEmpty, let r = e.lines(of: p) else { return nil }
        let all = lines(e.bytes)
        var end = r.upperBound
        while end < all.count {
            let l = all[end].drop { $0 == 0x20 || $0 == 0x09 }
            guard l.first == UInt8(ascii: "#") else { break }
            end += 1
        }
        // A new key or item goes on the line after the entry.
        return r.lowerBound...(end + 1)
    }

    /// A value as the file holds it once written (a string's `$` doubled, numbers as their text).
    static func written(_ v: YAMLValue) -> YAMLValue {
        switch v {
        case .string(let s): .raw(s.replacing("$", with: "$$"))
        case .int(let i): .raw(String(i))
        case .number(let n): .raw(JSONValue.format(n))
        case .bool(let b): .raw(b ? "true" : "false")
        case .reference(let n): .raw("${\(n)}")
        case .list(let a): .list(a.map(written))
        case .map(let m): .map(m.map { .init($0.key, written($0.value)) })
        case .null, .raw: v
        }
    }

    /// `edit` applied to a content; nil when it cannot apply (the editor must then have refused it).
    static func apply(_ edit: YAMLEdit, to v: YAMLValue) -> YAMLValue? {
        func change(_ v: YAMLValue, _ comps: ArraySlice<ConfigPath.Component>, _ f: (YAMLValue?) -> YAMLValue?) -> YAMLValue? {
            guard let c = comps.first else { return f(v) }
            switch (v, c) {
            case (.map(var m), .key(let k)):
                if let i = m.firstIndex(where: { $0.key == k }) {
                    guard let n = change(m[i].value, comps.dropFirst(), f) else { return nil }
                    m[i].value = n
                } else {
                    guard let n = change(.null, comps.dropFirst(), f) else { return nil }
                    m.append(.init(k, n))
                }
                return .map(m)
            case (.null, .key(let k)):
                guard let n = change(.null, comps.dropFirst(), f) else { return nil }
                return .map([.init(k, n)])
            case (.list(var a), .index(let i)) where i < a.count:
                guard let n = change(a[i], comps.dropFirst(), f) else { return nil }
                a[i] = n
                return .list(a)
            default:
                return nil
            }
        }
        let comps = edit.path.components
        switch edit {
        case .set(_, let value):
            return change(v, comps[...]) { _ in written(value) }
        case .append(_, let value):
            return change(v, comps[...]) { old in
                if case .list(let a)? = old { return .list(a + [written(value)]) }
                return old == .null || old == nil ? .list([written(value)]) : nil
            }
        case .remove:
            return change(v, comps.dropLast()) { old in
                switch (old, comps.last!) {
                case (.map(var m)?, .key(let k)):
                    guard let i = m.firstIndex(where: { $0.key == k }) else { return nil }
                    m.remove(at: i)
                    return .map(m)
                case (.list(var a)?, .index(let i)) where i < a.count:
                    a.remove(at: i)
                    return .list(a)
                default: return nil
                }
            }
        case .rename(_, let to):
            guard case .key(let k) = comps.last! else { return nil }
            return change(v, comps.dropLast()) { old in
                guard case .map(var m)? = old, let i = m.firstIndex(where: { $0.key == k }) else { return nil }
                if m.contains(where: { $0.key == to }) && k != to { return nil }
                m[i].key = to
                return .map(m)
            }
        }
    }
}
