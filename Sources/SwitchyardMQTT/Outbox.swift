import SwitchyardCore

/// A first-in first-out queue with amortised O(1) pops.
struct FIFO<Element> {
    private var items: [Element] = []
    private var head = 0

    var isEmpty: Bool { head >= items.count }
    var count: Int { items.count - head }
    var first: Element? { head < items.count ? items[head] : nil }

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
///
/// Messages wait in three lanes (`Lane`): one goes out only when the lanes before it are empty, each in
/// the order it was added. Events (non-retained) keep their order among themselves: a `now` event on a
/// topic that `soon` events wait on first moves the `soon` lane ahead of it.
struct Outbox {
    enum Key: Hashable {
        case retained(slot: UInt32, generation: UInt32)
        case event(id: UInt64)

        /// In 8 bytes, as the lanes hold it (hundreds of thousands wait at a start): the top bit set for a
        /// retained value.
        var packed: UInt64 {
            switch self {
            case .retained(let slot, let generation): return 1 << 63 | UInt64(slot) << 32 | UInt64(generation)
            case .event(let id): return id & ~(1 << 63)
            }
        }

        init(packed k: UInt64) {
            self = k >> 63 == 1 ? .retained(slot: UInt32(truncatingIfNeeded: k >> 32) & 0x7FFF_FFFF, generation: UInt32(truncatingIfNeeded: k))
                                : .event(id: k)
        }
    }

    /// A message as it is handed to the client; the payload is made (a source's) only then, outside the lock.
    struct Message {
        var topic: String
        var body: RetainedLedger.Stored
        var qos: Int
        var retain: Bool
        /// An event's MQTT 5 properties, its expiry reduced by the time it waited here.
        var properties = MessageProperties.none

        var payload: [UInt8] { body.bytes }
    }

    struct Event {
        var topic: String
        var payload: [UInt8]
        var qos: Int
        var lane: Lane
        var properties: MessageProperties
        /// When it was added, for one with an expiry (and a clock to read).
        var addedAt: MonotonicInstant?

        /// What it holds, as counted against `maxEventBytes`.
        var bytes: Int { payload.count + (properties.correlationData?.count ?? 0) }
    }

    let maxEvents: Int
    /// Payload bytes of the queued events; past `maxEventBytes` the oldest go, as past `maxEvents`.
    let maxEventBytes: Int
    private(set) var eventBytes = 0
    private(set) var ledger = RetainedLedger()
    private(set) var events: [UInt64: Event] = [:]
    /// Ids of the events not yet acknowledged, oldest first (an acknowledged one leaves once it is at the
    /// front: ids go up, and the oldest are acknowledged first).
    private(set) var eventOrder = FIFO<UInt64>()
    private var lanes = [FIFO<UInt64>](repeating: FIFO(), count: 3)
    /// Topics of the events waiting in the `soon` lane, with their counts.
    private var soonEventTopics: [String: Int] = [:]
    private(set) var inflight: [Int32: Key] = [:]
    private var nextEvent: UInt64 = 0
    private(set) var dropped = 0
    /// Events whose expiry ran out before they were sent.
    private(set) var expired = 0

    init(maxEvents: Int, maxEventBytes: Int = .max) {
        self.maxEvents = maxEvents
        self.maxEventBytes = maxEventBytes
    }

    /// Lets go of everything held, once the transport has stopped for good.
    mutating func releaseAll() { self = Outbox(maxEvents: maxEvents, maxEventBytes: maxEventBytes) }

    /// Messages not yet acknowledged: retained values awaiting PUBACK plus queued events.
    var pending: Int { ledger.unacked + events.count }
    var retainedCount: Int { ledger.count }

    mutating func add(topic: String, payload: [UInt8], qos: Int, retain: Bool, lane: Lane = .now) {
        add(Publication(topic, payload, qos: qos, retain: retain, lane: lane))
    }

    /// Queues a message; false (and nothing queued) for a topic no broker takes: empty or over 65 535 bytes.
    /// `now` starts the expiry of an event that has one (none given: it never expires here).
    @discardableResult
    mutating func add(_ p: Publication, now: MonotonicInstant? = nil) -> Bool {
        let n = p.topic.utf8.count
        guard n > 0, n <= 65_535 else { return false }
        if p.retain {
            let (slot, generation) = ledger.set(p.topic, RetainedLedger.Stored(p.body), qos: UInt8(clamping: p.qos), lane: p.lane)
            lanes[Int(p.lane.rawValue)].push(Key.retained(slot: slot, generation: generation).packed)
            return true
        }
        // An event is never `late`: events are history, kept in their order.
        let lane: Lane = p.lane == .now ? .now : .soon
        if lane == .now, soonEventTopics[p.topic] != nil { promoteSoon() }
        if lane == .soon { soonEventTopics[p.topic, default: 0] += 1 }
        nextEvent += 1
        let event = Event(topic: p.topic, payload: p.payload, qos: p.qos, lane: lane, properties: p.properties,
                          addedAt: p.properties.expiry > 0 ? now : nil)
        events[nextEvent] = event
        eventBytes += event.bytes
        eventOrder.push(nextEvent)
        lanes[Int(lane.rawValue)].push(Key.event(id: nextEvent).packed)
        while events.count > maxEvents || eventBytes > maxEventBytes, let oldest = eventOrder.pop() {
            if removeEvent(oldest) { dropped += 1 }
        }
        return true
    }

    /// Everything waiting in `soon` goes out before anything added to `now` from here on.
    private mutating func promoteSoon() {
        while let key = lanes[Int(Lane.soon.rawValue)].pop() {
            if case .event(let id) = Key(packed: key) { events[id]?.lane = .now }
            lanes[Int(Lane.now.rawValue)].push(key)
        }
        soonEventTopics.removeAll()
    }

    /// The next message to hand to the client, skipping superseded values and dropped events. At `now`, an event
    /// whose expiry has run out is dropped (counted in `expired`), and one that waited goes with what is left of it.
    mutating func next(now: MonotonicInstant? = nil) -> (Key, Message)? {
        for lane in lanes.indices {
            while let packed = lanes[lane].pop() {
                let key = Key(packed: packed)
                switch key {
                case .retained(let slot, let generation):
                    let e = ledger[slot]
                    guard e.topicLength != 0, e.generation == generation, !e.isAcked else { continue }
                    return (key, Message(topic: ledger.topic(slot), body: e.payload, qos: Int(e.qos), retain: true))
                case .event(let id):
                    guard let m = events[id] else { continue }
                    var properties = m.properties
                    if let now, let at = m.addedAt {
                        let waited = (now - at).seconds
                        if waited >= Double(properties.expiry) {
                            removeEvent(id)
                            trimEventOrder()
                            expired += 1
                            continue
                        }
                        properties.expiry -= UInt32(waited)
                    }
                    if m.lane == .soon { leftSoon(m.topic) }
                    events[id]?.lane = .now
                    return (key, Message(topic: m.topic, body: .bytes(m.payload), qos: m.qos, retain: false, properties: properties))
                }
            }
        }
        return nil
    }

    private mutating func leftSoon(_ topic: String) {
        guard let n = soonEventTopics[topic] else { return }
        soonEventTopics[topic] = n > 1 ? n - 1 : nil
    }

    mutating func sent(_ key: Key, mid: Int32) { inflight[mid] = key }

    /// The client refused the message for good (oversize, bad topic): forget it.
    mutating func discard(_ key: Key) {
        switch key {
        case .retained(let slot, let generation):
            if ledger[slot].generation == generation { ledger.remove(slot) }
        case .event(let id):
            removeEvent(id)
            trimEventOrder()
        }
    }

    private mutating func trimEventOrder() {
        while let id = eventOrder.first, events[id] == nil { _ = eventOrder.pop() }
    }

    @discardableResult
    private mutating func removeEvent(_ id: UInt64) -> Bool {
        guard let m = events.removeValue(forKey: id) else { return false }
        eventBytes -= m.bytes
        if m.lane == .soon { leftSoon(m.topic) }
        return true
    }

    /// PUBACK (QoS 1) or written (QoS 0).
    @discardableResult
    mutating func acknowledged(mid: Int32) -> Bool {
        guard let key = inflight.removeValue(forKey: mid) else { return false }
        switch key {
        case .retained(let slot, let generation): ledger.acknowledge(slot, generation: generation)
        case .event(let id):
            removeEvent(id)
            trimEventOrder()
        }
        return true
    }

    /// The latest payload of a retained topic the ledger holds (nil: none, or cleared and delivered).
    func retained(_ topic: String) -> [UInt8]? { ledger.find(topic).map { ledger[$0].payload.bytes } }

    /// The same as the core handed it over (nil also while the topic is being cleared).
    func retainedBody(_ topic: String) -> PayloadBody? { ledger.find(topic).flatMap { ledger[$0].payload.body } }

    /// Every retained topic under `prefix` (containing `infix` past it, under none of `excluding`) with its
    /// payload (those being cleared left out).
    func retained(under prefix: String, containing infix: String? = nil, excluding: [String] = []) -> [(topic: String, body: PayloadBody)] {
        ledger.slots(under: prefix, containing: infix, excluding: excluding).compactMap { slot in
            ledger[slot].payload.body.map { (topic: ledger.topic(slot), body: $0) }
        }
    }

    func retainedCount(under prefix: String, excluding: [String] = []) -> Int {
        ledger.slots(under: prefix, excluding: excluding).count { !ledger[$0].payload.isEmpty }
    }

    /// On every (re)connect: `first` (the birth message), then every retained topic the bridge owns (by lane:
    /// states and availability before discovery and details; in first-published order within one), then
    /// every event not yet acknowledged.
    mutating func resetForReconnect(first: String? = nil) {
        inflight.removeAll()
        for i in lanes.indices { lanes[i].removeAll() }
        soonEventTopics.removeAll()
        let firstSlot = first.flatMap { ledger.find($0) }
        if let firstSlot { lanes[0].push(Key.retained(slot: firstSlot, generation: ledger[firstSlot].generation).packed) }
        for slot in ledger.unacknowledgeAll() where slot != firstSlot {
            lanes[0].push(Key.retained(slot: slot, generation: ledger[slot].generation).packed)
        }
        var live = FIFO<UInt64>()
        while let id = eventOrder.pop() {
            guard events[id] != nil else { continue }
            events[id]?.lane = .now
            live.push(id)
            lanes[0].push(Key.event(id: id).packed)
        }
        eventOrder = live
    }
}
