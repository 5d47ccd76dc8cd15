/// An open-addressing index over numbered slots kept elsewhere (the retained ledger's entries, the HA
/// mirror's entities): 4 bytes a position, at most three quarters full, linear probing, removal by
/// backward shift (no tombstones). Where a Dictionary's table doubles past three quarters and holds its
/// keys and values itself, this holds only slot numbers: the caller keeps the keys, hashes them and says
/// whether a slot holds the key looked for. `hashOf` must not capture the owner of the index (a closure
/// over a struct's `self` holds a second reference to the table, and every write then copies it).
package struct SlotIndex: Sendable {
    /// Slot + 1, 0 for empty.
    private var table: [UInt32] = []
    package private(set) var count = 0

    package init() {}

    private var mask: Int { table.count - 1 }

    /// The slot whose key `matches`, found from the key's hash.
    package func find(hash: Int, _ matches: (UInt32) -> Bool) -> UInt32? {
        guard !table.isEmpty else { return nil }
        var i = hash & mask
        while table[i] != 0 {
            if matches(table[i] - 1) { return table[i] - 1 }
            i = (i + 1) & mask
        }
        return nil
    }

    /// Adds `slot` (not in the index yet) under `hash`; `hashOf` gives the hash of every slot already in,
    /// for when the table grows.
    package mutating func insert(_ slot: UInt32, hash: Int, hashOf: (UInt32) -> Int) {
        if (count + 1) * 4 > table.count * 3 { grow(hashOf) }
        var i = hash & mask
        while table[i] != 0 { i = (i + 1) & mask }
        table[i] = slot + 1
        count += 1
    }

    /// Removes `slot` (in the index under `hash`).
    package mutating func remove(_ slot: UInt32, hash: Int, hashOf: (UInt32) -> Int) {
        var i = hash & mask
        while table[i] != slot + 1 { i = (i + 1) & mask }
        var j = i
        while true {
            j = (j + 1) & mask
            if table[j] == 0 { break }
            let home = hashOf(table[j] - 1) & mask
            // Move j back to i unless its home lies cyclically in (i, j].
            let between = i <= j ? (home > i && home <= j) : (home > i || home <= j)
            if !between { table[i] = table[j]; i = j }
        }
        table[i] = 0
        count -= 1
    }

    /// Room for `n` slots in all, made at once.
    package mutating func reserve(_ n: Int, hashOf: (UInt32) -> Int) {
        if n * 4 > table.count * 3 { grow(hashOf, atLeast: n) }
    }

    private mutating func grow(_ hashOf: (UInt32) -> Int, atLeast n: Int = 0) {
        var size = max(64, table.count * 2)
        while size * 3 < max(n, count + 1) * 4 { size *= 2 }
        let old = table
        table = [UInt32](repeating: 0, count: size)
        for s in old where s != 0 {
            var i = hashOf(s - 1) & mask
            while table[i] != 0 { i = (i + 1) & mask }
            table[i] = s
        }
    }
}
