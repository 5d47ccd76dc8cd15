import CMosquitto
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import SwitchyardCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `mosquitto_lib_init` is not thread safe: a static let runs it exactly once.
enum MosquittoLibrary {
    static let initialised: Bool = {
        mosquitto_lib_init()
        return true
    }()
}

/// The MQTT transport over libmosquitto.
///
/// One dedicated network thread owns the libmosquitto handle and makes every libmosquitto call
/// (external-loop API: `poll` on the client socket plus a wake-up eventfd). Other threads only touch
/// the outbox under a mutex and wake that thread. This gives us our own reconnect policy (bounded
/// exponential backoff with jitter, client recreation when stuck) instead of libmosquitto's quadratic
/// one, and no libmosquitto lock-order hazards. Callbacks fire on the network thread, inside
/// `mosquitto_loop_*`, and are written in nonisolated code.
public final class MosquittoTransport: MQTTTransport {
    struct Shared: ~Copyable {
        var outbox: Outbox
        var subscriptions: [String] = []
        var subscriptionsChanged = false
        var stats = TransportStats()
        var stopRequested = false
        var drainDeadline: MonotonicInstant?
        var stopped: CheckedContinuation<Void, Never>?
        var finished = false
        /// `abandon`: the connection ends now, without a DISCONNECT.
        var abandoned = false
        /// Messages (and their bytes) handed to `events` and not yet released by the consumer.
        var inboundCount = 0
        var inboundBytes = 0
        var readingPaused = false
    }

    public let events: AsyncStream<TransportEvent>
    let continuation: AsyncStream<TransportEvent>.Continuation
    let settings: MQTTSettings
    let logger: Logger
    let shared: Locked<Shared>
    /// A non-blocking pipe, opened by `start`: other threads write a byte to wake the network thread's
    /// poll. Closed with the transport, when nothing can write to it any more.
    let wakeFDs = Locked<(read: Int32, write: Int32)>((-1, -1))
    let wakeWriteFD = Atomic<Int32>(-1)
    private let started = Atomic<Bool>(false)
    let clock = SystemClock()
    /// When the network thread last read something from the broker (nanoseconds on `clock`; -1: never).
    let heard = Atomic<Int64>(-1)
    /// Until when (nanoseconds on `clock`) the network thread counts as just resumed: it found itself woken
    /// long after it last ran (the process was paused), and what it reads first may be what the broker sent
    /// before it gave up on the connection.
    let resumedUntil = Atomic<Int64>(-1)
    /// Why a transport that does not reconnect has ended (`MQTTSettings.reconnects`).
    let ended = Locked<TransportEnd?>(nil)

    public init(settings: MQTTSettings, logger: Logger) {
        _ = MosquittoLibrary.initialised
        self.settings = settings
        self.logger = logger
        self.shared = Locked(Shared(outbox: Outbox(maxEvents: settings.maxEvents, maxEventBytes: settings.maxEventBytes)))
        // Unbounded as a stream: what it holds is bounded by `maxInbound`/`maxInboundBytes`, because the
        // network thread stops reading the socket at either (see `release`).
        (events, continuation) = AsyncStream.makeStream(of: TransportEvent.self)
    }

    deinit {
        let fds = wakeFDs.withLock { $0 }
        if fds.read >= 0 { close(fds.read) }
        if fds.write >= 0 { close(fds.write) }
    }

    var wakeFD: Int32 { wakeFDs.withLock { $0.read } }

    /// Starts the network thread. Connecting, reconnecting and republishing happen there, forever,
    /// until `stop`.
    public func start() {
        guard started.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged else { return }
        var fds: [Int32] = [-1, -1]
        _ = pipe(&fds)
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        wakeFDs.withLock { $0 = (fds[0], fds[1]) }
        wakeWriteFD.store(fds[1], ordering: .releasing)
        OSThread.start("mqtt-network") { [self] in
            let loop = NetworkLoop(transport: self)
            loop.run()
        }
    }

    public func publish(_ topic: String, _ payload: [UInt8], qos: Int, retain: Bool) {
        publish([Publication(topic, payload, qos: qos, retain: retain)])
    }

    /// One lock and one wake-up (a pipe write) for the whole batch, not one of each per message: a start
    /// hands over tens of thousands of messages.
    public func publish(_ batch: [Publication]) {
        guard !batch.isEmpty else { return }
        let now = clock.now()
        let refused = shared.withLock { s in batch.filter { !s.outbox.add($0, now: now) } }
        for p in refused {
            logger.error("message refused: its topic is empty or over 65 535 bytes", metadata: ["mqtt.topic": "\(p.topic.excerpt(200))"])
        }
        wake()
    }

    /// Says `payload` on the state topic (retained, QoS 1) on the connection numbered `connection` only (its
    /// `TransportStats.connects` once made: the `.connected` events so far): false, and nothing queued, when that
    /// connection is not up any more. For what is true of one connection and false on the next (a standby's
    /// `active` claim, design.md §18): the check and the queueing share the lock under which the network thread
    /// makes a connection and queues its birth, which supersedes the payload should it not have gone out on its
    /// connection (the transport must have a birth).
    @discardableResult
    public func sayState(_ payload: [UInt8], onConnection connection: Int) -> Bool {
        let queued = shared.withLock { s -> Bool in
            guard s.stats.connected, s.stats.connects == connection else { return false }
            return s.outbox.add(Publication(settings.stateTopic, payload, qos: 1, retain: true), now: clock.now())
        }
        if queued { wake() }
        return queued
    }

    public func setSubscriptions(_ filters: [String]) {
        shared.withLock { s in
            s.subscriptions = filters
            s.subscriptionsChanged = true
        }
        wake()
    }

    public func stats() -> TransportStats {
        shared.withLock { s in
            var st = s.stats
            st.outbox = s.outbox.pending
            st.dropped = s.outbox.dropped
            st.outboxEventBytes = s.outbox.eventBytes
            st.expired = s.outbox.expired
            return st
        }
    }

    public func release(_ message: InboundMessage) {
        let resume = shared.withLock { s -> Bool in
            s.inboundCount -= 1
            s.inboundBytes -= Self.footprint(message)
            return s.readingPaused && !Self.full(s, settings)
        }
        if resume { wake() }
    }

    /// What a queued message holds on to, as counted against `maxInboundBytes`.
    static func footprint(_ m: InboundMessage) -> Int { m.payload.count + m.topic.utf8.count + (m.replyTo?.footprint ?? 0) }

    static func full(_ s: borrowing Shared, _ settings: MQTTSettings) -> Bool {
        s.inboundCount >= settings.maxInbound || s.inboundBytes >= settings.maxInboundBytes
    }

    /// Whether the network thread may read the socket now; counts each time it has to stop.
    func mayRead() -> Bool {
        shared.withLock { s in
            let full = Self.full(s, settings)
            if full && !s.readingPaused { s.stats.inboundPauses += 1 }
            s.readingPaused = full
            return !full
        }
    }

    /// Publishes `offline` on the state topic, waits (at most `timeout`) until the broker has
    /// acknowledged everything, then disconnects cleanly (so the broker does not send the Will) and
    /// ends the network thread.
    public func stop(timeout: Double = 5) async {
        publish(settings.stateTopic, settings.willPayload, qos: 1, retain: true)
        guard started.load(ordering: .relaxed) else {
            continuation.finish()
            return
        }
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let resumeNow = shared.withLock { s -> Bool in
                if s.finished { return true }
                s.stopRequested = true
                s.drainDeadline = clock.now().adding(seconds: timeout)
                s.stopped = c
                return false
            }
            if resumeNow { c.resume() }
            wake()
        }
        continuation.finish()
    }

    /// When the broker last sent anything (a PINGRESP included), on the process's monotonic clock; nil
    /// before the first packet. An instance that has heard nothing for longer than the broker waits before
    /// it gives up on it may already have been replaced (design.md §18).
    public var lastHeard: MonotonicInstant? {
        let n = heard.load(ordering: .acquiring)
        return n < 0 ? nil : MonotonicInstant(sinceOrigin: .nanoseconds(n))
    }

    /// The network thread was found paused for longer than half the keepalive within the last second: what
    /// it has heard since may be stale (design.md §18).
    public var recentlyResumed: Bool { clock.now().sinceOrigin.nanosecondsClamped < resumedUntil.load(ordering: .acquiring) }

    /// Why the transport ended on its own (only when it does not reconnect); nil while it runs or after `stop`.
    public var endReason: TransportEnd? { ended.withLock { $0 } }

    /// Ends a transport that does not reconnect as if its connection had been lost: nothing more goes out, no
    /// DISCONNECT (the broker sends the Last Will), `events` ends and `endReason` says `lost`. For an instance
    /// that must stop speaking at once (a standby that stepped down, design.md §18); `stop` still follows.
    public func abandon() {
        shared.withLock { $0.abandoned = true }
        wake()
    }

    func wake() {
        var one: UInt8 = 1
        let fd = wakeWriteFD.load(ordering: .acquiring)
        if fd >= 0 { _ = write(fd, &one, 1) }   // EAGAIN when the pipe is full: the thread is awake anyway
    }
}

/// Lives on the network thread only; libmosquitto callbacks reach it through `userdata`.
final class NetworkLoop {
    let transport: MosquittoTransport
    var settings: MQTTSettings { transport.settings }
    var logger: Logger { transport.logger }
    var mosq: OpaquePointer?
    var connected = false
    var connackReceived = false
    var sessionPresent = false
    var connackRefusal: String?
    var refusalCode: Int32?
    /// What the broker's MQTT 5 CONNACK said (nil: nothing, or 3.1.1), for this connection.
    var receiveMaximum: Int?
    var maximumPacketSize: Int?
    var topicAliasMaximum: Int?
    var aliases = TopicAliases()
    /// A PUBLISH of this client went with an alias alone. libmosquitto keeps unacknowledged QoS 1 messages and
    /// sends them again after a reconnect, with their properties: an alias the new connection never learnt,
    /// which the broker answers by closing it (Mosquitto: a protocol error), again at every attempt. Such a
    /// client is recreated before the next attempt; the outbox sends everything unacknowledged anyway.
    var aliasesUsed = false
    /// CONNACK codes that another attempt will not change (MQTT 3.1.1: bad user name or password, not
    /// authorised; MQTT 5: the same, bad authentication method, banned): retried only every 30 s.
    static let refusedForGood: Set<Int32> = [4, 5, 0x86, 0x87, 0x8A, 0x8C]
    static let refusedDelay = 30.0
    var publishing = false
    /// Acknowledgements that came for a message not yet recorded as sent: while a window is published,
    /// libmosquitto finishes writing earlier packets of the window and calls back for any QoS 0 one that
    /// completes (the message is recorded only once the whole window is out). Cleared on every connect.
    var earlyAcks: Set<Int32> = []
    var subscribed: [String] = []
    /// The reason code of the broker's DISCONNECT (MQTT 5), or libmosquitto's error, for the connection now ending.
    var disconnectCode: Int32?
    /// Failed attempts since the last stable connection (the backoff's exponent).
    var attempt = 0
    var connectedAt: MonotonicInstant?
    /// A connection that lasted this long was stable: after losing it, the first attempt is immediate.
    static let stableAfter = 5.0
    var lastGoodConnection: MonotonicInstant
    let wakeFD: Int32

    init(transport: MosquittoTransport) {
        self.transport = transport
        lastGoodConnection = transport.clock.now()
        wakeFD = transport.wakeFD
    }

    func now() -> MonotonicInstant { transport.clock.now() }

    func run() {
        var failedAttempts = 0
        while !stopRequested() {
            if mosq == nil { createClient() }
            guard let mosq else { sleep(seconds: settings.reconnectMaxDelay); continue }
            disconnectCode = nil
            let rc = connect(mosq)
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                serve(mosq)
            } else {
                logger.warning("broker connect failed", metadata: ["mqtt.host": "\(settings.host)", "mqtt.port": "\(settings.port)",
                                                                    "error": "\(Self.describe(rc))"])
            }
            // A transport that does not reconnect ends with its first connection, or after its attempts.
            if !settings.reconnects && !stopRequested() {
                if connected || connectedAt != nil {
                    let end: TransportEnd = disconnectCode == Self.sessionTakenOver ? .takenOver : .lost
                    markDisconnected(reason: end == .takenOver ? "session taken over by another client" : "connection lost")
                    transport.ended.withLock { $0 = end }
                    break
                }
                failedAttempts += 1
                if failedAttempts >= settings.connectAttempts {
                    transport.ended.withLock { $0 = .neverConnected }
                    break
                }
            }
            var immediate = false
            if connected {
                markDisconnected(reason: disconnectCode == Self.sessionTakenOver ? "session taken over by another client" : "connection lost")
                // libmosquitto sends again, after the next CONNACK and before anything of ours, what it had in
                // flight on the lost connection. A persistent session is owed that (MQTT 3.1.1 4.4), and the outbox
                // sends it again too. A clean session is not: the broker dropped it, and what went out on it may
                // be superseded since (a standby's `active` claim, design.md §18). Its client is made anew, and the
                // outbox alone sends what is unacknowledged, as its latest value.
                if aliasesUsed || !settings.persistentSession { destroyClient() }
                // A stable connection lost (a broker restart): try again at once, the broker may already be
                // back. A connection that keeps dropping soon after it is made backs off like a failure.
                if let at = connectedAt, (now() - at).seconds >= Self.stableAfter { attempt = 0; immediate = true }
            }
            connectedAt = nil
            if stopRequested() { break }
            if (now() - lastGoodConnection).seconds > settings.stuckAfter {
                logger.warning("no broker connection for a long time: recreating the MQTT client",
                               metadata: ["seconds": "\(Int((now() - lastGoodConnection).seconds))"])
                destroyClient()
                transport.shared.withLock { $0.stats.clientRecreations += 1 }
                lastGoodConnection = now()
            }
            if immediate { continue }
            var delay = settings.backoff(attempt: attempt)
            // Credentials or an ACL refused: asking again at once would only fill the broker's log.
            if let code = refusalCode, Self.refusedForGood.contains(code) { delay = max(delay, Self.refusedDelay) }
            attempt += 1
            sleep(seconds: delay)
        }
        if let mosq, !transport.shared.withLock({ $0.abandoned }) {
            mosquitto_disconnect(mosq)
            _ = mosquitto_loop_write(mosq, 1)
        }
        destroyClient()
        let c = transport.shared.withLock { s -> CheckedContinuation<Void, Never>? in
            s.finished = true
            // Nothing goes out any more: what the outbox holds (every retained topic's latest payload and
            // the sources that write them) is let go now, not whenever the transport object is: the
            // console's feed, kept until the process exits, holds the transport, and LeakSanitizer reported
            // every payload only the ledger held as leaked at exit.
            s.outbox.releaseAll()
            s.stats.connected = false
            let c = s.stopped
            s.stopped = nil
            return c
        }
        // Ended on its own (no reconnects): its consumer learns it from the end of `events`.
        if c == nil && !settings.reconnects { transport.continuation.finish() }
        c?.resume()
    }

    /// MQTT 5 DISCONNECT reason 0x8E: another client connected with this client id.
    static let sessionTakenOver: Int32 = 0x8E

    func stopRequested() -> Bool { transport.shared.withLock { $0.stopRequested } }

    // MARK: client

    func createClient() {
        let userdata = Unmanaged.passUnretained(self).toOpaque()
        guard let m = mosquitto_new(settings.clientID, !settings.persistentSession, userdata) else {
            logger.error("mosquitto_new failed", metadata: ["errno": "\(errno)"])
            return
        }
        if settings.protocolVersion == 5 {
            mosquitto_int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5)
        }
        mosquitto_int_option(m, MOSQ_OPT_SEND_MAXIMUM, Int32(settings.maxInflight))
        mosquitto_int_option(m, MOSQ_OPT_RECEIVE_MAXIMUM, 100)
        mosquitto_int_option(m, MOSQ_OPT_TCP_NODELAY, 1)
        settings.willPayload.withUnsafeBytes { b in
            _ = mosquitto_will_set(m, settings.stateTopic, Int32(b.count), b.baseAddress, 1, true)
        }
        if let u = settings.username {
            mosquitto_username_pw_set(m, u, settings.password)
        }
        if let tls = settings.tls {
            if tls.caFile == nil && tls.caPath == nil {
                mosquitto_int_option(m, MOSQ_OPT_TLS_USE_OS_CERTS, 1)
            }
            let rc = mosquitto_tls_set(m, tls.caFile, tls.caPath, tls.certFile, tls.keyFile, nil)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                logger.error("TLS setup failed", metadata: ["error": "\(Self.describe(rc))"])
            }
            mosquitto_tls_opts_set(m, tls.verify ? 1 : 0, nil, nil)
            mosquitto_tls_insecure_set(m, !tls.verify)
        }
        mosquitto_connect_v5_callback_set(m) { _, obj, rc, flags, props in
            guard let obj else { return }
            let loop = Unmanaged<NetworkLoop>.fromOpaque(obj).takeUnretainedValue()
            loop.onConnect(rc: rc, flags: flags, props)
        }
        mosquitto_disconnect_v5_callback_set(m) { _, obj, rc, _ in
            guard let obj else { return }
            Unmanaged<NetworkLoop>.fromOpaque(obj).takeUnretainedValue().disconnectCode = rc
        }
        mosquitto_publish_callback_set(m) { _, obj, mid in
            guard let obj else { return }
            Unmanaged<NetworkLoop>.fromOpaque(obj).takeUnretainedValue().onPublish(mid: mid)
        }
        mosquitto_message_v5_callback_set(m) { _, obj, msg, props in
            guard let obj, let msg else { return }
            Unmanaged<NetworkLoop>.fromOpaque(obj).takeUnretainedValue().onMessage(msg.pointee, props)
        }
        mosq = m
    }

    func destroyClient() {
        if let m = mosq { mosquitto_destroy(m) }
        mosq = nil
        subscribed = []
        aliasesUsed = false
    }

    func connect(_ m: OpaquePointer) -> Int32 {
        connackReceived = false
        connackRefusal = nil
        refusalCode = nil
        receiveMaximum = nil
        maximumPacketSize = nil
        topicAliasMaximum = nil
        if settings.protocolVersion == 5 {
            var props: OpaquePointer? = nil
            mosquitto_property_add_int32(&props, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), UInt32(settings.sessionExpiry))
            defer { mosquitto_property_free_all(&props) }
            return mosquitto_connect_bind_v5(m, settings.host, Int32(settings.port), Int32(settings.keepalive), nil, props)
        }
        return mosquitto_connect(m, settings.host, Int32(settings.port), Int32(settings.keepalive))
    }

    // MARK: serving one connection

    /// `POLLRDHUP` (Linux: the peer shut down its side), which Swift's Glibc module does not export. Without
    /// it a broker's close would be seen only once the socket is read again, and it is not read while the core
    /// has its fill of inbound messages.
    static let peerClosed: Int16 = 0x2000

    func serve(_ m: OpaquePointer) {
        let started = now()
        var fds = [pollfd(fd: 0, events: 0, revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        var pauses = PauseDetector(keepalive: Double(settings.keepalive), at: started)
        while true {
            if let until = pauses.turn(at: now()) {
                transport.resumedUntil.store(until.sinceOrigin.nanosecondsClamped, ordering: .releasing)
            }
            let sock = mosquitto_socket(m)
            if sock < 0 || transport.shared.withLock({ $0.abandoned }) { return }
            // While the core has its fill of inbound messages the socket is not read: the broker waits.
            let reading = transport.mayRead()
            fds[0] = pollfd(fd: sock, events: (reading ? Int16(POLLIN) : 0) | Self.peerClosed | (mosquitto_want_write(m) ? Int16(POLLOUT) : 0),
                            revents: 0)
            fds[1].revents = 0
            let n = poll(&fds, 2, 250)
            if n < 0 && errno != EINTR { return }
            // Paused inside poll (where the thread waits most of the time): known before what it reads makes
            // `heard` fresh, so that the upstream lease never sees a fresh `heard` without the resume.
            if let until = pauses.turn(at: now()) {
                transport.resumedUntil.store(until.sinceOrigin.nanosecondsClamped, ordering: .releasing)
            }
            if fds[1].revents & Int16(POLLIN) != 0 {
                drainWake()
            }
            // A hang-up, an error or the broker closing its side (a takeover of the client id, design.md §18
            // rule 3) is read even while paused: that is how libmosquitto learns of it. What the broker sent
            // before it closed is then read too, a packet a turn: no more can come.
            if fds[0].revents & (Int16(POLLHUP) | Int16(POLLERR) | Self.peerClosed) != 0 || (reading && fds[0].revents & Int16(POLLIN) != 0) {
                let rc = mosquitto_loop_read(m, 1)
                if rc != MOSQ_ERR_SUCCESS.rawValue { logLost(rc); return }
                transport.heard.store(Int64(now().sinceOrigin.nanosecondsClamped), ordering: .releasing)
            }
            if fds[0].revents & Int16(POLLOUT) != 0 || mosquitto_want_write(m) {
                let rc = mosquitto_loop_write(m, 1)
                if rc != MOSQ_ERR_SUCCESS.rawValue && rc != MOSQ_ERR_NO_CONN.rawValue { logLost(rc); return }
            }
            let misc = mosquitto_loop_misc(m)
            if misc != MOSQ_ERR_SUCCESS.rawValue { logLost(misc); return }

            if let refusal = connackRefusal {
                logger.error("broker refused the connection", metadata: ["reason": "\(refusal)"])
                mosquitto_disconnect(m)
                return
            }
            if connackReceived && !connected { didConnect(m) }
            if !connected && (now() - started).seconds > settings.connectTimeout {
                logger.warning("no CONNACK from broker in time", metadata: ["seconds": "\(settings.connectTimeout)"])
                mosquitto_disconnect(m)
                return
            }
            if connected {
                syncSubscriptions(m)
                pump(m)
                let (stop, deadline) = transport.shared.withLock { ($0.stopRequested, $0.drainDeadline) }
                if stop {
                    let drained = transport.shared.withLock { $0.outbox.pending == 0 }
                    if drained || now() > (deadline ?? now()) { return }
                }
            } else if stopRequested() {
                return
            }
        }
    }

    func logLost(_ rc: Int32) {
        if connected { logger.warning("broker connection lost", metadata: ["error": "\(Self.describe(rc))"]) }
    }

    func didConnect(_ m: OpaquePointer) {
        connected = true
        connectedAt = now()
        lastGoodConnection = now()
        subscribed = []
        earlyAcks = []
        aliases.reset(maximum: settings.protocolVersion == 5 ? min(topicAliasMaximum ?? 0, settings.maxTopicAliases) : 0)
        let birth = settings.birth.map { $0() } ?? settings.birthPayload
        transport.shared.withLock { s in
            s.subscriptionsChanged = true
            s.stats.connected = true
            s.stats.connects += 1
            s.stats.receiveMaximum = receiveMaximum
            s.stats.maximumPacketSize = maximumPacketSize
            s.stats.topicAliasMaximum = topicAliasMaximum
            // Birth message first, then every retained topic we own, then unacknowledged events.
            if let birth { s.outbox.add(topic: settings.stateTopic, payload: birth, qos: 1, retain: true) }
            s.outbox.resetForReconnect(first: settings.stateTopic)
        }
        logger.info("connected to broker", metadata: ["mqtt.host": "\(settings.host)", "mqtt.port": "\(settings.port)",
                                                      "mqtt.session_present": "\(sessionPresent)"])
        syncSubscriptions(m)
        transport.continuation.yield(.connected(sessionPresent: sessionPresent))
    }

    func markDisconnected(reason: String) {
        connected = false
        transport.shared.withLock { $0.stats.connected = false }
        transport.continuation.yield(.disconnected(reason: reason))
    }

    func syncSubscriptions(_ m: OpaquePointer) {
        let wanted: [String]? = transport.shared.withLock { s in
            guard s.subscriptionsChanged else { return nil }
            s.subscriptionsChanged = false
            return s.subscriptions
        }
        guard let wanted else { return }
        for f in subscribed where !wanted.contains(f) { mosquitto_unsubscribe(m, nil, f) }
        for f in wanted where !subscribed.contains(f) {
            let rc = mosquitto_subscribe(m, nil, f, 1)
            if rc != MOSQ_ERR_SUCCESS.rawValue {
                logger.error("subscribe failed", metadata: ["mqtt.topic": "\(f)", "error": "\(Self.describe(rc))"])
            }
        }
        subscribed = wanted
    }

    /// Hands outbox messages to libmosquitto while fewer than `maxInflight` await their acknowledgement.
    /// A change of subscriptions made before a publish reaches the broker before it: the check and the
    /// take share the lock, so a sentinel published after subscribing comes back (the sweep relies on it).
    ///
    /// Messages are taken a window at a time: one lock to take them all, one to record them, not two per
    /// message on the network thread, where the engine's hand-overs contend for the same lock. The socket is
    /// not corked for a window (docs/performance.md says why).
    func pump(_ m: OpaquePointer) {
        // The broker's Receive Maximum, when lower: libmosquitto takes the CONNACK's value over its own send
        // maximum and would queue the rest inside itself, where the outbox no longer sees them.
        let limit = min(settings.maxInflight, receiveMaximum ?? .max)
        while true {
            let at = now()
            let window: [(Outbox.Key, Outbox.Message)]? = transport.shared.withLock { s in
                if s.abandoned { return [] }   // nothing published after `abandon` goes out
                if s.subscriptionsChanged { return nil }
                var out: [(Outbox.Key, Outbox.Message)] = []
                while s.outbox.inflight.count + out.count < limit, let next = s.outbox.next(now: at) { out.append(next) }
                return out
            }
            guard let window else {
                syncSubscriptions(m)
                continue
            }
            if window.isEmpty { return }
            var sent: [(Outbox.Key, Int32)] = []
            var refused: [Outbox.Key] = []
            sent.reserveCapacity(window.count)
            for (key, msg) in window {
                var mid: Int32 = 0
                let payload = msg.payload   // made here, outside the lock, when it comes from a source
                let use = settings.protocolVersion == 5 ? aliases.use(msg.topic) : .topic
                publishing = true
                let rc = settings.protocolVersion == 5 && (use != .topic || !msg.properties.isEmpty)
                    ? publishV5(m, &mid, msg, payload, use)
                    : payload.withUnsafeBytes { b in mosquitto_publish(m, &mid, msg.topic, Int32(b.count), b.baseAddress, Int32(msg.qos), msg.retain) }
                publishing = false
                if rc == MOSQ_ERR_SUCCESS.rawValue {
                    sent.append((key, mid))
                    if case .establish(let alias) = use { aliases.established(msg.topic, alias) }
                    if case .alias = use { aliasesUsed = true }
                } else if Self.connectionLost(rc) {
                    break   // the rest stays in the outbox; everything unacknowledged goes again after the reconnect
                } else if rc == MOSQ_ERR_OVERSIZE_PACKET.rawValue {
                    // Over the broker's Maximum Packet Size: sent, it would make the broker close the connection.
                    let reason = "a message of \(payload.count) bytes does not fit the broker's Maximum Packet Size (\(maximumPacketSize ?? 0) bytes); "
                        + (msg.retain ? "not published (the broker keeps the topic's previous value)" : "not published")
                    logger.error("message refused: over the broker's Maximum Packet Size", metadata: ["mqtt.topic": "\(msg.topic.excerpt(200))",
                                                                                                      "bytes": "\(payload.count)"])
                    refused.append(key)
                    transport.continuation.yield(.refused(topic: msg.topic, reason: reason))
                } else {
                    logger.error("message refused by the MQTT client", metadata: ["mqtt.topic": "\(msg.topic)", "error": "\(Self.describe(rc))"])
                    refused.append(key)
                }
            }
            // Only now, with the whole window out: an acknowledgement that came during a later message of the
            // window is in `earlyAcks` too.
            transport.shared.withLock { s in
                for (key, mid) in sent { s.outbox.sent(key, mid: mid) }
                s.stats.peakInflight = max(s.stats.peakInflight, s.outbox.inflight.count)
                for (_, mid) in sent where earlyAcks.remove(mid) != nil { s.outbox.acknowledged(mid: mid) }
                s.stats.published += sent.count
                for key in refused { s.outbox.discard(key) }
            }
            if sent.count + refused.count < window.count { return }
        }
    }

    /// A PUBLISH with MQTT 5 properties: a topic alias (with the topic, or alone), the Message Expiry Interval,
    /// the Correlation Data of an answer.
    func publishV5(_ m: OpaquePointer, _ mid: inout Int32, _ msg: Outbox.Message, _ payload: [UInt8], _ use: TopicAliases.Use) -> Int32 {
        var props: OpaquePointer? = nil
        defer { mosquitto_property_free_all(&props) }
        switch use {
        case .topic: break
        case .establish(let alias), .alias(let alias):
            mosquitto_property_add_int16(&props, Int32(MQTT_PROP_TOPIC_ALIAS.rawValue), alias)
        }
        if msg.properties.expiry > 0 {
            mosquitto_property_add_int32(&props, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), msg.properties.expiry)
        }
        if let data = msg.properties.correlationData {
            data.withUnsafeBytes { b in
                _ = mosquitto_property_add_binary(&props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), b.baseAddress, UInt16(clamping: b.count))
            }
        }
        let topic: String? = if case .alias = use { nil } else { msg.topic }
        return payload.withUnsafeBytes { b in
            mosquitto_publish_v5(m, &mid, topic, Int32(b.count), b.baseAddress, Int32(msg.qos), msg.retain, props)
        }
    }

    /// Whether a publish failed because of the connection (the message stays in the outbox and goes again
    /// after the reconnect), not because of the message itself (refused for good). A write that fails with
    /// an errno (EPIPE, ECONNRESET: the broker went away mid-burst) is the connection's: as "refused" it would
    /// drop every message published while the loss is being noticed (in a large start, most of them).
    static func connectionLost(_ rc: Int32) -> Bool {
        [MOSQ_ERR_NO_CONN, MOSQ_ERR_CONN_LOST, MOSQ_ERR_ERRNO, MOSQ_ERR_KEEPALIVE, MOSQ_ERR_NOMEM, MOSQ_ERR_TLS].contains { $0.rawValue == rc }
    }

    // MARK: callbacks (network thread, inside mosquitto_loop_* or mosquitto_publish)

    func onConnect(rc: Int32, flags: Int32, _ props: OpaquePointer?) {
        if rc == 0 {
            connackReceived = true
            sessionPresent = flags & 1 == 1
            if let props {
                var v16: UInt16 = 0
                var v32: UInt32 = 0
                if mosquitto_property_read_int16(props, Int32(MQTT_PROP_RECEIVE_MAXIMUM.rawValue), &v16, false) != nil { receiveMaximum = Int(v16) }
                if mosquitto_property_read_int32(props, Int32(MQTT_PROP_MAXIMUM_PACKET_SIZE.rawValue), &v32, false) != nil { maximumPacketSize = Int(v32) }
                if mosquitto_property_read_int16(props, Int32(MQTT_PROP_TOPIC_ALIAS_MAXIMUM.rawValue), &v16, false) != nil { topicAliasMaximum = Int(v16) }
            }
        } else {
            connackRefusal = String(cString: mosquitto_connack_string(rc))
            refusalCode = rc
        }
    }

    func onPublish(mid: Int32) {
        let known = transport.shared.withLock { $0.outbox.acknowledged(mid: mid) }
        if !known && publishing { earlyAcks.insert(mid) }
    }

    func onMessage(_ msg: mosquitto_message, _ props: OpaquePointer?) {
        let topic = String(cString: msg.topic)
        // Over max_payload: not copied, only its size goes on (the core refuses it with that size).
        let oversize = Int(msg.payloadlen) > settings.maxPayload ? Int(msg.payloadlen) : nil
        let payload: [UInt8] = oversize == nil && msg.payloadlen > 0 && msg.payload != nil
            ? Array(UnsafeRawBufferPointer(start: msg.payload, count: Int(msg.payloadlen))) : []
        var user: [String: String] = [:]
        var replyTo: ReplyTo?
        if let props {
            // MQTT 5 request/response: copied only within their bounds (`ReplyTo`).
            var responseTopic: UnsafeMutablePointer<CChar>? = nil
            if mosquitto_property_read_string(props, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), &responseTopic, false) != nil, let responseTopic {
                var data: UnsafeMutableRawPointer? = nil
                var length: UInt16 = 0
                let correlated = mosquitto_property_read_binary(props, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &data, &length, false) != nil
                replyTo = ReplyTo(topic: UnsafeRawBufferPointer(start: responseTopic, count: strlen(responseTopic)),
                                  correlation: correlated ? UnsafeRawBufferPointer(start: data, count: Int(length)) : nil)
                free(data)
            }
            free(responseTopic)
            let id = Int32(MQTT_PROP_USER_PROPERTY.rawValue)
            var name: UnsafeMutablePointer<CChar>? = nil
            var value: UnsafeMutablePointer<CChar>? = nil
            var p = mosquitto_property_read_string_pair(props, id, &name, &value, false)
            while p != nil {
                if let name, let value { user[String(cString: name)] = String(cString: value) }
                free(name)
                free(value)
                name = nil
                value = nil
                p = mosquitto_property_read_string_pair(p, id, &name, &value, true)
            }
        }
        let m = InboundMessage(topic: topic, payload: payload, retain: msg.retain, qos: Int(msg.qos), userProperties: user, oversize: oversize,
                               replyTo: replyTo)
        transport.shared.withLock { s in
            s.stats.received += 1
            if oversize != nil { s.stats.oversize += 1 }
            s.inboundCount += 1
            s.inboundBytes += MosquittoTransport.footprint(m)
        }
        transport.continuation.yield(.message(m))
    }

    // MARK: helpers

    func sleep(seconds: Double) {
        let deadline = now().adding(seconds: seconds)
        while !stopRequested() {
            let left = (deadline - now()).seconds
            if left <= 0 { return }
            var fd = pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)
            _ = poll(&fd, 1, Int32(min(left, 0.5) * 1000))
            if fd.revents & Int16(POLLIN) != 0 {
                drainWake()
            }
        }
    }

    func drainWake() {
        var buf = [UInt8](repeating: 0, count: 256)
        while read(wakeFD, &buf, 256) > 0 {}
    }

    static func describe(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue { return String(cString: strerror(errno)) }
        return String(cString: mosquitto_strerror(rc))
    }
}

/// The ledger's retained topics, for the console's feed (it keeps no copy of its own).
extension MosquittoTransport: RetainedStore {
    public func retainedBody(_ topic: String) -> PayloadBody? { shared.withLock { $0.outbox.retainedBody(topic) } }
    public func retained(under prefix: String, containing infix: String?, excluding: [String]) -> [(topic: String, body: PayloadBody)] {
        shared.withLock { $0.outbox.retained(under: prefix, containing: infix, excluding: excluding) }
    }
    public func retainedCount(under prefix: String, excluding: [String]) -> Int {
        shared.withLock { $0.outbox.retainedCount(under: prefix, excluding: excluding) }
    }
}

/// The network thread's turns come at least every 250 ms (its poll's timeout); one that comes after half the
/// keepalive means the process was paused (SIGSTOP, a frozen VM) and the broker may have given up on the
/// connection meanwhile. For a second after such a turn the transport counts as just resumed
/// (`MosquittoTransport.recentlyResumed`): what it reads first may be what the broker sent before it gave up.
struct PauseDetector {
    let limit: Double
    var last: MonotonicInstant

    init(keepalive: Double, at start: MonotonicInstant) {
        limit = keepalive / 2
        last = start
    }

    /// A turn of the loop at `now`: when the process was paused before it, until when it counts as resumed.
    mutating func turn(at now: MonotonicInstant) -> MonotonicInstant? {
        defer { last = now }
        return (now - last).seconds > limit ? now.adding(seconds: 1) : nil
    }
}
