import SwitchyardCore

/// Which transports see each LIFX light, and since when: the one place that decides whether a light is
/// there, reachable, and over which transport (docs/topics.md "LIFX: one light, two transports").
/// A value with no I/O and no clock of its own: the adapter feeds it sightings and the time.
///
/// Each transport has its own grace:
/// - the cloud sees a light while it is absent from fewer than `cloudGrace` consecutive listings;
/// - the LAN sees a light while it answered within `lanGrace` seconds (`lan.offline_after`).
///
/// A light is available while a transport that sees it says it is reachable (the cloud's `connected`, or
/// any answer on the LAN). It is removed only when the cloud, having listed it, no longer does *and* the
/// LAN does not see it either: the LAN has no listing, so a light only the LAN knows goes offline when it
/// falls silent and is never removed. Groups and locations are the lights' (by id, whichever transport
/// named them), so they follow.
struct LIFXPresence: Sendable, Equatable {
    enum Transport: String, Sendable { case cloud, lan }

    struct Sighting: Sendable, Equatable {
        /// Consecutive cloud listings without the light; nil while the cloud has never listed it.
        var cloudMissed: Int?
        /// The light's `connected` in the last cloud listing that had it.
        var cloudConnected = false
        /// When the light last answered on the LAN; nil while it never has.
        var lanHeard: MonotonicInstant?
    }

    let cloudGrace: Int
    let lanGrace: Double
    private(set) var lights: [String: Sighting] = [:]

    init(cloudGrace: Int = 3, lanGrace: Double) {
        self.cloudGrace = max(1, cloudGrace)
        self.lanGrace = lanGrace
    }

    /// The same sightings under another LAN grace (a reload changed `offline_after`).
    func regraced(lanGrace: Double) -> LIFXPresence {
        var p = LIFXPresence(cloudGrace: cloudGrace, lanGrace: lanGrace)
        p.lights = lights
        return p
    }

    /// A complete cloud listing (id → `connected`). Returns the lights that no transport sees any more,
    /// which are forgotten here and are to be removed.
    mutating func cloudListed(_ listed: [String: Bool], now: MonotonicInstant) -> [String] {
        for (id, connected) in listed {
            lights[id, default: Sighting()].cloudMissed = 0
            lights[id]!.cloudConnected = connected
        }
        var gone: [String] = []
        for (id, s) in lights where listed[id] == nil {
            guard let missed = s.cloudMissed else { continue }
            lights[id]!.cloudMissed = missed + 1
            if missed + 1 >= cloudGrace, !lanSees(id, now: now) {
                gone.append(id)
            }
        }
        for id in gone { lights[id] = nil }
        return gone.sorted()
    }

    /// The cloud answered a request for the light: it reached it or not.
    mutating func cloudReached(_ id: String, _ reachable: Bool) {
        guard lights[id]?.cloudMissed != nil else { return }
        lights[id]!.cloudConnected = reachable
    }

    /// The cloud cannot be reached (listings keep failing): nothing it saw counts as reachable through it.
    mutating func cloudUnreachable() {
        for id in lights.keys { lights[id]!.cloudConnected = false }
    }

    /// The light answered on the LAN.
    mutating func lanHeard(_ id: String, at now: MonotonicInstant) {
        lights[id, default: Sighting()].lanHeard = now
    }

    /// Forgets a light (its transports no longer know it).
    mutating func forget(_ id: String) { lights[id] = nil }

    func cloudSees(_ id: String) -> Bool {
        guard let missed = lights[id]?.cloudMissed else { return false }
        return missed < cloudGrace
    }

    func lanSees(_ id: String, now: MonotonicInstant) -> Bool {
        guard let heard = lights[id]?.lanHeard else { return false }
        return (now - heard).seconds <= lanGrace
    }

    /// Whether a light can be reached now: the LAN hears it, or the cloud sees it and calls it connected.
    func available(_ id: String, now: MonotonicInstant) -> Bool {
        lanSees(id, now: now) || (cloudSees(id) && lights[id]?.cloudConnected == true)
    }

    /// The routing rule: over the LAN while the LAN sees the light; over the cloud when only the cloud does;
    /// when neither does, the LAN if it ever heard the light (it is looked for there), else the cloud.
    func route(_ id: String, now: MonotonicInstant) -> Transport {
        if lanSees(id, now: now) { return .lan }
        if cloudSees(id) { return .cloud }
        return lights[id]?.lanHeard != nil ? .lan : .cloud
    }
}
