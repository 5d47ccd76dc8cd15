#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// What the engine publishes, for the pages (docs/console.md "How the page is fed"): a bounded ring of
/// recent changes, and the recent log lines. The latest payload of every retained topic (and the discovery
/// configs, read on demand and never pushed) is read from the transport's own ledger (`RetainedStore`),
/// which keeps it for the broker anyway: the feed holds no index of its own, and a payload source (a
/// device's details) is written only when a page is sent it. Each open page reads the ring from its own
/// cursor: retained topics are read from the store when the page's turn comes (so a device that changed
/// ten times is sent once, with its latest state), other messages (logs, events, results) come with the
/// ring. A page that falls behind the ring's start is sent everything again instead (a "resync"): nothing
/// is ever queued per page.
///
/// `published` runs on the engine's actor: one lock, a ring slot, a wake-up per page.
public final class ConsoleFeed: EngineObserver, Sendable {
    public struct Limits: Sendable {
        /// Changes kept in the ring.
        public var ringEntries = 16_384
        /// Payload bytes of non-retained messages kept in the ring.
        public var ringEventBytes = 1 << 20
        /// `bridge/log` lines kept for a page that opens.
        public var recentLogs = 200
        public init() {}
    }

    /// One change: a retained topic (its payload is read from the store when sent) or a message.
    struct Change {
        let seq: UInt64
        let topic: String
        /// Nil for a retained topic.
        let payload: [UInt8]?
    }

    struct State {
        /// Grows to `ringEntries` as changes come, then wraps.
        var ring: [Change?] = []
        /// Index of the oldest change in `ring`, and how many there are.
        var start = 0
        var count = 0
        var eventBytes = 0
        /// The sequence number the next change gets.
        var next: UInt64 = 1
        var recentLogs: [[UInt8]] = []
        var wakers: [UInt64: AsyncStream<Void>.Continuation] = [:]
        /// Commands a page sent, by transaction, until their result or response is published.
        var awaiting: [String: AsyncStream<JSONValue>.Continuation] = [:]
    }

    public let scheme: TopicScheme
    /// Where the latest retained payloads are read (the transport the engine publishes to). Strong: a weak
    /// reference's side table outlives the transport while the feed lives, and something outside the
    /// console's run keeps the feed until the process exits, where LeakSanitizer then reports the side
    /// table. The transport empties its outbox when it stops, so keeping it holds nothing large.
    let store: any RetainedStore
    let limits: Limits
    let state: Locked<State>
    let metrics: ConsoleMetrics
    let logTopic: String
    let responsePrefix: String
    let discoveryPrefix: String

    public init(scheme: TopicScheme, store: any RetainedStore, limits: Limits = Limits()) {
        self.scheme = scheme
        self.store = store
        self.limits = limits
        self.state = Locked(State())
        self.metrics = ConsoleMetrics()
        logTopic = scheme.bridge("log")
        responsePrefix = scheme.response("")
        discoveryPrefix = scheme.discoveryPrefix + "/"
    }

    // MARK: from the engine

    /// Called after the transport (the store) has taken the message.
    public func published(topic: String, body: PayloadBody, retain: Bool) {
        // Discovery configs are read from the store when a device page asks for them (the discovery prefix
        // may lie under the base topic: they are never pushed).
        if topic.hasPrefix(discoveryPrefix) { return }
        guard topic.hasPrefix(scheme.base), topic.utf8.dropFirst(scheme.base.utf8.count).first == UInt8(ascii: "/") else { return }
        if retain {
            state.withLock { s in
                append(&s, Change(seq: s.next, topic: topic, payload: nil))
                for w in s.wakers.values { w.yield() }
            }
            return
        }
        let payload = body.bytes
        if topic == logTopic { metrics.logged(payload) }
        let answered: AsyncStream<JSONValue>.Continuation?
        let answer: JSONValue?
        (answered, answer) = state.withLock { s in
            append(&s, Change(seq: s.next, topic: topic, payload: payload))
            if topic == logTopic {
                if s.recentLogs.count >= limits.recentLogs { s.recentLogs.removeFirst(s.recentLogs.count - limits.recentLogs + 1) }
                s.recentLogs.append(payload)
            }
            for w in s.wakers.values { w.yield() }
            // A page's command is answered by its result (or a request's response) carrying its transaction.
            guard !s.awaiting.isEmpty, topic.hasSuffix("/result") || topic.hasPrefix(responsePrefix),
                  let json = try? JSONValue.parse(payload), case .string(let t)? = json["transaction"],
                  let c = s.awaiting.removeValue(forKey: t) else { return (nil, nil) }
            return (c, json)
        }
        if let answered, let answer {
            answered.yield(answer)
            answered.finish()
        }
    }

    /// `published` with bytes.
    public func published(topic: String, payload: [UInt8], retain: Bool) {
        published(topic: topic, body: .bytes(payload), retain: retain)
    }

    public func commandFinished(adapter: String, ok: Bool, seconds: Double) {
        metrics.commandFinished(adapter: adapter, ok: ok, seconds: seconds)
    }

    public func commandRefused(topic: String) {
        if case .set = scheme.classify(topic) { metrics.commandRefused() }
    }

    func append(_ s: inout State, _ c: Change) {
        let cap = limits.ringEntries
        // Make room: one slot, and the event bytes bound.
        while s.count > 0 && (s.count == cap || s.eventBytes + (c.payload?.count ?? 0) > limits.ringEventBytes) {
            if let old = s.ring[s.start] { s.eventBytes -= old.payload?.count ?? 0 }
            s.ring[s.start] = nil
            s.start = (s.start + 1) % cap
            s.count -= 1
        }
        let i = (s.start + s.count) % cap
        if i == s.ring.count { s.ring.append(c) } else { s.ring[i] = c }
        s.count += 1
        s.eventBytes += c.payload?.count ?? 0
        s.next += 1
    }

    /// `<prefix>/<component>/<node>/<object>/config` or `<prefix>/device/<node>/config` → `<node>`.
    static func node(ofDiscoveryTopic topic: String) -> String? {
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts.last == "config" else { return nil }
        return String(parts[parts.count - 3] == "device" ? parts[parts.count - 2] : parts[parts.count - 3])
    }

    // MARK: for the pages

    /// A page's way to be woken when something changed (at most one wake-up waits).
    func register(_ id: UInt64) -> (AsyncStream<Void>, AsyncStream<Void>.Continuation) {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        state.withLock { $0.wakers[id] = continuation }
        continuation.yield()
        return (stream, continuation)
    }

    func unregister(_ id: UInt64) {
        let c = state.withLock { $0.wakers.removeValue(forKey: id) }
        c?.finish()
    }

    /// One message for a page: a topic and its payload (nil: the retained topic was cleared). A payload
    /// source is written only when the page's frame is (`payload`), so that a page opening on ten thousand
    /// devices never holds every device's details at once.
    public struct Item: Sendable {
        public let topic: String
        let body: PayloadBody?
        public init(topic: String, payload: [UInt8]?) {
            self.init(topic: topic, body: payload.map { .bytes($0) })
        }
        init(topic: String, body: PayloadBody?) {
            self.topic = topic
            self.body = body
        }
        /// The payload's bytes: a source's are written now (call it once per frame).
        public var payload: [UInt8]? { body?.bytes }
        /// What it adds to a frame: exact for bytes; a source's payload counted as a typical device's details,
        /// without writing it (`read` bounds a batch with it; `PageProtocol.inFrames` then writes and splits).
        var size: Int {
            switch body {
            case .bytes(let b)?: topic.utf8.count + b.count
            case .source?: topic.utf8.count + 1_024
            case nil: topic.utf8.count
            }
        }
    }

    /// Everything a page that opens (or falls behind) is sent: every retained topic (the bridge's own
    /// first, then devices; `excluded` prefixes left out) and the recent log lines, and the cursor to read
    /// changes from. The cursor is taken before the store is read: a change made meanwhile is sent again
    /// from the ring, with the same latest payload.
    func snapshot(excluded: [String]) -> (items: [Item], cursor: UInt64) {
        let (logs, cursor) = state.withLock { s in (s.recentLogs, s.next) }
        var bridge: [Item] = [], rest: [Item] = []
        let bridgePrefix = scheme.bridge("")
        // Never pushed: discovery configs, and the transport's own birth and last-will topic, which it writes
        // to its ledger directly (the engine never publishes it, so a page would get no change of it).
        for (t, p) in store.retained(under: scheme.base + "/", containing: nil, excluding: excluded + [discoveryPrefix]) where t != scheme.bridgeState {
            if t.hasPrefix(bridgePrefix) { bridge.append(Item(topic: t, body: p)) } else { rest.append(Item(topic: t, body: p)) }
        }
        bridge.sort { Self.bridgeOrder($0.topic) < Self.bridgeOrder($1.topic) }
        return (bridge + rest + logs.map { Item(topic: logTopic, payload: $0) }, cursor)
    }

    /// bridge/info and bridge/devices first: the page can draw with them.
    static func bridgeOrder(_ topic: String) -> Int {
        if topic.hasSuffix("/bridge/info") { return 0 }
        if topic.hasSuffix("/bridge/devices") { return 1 }
        return 2
    }

    enum Read {
        /// The page fell behind the ring: send it everything again.
        case behind
        /// Changes from the cursor (a retained topic once, with its latest payload), the cursor after them,
        /// and whether more are waiting past `budget` bytes.
        case changes([Item], cursor: UInt64, more: Bool)
    }

    func read(from cursor: UInt64, budget: Int, excluded: [String]) -> Read {
        state.withLock { s in
            let oldest = s.next - UInt64(s.count)
            guard cursor >= oldest else { return .behind }
            var items: [Item] = []
            var seen: Set<String> = []
            var bytes = 0
            var c = cursor
            let cap = limits.ringEntries
            while c < s.next, bytes < budget {
                let change = s.ring[(s.start + Int(c - oldest)) % cap]!
                c += 1
                if excluded.contains(where: { change.topic.hasPrefix($0) }) { continue }
                if let p = change.payload {
                    items.append(Item(topic: change.topic, payload: p))
                    bytes += p.count + change.topic.utf8.count
                } else if seen.insert(change.topic).inserted {
                    // The store's lock inside the feed's: the transport never calls the feed holding its own.
                    let item = Item(topic: change.topic, body: store.retainedBody(change.topic))
                    items.append(item)
                    bytes += item.size
                }
            }
            return .changes(items, cursor: c, more: c < s.next)
        }
    }

    /// The discovery configs of one device (its node), topic → payload, from the store.
    func discoveryConfigs(adapter: String, deviceID: String) -> [(String, [UInt8])] {
        let node = DiscoveryBuilder(scheme: scheme, version: "").nodeID(adapter: adapter, deviceID: deviceID)
        return store.retained(under: discoveryPrefix, containing: "/\(node)/", excluding: [])
            .filter { Self.node(ofDiscoveryTopic: $0.topic) == node }
            .sorted { $0.topic < $1.topic }
            .map { ($0.topic, $0.body.bytes) }
    }

    /// Sends a page's command with `send` and waits for its result (or a request's response) carrying
    /// `transaction`, at most `timeout` seconds (nil then).
    func awaitAnswer(_ transaction: String, timeout: Double, send: @Sendable () async -> Void) async -> JSONValue? {
        let (answers, continuation) = AsyncStream.makeStream(of: JSONValue.self, bufferingPolicy: .bufferingNewest(1))
        state.withLock { $0.awaiting[transaction] = continuation }
        await send()
        let first = await firstResult(of: { () -> JSONValue? in
            for await a in answers { return a }
            return nil
        }, within: timeout, otherwise: nil)
        state.withLock { $0.awaiting[transaction] = nil }
        continuation.finish()
        return first
    }

    /// The retained topics under the base topic in the store (what a snapshot sends, give or take the
    /// bridge's state), discovery configs left out where their prefix lies under the base.
    var retainedCount: Int {
        let base = scheme.base + "/"
        return store.retainedCount(under: base, excluding: [discoveryPrefix])
    }
}
