import SwitchyardCore

/// Every retained topic the bridge has published, with its latest payload, for the life of the process: the
/// outbox re-publishes all of it on every connect (design.md §4). With a large Home Assistant mirror that
/// is a few hundred thousand topics, so it is kept packed (a Dictionary<String, entry> costs several times
/// more a topic: a String per topic, and a table that doubles in one piece):
///
/// - topic bytes are appended to 64 KiB chunks (no allocation, header or padding per topic; the space of a
///   removed topic is reclaimed by compacting once it is more than half of what the chunks hold);
/// - a payload of up to 16 bytes (`online`, `21.5`, `"W"`) is kept inside its entry; a longer one is the
///   caller's own array (shared with whoever made it: the registry's state, the mirror's attribute), or the
///   source that makes it when it is sent (discovery, device details);
/// - entries sit in pages of 4 096 (the table never doubles in one piece: one array of hundreds of thousands
///   of entries, doubling, holds the old and the new at once at the peak of a start), found by an
///   open-addressing index of 4-byte slots.
///
/// Pure bookkeeping: no I/O, unit-tested without a broker.
struct RetainedLedger {
    /// A payload as the ledger keeps it.
    enum Stored {
        case inline(UInt8, (UInt64, UInt64))
        case bytes([UInt8])
        case source(any PayloadSource)

        init(_ body: PayloadBody) {
            switch body {
            case .source(let s): self = .source(s)
            case .bytes(let b):
                guard b.count <= 16 else { self = .bytes(b); return }
                var words: (UInt64, UInt64) = (0, 0)
                withUnsafeMutableBytes(of: &words) { w in w.copyBytes(from: b) }
                self = .inline(UInt8(b.count), words)
            }
        }

        /// The bytes to send (a source makes them now).
        var bytes: [UInt8] {
            switch self {
            case .inline(let n, let words):
                return withUnsafeBytes(of: words) { Array($0.prefix(Int(n))) }
            case .bytes(let b): return b
            case .source(let s): return s.payload()
            }
        }

        /// As the core handed it over (short payloads kept inline come back as bytes); nil while being cleared.
        var body: PayloadBody? {
            switch self {
            case .inline(0, _): return nil
            case .inline: return .bytes(bytes)
            case .bytes(let b): return b.isEmpty ? nil : .bytes(b)
            case .source(let s): return .source(s)
            }
        }

        /// An empty payload: the topic is being cleared.
        var isEmpty: Bool {
            if case .inline(0, _) = self { return true }
            if case .bytes(let b) = self { return b.isEmpty }
            return false
        }
    }

    struct Entry {
        var payload: Stored
        /// Bumped (wrapping) on every new value, and kept across the slot's reuse: a queued (slot, generation)
        /// names one value of one topic.
        var generation: UInt32
        /// First-publish order: a reconnect re-publishes in it.
        var order: UInt32
        /// Chunk (high 16 bits) and offset (low 16) of the topic's bytes; `topicLength` 0: a free slot.
        var topicAt: UInt32
        var topicLength: UInt16
        var qos: UInt8
        var flags: UInt8

        static let acked: UInt8 = 1

        var isAcked: Bool {
            get { flags & Self.acked != 0 }
            set { flags = newValue ? flags | Self.acked : flags & ~Self.acked }
        }
        /// The lane of the latest value (see `Lane`), kept for the order of a reconnect.
        var lane: Lane {
            get { Lane(rawValue: flags >> 1) ?? .now }
            set { flags = (flags & Self.acked) | (newValue.rawValue << 1) }
        }
    }

    static let chunkSize = 1 << 16

    static let pageBits = 12
    private var pages: [[Entry]] = []
    private var entryCount = 0
    private var freeSlots: [UInt32] = []
    private var index = SlotIndex()
    private var chunks: [[UInt8]] = []
    private var liveTopicBytes = 0
    private var deadTopicBytes = 0
    private var nextOrder: UInt32 = 0
    private(set) var count = 0
    /// Entries whose latest value the broker has not acknowledged.
    private(set) var unacked = 0

    // MARK: lookup

    func find(_ topic: String) -> UInt32? {
        guard count > 0 else { return nil }
        var topic = topic
        return topic.withUTF8 { t in index.find(hash: Self.hash(t)) { matches($0, t) } }
    }

    func topic(_ slot: UInt32) -> String { Self.withTopicBytes(self[slot], in: chunks) { String(decoding: $0, as: UTF8.self) } }

    /// An entry's topic bytes, read in place from `chunks` (the ledger's, or a copy a closure or `compact`
    /// holds).
    static func withTopicBytes<R>(_ e: Entry, in chunks: [[UInt8]], _ body: (UnsafeBufferPointer<UInt8>) -> R) -> R {
        chunks[Int(e.topicAt >> 16)].withUnsafeBufferPointer { c in
            body(UnsafeBufferPointer(rebasing: c[Int(e.topicAt & 0xFFFF)..<(Int(e.topicAt & 0xFFFF) + Int(e.topicLength))]))
        }
    }

    subscript(slot: UInt32) -> Entry {
        get { pages[Int(slot) >> Self.pageBits][Int(slot) & (1 << Self.pageBits - 1)] }
        _modify { yield &pages[Int(slot) >> Self.pageBits][Int(slot) & (1 << Self.pageBits - 1)] }
    }

    /// The live slots.
    var slots: [UInt32] { (0..<UInt32(entryCount)).filter { self[$0].topicLength != 0 } }

    /// The live slots whose topic begins with `prefix`, past it contains `infix` (if given), and begins with
    /// none of `excluding`, compared as bytes: no String is made for the others.
    func slots(under prefix: String, containing infix: String? = nil, excluding: [String] = []) -> [UInt32] {
        let p = Array(prefix.utf8), inner = infix.map { Array($0.utf8) } ?? [], out = excluding.map { Array($0.utf8) }
        return (0..<UInt32(entryCount)).filter { slot in
            let e = self[slot]
            guard e.topicLength != 0, Int(e.topicLength) >= p.count + inner.count else { return false }
            return Self.withTopicBytes(e, in: chunks) { t in
                guard t.starts(with: p), !out.contains(where: { t.starts(with: $0) }) else { return false }
                return inner.isEmpty || t[p.count...].firstRange(of: inner) != nil
            }
        }
    }

    // MARK: changes

    /// Stores a new value for `topic` (unacknowledged); returns its slot and generation. The topic must be a
    /// publishable one: 1 to 65 535 bytes.
    mutating func set(_ topic: String, _ payload: Stored, qos: UInt8, lane: Lane) -> (slot: UInt32, generation: UInt32) {
        let slot = find(topic) ?? insert(topic)
        if self[slot].isAcked { unacked += 1 }
        if payload.isEmpty, self[slot].order != nextOrder {
            // A clear goes again after a reconnect in the order it was made, not in its topic's first-publish
            // order: a removal clears a device's discovery configs before its state, though the state was
            // published first (docs/topics.md "Device lifecycle"). Once delivered it is forgotten.
            nextOrder &+= 1
            self[slot].order = nextOrder
        }
        self[slot].payload = payload
        self[slot].generation &+= 1
        self[slot].qos = qos
        self[slot].isAcked = false
        self[slot].lane = lane
        return (slot, self[slot].generation)
    }

    /// Marks the value as acknowledged; a cleared topic (empty payload) is then forgotten.
    mutating func acknowledge(_ slot: UInt32, generation: UInt32) {
        guard Int(slot) < entryCount, self[slot].topicLength != 0, self[slot].generation == generation,
              !self[slot].isAcked else { return }
        if self[slot].payload.isEmpty {
            remove(slot)
        } else {
            self[slot].isAcked = true
            unacked -= 1
        }
    }

    /// Marks every entry unacknowledged (a new connection); returns the slots in re-publish order: by lane,
    /// then first-publish order.
    mutating func unacknowledgeAll() -> [UInt32] {
        var live: [UInt32] = []
        live.reserveCapacity(count)
        for slot in 0..<UInt32(entryCount) where self[slot].topicLength != 0 {
            if self[slot].isAcked { self[slot].isAcked = false; unacked += 1 }
            live.append(slot)
        }
        live.sort { a, b in
            let x = self[a], y = self[b]
            return x.lane != y.lane ? x.lane < y.lane : x.order < y.order
        }
        return live
    }

    /// Forgets a topic (its clear was delivered, or the client refused it for good).
    mutating func remove(_ slot: UInt32) {
        let e = self[slot]
        guard e.topicLength != 0 else { return }
        if !e.isAcked { unacked -= 1 }
        index.remove(slot, hash: topicHash(slot), hashOf: hashOf)
        deadTopicBytes += Int(e.topicLength)
        liveTopicBytes -= Int(e.topicLength)
        self[slot] = Entry(payload: .inline(0, (0, 0)), generation: e.generation, order: 0, topicAt: 0, topicLength: 0, qos: 0, flags: 0)
        freeSlots.append(slot)
        count -= 1
        if deadTopicBytes > Self.chunkSize && deadTopicBytes > liveTopicBytes { compact() }
    }

    // MARK: internals

    private mutating func insert(_ topic: String) -> UInt32 {
        var topic = topic
        let (at, length, h) = topic.withUTF8 { t in (append(t), UInt16(t.count), Self.hash(t)) }
        nextOrder &+= 1
        let slot: UInt32
        if let free = freeSlots.popLast() {
            slot = free
            self[slot] = Entry(payload: .inline(0, (0, 0)), generation: self[slot].generation, order: nextOrder,
                                       topicAt: at, topicLength: length, qos: 1, flags: 0)
        } else {
            slot = UInt32(entryCount)
            if entryCount >> Self.pageBits == pages.count {
                var page: [Entry] = []
                page.reserveCapacity(1 << Self.pageBits)
                pages.append(page)
            }
            pages[pages.count - 1].append(Entry(payload: .inline(0, (0, 0)), generation: 0, order: nextOrder, topicAt: at, topicLength: length, qos: 1, flags: 0))
            entryCount += 1
        }
        index.insert(slot, hash: h, hashOf: hashOf)
        count += 1
        unacked += 1
        return slot
    }

    /// Appends a topic's bytes to the last chunk (a new one when it does not fit).
    private mutating func append(_ t: UnsafeBufferPointer<UInt8>) -> UInt32 {
        if chunks.isEmpty || chunks[chunks.count - 1].count + t.count > Self.chunkSize {
            var c: [UInt8] = []
            c.reserveCapacity(Self.chunkSize)
            chunks.append(c)
        }
        let n = chunks.count - 1
        let offset = chunks[n].count
        chunks[n].append(contentsOf: t)
        liveTopicBytes += t.count
        return UInt32(n) << 16 | UInt32(offset)
    }

    private func matches(_ slot: UInt32, _ t: UnsafeBufferPointer<UInt8>) -> Bool {
        let e = self[slot]
        guard Int(e.topicLength) == t.count else { return false }
        return Self.withTopicBytes(e, in: chunks) { $0.elementsEqual(t) }
    }

    /// The hash of a slot's topic for the index, from the entries and chunks alone: a closure over `self`
    /// would hold a second reference to the index's table while the index writes to it, and every write
    /// would copy the table (quadratic in the number of topics).
    private var hashOf: (UInt32) -> Int {
        { [pages, chunks] slot in
            let e = pages[Int(slot) >> Self.pageBits][Int(slot) & (1 << Self.pageBits - 1)]
            return Self.withTopicBytes(e, in: chunks, Self.hash)
        }
    }

    private func topicHash(_ slot: UInt32) -> Int { Self.withTopicBytes(self[slot], in: chunks, Self.hash) }

    /// FNV-1a, 64 bits.
    static func hash(_ t: UnsafeBufferPointer<UInt8>) -> Int {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in t { h = (h ^ UInt64(b)) &* 0x100_0000_01b3 }
        return Int(truncatingIfNeeded: h ^ (h >> 29))
    }

    /// Copies the live topics into fresh chunks, dropping the space of removed ones.
    private mutating func compact() {
        let old = chunks
        chunks = []
        liveTopicBytes = 0
        deadTopicBytes = 0
        for slot in 0..<UInt32(entryCount) where self[slot].topicLength != 0 {
            self[slot].topicAt = Self.withTopicBytes(self[slot], in: old) { append($0) }
        }
    }
}
