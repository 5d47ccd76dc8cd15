/// What one instance of a standby group (design.md §18) knows of the others, and when it may take the
/// bridge's client id: a value fed what its watching connection reads on `<base>/bridge/instances/<name>`
/// (each instance's role, retained, with a Last Will of its own) and the time; no I/O, no clock of its own
/// (table-tested in `StandbyWatchTests`).
///
/// It decides only *when to try*. That two instances never serve at once is the broker's to enforce: the
/// bridge's client id is held by one connection at a time, and an instance that loses it stops (the
/// runtime's `StandbyService`). A wrong guess here costs one takeover, never two actives.
public struct StandbyWatch: Sendable {
    public enum Role: String, Sendable, Equatable {
        case standby, active, offline
    }

    /// What an instance last said of itself, and whether it said it while this watcher was connected (a
    /// retained message replayed at subscribe time may be left over from an instance that died while the
    /// broker was down, with persistence on: it is believed only once that instance says it again).
    public struct Claim: Sendable, Equatable {
        public var role: Role
        public var live: Bool
        public var since: MonotonicInstant
    }

    public enum Decision: Sendable, Equatable {
        /// Another instance is active (or may be): keep watching.
        case wait
        /// Nobody is: take the client id (`from` is the instance that was last seen active, if any).
        case takeOver(from: String?, reason: String)
    }

    public let me: String
    /// How long nobody must be active before this instance tries (the group's own spread is added by the
    /// caller: `jitter`).
    public let takeoverDelay: Double
    /// How long a replayed `active` claim is believed without being said again.
    public let confirmWithin: Double
    public private(set) var claims: [String: Claim] = [:]
    /// Since when nobody has been (believably) active; nil while someone is, or while not connected.
    public private(set) var vacantSince: MonotonicInstant?
    /// The instance last seen active and how that ended (for the takeover event).
    public private(set) var lastActive: (name: String, ended: String, at: MonotonicInstant)?
    var connectedAt: MonotonicInstant?

    public init(me: String, takeoverDelay: Double, confirmWithin: Double) {
        self.me = me
        self.takeoverDelay = takeoverDelay
        self.confirmWithin = confirmWithin
    }

    /// The watching connection is (again) connected: what it is told from now on is news, and everything
    /// it knew is to be said again (the runtime asks every instance to, `bridge/instances/ping`).
    public mutating func connected(now: MonotonicInstant) {
        connectedAt = now
        for k in claims.keys { claims[k]?.live = false }
        vacantSince = nil
    }

    /// This instance was active and is not any more (its connection ended, or it was paused): what it knew
    /// of the others may be as old as its active phase, and a pause may have hidden everything said while it
    /// lasted. It starts again as if its watching connection had just connected: nobody is believed gone
    /// before each has had `confirmWithin` to say it again (the runtime asks them), and the vacancy is timed
    /// from now. This instance is then the one last active: a takeover that follows, by itself or by
    /// another (unless another is seen active and gone meanwhile), is from it, its gap from now.
    public mutating func activePhaseEnded(now: MonotonicInstant) {
        if connectedAt != nil { connected(now: now) }
        vacantSince = nil
        lastActive = (me, "its connection ended", now)
    }

    /// The watching connection is gone: nothing it knew is current.
    public mutating func disconnected() {
        connectedAt = nil
        vacantSince = nil
    }

    /// A message on `bridge/instances/<name>`: `role` nil for an empty payload (the topic cleared).
    public mutating func saw(_ name: String, role: Role?, replayed: Bool, now: MonotonicInstant) {
        let before = claims[name]
        if let role {
            claims[name] = Claim(role: role, live: !replayed, since: before?.role == role && replayed ? before!.since : now)
        } else {
            claims[name] = nil
        }
        if name != me, before?.role == .active, role != .active {
            lastActive = (name, role == .offline ? "its connection ended (Last Will)" : role == nil ? "its claim was cleared" : "it stepped down", now)
            // The vacancy dates from the moment the active instance's claim ended, not from the next look.
            if connectedAt != nil, activeOther(now: now) == nil, vacantSince == nil { vacantSince = now }
        }
    }

    /// The other instance that may be serving now: one that said `active` while we watched, or whose replayed
    /// `active` is still within `confirmWithin` of our connecting.
    func activeOther(now: MonotonicInstant) -> String? {
        guard let connectedAt else { return nil }
        for (name, c) in claims.sorted(by: { $0.key < $1.key }) where name != me && c.role == .active {
            if c.live || (now - connectedAt).seconds < confirmWithin { return name }
        }
        return nil
    }

    /// Called often (every event and on a timer): whether to take over now. `jitter` (0…1 of the delay,
    /// chosen once per instance) spreads the group's attempts.
    public mutating func decide(now: MonotonicInstant, jitter: Double = 0) -> Decision {
        guard connectedAt != nil else { return .wait }
        if activeOther(now: now) != nil {
            vacantSince = nil
            return .wait
        }
        let since = vacantSince ?? now
        vacantSince = since
        guard (now - since).seconds >= takeoverDelay * (1 + jitter) else { return .wait }
        if let last = lastActive { return .takeOver(from: last.name, reason: last.ended) }
        // A replayed claim nobody confirmed: its instance is gone.
        if let stale = claims.first(where: { $0.key != me && $0.value.role == .active }) {
            return .takeOver(from: stale.key, reason: "its claim was not confirmed within \(confirmWithin) s")
        }
        return .takeOver(from: nil, reason: "no instance is active")
    }
}
