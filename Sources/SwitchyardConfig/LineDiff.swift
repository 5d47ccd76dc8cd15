/// A line diff of two texts (Myers' algorithm), printed as a unified diff: what the console shows before a
/// change is written.
enum LineDiff {
    /// The lines of `bytes`, each with its line break.
    static func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var out: [ArraySlice<UInt8>] = []
        var start = 0
        for i in bytes.indices where bytes[i] == 0x0A {
            out.append(bytes[start...i])
            start = i + 1
        }
        if start < bytes.count { out.append(bytes[start...]) }
        return out
    }

    enum Op: Equatable { case same, delete, insert }

    /// The edit script turning `a` into `b`: for each step, the operation.
    static func script(_ a: [ArraySlice<UInt8>], _ b: [ArraySlice<UInt8>]) -> [Op] {
        let n = a.count, m = b.count
        let max = n + m
        if max == 0 { return [] }
        var v = [Int](repeating: 0, count: 2 * max + 2)
        var trace: [[Int]] = []
        outer: for d in 0...max {
            trace.append(v)
            for k in stride(from: -d, through: d, by: 2) {
                var x: Int
                if k == -d || (k != d && v[max + k - 1] < v[max + k + 1]) { x = v[max + k + 1] } else { x = v[max + k - 1] + 1 }
                var y = x - k
                while x < n, y < m, a[x] == b[y] { x += 1; y += 1 }
                v[max + k] = x
                if x >= n, y >= m { trace.append(v); break outer }
            }
        }
        // Back from the end through the saved rows.
        var ops: [Op] = []
        var x = n, y = m
        for d in stride(from: trace.count - 2, through: 0, by: -1) {
            let vd = trace[d]
            let k = x - y
            let prevK = (k == -d || (k != d && vd[max + k - 1] < vd[max + k + 1])) ? k + 1 : k - 1
            let prevX = vd[max + prevK], prevY = prevX - prevK
            while x > prevX, y > prevY { ops.append(.same); x -= 1; y -= 1 }
            if d > 0 { ops.append(x == prevX ? .insert : .delete) }
            x = prevX
            y = prevY
        }
        while x > 0, y > 0 { ops.append(.same); x -= 1; y -= 1 }
        return ops.reversed()
    }

    static func unified(_ before: [UInt8], _ after: [UInt8], name: String, context: Int = 3) -> String {
        let a = lines(before), b = lines(after)
        let ops = script(a, b)
        if !ops.contains(where: { $0 != .same }) { return "" }
        // Each op with its line numbers.
        var rows: [(op: Op, ai: Int, bi: Int)] = []
        var ai = 0, bi = 0
        for op in ops {
            rows.append((op, ai, bi))
            switch op {
            case .same: ai += 1; bi += 1
            case .delete: ai += 1
            case .insert: bi += 1
            }
        }
        var out = "--- a/\(name)\n+++ b/\(name)\n"
        var i = 0
        while i < rows.count {
            guard rows[i].op != .same else { i += 1; continue }
            var start = max(0, i - context)
            var end = i
            // Extend over changes closer than two contexts apart.
            while end < rows.count {
                if rows[end].op != .same { end += 1; continue }
                var j = end
                while j < rows.count, rows[j].op == .same { j += 1 }
                if j < rows.count, j - end <= 2 * context { end = j } else { end = min(rows.count, end + context); break }
            }
            start = max(start, 0)
            let hunk = rows[start..<end]
            let aCount = hunk.filter { $0.op != .insert }.count, bCount = hunk.filter { $0.op != .delete }.count
            let aStart = hunk.first!.ai + (aCount == 0 ? 0 : 1), bStart = hunk.first!.bi + (bCount == 0 ? 0 : 1)
            out += "@@ -\(aStart),\(aCount) +\(bStart),\(bCount) @@\n"
            for r in hunk {
                let line: ArraySlice<UInt8>
                switch r.op {
                case .same: out += " "; line = a[r.ai]
                case .delete: out += "-"; line = a[r.ai]
                case .insert: out += "+"; line = b[r.bi]
                }
                out += String(decoding: line, as: UTF8.self)
                if line.last != 0x0A { out += "\n\\ No newline at end of file\n" }
            }
            i = end
        }
        return out
    }
}
