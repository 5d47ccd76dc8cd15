import SwitchyardCore

/// The in-memory twin of the local network, for the unit tier (as `ManualClock` is of the clock). As the LAN
/// transport's `LIFXLANNetwork` it gives each run a socket whose datagrams go, in memory, to `peer`: a closure
/// the test gives (devices played by the LAN simulator's own byte handling, silence, a table), whose answers
/// are on the socket's stream before `send` returns. It records every datagram the bridge sent, and `deliver`
/// puts any datagram on the stream (a stray or malformed packet, a device answering from a new address). No
/// socket, no thread: what the transport does with the bytes is all that is tested.
public final class LIFXLANTwin: LIFXLANNetwork, Sendable {
    /// Answers one datagram the bridge sent to `to`: the datagrams that come back (each with its sender).
    public typealias Peer = @Sendable (_ bytes: [UInt8], _ to: LIFXLANEndpoint) -> [LIFXLANDatagram]

    /// A datagram the bridge sent: its bytes, where to, and when on the twin's clock (nil without one).
    public struct Sent: Sendable {
        public var bytes: [UInt8]
        public var to: LIFXLANEndpoint
        public var at: MonotonicInstant?
    }

    /// One run's socket: its stream is fed by the twin, bounded as the kernel's socket is, and says when its
    /// reader has taken everything and waits for more (`quiet`).
    final class Socket: LIFXLANSocket {
        struct Inbox {
            var queue: [LIFXLANDatagram] = []
            var head = 0
            var reader: CheckedContinuation<LIFXLANDatagram?, Never>?
            var finished = false
            var dropped = 0
            var waiting: Int { queue.count - head }
        }

        let inbox = Locked(Inbox())
        /// The twin, until the run ends (it then drops the socket: no cycle stays).
        let twin: LIFXLANTwin
        let bound: Int
        let datagrams: AsyncStream<LIFXLANDatagram>

        init(twin: LIFXLANTwin, bound: Int) {
            self.twin = twin
            self.bound = bound
            let inbox = self.inbox
            datagrams = AsyncStream(unfolding: { await Socket.next(inbox) })
        }

        var dropped: Int { inbox.withLock { $0.dropped } }
        /// The reader has taken every datagram and waits for the next (or the socket is closed).
        var quiet: Bool { inbox.withLock { $0.finished || ($0.waiting == 0 && $0.reader != nil) } }

        /// The next datagram, waiting for one; nil once the socket is closed or the reading task is cancelled.
        static func next(_ inbox: Locked<Inbox>) async -> LIFXLANDatagram? {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<LIFXLANDatagram?, Never>) in
                    let ready = inbox.withLock { s -> LIFXLANDatagram?? in
                        if s.waiting > 0 {
                            let d = s.queue[s.head]
                            s.head += 1
                            if s.head == s.queue.count { s.queue = []; s.head = 0 }
                            return .some(d)
                        }
                        if s.finished || Task.isCancelled { return .some(nil) }
                        s.reader = c
                        return nil
                    }
                    if let ready { c.resume(returning: ready) }
                }
            } onCancel: {
                finish(inbox)
            }
        }

        static func finish(_ inbox: Locked<Inbox>) {
            let reader = inbox.withLock { s -> CheckedContinuation<LIFXLANDatagram?, Never>? in
                s.finished = true
                defer { s.reader = nil }
                return s.reader
            }
            reader?.resume(returning: nil)
        }

        func receive(_ d: LIFXLANDatagram) {
            let reader = inbox.withLock { s -> CheckedContinuation<LIFXLANDatagram?, Never>? in
                guard !s.finished else { return nil }
                if let r = s.reader {
                    s.reader = nil
                    return r
                }
                if s.waiting >= bound {
                    s.dropped += 1
                } else {
                    s.queue.append(d)
                }
                return nil
            }
            reader?.resume(returning: d)
        }

        @discardableResult
        func send(_ bytes: [UInt8], to e: LIFXLANEndpoint) -> Bool {
            for reply in twin.sent(bytes, to: e) { receive(reply) }
            return true
        }
    }

    struct State {
        var peer: Peer
        var sent: [Sent] = []
        var socket: Socket?
        var ports: [UInt16] = []
    }

    let state: Locked<State>
    let clock: (any BridgeClock)?
    /// Datagrams that may wait to be read (the kernel socket's bound).
    let bound: Int

    public init(clock: (any BridgeClock)? = nil, bound: Int = 1024, peer: @escaping Peer = { _, _ in [] }) {
        self.clock = clock
        self.bound = bound
        state = Locked(State(peer: peer))
    }

    /// From now on, datagrams the bridge sends are answered by `peer`.
    public func answer(with peer: @escaping Peer) { state.withLock { $0.peer = peer } }

    /// Every datagram the bridge sent, in order.
    public var sent: [Sent] { state.withLock { $0.sent } }
    public func clearSent() { state.withLock { $0.sent = [] } }
    /// Whether a run has the socket open now.
    public var isOpen: Bool { state.withLock { $0.socket != nil } }
    /// The local port each run asked for, in order.
    public var ports: [UInt16] { state.withLock { $0.ports } }
    /// Datagrams the open socket dropped (its reader was `bound` behind).
    public var dropped: Int { state.withLock { $0.socket?.dropped ?? 0 } }
    /// The open socket's reader has taken every datagram so far and waits for the next (true with no socket
    /// open): a test that moves a manual clock waits for this first, so that no reply is still unread when
    /// the clock passes the time-out of the request it answers.
    public var quiet: Bool { state.withLock { $0.socket }?.quiet ?? true }

    /// Puts a datagram on the open socket's stream, as if `from` had sent it; false when no run has it open.
    @discardableResult
    public func deliver(_ bytes: [UInt8], from: LIFXLANEndpoint) -> Bool {
        guard let socket = state.withLock({ $0.socket }) else { return false }
        socket.receive(LIFXLANDatagram(bytes: bytes, from: from))
        return true
    }

    func sent(_ bytes: [UInt8], to e: LIFXLANEndpoint) -> [LIFXLANDatagram] {
        let at = clock?.now()
        let peer = state.withLock { s -> Peer in
            s.sent.append(Sent(bytes: bytes, to: e, at: at))
            return s.peer
        }
        return peer(bytes, e)
    }

    public func withSocket<R>(localPort: UInt16, isolation: isolated (any Actor)?,
                              _ body: (any LIFXLANSocket) async throws -> R) async throws -> R {
        let socket = Socket(twin: self, bound: bound)
        try state.withLock { s in
            guard s.socket == nil else { throw AdapterError("LIFX LAN: the twin's socket is open already") }
            s.socket = socket
            s.ports.append(localPort)
        }
        return try await withTeardown { try await body(socket) } teardown: {
            self.state.withLock { $0.socket = nil }
            Socket.finish(socket.inbox)
        }
    }
}
