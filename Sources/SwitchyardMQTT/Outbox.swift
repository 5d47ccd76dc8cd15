/// A first-in first-out queue with amortised O(1) pops.
struct FIFO<Element> {
    private var items: [Element] = []
    private var head = 0

    var isEmpty: Bool { head >= items.count }
    var count: Int { items.count - head }

    mutating func push(_ e: Element) { items.append(e) }

    mutating func pop() -> Element? {
        guard head < items.count else { return nil }
        let e = items[head]
        head += 1
        if head == items.count {
            // Drained: a burst (every retained topic re-published on connect) leaves no large array behind.
            items.removeAll(keepingCapacity: items.capacity <= 1024)
            head = 0
        } else if head > 1024 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
        return e
    }

    mutating func removeAll() { items.removeAll(keepingCapacity: true); head = 0 }
}

/// What the bridge has asked to publish and the broker has not yet acknowledged (design.md §4),
/// plus the ledger of every retained topic (latest value), re-published on every connect.
/// Pure bookkeeping: no I/O, so it is unit-tested without a broker.
struct Outbox {
    enum Key: Hashable {
        case retained(topic: String, generation: UInt32)
        case event(id: UInt64)
    }

    struct Message {
        var topic: String
        var payload: [UInt8]
        var qos: Int
        var retain: Bool
    }

    /// The ledger holds every retained topic for the life of the process (tens of thousands with a large
    /// Home Assistant mirror), so its entries are kept small: 32 bytes plus the payload, which is stored
    /// without an allocation when it is UTF-8 of at most 15 bytes (`online`, `21.5`, `"W"`).
    struct RetainedEntry {
        // In this order the fields pack into 32 bytes (the payload enum takes 17).
        var stored: StoredPayload
        var qos: UInt8
        var acked: Bool
        var generation: UInt32  // bumped (wrapping) on every new value
        var order: UInt64       // first publish: republish keeps the original order

        var payload: [UInt8] { stored.bytes }
    }

    enum StoredPayload {
        case text(String)       // String keeps up to 15 UTF-8 bytes inline
        case bytes([UInt8])

        init(_ b: [UInt8]) {
            if b.count <= 15, let s = String(validating: b, as: UTF8.self) { self = .text(s) } else { self = .bytes(b) }
        }

        var bytes: [UInt8] {
            switch self {
            case .text(let s): return Array(s.utf8)
            case .bytes(let b): return b
            }
        }

        var isEmpty: Bool {
            switch self {
            case .text(let s): return s.isEmpty
            case .bytes(let b): return b.isEmpty
            }
        }
    }

    let maxEvents: Int
    /// Payload bytes of the queued events; past `maxEventBytes` the oldest go, as past `maxEvents`.
    let maxEventBytes: Int
    private(set) var eventBytes = 0
    private(set) var ledger: [String: RetainedEntry] = [:]
    private(set) var events: [UInt64: Message] = [:]
    private var eventOrder = FIFO<UInt64>()
    private var sendQueue = FIFO<Key>()
    private(set) var inflight: [Int32: Key] = [:]
    private var nextOrder: UInt64 = 0
    private var nextEvent: UInt64 = 0
    private(set) var dropped = 0

    init(maxEvents: Int, maxEventBytes: Int = .max) {
        self.maxEvents = maxEvents
        self.maxEventBytes = maxEventBytes
    }

    /// Messages not yet acknowledged: retained values awaiting PUBACK plus queued events.
    var pending: Int { ledger.values.reduce(0) { $0 + ($1.acked ? 0 : 1) } + events.count }
    var retainedCount: Int { ledger.count }

    mutating func add(topic: String, payload: [UInt8], qos: Int, retain: Bool) {
        nextOrder += 1
        if retain {
            var e = ledger[topic] ?? RetainedEntry(stored: .bytes([]), qos: 0, acked: false, generation: 0, order: nextOrder)
            e.stored = StoredPayload(payload)
            e.qos = UInt8(clamping: qos)
            e.generation &+= 1
            e.acked = false
            ledger[topic] = e
            sendQueue.push(.retained(topic: topic, generation: e.generation))
        } else {
            nextEvent += 1
            events[nextEvent] = Message(topic: topic, payload: payload, qos: qos, retain: false)
            eventBytes += payload.count
            eventOrder.push(nextEvent)
            sendQueue.push(.event(id: nextEvent))
            while events.count > maxEvents || eventBytes > maxEventBytes, let oldest = eventOrder.pop() {
                if removeEvent(oldest) { dropped += 1 }
            }
        }
    }

    /// The next message to hand to the client, skipping superseded values and dropped events.
    mutating func next() -> (Key, Message)? {
        while let key = sendQueue.pop() {
            switch key {
            case .retained(let topic, let generation):
                guard let e = ledger[topic], e.generation == generation, !e.acked else { continue }
                return (key, Message(topic: topic, payload: e.payload, qos: Int(e.qos), retain: true))
            case .event(let id):
                guard let m = events[id] else { continue }
                return (key, m)
            }
        }
        return nil
    }

    mutating func sent(_ key: Key, mid: Int32) { inflight[mid] = key }

    /// The client refused the message for good (oversize, bad topic): forget it.
    mutating func discard(_ key: Key) {
        switch key {
        case .retained(let topic, let generation):
            if ledger[topic]?.generation == generation { ledger[topic] = nil }
        case .event(let id):
            removeEvent(id)
        }
    }

    @discardableResult
    private mutating func removeEvent(_ id: UInt64) -> Bool {
        guard let m = events.removeValue(forKey: id) else { return false }
        eventBytes -= m.payload.count
        return true
    }

    /// PUBACK (QoS 1) or written (QoS 0).
    @discardableResult
    mutating func acknowledged(mid: Int32) -> Bool {
        guard let key = inflight.removeValue(forKey: mid) else { return false }
        switch key {
        case .retained(let topic, let generation):
            if var e = ledger[topic], e.generation == generation {
                if e.stored.isEmpty {
                    ledger[topic] = nil   // a delivered clear needs no republish
                } else {
                    e.acked = true
                    ledger[topic] = e
                }
            }
        case .event(let id):
            removeEvent(id)
        }
        return true
    }

    /// On every (re)connect: `first` (the birth message), then every retained topic the bridge owns
    /// (original order), then every event not yet acknowledged.
    mutating func resetForReconnect(first: String? = nil) {
        inflight.removeAll()
        sendQueue.removeAll()
        let ordered = ledger.sorted { a, b in
            if a.key == first || b.key == first { return a.key == first && b.key != first }
            return a.value.order < b.value.order
        }
        for (topic, e) in ordered {
            if e.stored.isEmpty && e.acked { continue }
            ledger[topic]!.acked = false
            sendQueue.push(.retained(topic: topic, generation: e.generation))
        }
        var live = FIFO<UInt64>()
        while let id = eventOrder.pop() {
            guard events[id] != nil else { continue }
            live.push(id)
            sendQueue.push(.event(id: id))
        }
        eventOrder = live
    }
}
