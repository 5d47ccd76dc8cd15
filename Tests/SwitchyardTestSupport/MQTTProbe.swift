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
        /// MQTT 5 properties as they arrived (nil: absent, and always under 3.1.1).
        public var correlationData: [UInt8]?
        public var messageExpiry: UInt32?
        public var description: String { "\(topic) \(retain ? "(r) " : "")\(payload)" }

        public init(topic: String, payload: String, retain: Bool, at: Date, correlationData: [UInt8]? = nil, messageExpiry: UInt32? = nil) {
            self.topic = topic
            self.payload = payload
            self.retain = retain
            self.at = at
            self.correlationData = correlationData
            self.messageExpiry = messageExpiry
        }
    }

    static let initialised: Bool = {
        mosquitto_lib_init()
        return true
    }()

    let handle: OpaquePointer
    let loop: ProbeLoop
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
        do {
            loop = try ProbeLoop(handle: h, port: Int32(port))
        } catch {
            mosquitto_destroy(h)
            throw error
        }
        if protocolVersion == 5 { mosquitto_int_option(h, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5) }
        mosquitto_int_option(h, MOSQ_OPT_TCP_NODELAY, 1)
        mosquitto_user_data_set(h, Unmanaged.passUnretained(self).toOpaque())
        mosquitto_connect_callback_set(h, ProbeCallbacks.onConnect)
        mosquitto_message_v5_callback_set(h, ProbeCallbacks.onMessage)
        mosquitto_subscribe_callback_set(h, ProbeCallbacks.onSubscribe)
        mosquitto_disconnect_callback_set(h, ProbeCallbacks.onDisconnect)
        mosquitto_publish_callback_set(h, ProbeCallbacks.onPublish)
        // Calls from the tests' threads only queue their packets and wake the probe's own thread.
        mosquitto_threaded_set(h, true)
        loop.start()
    }

    public static func connect(port: Int, protocolVersion: Int = 4, clientID: String = "probe-\(UUID().uuidString.prefix(8))",
                               cleanSession: Bool = true) async throws -> MQTTProbe {
        let p = try MQTTProbe(port: port, clientID: clientID, protocolVersion: protocolVersion, cleanSession: cleanSession)
        for _ in 0..<600 where !p.connected.load(ordering: .relaxed) { await TestEnvironment.sleep(0.05) }
        guard p.connected.load(ordering: .relaxed) else { throw TestError("probe could not connect to port \(port)") }
        return p
    }

    /// The client socket's descriptor number (-1 while not connected).
    var socketNumber: Int32 { mosquitto_socket(handle) }

    /// Disconnects (a DISCONNECT, so no will) and ends the probe's thread.
    /// Stops the network loop and lets go of the `stream` handler, which often holds what holds the probe.
    public func close() {
        loop.stop()
        handler.withLock { $0 = nil }
    }

    deinit {
        loop.stop()
        mosquitto_destroy(handle)
    }

    /// Subscribes and waits for the SUBACK (so retained messages are on their way).
    public func subscribe(_ filters: String...) async throws { try await subscribe(filters) }

    public func subscribe(_ filters: [String]) async throws {
        for f in filters {
            self.filters.withLock { $0.append(f) }
            let before = subacks.load(ordering: .relaxed)
            var rc = mosquitto_subscribe(handle, nil, f, 1)
            loop.wake()
            // Not connected right now (a loaded machine can drop and re-open the probe's connection):
            // libmosquitto reconnects on its own and onConnect subscribes the filters again.
            for _ in 0..<500 where rc == MOSQ_ERR_NO_CONN.rawValue {
                await TestEnvironment.sleep(0.02)
                if connected.load(ordering: .relaxed) { rc = mosquitto_subscribe(handle, nil, f, 1); loop.wake() }
            }
            guard rc == MOSQ_ERR_SUCCESS.rawValue else {
                throw TestError("subscribe \(f) failed: \(String(cString: mosquitto_strerror(rc))) (last disconnect rc \(lastDisconnect.load(ordering: .relaxed)))")
            }
            for _ in 0..<600 where subacks.load(ordering: .relaxed) == before { await TestEnvironment.sleep(0.02) }
        }
    }

    /// `responseTopic` and `correlationData`: an MQTT 5 request (the probe must be in v5 mode).
    public func publish(_ topic: String, _ payload: String, retain: Bool = false, qos: Int32 = 1,
                        userProperties: [String: String] = [:], responseTopic: String? = nil, correlationData: [UInt8]? = nil) {
        let bytes = Array(payload.utf8)
        var props: OpaquePointer? = nil
        for (k, v) in userProperties { mosquitto_property_add_string_pair(&props, Int32(MQTT_PROP_USER_PROPERTY.rawValue), k, v) }
        if let responseTopic { mosquitto_property_add_string(&props, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic) }
        if let correlationData {
            correlationData.withUnsafeBytes { b in
                _ = mosquitto_property_add_binary(&props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), b.baseAddress, UInt16(b.count))
            }
        }
        defer { mosquitto_property_free_all(&props) }
        _ = bytes.withUnsafeBytes { b in
            mosquitto_publish_v5(handle, nil, topic, Int32(b.count), b.baseAddress, qos, retain, props)
        }
        loop.wake()
    }

    /// Publishes at QoS 1 and returns once the broker has acknowledged it (PUBACK): then it is the
    /// broker's (in a subscriber's session, or retained), whatever happens to the publisher.
    public func publishAcknowledged(_ topic: String, _ payload: String, retain: Bool = false, timeout: Double = 30) async throws {
        var mid: Int32 = 0
        let bytes = Array(payload.utf8)
        let rc = bytes.withUnsafeBytes { b in mosquitto_publish(handle, &mid, topic, Int32(b.count), b.baseAddress, 1, retain) }
        loop.wake()
        guard rc == MOSQ_ERR_SUCCESS.rawValue else { throw TestError("publish \(topic) failed: \(String(cString: mosquitto_strerror(rc)))") }
        var budget = PollBudget(timeout)
        while !acked.withLock({ $0.contains(mid) }) {
            if await !budget.sleep(0.005, checkedSince: budget.now) { throw TestError("no PUBACK for \(topic) in \(timeout) s") }
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
        var budget = PollBudget(timeout)
        repeat {
            let asked = budget.now
            let m = messages
            if predicate(m) { return m }
            if await !budget.sleep(0.02, checkedSince: asked) { break }
        } while true
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

/// The probe's network thread: libmosquitto's external-loop API with poll(2) on the client socket and a
/// wake-up pipe, not `mosquitto_loop_start`. libmosquitto's own loop waits in select(2), and glibc ends
/// the process ("bit out of range 0 - FD_SETSIZE on fd_set") when a socket's number passes 1023: a whole
/// parallel test run holds close to a thousand descriptors (965 at its peak, measured), and a run under
/// AddressSanitizer crossed it. Like libmosquitto's loop it connects again a second after a loss. The
/// thread ends when asked and is joined, never cancelled (a thread cancelled inside a call ThreadSanitizer
/// intercepts ends "with ignores enabled", which TSan reports as fatal).
final class ProbeLoop: @unchecked Sendable {
    let handle: OpaquePointer
    let port: Int32
    let wakeFD: Int32
    let wakeWriteFD: Int32
    let stopping = Atomic<Bool>(false)
    let ended = DispatchSemaphore(value: 0)

    init(handle: OpaquePointer, port: Int32) throws {
        self.handle = handle
        self.port = port
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { throw TestError("pipe failed: \(String(cString: strerror(errno)))") }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeFD = ends[0]
        wakeWriteFD = ends[1]
    }

    func start() {
        let thread = Thread { [self] in
            run()
            ended.signal()
        }
        thread.name = "mqtt-probe"
        thread.start()
    }

    func wake() {
        var one: UInt8 = 1
        _ = write(wakeWriteFD, &one, 1)   // EAGAIN when the pipe is full: the thread is awake anyway
    }

    func drainWake() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeFD, &buffer, 64) > 0 {}
    }

    /// Asks the thread to disconnect and end, and waits for it; once (later calls return at once).
    func stop() {
        guard !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wake()
        ended.wait()
    }

    /// The pipe goes with the loop, not at `stop()`: a `wake()` after a close (a test publishing on a
    /// closed probe) then writes to this pipe, never to a descriptor number another socket reuses.
    deinit {
        Glibc.close(wakeFD)
        Glibc.close(wakeWriteFD)
    }

    func run() {
        var tried = false
        while !stopping.load(ordering: .acquiring) {
            let sock = mosquitto_socket(handle)
            if sock < 0 {
                // libmosquitto's loop waits its reconnect delay (one second) before each new attempt, and
                // sets the client up (host, keepalive, quotas) once. A blocking connect: on loopback it is
                // answered or refused at once.
                if tried {
                    pause(seconds: 1)
                    if !stopping.load(ordering: .acquiring) { _ = mosquitto_reconnect(handle) }
                } else {
                    tried = true
                    _ = mosquitto_connect(handle, "127.0.0.1", port, 30)
                }
                continue
            }
            var fds = [pollfd(fd: sock, events: Int16(POLLIN) | (mosquitto_want_write(handle) ? Int16(POLLOUT) : 0), revents: 0),
                       pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
            _ = poll(&fds, 2, 100)
            if fds[1].revents & Int16(POLLIN) != 0 { drainWake() }
            // An error closes the socket and calls the disconnect callback: the next turn connects again.
            if fds[0].revents & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0,
               mosquitto_loop_read(handle, 1) != MOSQ_ERR_SUCCESS.rawValue { continue }
            if mosquitto_want_write(handle), mosquitto_loop_write(handle, 1) != MOSQ_ERR_SUCCESS.rawValue { continue }
            _ = mosquitto_loop_misc(handle)
        }
        // A DISCONNECT, written before the thread ends.
        if mosquitto_socket(handle) >= 0, mosquitto_disconnect(handle) == MOSQ_ERR_SUCCESS.rawValue {
            for _ in 0..<100 where mosquitto_want_write(handle) && mosquitto_socket(handle) >= 0 {
                if mosquitto_loop_write(handle, 1) != MOSQ_ERR_SUCCESS.rawValue { break }
                if mosquitto_want_write(handle) { usleep(1_000) }
            }
        }
    }

    /// Sleeps about `seconds` (in steps of 0.1 s on the wake-up pipe), ending early when asked to stop.
    func pause(seconds: Double) {
        var fd = pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)
        for _ in 0..<Int(seconds * 10) where !stopping.load(ordering: .acquiring) {
            fd.revents = 0
            _ = poll(&fd, 1, 100)
            if fd.revents & Int16(POLLIN) != 0 { drainWake() }
        }
    }
}

/// C callbacks, defined in nonisolated code (a static on a plain enum): libmosquitto calls them on the
/// probe's thread. They use the probe without retaining it: were a callback to hold the last reference
/// when the test drops its own, `deinit` would run on the probe's thread and wait for that thread to end.
/// The probe cannot go meanwhile: its `deinit` waits for the thread before anything is freed.
enum ProbeCallbacks {
    static func with(_ obj: UnsafeMutableRawPointer, _ body: (MQTTProbe) -> Void) {
        Unmanaged<MQTTProbe>.fromOpaque(obj)._withUnsafeGuaranteedRef(body)
    }
    static let onConnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { mosq, obj, rc in
        guard let obj, rc == 0 else { return }
        with(obj) { probe in
            for f in probe.filters.withLock({ $0 }) { mosquitto_subscribe(mosq, nil, f, 1) }
            probe.connected.store(true, ordering: .relaxed)
        }
    }
    static let onDisconnect: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { _, obj, rc in
        guard let obj else { return }
        with(obj) { probe in
            probe.connected.store(false, ordering: .relaxed)
            probe.lastDisconnect.store(rc, ordering: .relaxed)
        }
    }
    static let onPublish: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32) -> Void = { _, obj, mid in
        guard let obj else { return }
        with(obj) { probe in _ = probe.acked.withLock { $0.insert(mid) } }
    }
    static let onSubscribe: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int32, Int32, UnsafePointer<Int32>?) -> Void = { _, obj, _, _, _ in
        guard let obj else { return }
        with(obj) { probe in probe.subacks.add(1, ordering: .relaxed) }
    }
    static let onMessage: @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, UnsafePointer<mosquitto_message>?, OpaquePointer?) -> Void = {
        _, obj, msg, props in
        guard let obj, let msg else { return }
        let m = msg.pointee
        let payload = m.payloadlen > 0 ? String(decoding: UnsafeRawBufferPointer(start: m.payload, count: Int(m.payloadlen)), as: UTF8.self) : ""
        var correlation: [UInt8]?
        var expiry: UInt32?
        if let props {
            var data: UnsafeMutableRawPointer? = nil
            var length: UInt16 = 0
            if mosquitto_property_read_binary(props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &data, &length, false) != nil {
                correlation = Array(UnsafeRawBufferPointer(start: data, count: Int(length)))
                free(data)
            }
            var seconds: UInt32 = 0
            if mosquitto_property_read_int32(props, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), &seconds, false) != nil { expiry = seconds }
        }
        let message = MQTTProbe.Message(topic: String(cString: m.topic), payload: payload, retain: m.retain, at: Date(),
                                        correlationData: correlation, messageExpiry: expiry)
        with(obj) { probe in probe.record(message) }
    }
}
