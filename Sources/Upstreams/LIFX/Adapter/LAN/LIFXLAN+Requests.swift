import SwitchyardCore

/// The LAN transport's requests on the wire, with the protocol's rules (docs/upstreams/lifx-lan.md): one
/// random source ≥ 2, a sequence per device, replies matched on (source, sequence, target) and never on the
/// sender's address, at most 20 datagrams a second to one device, retries with growing gaps and a new
/// sequence each, at most `gaps.count` datagrams per request. Counts what it refuses. Owned by the LAN
/// transport: the socket's reader and the requests run in its isolation, so a reply reaches the request
/// waiting for it without another hop.
struct LIFXLANRequests {
    /// One request under one sequence: the replies so far, until `complete` says they are all there (one
    /// for most requests; a zone read takes as many as the zone count needs), and whoever waits for them.
    /// A reply may come before anyone waits (the first datagram of a command goes out before its wait).
    struct Pending {
        let expect: Set<UInt16>
        var replies: [LIFXLANPacket] = []
        let complete: @Sendable ([LIFXLANPacket]) -> Bool
        var done = false
        var waiter: CheckedContinuation<[LIFXLANPacket], Never>?

        mutating func finish() {
            done = true
            waiter?.resume(returning: replies)
            waiter = nil
        }
    }

    /// One attempt of a request: sent under `seq`, its replies due by `deadline`.
    struct Attempt: Sendable {
        var target: UInt64
        var seq: UInt8
        var deadline: MonotonicInstant
    }

    static let one: @Sendable ([LIFXLANPacket]) -> Bool = { !$0.isEmpty }
    /// Replies one request may collect: a zone read of the most zones taken, in single-zone replies, twice over.
    static let maxReplies = 2 * LIFXLANMessage.maxZones
    static let minSpacing = 0.05

    let source = UInt32.random(in: 2...UInt32.max)
    /// Waits before each retry (the first datagram goes at once): 5 datagrams at most.
    var gaps: [Double] = [0.2, 0.3, 0.5, 1, 2]
    var sequences: [UInt64: UInt8] = [:]
    var nextSend: [UInt64: MonotonicInstant] = [:]
    var pending: [UInt64: [UInt8: Pending]] = [:]
    /// Where each device answers now (discovery moves it): every attempt of a request goes there.
    var endpoints: [UInt64: LIFXLANEndpoint] = [:]
    var counts = (sent: 0, received: 0, malformed: 0, foreign: 0, unmatched: 0, retries: 0, timeouts: 0)

    mutating func nextSequence(_ target: UInt64) -> UInt8 {
        let s = sequences[target, default: UInt8.random(in: 0...255)] &+ 1
        sequences[target] = s
        return s
    }

    /// When the next datagram to a device may go (at most 20 a second), reserving that slot.
    mutating func slot(_ target: UInt64, now: MonotonicInstant) -> MonotonicInstant {
        let at = max(now, nextSend[target] ?? now)
        nextSend[target] = at.adding(seconds: Self.minSpacing)
        return at
    }

    /// Whether a datagram may go to the device at once; if so, the slot is taken.
    mutating func slotNow(_ target: UInt64, now: MonotonicInstant) -> Bool {
        guard (nextSend[target] ?? now) <= now else { return false }
        nextSend[target] = now.adding(seconds: Self.minSpacing)
        return true
    }

    var metrics: [String: JSONValue] {
        ["sent": JSONValue(counts.sent), "received": JSONValue(counts.received), "malformed": JSONValue(counts.malformed),
         "foreign": JSONValue(counts.foreign), "unmatched": JSONValue(counts.unmatched), "retries": JSONValue(counts.retries),
         "timeouts": JSONValue(counts.timeouts)]
    }
}

/// A request as the transport sends it: type, payload, what answers it.
struct LIFXLANRequest: Sendable {
    var type: UInt16
    var payload: [UInt8] = []
    var expect: Set<UInt16>
    /// A Set: sent with ack_required, answered by the Acknowledgement.
    var ack = false
    var complete: @Sendable ([LIFXLANPacket]) -> Bool = LIFXLANRequests.one

    /// A Set, acknowledged.
    static func set(_ type: UInt16, _ payload: [UInt8]) -> LIFXLANRequest {
        LIFXLANRequest(type: type, payload: payload, expect: [LIFXLANMessage.acknowledgement], ack: true)
    }
}

extension LIFXLAN {
    /// Reads the socket until it closes: matches replies to requests, takes discovery answers in.
    func receive(_ datagrams: AsyncStream<LIFXLANDatagram>) async {
        for await d in datagrams {
            requests.counts.received += 1
            guard let p = LIFXLANPacket.decode(d.bytes) else { requests.counts.malformed += 1; continue }
            guard p.header.source == requests.source else { requests.counts.foreign += 1; continue }
            // A reply to a request (or the device saying it does not know the request's type).
            let unhandled = p.header.type == LIFXLANMessage.stateUnhandled
            if var w = requests.pending[p.header.target]?[p.header.sequence], !w.done, w.expect.contains(p.header.type) || unhandled {
                if unhandled {
                    w.replies = [p]
                } else {
                    // Replies held per request are bounded: more than a zone read can need is not taken.
                    guard w.replies.count < LIFXLANRequests.maxReplies else { requests.counts.unmatched += 1; continue }
                    w.replies.append(p)
                }
                heard(LIFXSerial.serial(p.header.target))
                if unhandled || w.complete(w.replies) {
                    if w.waiter != nil {
                        requests.pending[p.header.target]?[p.header.sequence] = nil
                        w.finish()
                    } else {
                        // Nobody waits yet (the first datagram of a command goes before its wait): kept for it.
                        w.done = true
                        requests.pending[p.header.target]?[p.header.sequence] = w
                    }
                } else {
                    requests.pending[p.header.target]?[p.header.sequence] = w
                }
                continue
            }
            if p.header.type == LIFXLANMessage.stateService {
                discovered(p, from: d.from)
            } else {
                requests.counts.unmatched += 1
            }
        }
    }

    /// Sends one attempt of a request to a device now (its slot reserved by the caller).
    func send(_ r: LIFXLANRequest, to target: UInt64) -> LIFXLANRequests.Attempt {
        let seq = requests.nextSequence(target)
        // A request still waiting under this sequence (256 requests ago) is answered: time-out.
        requests.pending[target]?[seq]?.finish()
        requests.pending[target, default: [:]][seq] = LIFXLANRequests.Pending(expect: r.expect, complete: r.complete)
        requests.counts.sent += 1
        let packet = LIFXLANPacket(type: r.type, source: requests.source, target: target, sequence: seq, ackRequired: r.ack, payload: r.payload)
        if let e = requests.endpoints[target] { socket?.send(packet.bytes, to: e) }
        return LIFXLANRequests.Attempt(target: target, seq: seq, deadline: clock.now().adding(seconds: requests.gaps[0]))
    }

    /// The first attempt of a request, sent at once if the device's pace allows it (nil otherwise: the
    /// request then goes when it is awaited).
    func start(_ r: LIFXLANRequest, serial: String) -> LIFXLANRequests.Attempt? {
        guard let d = devices[serial], socket != nil, requests.slotNow(d.target, now: clock.now()) else { return nil }
        return send(r, to: d.target)
    }

    /// A request and its replies: until a reply of an expected type (or StateUnhandled, returned at once)
    /// arrives, retried with a new sequence after each gap; nil when every attempt timed out. `started`: its
    /// first attempt, already on the wire.
    func request(_ r: LIFXLANRequest, serial: String, started: LIFXLANRequests.Attempt? = nil) async -> [LIFXLANPacket]? {
        guard let target = devices[serial]?.target else { return nil }
        var collected: [LIFXLANPacket] = []
        for (i, gap) in requests.gaps.enumerated() {
            if Task.isCancelled { break }
            var attempt: LIFXLANRequests.Attempt
            if i == 0, let started {
                attempt = started
            } else {
                if i > 0 { requests.counts.retries += 1 }
                let at = requests.slot(target, now: clock.now())
                if at > clock.now() { try? await clock.sleep(until: at) }
                if Task.isCancelled || socket == nil { break }
                attempt = send(r, to: target)
                attempt.deadline = clock.now().adding(seconds: gap)
            }
            let replies = await replies(attempt)
            if replies.first?.header.type == LIFXLANMessage.stateUnhandled { return replies }
            collected += replies
            if r.complete(collected) { return collected }
            if collected.count > LIFXLANRequests.maxReplies { break }
        }
        requests.counts.timeouts += 1
        requestTimedOut = true
        return nil
    }

    /// The replies to one attempt, by its deadline (what came, possibly nothing). The time-out is a child of
    /// the wait and ends with it: cut short once the replies are in, or answered at once when the waiting
    /// task is cancelled, so that nothing waits for a reply forever.
    func replies(_ a: LIFXLANRequests.Attempt) async -> [LIFXLANPacket] {
        if let w = requests.pending[a.target]?[a.seq], w.done {
            requests.pending[a.target]?[a.seq] = nil
            return w.replies
        }
        guard requests.pending[a.target]?[a.seq] != nil else { return [] }
        return await withTaskGroup(of: Void.self) { timer -> [LIFXLANPacket] in
            timer.addTask { [clock] in
                try? await clock.sleep(until: a.deadline)
                await self.expire(a)
            }
            let r = await withCheckedContinuation { (c: CheckedContinuation<[LIFXLANPacket], Never>) in
                guard var w = requests.pending[a.target]?[a.seq] else { return c.resume(returning: []) }
                if w.done { requests.pending[a.target]?[a.seq] = nil; return c.resume(returning: w.replies) }
                w.waiter = c
                requests.pending[a.target]?[a.seq] = w
            }
            timer.cancelAll()
            return r
        }
    }

    /// An attempt's time is up: it is answered with what it has (nothing, or part of a zone read).
    func expire(_ a: LIFXLANRequests.Attempt) {
        guard var w = requests.pending[a.target]?[a.seq] else { return }
        requests.pending[a.target]?[a.seq] = nil
        w.finish()
    }

    /// One request and its reply of type `expect`; nil on time-out or when the device does not know the type.
    func ask(_ serial: String, _ type: UInt16, _ payload: [UInt8] = [], expect: UInt16) async -> LIFXLANPacket? {
        let r = await request(LIFXLANRequest(type: type, payload: payload, expect: [expect]), serial: serial)?.first
        return r?.header.type == expect ? r : nil
    }

    /// A request answered by one packet or several (`complete` says when they are all in): the replies, a
    /// lone StateUnhandled when the device does not know the type, nil when it did not answer.
    func ask(_ serial: String, _ type: UInt16, _ payload: [UInt8] = [], expect: Set<UInt16>,
             complete: @escaping @Sendable ([LIFXLANPacket]) -> Bool) async -> [LIFXLANPacket]? {
        await request(LIFXLANRequest(type: type, payload: payload, expect: expect, complete: complete), serial: serial)
    }

    /// Tagged GetService to each address: the answers come back as discovery.
    func discover(_ targets: [LIFXLANEndpoint]) {
        for t in targets {
            let p = LIFXLANPacket(type: LIFXLANMessage.getService, source: requests.source, target: 0, sequence: 0, tagged: true)
            requests.counts.sent += 1
            socket?.send(p.bytes, to: t)
        }
    }

    /// The transport stops: every request still waiting is answered with what it has.
    func finishRequests() {
        for (target, w) in requests.pending { for (seq, _) in w { requests.pending[target]?[seq]?.finish() } }
        requests.pending = [:]
    }
}
