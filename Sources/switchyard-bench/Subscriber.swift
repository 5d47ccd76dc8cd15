import CMosquitto
import Foundation
import SwitchyardCore
import Synchronization

/// A plain libmosquitto subscriber that counts messages and can wake a waiter on a matching payload.
final class CountingSubscriber: @unchecked Sendable {
    struct State {
        var count = 0
        var lastAt = Date()
        var topics: [String: String] = [:]   // topic -> last payload (when tracking)
        var waiter: (id: UInt64, topic: String, needle: String, continuation: CheckedContinuation<Bool, Never>)?
        var nextWaiter: UInt64 = 0
        var trackTopics = false
        /// When the number of distinct topics reached `topicTarget` (stamped in the client's callback, so that a
        /// poll's delay is not measured).
        var topicTarget = Int.max
        var targetReachedAt: Date?
        /// When the first message arrived.
        var firstAt: Date?
        /// When the last waiter (`expect`) was answered, stamped in the client's callback.
        var waiterHitAt: Date?
    }

    static let initialised: Bool = {
        mosquitto_lib_init()
        return true
    }()

    let handle: OpaquePointer
    let state = Locked(State())
    let connected = Atomic<Bool>(false)
    let subacks = Atomic<Int>(0)
    /// False for a plain subscriber that only counts: the payload is never copied or decoded (the baseline
    /// a flood's processing is compared with).
    let decodes: Bool

    init(port: Int, filters: [String], trackTopics: Bool = false, topicTarget: Int = .max, decodes: Bool = true) async throws {
        _ = Self.initialised
        guard let h = mosquitto_new("bench-sub-\(UUID().uuidString.prefix(6))", true, nil) else { throw BenchError("mosquitto_new") }
        handle = h
        self.decodes = decodes
        state.withLock {
            $0.trackTopics = trackTopics
            $0.topicTarget = topicTarget
        }
        mosquitto_int_option(h, MOSQ_OPT_RECEIVE_MAXIMUM, 1000)
        mosquitto_int_option(h, MOSQ_OPT_TCP_NODELAY, 1)
        mosquitto_user_data_set(h, Unmanaged.passUnretained(self).toOpaque())
        mosquitto_connect_callback_set(h, SubscriberCallbacks.onConnect)
        mosquitto_subscribe_callback_set(h, SubscriberCallbacks.onSubscribe)
        mosquitto_message_callback_set(h, SubscriberCallbacks.onMessage)
        mosquitto_loop_start(h)
        mosquitto_connect_async(h, "127.0.0.1", Int32(port), 60)
        for _ in 0..<500 where !connected.load(ordering: .relaxed) { try await Task.sleep(for: .milliseconds(10)) }
        guard connected.load(ordering: .relaxed) else { throw BenchError("subscriber could not connect") }
        for f in filters { mosquitto_subscribe(h, nil, f, 1) }
        for _ in 0..<500 where subacks.load(ordering: .relaxed) < filters.count { try await Task.sleep(for: .milliseconds(10)) }
    }

    func close() {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
        mosquitto_destroy(handle)
    }

    var count: Int { state.withLock { $0.count } }
    var lastAt: Date { state.withLock { $0.lastAt } }
    var distinctTopics: Int { state.withLock { $0.topics.count } }
    func lastPayload(_ topic: String) -> String? { state.withLock { $0.topics[topic] } }
    /// When the last message arrived (stamped in the client's callback).
    var lastArrival: Date { state.withLock { $0.lastAt } }
    /// When `topicTarget` distinct topics had arrived (nil: not yet).
    var targetReachedAt: Date? { state.withLock { $0.targetReachedAt } }
    var firstAt: Date? { state.withLock { $0.firstAt } }
    /// When the message the last answered `expect` waited for arrived.
    var waiterHitAt: Date? { state.withLock { $0.waiterHitAt } }

    /// Polls `condition` every 2 ms until it holds (true) or `timeout` seconds pass (false).
    func waitUntil(timeout: Double, _ condition: (State) -> Bool) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if state.withLock({ condition($0) }) { return true }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return false
    }

    /// Every topic's last payload contains its expected text.
    func waitForFinal(_ expected: [String: String], timeout: Double) async -> Bool {
        await waitUntil(timeout: timeout) { s in expected.allSatisfy { s.topics[$0.key]?.contains($0.value) == true } }
    }

    func waitForCount(_ target: Int, timeout: Double) async -> Bool {
        await waitUntil(timeout: timeout) { $0.count >= target }
    }

    func waitForTopics(_ target: Int, timeout: Double) async -> Bool {
        await waitUntil(timeout: timeout) { $0.topics.count >= target }
    }

    /// Arms a waiter for a message on `topic` whose payload contains `needle`; call before causing it,
    /// then `await` the returned task: true when it arrived, false after `timeout` seconds.
    func expect(topic: String, containing needle: String, timeout: Double) async -> Task<Bool, Never> {
        let armed = Atomic<Bool>(false)
        let id = state.withLock { s -> UInt64 in
            s.nextWaiter += 1
            return s.nextWaiter
        }
        let task = Task {
            await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                state.withLock { $0.waiter = (id, topic, needle, c) }
                armed.store(true, ordering: .releasing)
            }
        }
        while !armed.load(ordering: .acquiring) { await Task.yield() }
        // The timeout resolves only its own waiter (an earlier one with the same needle must not fire
        // on a later command), and is cancelled as soon as the waiter is answered.
        let timer = Task {
            try? await Task.sleep(for: .seconds(timeout))
            if Task.isCancelled { return }
            state.withLock { s -> CheckedContinuation<Bool, Never>? in
                guard let w = s.waiter, w.id == id else { return nil }
                s.waiter = nil
                return w.continuation
            }?.resume(returning: false)
        }
        return Task {
            let ok = await task.value
            timer.cancel()
            return ok
        }
    }

    func received(topic: String, payload: String) {
        let c = state.withLock { s -> CheckedContinuation<Bool, Never>? in
            s.count += 1
            s.lastAt = Date()
            if s.firstAt == nil { s.firstAt = s.lastAt }
            if s.trackTopics {
                s.topics[topic] = payload
                if s.targetReachedAt == nil && s.topics.count >= s.topicTarget { s.targetReachedAt = s.lastAt }
            }
            if let w = s.waiter, w.topic == topic, payload.contains(w.needle) {
                s.waiter = nil
                s.waiterHitAt = s.lastAt
                return w.continuation
            }
            return nil
        }
        c?.resume(returning: true)
    }
}

enum SubscriberCallbacks {
    static let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { _, obj, rc in
        guard let obj, rc == 0 else { return }
        Unmanaged<CountingSubscriber>.fromOpaque(obj).takeUnretainedValue().connected.store(true, ordering: .relaxed)
    }
    static let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?) -> Void = { _, obj, _, _, _ in
        guard let obj else { return }
        Unmanaged<CountingSubscriber>.fromOpaque(obj).takeUnretainedValue().subacks.add(1, ordering: .relaxed)
    }
    static let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?) -> Void = { _, obj, msg in
        guard let obj, let msg else { return }
        let m = msg.pointee
        let sub = Unmanaged<CountingSubscriber>.fromOpaque(obj).takeUnretainedValue()
        let payload = sub.decodes && m.payloadlen > 0 ? String(decoding: UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen)), as: UTF8.self) : ""
        sub.received(topic: String(cString: m.topic), payload: payload)
    }
}

/// Raw libmosquitto publishing: the baseline every bridge figure is divided by.
enum RawPublisher {
    /// Publishes every payload (round-robin over `topics`) and returns the client; the caller closes it
    /// once the subscriber has counted everything, so nothing is cut off in flight.
    static func publish(port: Int, topics: [String], payloads: [String], qos: Int32, retain: Bool) throws -> RawClient {
        _ = CountingSubscriber.initialised
        guard let h = mosquitto_new("bench-raw-\(UUID().uuidString.prefix(6))", true, nil) else { throw BenchError("mosquitto_new") }
        mosquitto_int_option(h, MOSQ_OPT_SEND_MAXIMUM, 100)
        mosquitto_int_option(h, MOSQ_OPT_TCP_NODELAY, 1)
        mosquitto_loop_start(h)
        guard mosquitto_connect(h, "127.0.0.1", Int32(port), 60) == MOSQ_ERR_SUCCESS.rawValue else { throw BenchError("raw connect") }
        for (i, p) in payloads.enumerated() {
            let bytes = Array(p.utf8)
            _ = bytes.withUnsafeBytes { b in
                mosquitto_publish(h, nil, topics[i % topics.count], Int32(b.count), b.baseAddress, qos, retain)
            }
        }
        return RawClient(handle: h)
    }
}

final class RawClient: @unchecked Sendable {
    let handle: OpaquePointer
    init(handle: OpaquePointer) { self.handle = handle }
    func close() {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
        mosquitto_destroy(handle)
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}
