import SwitchyardCore

/// One request to the LIFX cloud, queued or on the wire: the plan's order (what it changes, on which lights,
/// their values before), the outcomes of the commands it answers, and how often it was tried.
struct LIFXOp: Sendable {
    typealias Kind = LIFXCloudOrder.Kind
    var order: LIFXCloudOrder
    var outcomes: [LIFXOutcome] = []
    var attempts = 0

    init(_ order: LIFXCloudOrder) { self.order = order }

    init(kind: Kind, selector: String, lights: [String], previous: [String: LIFXLight.Values] = [:], label: String) {
        order = LIFXCloudOrder(kind: kind, selector: selector, lights: lights, previous: previous, label: label)
    }

    var kind: Kind {
        get { order.kind }
        set { order.kind = newValue }
    }
    var selector: String { order.selector }
    var lights: [String] { order.lights }
    var previous: [String: LIFXLight.Values] {
        get { order.previous }
        set { order.previous = newValue }
    }
    var label: String { order.label }
    var labels: [String: String] {
        get { order.labels }
        set { order.labels = newValue }
    }
    var isSet: Bool { order.isSet }
}

/// The merging request queue and its pacing (docs/upstreams/lifx-cloud.md "Budget"). Pure: the adapter asks
/// it what to send and when, and tells it what happened.
///
/// - A command for a target that already has a queued request merges into it (last value wins per
///   field; deltas add up); effects and scene activations never merge.
/// - One request is on the wire at a time; absolute sets right behind each other go as one batch
///   (`PUT /lights/states`, at most 50).
/// - Nothing is sent within `minInterval` of the previous send, nor before a retry's time, nor before
///   the rate budget allows it.
/// - Only absolute sets are retried (3 attempts, the delay doubling from `retryDelay`).
struct LIFXRequestQueue: Sendable {
    let minInterval: Double
    let retryDelay: Double
    private(set) var queue: [LIFXOp] = []
    private(set) var inFlight: [LIFXOp] = []
    private(set) var merged = 0
    private(set) var retries = 0
    private(set) var lastSend = MonotonicInstant.distantPast
    private(set) var retryAt = MonotonicInstant.distantPast

    init(minInterval: Double, retryDelay: Double) {
        self.minInterval = minInterval
        self.retryDelay = retryDelay
    }

    var isEmpty: Bool { queue.isEmpty }

    /// Whether a queued or in-flight request changes this light (a poll must not overwrite its
    /// optimistic values until that request is answered).
    func changes(light id: String) -> Bool { (queue + inFlight).contains { $0.lights.contains(id) } }

    /// Everything not yet answered, queued first.
    var unanswered: [LIFXOp] { queue + inFlight }

    /// The lights a queued or in-flight request changes.
    var lights: Set<String> { Set(unanswered.flatMap(\.lights)) }

    /// Queues an op with the outcome its command waits for, merging sets (and deltas) into the latest
    /// queued op for the same selector (which then answers both).
    mutating func enqueue(_ op: LIFXOp, _ outcome: LIFXOutcome) {
        let mine = Set(op.lights)
        if let i = queue.lastIndex(where: { !Set($0.lights).isDisjoint(with: mine) || $0.selector == op.selector }),
           queue[i].selector == op.selector {
            var kind: LIFXOp.Kind?
            switch (queue[i].kind, op.kind) {
            case (.set(let a), .set(let b)): kind = .set(a.merged(with: b))
            case (.delta(let a), .delta(let b)): kind = .delta(a.merged(with: b))
            default: kind = nil
            }
            if let kind {
                queue[i].kind = kind
                queue[i].outcomes.append(outcome)
                for (id, v) in op.previous where queue[i].previous[id] == nil { queue[i].previous[id] = v }
                for (id, l) in op.labels { queue[i].labels[id] = l }
                merged += 1
                return
            }
        }
        var op = op
        op.outcomes = [outcome]
        queue.append(op)
    }

    /// When the head of the queue may go, given when the budget allows the next request; nil when empty.
    func sendableAt(budgetAllows: MonotonicInstant) -> MonotonicInstant? {
        guard !queue.isEmpty else { return nil }
        return max(lastSend.adding(seconds: minInterval), retryAt, budgetAllows)
    }

    /// Takes the next request off the queue and puts it on the wire: the head op, plus the absolute
    /// sets right behind it when the head is a set.
    mutating func takeBatch(now: MonotonicInstant) -> [LIFXOp] {
        var batch = [queue.removeFirst()]
        if batch[0].isSet {
            while batch.count < 50, let next = queue.first, next.isSet { batch.append(queue.removeFirst()) }
        }
        inFlight = batch
        lastSend = now
        return batch
    }

    /// The request on the wire was answered (or failed): it is no longer in flight.
    mutating func answered() { inFlight = [] }

    /// A 429: the batch goes back to the front, to be sent again once the budget allows.
    mutating func requeue(_ batch: [LIFXOp]) {
        queue.insert(contentsOf: batch, at: 0)
    }

    /// A failure worth retrying (5xx, no answer): absolute sets go back to the front, to be sent again
    /// after `retryDelay` (doubling); returns false when the batch is not retried (anything but absolute
    /// sets, or the third attempt failed).
    mutating func retry(_ batch: [LIFXOp], now: MonotonicInstant) -> Bool {
        guard batch.allSatisfy({ $0.isSet && $0.attempts < 2 }) else { return false }
        retries += 1
        let again = batch.map { op -> LIFXOp in
            var o = op
            o.attempts += 1
            return o
        }
        var delay = retryDelay
        for _ in 1..<again[0].attempts { delay *= 2 }
        retryAt = now.adding(seconds: delay)
        queue.insert(contentsOf: again, at: 0)
        return true
    }
}
