#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HummingbirdWebSocket
import NIOCore
import SwitchyardCore

/// One open page's WebSocket (docs/console.md "The page's WebSocket"). The sender sends `hello`, then
/// everything (`reset`, batches of `m`, `synced`), then each batch of changes from the feed as it comes,
/// at most one frame in flight: a page that has not taken a frame within `web.client_timeout` is cut off
/// (its connection closed, nothing kept for it). The reader takes the page's requests: `sub` (the Home
/// Assistant mirror's topics or not), `cmd` (a command or bridge request, handed to the engine as if it
/// came from the broker, answered with its result) and `disc` (a device's discovery configs).
///
/// What answers the page's requests is bounded without a timer: the reader reads nothing more while an
/// answer it made (`disc`, a refusal) waits to be sent, so a page that sends and never reads is pushed
/// back on by TCP; a command counts against `maxPending` until its answer is sent; and the answers
/// waiting, in all, past `maxReplyBytes` cut the page off (`Replies`).
final class ConsoleClient: Sendable {
    struct Limits: Sendable {
        /// Bytes of payloads per `m` frame (a single larger payload goes alone).
        var frameBudget = 64 * 1024
        /// A page's message (a command), at most.
        var maxInbound = 64 * 1024
        /// Commands a page may have waiting for their results at once (until the answer is sent).
        var maxPending = 32
        /// Bytes of answers waiting to be sent to the page, at most (past it, the page is cut off).
        var maxReplyBytes = 2 << 20
        /// A command unanswered this long is answered `timeout` to the page.
        var answerTimeout = 30.0
        /// At most this many frames a second (changes in between go together).
        var minFrameInterval = 0.01
        var stallTimeout = 10.0
    }

    /// Frames that answer the page's requests, in order, and what they hold: at most one from the reader
    /// (which waits for it to be sent) and one per command in flight, `maxBytes` in all.
    struct Replies {
        enum Origin { case reader, command }
        var queue: [(text: String, origin: Origin)] = []
        var bytes = 0
        /// Frames the reader made that are not sent yet.
        var fromReader = 0

        /// False when the frame would take the queue past `maxBytes` (it is not queued).
        mutating func add(_ text: String, _ origin: Origin, maxBytes: Int) -> Bool {
            guard bytes + text.utf8.count <= maxBytes else { return false }
            queue.append((text, origin))
            bytes += text.utf8.count
            if origin == .reader { fromReader += 1 }
            return true
        }

        /// Everything queued, for the sender; the bytes stay counted until each frame is `sent`.
        mutating func take() -> [(text: String, origin: Origin)] {
            defer { queue = [] }
            return queue
        }

        mutating func sent(_ frame: (text: String, origin: Origin)) {
            bytes -= frame.text.utf8.count
            if frame.origin == .reader { fromReader -= 1 }
        }
    }

    struct State {
        var mirror = false
        var resubscribe = false
        /// Commands taken whose answer is not sent yet.
        var pending = 0
        var replies = Replies()
        var writingSince: ContinuousClock.Instant?
        var nextCommand: UInt64 = 0
        var statusDue = true
    }

    let id: UInt64
    let feed: ConsoleFeed
    let engine: any ConsoleEngine
    let stats: @Sendable () -> TransportStats
    let auth: Bool
    let channel: any Channel
    let limits: Limits
    let nonce: String
    let state = Locked(State())
    let wake: AsyncStream<Void>
    let poke: AsyncStream<Void>.Continuation
    /// Wakes the reader when a frame it made has been sent.
    let readerWake: AsyncStream<Void>
    let readerPoke: AsyncStream<Void>.Continuation

    init(id: UInt64, feed: ConsoleFeed, engine: any ConsoleEngine, stats: @escaping @Sendable () -> TransportStats, auth: Bool,
         channel: any Channel, limits: Limits) {
        self.id = id
        self.feed = feed
        self.engine = engine
        self.stats = stats
        self.auth = auth
        self.channel = channel
        self.limits = limits
        nonce = randomHex(bytes: 8)
        (wake, poke) = feed.register(id)
        (readerWake, readerPoke) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// The page's whole life; returns when it goes, is cut off, or the console stops.
    func run(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        defer { feed.unregister(id) }
        let snapshot = await engine.snapshot()
        let mirrors = snapshot.adapters.filter(\.mirror).map(\.id)
        try await withThrowingTaskGroup(of: Void.self) { g in
            g.addTask { try await self.send(outbound, mirrors: mirrors, snapshot: snapshot) }
            g.addTask { try await self.read(inbound, mirrors: mirrors) }
            g.addTask { try await self.watch() }
            _ = try await g.next()
            g.cancelAll()
        }
    }

    // MARK: sending

    func excluded(_ mirrors: [String]) -> [String] {
        state.withLock { $0.mirror } ? [] : mirrors.map { "\(feed.scheme.base)/\($0)/" }
    }

    func send(_ out: WebSocketOutboundWriter, mirrors: [String], snapshot: EngineSnapshot) async throws {
        let hello: JSONValue = [
            "t": "hello", "version": .string(snapshot.version), "base": .string(feed.scheme.base),
            "discovery_prefix": .string(feed.scheme.discoveryPrefix), "mirrors": .array(mirrors.map(JSONValue.string)),
            "auth": .bool(auth),
        ]
        try await write(out, hello.serialized)
        var cursor = try await resync(out, mirrors)
        var last = ContinuousClock.now
        for await _ in wake {
            let gap = ContinuousClock.now - last
            if gap < .seconds(limits.minFrameInterval) { try await Task.sleep(for: .seconds(limits.minFrameInterval) - gap) }
            let (replies, again, statusDue) = state.withLock { s in
                defer { s.resubscribe = false; s.statusDue = false }
                return (s.replies.take(), s.resubscribe, s.statusDue)
            }
            for r in replies {
                try await write(out, r.text)
                state.withLock { s in
                    s.replies.sent(r)
                    if r.origin == .command { s.pending -= 1 }
                }
                if r.origin == .reader { readerPoke.yield() }
            }
            // It holds the uptime: it differs every time.
            if statusDue { try await write(out, await self.status().serialized) }
            if again { cursor = try await resync(out, mirrors) }
            var more = true
            while more {
                switch feed.read(from: cursor, budget: limits.frameBudget, excluded: excluded(mirrors)) {
                case .behind:
                    feed.metrics.resynced()
                    cursor = try await resync(out, mirrors)
                    more = false
                case .changes(let items, let next, let m):
                    try await PageProtocol.inFrames(items, budget: limits.frameBudget) { try await write(out, PageProtocol.frame($0)) }
                    cursor = next
                    more = m
                }
            }
            last = ContinuousClock.now
        }
    }

    /// Everything again: `reset`, the snapshot in frames of `frameBudget`, `synced`; the cursor after it.
    func resync(_ out: WebSocketOutboundWriter, _ mirrors: [String]) async throws -> UInt64 {
        let (items, cursor) = feed.snapshot(excluded: excluded(mirrors))
        try await write(out, #"{"t":"reset"}"#)
        try await PageProtocol.inFrames(items, budget: limits.frameBudget) { try await write(out, PageProtocol.frame($0)) }
        try await write(out, #"{"t":"synced"}"#)
        return cursor
    }

    /// One frame in flight: the watchdog cuts the page off when it has not taken it within `stallTimeout`.
    func write(_ out: WebSocketOutboundWriter, _ text: String) async throws {
        state.withLock { $0.writingSince = .now }
        defer { state.withLock { $0.writingSince = nil } }
        try await out.writeTextMessage(text)
    }

    /// `bridge/health`'s figures, live (it is published only every `health.interval`), with readiness.
    func status() async -> JSONValue {
        let s = stats()
        let e = await engine.snapshot()
        let reasons = ConsoleService.notReady(e, s)
        var adapters: [String: JSONValue] = [:]
        for a in e.adapters {
            adapters[a.id] = BridgeAPI.adapterHealth(status: a.status, devices: a.devices, requests: a.requests, errors: a.errors,
                                                     lastError: a.lastError, lastOK: a.lastOK)
        }
        var status = BridgeAPI.health(uptime: e.uptime, rss: ProcessStats.residentBytes(), transport: s, adapters: adapters,
                                      limits: engine.bounds.snapshot).objectValue ?? [:]
        status["t"] = "status"
        status["ready"] = .bool(reasons.isEmpty)
        status["reasons"] = .array(reasons.map(JSONValue.string))
        if let sb = e.standby { status["standby"] = sb.json }
        return .object(status)
    }

    /// Cuts a stalled page off; asks the sender for the status every 2 s.
    func watch() async throws {
        var ticks = 0
        while true {
            try await Task.sleep(for: .milliseconds(500))
            ticks += 1
            if ticks % 4 == 0 {
                state.withLock { $0.statusDue = true }
                poke.yield()
            }
            let since = state.withLock { $0.writingSince }
            if let since, ContinuousClock.now - since > .seconds(limits.stallTimeout) {
                cut("slow", bound: "web_slow_client")
                throw CancellationError()
            }
        }
    }

    /// Cuts the page off: its connection closed, nothing kept for it.
    func cut(_ reason: String, bound: String) {
        feed.metrics.clientCut(reason)
        engine.bounds.hit(bound)
        channel.close(promise: nil)
    }

    /// An answer to one of the page's requests, for the sender to send next. Past `maxReplyBytes` waiting,
    /// the page is cut off instead.
    func reply(_ v: JSONValue, _ origin: Replies.Origin) {
        let text = v.serialized
        guard state.withLock({ $0.replies.add(text, origin, maxBytes: limits.maxReplyBytes) }) else {
            cut("replies", bound: "web_client_replies")
            return
        }
        poke.yield()
    }

    /// The reader's answer: sent before the reader reads the page's next message.
    func replyAndWait(_ v: JSONValue, _ woken: inout AsyncStream<Void>.Iterator) async throws {
        reply(v, .reader)
        while state.withLock({ $0.replies.fromReader > 0 }) {
            guard await woken.next() != nil else { throw CancellationError() }
        }
    }

    // MARK: reading

    func read(_ inbound: WebSocketInboundStream, mirrors: [String]) async throws {
        var woken = readerWake.makeAsyncIterator()
        try await withThrowingDiscardingTaskGroup { g in
            for try await message in inbound.messages(maxSize: limits.maxInbound) {
                guard case .text(let text) = message, let request = PageProtocol.request(text) else { continue }
                switch request {
                case .sub(let mirror):
                    state.withLock { s in
                        if mirror != s.mirror { s.resubscribe = true }
                        s.mirror = mirror
                    }
                    poke.yield()
                case .disc(let id, let adapter, let device):
                    let configs = feed.discoveryConfigs(adapter: adapter, deviceID: device).map { (topic, payload) -> JSONValue in
                        [.string(topic), .string(String(decoding: payload, as: UTF8.self))]
                    }
                    try await replyAndWait(["t": "disc", "id": id, "configs": .array(configs)], &woken)
                case .cmd(let id, let m):
                    let number = state.withLock { s -> UInt64? in
                        guard s.pending < limits.maxPending else { return nil }
                        s.pending += 1
                        s.nextCommand += 1
                        return s.nextCommand
                    }
                    guard let number else {
                        try await replyAndWait(["t": "res", "id": id, "status": "error",
                                                "error": .string("more than \(limits.maxPending) commands are waiting for their results")], &woken)
                        continue
                    }
                    g.addTask {
                        let answer = await self.command(m, number: number, mirrors: mirrors)
                        var o = answer.objectValue ?? [:]
                        o["t"] = "res"
                        o["id"] = id
                        self.reply(.object(o), .command)
                    }
                }
            }
        }
    }

    /// Carries a page's command out; the answer is its result, the request's response, or "sent".
    func command(_ m: JSONValue, number: UInt64, mirrors: [String]) async -> JSONValue {
        let engine = self.engine
        switch PageProtocol.submission(m, scheme: feed.scheme, mirrors: mirrors, transaction: "console-\(nonce)-\(number)") {
        case .refused(let why):
            return ["status": "error", "error": .string(why)]
        case .send(let topic, let payload):
            await engine.submit(topic: topic, payload: payload)
            return ["status": "sent"]
        case .ask(let topic, let payload, let transaction):
            guard let answer = await feed.awaitAnswer(transaction, timeout: limits.answerTimeout, send: { await engine.submit(topic: topic, payload: payload) })
            else { return ["status": "timeout", "error": .string("no answer within \(Int(limits.answerTimeout)) s")] }
            var out: [String: JSONValue] = ["status": answer["status"] ?? "error"]
            if let e = answer["error"] { out["error"] = e }
            if let d = answer["data"] { out["data"] = d }
            if let d = answer["details"] { out["details"] = d }
            return .object(out)
        }
    }
}
