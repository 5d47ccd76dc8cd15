import CMosquitto
import Foundation
import SwitchyardCore
import Synchronization

/// A plain libmosquitto client for tests: what a real `mosquitto_sub` / `mosquitto_pub` user sees.
/// Independent of the bridge's transport (threaded libmosquitto, its own callbacks).
public final class MQTTProbe: @unchecked Sendable {
    public struct Message: Sendable, Equatable, CustomStringConvertible {
        public var topic: String
        public var payload: String
        public var retain: Bool
        public var at: Date
        public var description: String { "\(topic) \(retain ? "(r) " : "")\(payload)" }
    }

    static let initialised: Bool = {
        mosquitto_lib_init()
        return true
    }()

    let handle: OpaquePointer
    let received = Locked<[Message]>([])
    let connected = Atomic<Bool>(false)
    let subacks = Atomic<Int>(0)
    /// Filters subscribed so far: subscribed again after a reconnect (the session is clean).
    let filters = Locked<[String]>([])
    /// The rc of the last disconnect (libmosquitto's), for error messages.
    let lastDisconnect = Atomic<Int32>(-1)
    /// Message ids the broker has acknowledged (PUBACK for QoS 1).
    let acked = Locked<Set<Int32>>([])

    /// `cleanSession: false` keeps the subscriptions and queued QoS 1 messages at the broker while the
    /// probe is away (across broker restarts too, with the broker's persistence on).
    public init(port: Int, clientID: String = "probe-\(UUID().uuidString.prefix(8))", protocolVersion: Int = 4,
                cleanSession: Bool = true) throws {
        _ = Self.initialised
        guard let h = mosquitto_new(clientID, cleanSession, nil) else { throw TestError("mosquitto_new failed") }
        handle = h
        if protocolVersion == 5 { mosquitto_int_option(h, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5) }
        mosquitto_int_option(h, MOSQ_OPT_TCP_NODELAY, 1)
        mosquitto_user_data_set(h, Unmanaged.passUnretained(self).toOpaque())
        mosquitto_connect_callback_set(h, ProbeCallbacks.onConnect)
        mosquitto_message_callback_set(h, ProbeCallbacks.onMessage)
        mosquitto_subscribe_callback_set(h, ProbeCallbacks.onSubscribe)
        mosquitto_disconnect_callback_set(h, ProbeCallbacks.onDisconnect)
        mosquitto_publish_callback_set(h, ProbeCallbacks.onPublish)
        guard mosquitto_loop_start(h) == MOSQ_ERR_SUCCESS.rawValue else { throw TestError("loop_start failed") }
        guard mosquitto_connect_async(h, "127.0.0.1", Int32(port), 30) == MOSQ_ERR_SUCCESS.rawValue else { throw TestError("connect failed") }
    }

    public static func connect(port: Int, protocolVersion: Int = 4, clientID: String = "probe-\(UUID().uuidString.prefix(8))",
                               cleanSession: Bool = true) async throws -> MQTTProbe {
        let p = try MQTTProbe(port: port, clientID: clientID, protocolVersion: protocolVersion, cleanSession: cleanSession)
        for _ in 0..<600 where !p.connected.load(ordering: .relaxed) { await TestEnvironment.sleep(0.05) }
        guard p.connected.load(ordering: .relaxed) else { throw TestError("probe could not connect to port \(port)") }
        return p
    }

    public func close() {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
    }

    /// The network thread is asked to end (a disconnect ends its loop) and joined, never cancelled: a
    /// thread cancelled inside a call ThreadSanitizer intercepts ends "with ignores enabled", which TSan
    /// reports as fatal.
    deinit {
        mosquitto_disconnect(handle)
        mosquitto_loop_stop(handle, false)
        mosquitto_destroy(handle)
    }

    /// Subscribes and waits for the SUBACK (so retained messages are on their way).
    public func subscribe(_ filters: String...) async throws { try await subscribe(filters) }

    public func subscribe(_ filters: [String]) async throws {
        for f in filters {
            self.filters.withLock { $0.append(f) }
            let before = subacks.load(ordering: .relaxed)
            var rc = mosquitto_subscribe(handle, nil, f, 1)
            // Not connected right now (a loaded machine can drop and re-open the probe's connection):
            // libmosquitto reconnects on its own and onConnect subscribes the filters again.
            for _ in 0..<500 where rc == MOSQ_ERR_NO_CONN.rawValue {
                await TestEnvironment.sleep(0.02)
                if connected.load(ordering: .relaxed) { rc = mosquitto_subscribe(handle, nil, f, 1) }
            }
            guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                throw TestError("subscribe \(f) failed: \(String(cString: mosquitto_strerror(rc))) (last disconnect rc \(lastDisconnect.load(ordering: .relaxed)))")
            }
            for _ in 0..<600 where subacks.load(ordering: .relaxed) == before { await TestEnvironment.sleep(0.02) }
        }
    }

    public func publish(_ topic: String, _ payload: String, retain: Bool = false, qos: Int32 = 1,
                        userProperties: [String: String] = [:]) {
        let bytes = Array(payload.utf8)
        var props: OpaquePointer? = nil
        for (k, v) in userProperties { mosquitto_property_add_string_pair(&props, Int32(MQTT_PROP_USER_PROPERTY.rawValue), k, v) }
        defer { mosquitto_property_free_all(&props) }
        _ = bytes.withUnsafeBytes { b in
            mosquitto_publish_v5(handle, nil, topic, Int32(b.count), b.baseAddress, qos, retain, props)
        }
    }

    /// Publishes at QoS 1 and returns once the broker has acknowledged it (PUBACK): then it is the
    /// broker's (in a subscriber's session, or retained), whatever happens to the publisher.
    public func publishAcknowledged(_ topic: String, _ payload: String, retain: Bool = false, timeout: Double = 30) async throws {
        var mid: Int32 = 0
        let bytes = Array(payload.utf8)
        let rc = bytes.withUnsafeBytes { b in mosquitto_publish(handle, &mid, topic, Int32(b.count), b.baseAddress, 1, retain) }
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw TestError("publish \(topic) failed: \(String(cString: mosquitto_strerror(rc)))") }
        let deadline = Date().addingTimeInterval(timeout)
        while !acked.withLock({ $0.contains(mid) }) {
            if Date() > deadline { throw TestError("no PUBACK for \(topic) in \(timeout) s") }
            await TestEnvironment.sleep(0.005)
        }
    }

    public var messages: [Message] { received.withLock { $0 } }
    public func clear() { received.withLock { $0.removeAll() } }

    public func messages(on topic: String) -> [Message] { messages.filter { $0.topic == topic } }

    /// The latest payload on a topic, if any.
    public func last(_ topic: String) -> String? { messages.last { $0.topic == topic }?.payload }

    /// Waits (at most `timeout` seconds, polling) until `predicate` holds for the messages received.
    @discardableResult
    public func waitFor(_ what: String, timeout: Double = 30, _ predicate: ([Message]) -> Bool) async throws -> [Message] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let m = messages
            if predicate(m) { return m }
            await TestEnvironment.sleep(0.02)
        }
        throw TestError("timed out waiting for \(what); received:\n" + messages.suffix(40).map(\.description).joined(separator: "\n"))
    }

    /// Waits for a message on `topic` (optionally with `payload`).
    @discardableResult
    public func waitFor(topic: String, payload: String? = nil, timeout: Double = 30) async throws -> Message {
        let m = try await waitFor("\(topic) \(payload ?? "")", timeout: timeout) { ms in
            ms.contains { $0.topic == topic && (payload == nil || $0.payload == payload) }
        }
        return m.last { $0.topic == topic && (payload == nil || $0.payload == payload) }!
    }

    /// Hands every message to `handler` (on libmosquitto's thread, in arrival order) instead of keeping it:
    /// a long run's checker, whose memory must not grow with the traffic.
    public func stream(to handler: @escaping @Sendable (Message) -> Void) { self.handler.withLock { $0 = Handler(call: handler) } }
    /// The closure inside a struct: held directly as `Locked`'s generic value, every `withLock` wrapped it in
    /// two more reabstraction thunks (into the generic representation and back), so after some 10^5 messages
    /// calling it overflowed the stack of libmosquitto's thread (the hour-long soak crashed at ~45 min).
    struct Handler { let call: @Sendable (Message) -> Void }
    let handler = Locked<Handler?>(nil)

    func record(_ m: Message) {
        if let h = handler.withLock({ $0 }) { h.call(m); return }
        received.withLock { $0.append(m) }
    }
}

/// C callbacks, defined in nonisolated code (a static on a plain enum): libmosquitto calls them on its thread.
enum ProbeCallbacks {
    static let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { mosq, obj, rc in
        guard let obj, rc == 0 else { return }
        let probe = Unmanaged<MQTTProbe>.fromOpaque(obj).takeUnretainedValue()
        for f in probe.filters.withLock({ $0 }) { mosquitto_subscribe(mosq, nil, f, 1) }
        probe.connected.store(true, ordering: .relaxed)
    }
    static let onDisconnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { _, obj, rc in
        guard let obj else { return }
        let probe = Unmanaged<MQTTProbe>.fromOpaque(obj).takeUnretainedValue()
        probe.connected.store(false, ordering: .relaxed)
        probe.lastDisconnect.store(rc, ordering: .relaxed)
    }
    static let onPublish: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { _, obj, mid in
        guard let obj else { return }
        _ = Unmanaged<MQTTProbe>.fromOpaque(obj).takeUnretainedValue().acked.withLock { $0.insert(mid) }
    }
    static let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?) -> Void = { _, obj, _, _, _ in
        guard let obj else { return }
        Unmanaged<MQTTProbe>.fromOpaque(obj).takeUnretainedValue().subacks.add(1, ordering: .relaxed)
    }
    static let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?) -> Void = { _, obj, msg in
        guard let obj, let msg else { return }
        let m = msg.pointee
        let payload = m.payloadlen > 0 ? String(decoding: UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen)), as: UTF8.self) : ""
        Unmanaged<MQTTProbe>.fromOpaque(obj).takeUnretainedValue()
            .record(.init(topic: String(cString: m.topic), payload: payload, retain: m.retain, at: Date()))
    }
}
