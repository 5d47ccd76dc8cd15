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
final class ConsoleClient: Sendable {
    struct Limits: Sendable {
        /// Bytes of payloads per `m` frame (a single larger payload goes alone).
        var frameBudget = 64 * 1024
        /// A page's message (a command), at most.
        var maxInbound = 64 * 1024
        /// Commands a page may have waiting for their results at once.
        var maxPending = 32
        /// A command unanswered this long is answered `timeout` to the page.
        var answerTimeout = 30.0
        /// At most this many frames a second (changes in between go together).
        var minFrameInterval = 0.01
        var stallTimeout = 10.0
    }

    struct State {
        var mirror = false
        var resubscribe = false
        var pending = 0
        var direct: [String] = []
        var writingSince: ContinuousClock.Instant?
        var nextCommand: UInt64 = 0
        var statusDue = true
    }

    let id: UInt64
    let feed: ConsoleFeed
    let engine: BridgeEngine
    let stats: @Sendable () -> TransportStats
    let auth: Bool
    let channel: any Channel
    let limits: Limits
    let nonce: String
    let state = Locked(State())
    let wake: AsyncStream<Void>
    let poke: AsyncStream<Void>.Continuation

    init(id: UInt64, feed: ConsoleFeed, engine: BridgeEngine, stats: @escaping @Sendable () -> TransportStats, auth: Bool,
         channel: any Channel, limits: Limits) {
        self.id = id
        self.feed = feed
        self.engine = engine
        self.stats = stats
        self.auth = auth
        self.channel = channel
        self.limits = limits
        var rng = SystemRandomNumberGenerator()
        nonce = (0..<8).map { _ in UInt8.random(in: 0...255, using: &rng) }.hexString
        (wake, poke) = feed.register(id)
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
        var lastStatus = ""
        for await _ in wake {
            let gap = ContinuousClock.now - last
            if gap < .seconds(limits.minFrameInterval) { try await Task.sleep(for: .seconds(limits.minFrameInterval) - gap) }
            let (direct, again, statusDue) = state.withLock { s in
                defer { s.direct = []; s.resubscribe = false; s.statusDue = false }
                return (s.direct, s.resubscribe, s.statusDue)
            }
            for d in direct { try await write(out, d) }
            if statusDue {
                let status = await self.status().serialized
                if status != lastStatus { try await write(out, status) }
                lastStatus = status
            }
            if again { cursor = try await resync(out, mirrors) }
            var more = true
            while more {
                switch feed.read(from: cursor, budget: limits.frameBudget, excluded: excluded(mirrors)) {
                case .behind:
                    feed.metrics.resynced()
                    cursor = try await resync(out, mirrors)
                    more = false
                case .changes(let items, let next, let m):
                    if !items.isEmpty { try await write(out, Self.frame(items)) }
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
        var batch: [ConsoleFeed.Item] = []
        var bytes = 0
        for item in items {
            batch.append(item)
            bytes += item.topic.utf8.count + (item.payload?.count ?? 0)
            if bytes >= limits.frameBudget {
                try await write(out, Self.frame(batch))
                batch.removeAll(keepingCapacity: true)
                bytes = 0
            }
        }
        if !batch.isEmpty { try await write(out, Self.frame(batch)) }
        try await write(out, #"{"t":"synced"}"#)
        return cursor
    }

    /// One frame in flight: the watchdog cuts the page off when it has not taken it within `stallTimeout`.
    func write(_ out: WebSocketOutboundWriter, _ text: String) async throws {
        state.withLock { $0.writingSince = .now }
        defer { state.withLock { $0.writingSince = nil } }
        try await out.writeTextMessage(text)
    }

    /// Readiness and the broker link, live (`bridge/health` comes only every `health.interval`).
    func status() async -> JSONValue {
        let s = stats()
        let e = await engine.snapshot()
        let reasons = ConsoleService.notReady(e, s)
        var adapters: [String: JSONValue] = [:]
        for a in e.adapters {
            adapters[a.id] = ["status": .string(a.status.description), "devices": JSONValue(a.devices), "requests": JSONValue(a.requests),
                              "errors": JSONValue(a.errors), "last_error": a.lastError.map(JSONValue.string) ?? .null]
        }
        return [
            "t": "status", "ready": .bool(reasons.isEmpty), "reasons": .array(reasons.map(JSONValue.string)),
            "uptime": .number(e.uptime), "rss_bytes": ProcessStats.residentBytes().map { JSONValue($0) } ?? .null,
            "limits": .object(engine.bounds.snapshot.mapValues { JSONValue($0) }), "adapters": .object(adapters),
            "mqtt": ["connected": .bool(s.connected), "published": JSONValue(s.published), "received": JSONValue(s.received),
                     "outbox": JSONValue(s.outbox), "outbox_event_bytes": JSONValue(s.outboxEventBytes), "dropped": JSONValue(s.dropped),
                     "connects": JSONValue(s.connects), "inbound_pauses": JSONValue(s.inboundPauses), "oversize": JSONValue(s.oversize)],
        ]
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
                feed.metrics.clientCut("slow")
                engine.bounds.hit("web_slow_client")
                channel.close(promise: nil)
                throw CancellationError()
            }
        }
    }

    /// `{"t":"m","m":[[topic,payload],…]}`: payloads as JSON strings (null: a retained topic was cleared).
    static func frame(_ items: [ConsoleFeed.Item]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(items.reduce(16) { $0 + $1.topic.utf8.count + ($1.payload?.count ?? 4) + 8 })
        out.append(contentsOf: #"{"t":"m","m":["#.utf8)
        for (i, item) in items.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "["))
            appendJSONString(&out, item.topic.utf8)
            out.append(UInt8(ascii: ","))
            if let p = item.payload {
                if let s = String(validating: p, as: UTF8.self) { appendJSONString(&out, s.utf8) } else {
                    appendJSONString(&out, String(decoding: p, as: UTF8.self).utf8)
                }
            } else {
                out.append(contentsOf: "null".utf8)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: "]}".utf8)
        return String(decoding: out, as: UTF8.self)
    }

    static func appendJSONString(_ out: inout [UInt8], _ s: some Sequence<UInt8>) {
        let hex: [UInt8] = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for b in s {
            switch b {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0..<0x20, 0x7F:
                out.append(contentsOf: Array(#"\u00"#.utf8))
                out.append(hex[Int(b >> 4)])
                out.append(hex[Int(b & 15)])
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// A frame for the sender to send next (answers to the page's requests).
    func direct(_ v: JSONValue) {
        state.withLock { $0.direct.append(v.serialized) }
        poke.yield()
    }

    // MARK: reading

    func read(_ inbound: WebSocketInboundStream, mirrors: [String]) async throws {
        try await withThrowingDiscardingTaskGroup { g in
            for try await message in inbound.messages(maxSize: limits.maxInbound) {
                guard case .text(let text) = message, let m = try? JSONValue.parse(text), case .string(let t)? = m["t"] else { continue }
                let id = m["id"] ?? .null
                switch t {
                case "sub":
                    state.withLock { s in
                        let mirror = m["mirror"]?.boolValue ?? false
                        if mirror != s.mirror { s.resubscribe = true }
                        s.mirror = mirror
                    }
                    poke.yield()
                case "disc":
                    guard case .string(let adapter)? = m["adapter"], case .string(let device)? = m["device_id"] else { continue }
                    let configs = feed.discoveryConfigs(adapter: adapter, deviceID: device).map { (topic, payload) -> JSONValue in
                        [.string(topic), .string(String(decoding: payload, as: UTF8.self))]
                    }
                    direct(["t": "disc", "id": id, "configs": .array(configs)])
                case "cmd":
                    let number = state.withLock { s -> UInt64? in
                        guard s.pending < limits.maxPending else { return nil }
                        s.pending += 1
                        s.nextCommand += 1
                        return s.nextCommand
                    }
                    guard let number else {
                        direct(["t": "res", "id": id, "status": "error", "error": .string("more than \(limits.maxPending) commands are waiting for their results")])
                        continue
                    }
                    g.addTask {
                        let answer = await self.command(m, number: number, mirrors: mirrors)
                        self.state.withLock { $0.pending -= 1 }
                        var o = answer.objectValue ?? [:]
                        o["t"] = "res"
                        o["id"] = id
                        self.direct(.object(o))
                    }
                default:
                    continue
                }
            }
        }
    }

    /// A page's command: a topic the engine takes from MQTT (`…/set`, `…/get`, `bridge/request/…`) and its
    /// payload, handed to the engine exactly as a broker would hand it (InboundRouter validates it). A JSON
    /// object gets a transaction of ours, and the answer is the command's result or the request's response.
    func command(_ m: JSONValue, number: UInt64, mirrors: [String]) async -> JSONValue {
        guard case .string(let topic)? = m["topic"] else { return ["status": "error", "error": "no topic"] }
        let scheme = feed.scheme
        let kind = scheme.classify(topic)
        // Answered with a result: a command for a device (as a JSON object) and a bridge request. A mirror's
        // command (Home Assistant) and `/get` have none: they are sent, and their errors go to bridge/log.
        var answered = true
        switch kind {
        case .set(let adapter, _, _): answered = !mirrors.contains(adapter)
        case .get: answered = false
        case .request: break
        default:
            return ["status": "error", "error": "the console sends commands (…/set, …/get) and bridge requests only"]
        }
        var body = m["payload"] ?? .object([:])
        let transaction = "console-\(nonce)-\(number)"
        guard answered, case .object(var o) = body else {
            let bytes: [UInt8]
            if case .string(let s) = body { bytes = Array(s.utf8) } else { bytes = body.bytes }
            await engine.submit(topic: topic, payload: bytes)
            return ["status": "sent"]
        }
        o["transaction"] = .string(transaction)
        body = .object(o)
        let payload = body.bytes
        let engine = self.engine
        guard let answer = await feed.awaitAnswer(transaction, timeout: limits.answerTimeout, send: { await engine.submit(topic: topic, payload: payload) })
        else { return ["status": "timeout", "error": .string("no answer within \(Int(limits.answerTimeout)) s")] }
        var out: [String: JSONValue] = ["status": answer["status"] ?? "error"]
        if let e = answer["error"] { out["error"] = e }
        if let d = answer["data"] { out["data"] = d }
        return .object(out)
    }
}
