import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HTTPTypes
import Logging
import NIOCore
import SwitchyardCore
import SwitchyardTestSupport
import WSClient

/// A page of the console as a program sees it: its WebSocket (docs/console.md "The page's WebSocket"),
/// every frame kept with the time it arrived, a way to send. For tests, the bench and the soak; the real
/// page is tested in a real browser (Tests/browser).
public final class PageClient: Sendable {
    public struct Frame: Sendable {
        public var json: JSONValue
        public var at: ContinuousClock.Instant
        public var bytes: Int
    }

    let frames = Locked<[Frame]>([])
    let outgoing: AsyncStream<String>.Continuation
    let task: Task<Void, Never>
    let end = Locked<Result<WebSocketCloseFrame?, any Error>?>(nil)
    /// Retained topics as the page knows them (after resets and clears), and non-retained ones in order.
    let topics = Locked<[String: String]>([:])
    let keep: Bool
    let largest = Locked(0)

    /// Opens `ws://host:port/ws` with these headers. `keepFrames: false` keeps only the topic view (long runs).
    /// `onMessage` sees each publication as it arrives (topic, payload, when), on the reading task.
    public init(port: Int, headers: HTTPFields = [:], keepFrames: Bool = true,
                onMessage: (@Sendable (String, String?, ContinuousClock.Instant) -> Void)? = nil) {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        outgoing = continuation
        keep = keepFrames
        var config = WebSocketClientConfiguration(maxFrameSize: 1 << 20)
        config.additionalHeaders = headers
        var logger = Logger(label: "page-client")
        logger.logLevel = .critical
        let frames = self.frames, topics = self.topics, keep = keepFrames, end = self.end, largest = self.largest
        task = Task {
            let result: Result<WebSocketCloseFrame?, any Error>
            do { result = .success(try await WebSocketClient.connect(url: "ws://127.0.0.1:\(port)/ws", configuration: config, logger: logger) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { g in
                    g.addTask {
                        for await text in stream { try await outbound.write(.text(text)) }
                    }
                    g.addTask {
                        for try await message in inbound.messages(maxSize: 64 << 20) {
                            guard case .text(let text) = message, let json = try? JSONValue.parse(text) else { continue }
                            let frame = Frame(json: json, at: .now, bytes: text.utf8.count)
                            PageClient.apply(json, to: topics)
                            largest.withLock { $0 = max($0, frame.bytes) }
                            if let onMessage, json["t"] == "m" {
                                for item in json["m"]?.arrayValue ?? [] {
                                    guard let pair = item.arrayValue, case .string(let topic)? = pair.first else { continue }
                                    onMessage(topic, pair.dropFirst().first?.stringValue, frame.at)
                                }
                            }
                            frames.withLock { f in
                                if keep { f.append(frame) } else { f = [frame] }
                            }
                        }
                    }
                    try await g.next()
                    g.cancelAll()
                }
            }) } catch { result = .failure(error) }
            end.withLock { $0 = result }
        }
    }

    static func apply(_ json: JSONValue, to topics: Locked<[String: String]>) {
        switch json["t"]?.stringValue {
        case "reset": topics.withLock { $0.removeAll() }
        case "m":
            topics.withLock { t in
                for item in json["m"]?.arrayValue ?? [] {
                    guard case .string(let topic)? = item.arrayValue?.first else { continue }
                    t[topic] = item.arrayValue?.dropFirst().first?.stringValue
                }
            }
        default: break
        }
    }

    /// Waits until the console accepts connections: a page opens its WebSocket once and is not retried, and
    /// the bridge's first states on MQTT do not say its console is listening yet (on a loaded machine it
    /// was not, and a page opened then never saw a light).
    public static func waitForListener(port: Int, timeout: Double = 60) async throws {
        try await waitUntil("the console on port \(port) accepts connections", timeout: timeout) {
            guard let fd = try? HTTPProbe.connect(port: port, timeout: 2) else { return false }
            Glibc.close(fd)
            return true
        }
    }

    public var all: [Frame] { frames.withLock { $0 } }
    public func payload(_ topic: String) -> String? { topics.withLock { $0[topic] } }
    public var topicCount: Int { topics.withLock { $0.count } }
    /// The largest frame the page got, in bytes.
    public var largestFrame: Int { largest.withLock { $0 } }

    public func send(_ json: JSONValue) { outgoing.yield(json.serialized) }

    /// The first frame (from `after` on) that `predicate` accepts, waiting at most `timeout` seconds.
    public func waitFor(_ what: String, after: Int = 0, timeout: Double = 15, _ predicate: @Sendable (JSONValue) -> Bool) async throws -> JSONValue {
        let found = Locked<JSONValue?>(nil)
        try await waitUntil(what, timeout: timeout) {
            let f = self.frames.withLock { $0.dropFirst(after).first { predicate($0.json) }?.json }
            found.withLock { $0 = f }
            return f != nil || self.end.withLock { $0 != nil }
        }
        guard let found = found.withLock({ $0 }) else {
            throw TestError("the page's connection ended before \(what): \(end.withLock { $0.map { "\($0)" } ?? "" })")
        }
        return found
    }

    /// Sends a command and waits for its answer (`res` with the same id).
    public func command(_ id: Int, topic: String, payload: JSONValue, timeout: Double = 30) async throws -> JSONValue {
        send(["t": "cmd", "id": JSONValue(id), "topic": .string(topic), "payload": payload])
        return try await waitFor("the answer to command \(id)", timeout: timeout) { $0["t"] == "res" && $0["id"] == JSONValue(id) }
    }

    /// How the connection ended: nil while it is open after `seconds`; the close frame (or the error) once it has.
    public func ended(within seconds: Double) async -> Result<WebSocketCloseFrame?, any Error>? {
        try? await waitUntil("the page's connection ends", timeout: seconds) { self.end.withLock { $0 != nil } }
        return end.withLock { $0 }
    }

    public func close() {
        outgoing.finish()
        task.cancel()
    }
}
