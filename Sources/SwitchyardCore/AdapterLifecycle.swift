/// One adapter instance's life in the engine, as a value: its phase, and the work that waits because of
/// its phase (commands for devices it has not listed yet; work that came while a reload replaced it, or
/// before a reload's new instance listed). Every change is a transition that returns what the engine must
/// do with that work; the engine carries the actions out and keeps no lifecycle flags of its own. Pure: no
/// clock, no I/O, no actor (table-tested in `AdapterLifecycleTests`).
///
/// ```text
///            start                          listed / gave up / settle time
///   ──▶ starting ──────────────────────────────────────────────────────▶ running ──▶ failed (run threw)
///   ──▶ listing (a reload's new instance, devices carried) ──────────────┘   │           │
///                                                                   stop(successor?) ◀──────┘
///                                            draining ──▶ stopping ──▶ replaced (work handed on)
///                                                                   └──▶ stopped  (work refused)
/// ```
///
/// `Held` is a command for a device not listed yet, kept raw so that it is routed again once the adapter
/// has listed (it may name a device the listing brings); `Waiting` is work already routed to this adapter
/// that waits for an instance that can take it. A command for a device the instance may still list after
/// its first listing (one the group's previous active instance listed, one its adapter is still
/// identifying: `hold(_:bytes:expected:)`) stays held past that listing, until a later listing routes it
/// again or the start window closes (`stopAwaiting`).
public struct AdapterLifecycle<Held: Sendable, Waiting: Sendable>: Sendable {
    public enum Phase: Equatable, Sendable {
        /// The first instance of this id, running, with no listing yet.
        case starting
        /// A reload's new instance, running with the devices the old one listed; no listing of its own yet.
        case listing
        /// Listed, or said that no listing is coming (disabled, failing), or the settle time passed.
        case running
        /// Its `run` threw. Its worker still takes commands (an adapter may serve them without its loop).
        case failed
        /// Told to stop: carries out what its queue holds (the engine bounds how long). `successor`: a reload
        /// replaces it, and work for it waits for the new instance.
        case draining(successor: Bool)
        /// Its run and worker are being cancelled: what it reports from now on changes nothing.
        case stopping(successor: Bool)
        /// Stopped; what waited was handed on, and what comes until the new instance starts waits for it
        /// (`handOff`): the engine may suspend between the two (the new instance inherits from the old).
        case replaced
        /// Stopped for good (removed from the config, or the engine stopped).
        case stopped
    }

    /// What a piece of routed work is, as the phase sees it.
    public enum Arrival: Sendable {
        /// A command or `/get` for a device this adapter has listed (or carried over from the old instance).
        case listedDevice
        /// Work that does not depend on a listing (a mirror's command).
        case unlisted
    }

    /// What to do with work routed to this instance.
    public enum Route: Equatable, Sendable {
        /// Into its queue now.
        case enqueue
        /// Kept here until a phase change hands it on (`settle`, `finish`).
        case kept
        /// Not carried out: answer it, for this reason.
        case refuse(Refusal)
    }

    /// Why work is refused; the engine words the answer.
    public enum Refusal: Equatable, Sendable {
        /// The instance has stopped (its work was handed on or let go already).
        case notRunning
        /// Work waiting for an instance that can take it is at its bound.
        case waitingFull
        /// Commands held for devices not listed yet are at their bound.
        case heldFull
        /// The instance has listed, and the device is not among its devices.
        case unknown
    }

    /// Work let go by a transition, in arrival order: `waiting` to queue again (for this instance or its
    /// successor), `held` to route again.
    public struct Release: Sendable {
        public var waiting: [Waiting] = []
        public var held: [Held] = []
        /// The bytes `held` was counted for (a successor that keeps them counts them on).
        public var heldBytes = 0
        public init(waiting: [Waiting] = [], held: [Held] = [], heldBytes: Int = 0) {
            self.waiting = waiting
            self.held = held
            self.heldBytes = heldBytes
        }
        public var isEmpty: Bool { waiting.isEmpty && held.isEmpty }
    }

    /// How a stopped instance's work ends (`finish`).
    public enum Ending: Sendable {
        /// A reload's new instance takes it: it keeps the held commands (`init(bounds:carried:held:heldBytes:)`)
        /// and the waiting work is routed to it again.
        case handOver(Release)
        /// No successor: the waiting work is refused, the held commands are routed again (they then meet
        /// the adapter's absence and are answered as such).
        case drop(Release)
    }

    /// The bounds of what waits here, per instance: at most `limit` items and `bytes` bytes each of held
    /// and of waiting work (`EngineSettings.heldLimit`, `heldBytesLimit`).
    public struct Bounds: Sendable, Equatable {
        public var limit: Int
        public var bytes: Int
        public init(limit: Int, bytes: Int) {
            self.limit = limit
            self.bytes = bytes
        }
    }

    public private(set) var phase: Phase
    /// Listed, gave up listing, or given up on: from then on a command for a device it does not know is
    /// unknown. Kept through a stop: an instance replaced before it ever listed hands its held commands on.
    public private(set) var isSettled = false
    /// Its start window is open: commands for devices it may still list wait past its first listing
    /// (`hold(_:bytes:expected:)`). Closed by `stopAwaiting` (the settle time) or a failed run.
    public private(set) var awaitsDevices = true
    let bounds: Bounds
    private(set) var held: [Held] = []
    private(set) var heldBytes = 0
    private(set) var waiting: [Waiting] = []
    private(set) var waitingBytes = 0

    /// A new instance: `starting`, or `listing` when it follows a stopped instance whose held commands it
    /// keeps (`previous`, from `finish`'s `.handOver`).
    public init(bounds: Bounds, carried: Bool, held: [Held] = [], heldBytes: Int = 0) {
        self.bounds = bounds
        phase = carried ? .listing : .starting
        self.held = held
        self.heldBytes = heldBytes
    }

    /// Whether what the instance reports (listings, states, statuses) is taken.
    public var acceptsReports: Bool {
        switch phase {
        case .starting, .listing, .running, .failed, .draining: return true
        case .stopping, .replaced, .stopped: return false
        }
    }

    /// Whether the instance is on its way out (told to stop, or stopped).
    public var isEnding: Bool {
        switch phase {
        case .draining, .stopping, .replaced, .stopped: return true
        default: return false
        }
    }

    /// Counts of what waits here (for tests and health).
    public var heldCount: Int { held.count }
    public var waitingCount: Int { waiting.count }

    // MARK: arrivals

    /// Work routed to this instance: queued, kept until the instance (or its successor) can take it, or
    /// refused (its bound is reached, or the instance is gone).
    public mutating func route(_ work: Waiting, bytes: Int, _ arrival: Arrival) -> Route {
        let keep: Bool
        switch phase {
        case .starting, .running, .failed:
            return .enqueue
        case .listing:
            // A reload's new instance does not know the carried devices until it lists; a mirror's commands
            // name no device and go straight in.
            guard case .listedDevice = arrival else { return .enqueue }
            keep = true
        case .draining, .stopping, .replaced:
            keep = true
        case .stopped:
            keep = false
        }
        guard keep else { return .refuse(.notRunning) }
        guard waiting.count < bounds.limit, waitingBytes + bytes <= bounds.bytes else { return .refuse(.waitingFull) }
        waiting.append(work)
        waitingBytes += bytes
        return .kept
    }

    /// A command for a device this instance has not listed: held until it lists (bounded), or refused as
    /// unknown once it has. `expected`: a device it may still list (the group knew it, or its adapter lists
    /// it but is still identifying it), held after the first listing too while the start window is open.
    public mutating func hold(_ message: Held, bytes: Int, expected: Bool = false) -> Route {
        guard !isSettled || expected && awaitsDevices && phase != .stopped else { return .refuse(.unknown) }
        guard held.count < bounds.limit, heldBytes + bytes <= bounds.bytes else { return .refuse(.heldFull) }
        held.append(message)
        heldBytes += bytes
        return .kept
    }

    // MARK: transitions

    /// The instance has listed its devices, said that none is coming (disabled or failing), or the settle
    /// time has passed: `running`. Returns what waited for that: work to queue to it, held commands to route
    /// again. Nothing when it had settled already or is ending.
    public mutating func settle() -> Release {
        guard phase == .starting || phase == .listing else { return Release() }
        phase = .running
        isSettled = true
        return takeAll()
    }

    /// Its `run` threw: `failed`, settled if it was not, its start window closed (nothing more will be
    /// listed): what waited is released as by `settle`. An instance on its way out stays on its way.
    public mutating func runFailed() -> Release {
        switch phase {
        case .starting, .listing, .running:
            phase = .failed
            isSettled = true
            awaitsDevices = false
            return takeAll()
        default:
            return Release()
        }
    }

    /// A settled instance listed again: the commands held for devices it may still list are routed again
    /// (the listing may have brought theirs; the others are held again, in their order).
    public mutating func relisted() -> Release {
        guard isSettled, !isEnding else { return Release() }
        return takeHeld()
    }

    /// The start window has closed (the settle time passed): nothing waits for a device any more. Returns
    /// the commands that did, to route again (and be refused as unknown) when the instance has settled.
    public mutating func stopAwaiting() -> Release {
        awaitsDevices = false
        guard isSettled, !isEnding else { return Release() }
        return takeHeld()
    }

    /// Told to stop, after carrying out its queue: work for it from now on waits (for a successor, or to
    /// be refused). Returns false when it was told already.
    public mutating func beginStop(successor: Bool) -> Bool {
        guard !isEnding else { return false }
        phase = .draining(successor: successor)
        return true
    }

    /// Its queue is carried out (or the drain time is up): its run and worker are cancelled now.
    public mutating func cancel() {
        if case .draining(let successor) = phase { phase = .stopping(successor: successor) }
    }

    /// Its run and worker have returned: `replaced` with its work handed on, or `stopped` with its work
    /// let go (`Ending`).
    public mutating func finish() -> Ending {
        let successor: Bool
        switch phase {
        case .draining(let s), .stopping(let s): successor = s
        default: successor = false
        }
        phase = successor ? .replaced : .stopped
        let release = takeAll()
        return successor ? .handOver(release) : .drop(release)
    }

    /// A replaced instance's successor starts: what came after `finish` is its now (the instance keeps
    /// nothing more: anything routed to it from here is refused as not running).
    public mutating func handOff() -> Release {
        guard phase == .replaced else { return Release() }
        phase = .stopped
        return takeAll()
    }

    private mutating func takeHeld() -> Release {
        defer {
            held = []
            heldBytes = 0
        }
        return Release(held: held, heldBytes: heldBytes)
    }

    private mutating func takeAll() -> Release {
        defer {
            waiting = []
            waitingBytes = 0
            held = []
            heldBytes = 0
        }
        return Release(waiting: waiting, held: held, heldBytes: heldBytes)
    }
}
