/// The SDK's `performAutoConnect` (docs/upstreams/nova.md §2.8), as a pure plan over a snapshot of flashes.
/// Flashes with an unknown signal (RSSI 127: a just-received advertisement proves presence) rank after
/// the ones with a known signal and are not held back by `minSignal`.
public struct AutoConnectRules: Sendable, Equatable {
    public var maxFlashes = 1
    /// Percent.
    public var minSignal = 10
    public var whitelist: Set<String> = []
    public var blacklist: Set<String> = []
    public init(maxFlashes: Int = 1, minSignal: Int = 10, whitelist: Set<String> = [], blacklist: Set<String> = []) {
        self.maxFlashes = maxFlashes
        self.minSignal = minSignal
        self.whitelist = whitelist
        self.blacklist = blacklist
    }
}

/// A flash's status, as the SDK names them (NVFlash.h) and as published in `status`.
public enum NovaFlashStatus: String, Sendable, Equatable {
    case available, unavailable, connecting, ready, busy
    /// Holding (or opening) a link.
    public var isConnected: Bool { self == .connecting || self == .ready || self == .busy }
}

public struct AutoConnectCandidate: Sendable, Equatable {
    public typealias Status = NovaFlashStatus
    public var address: String
    public var status: Status
    /// Percent, nil when unknown.
    public var signal: Int?
    public init(address: String, status: Status, signal: Int?) {
        self.address = address
        self.status = status
        self.signal = signal
    }
}

public struct AutoConnectPlan: Sendable, Equatable {
    public var connect: [String] = []
    public var disconnect: [String] = []
}

public func planAutoConnect(_ flashes: [AutoConnectCandidate], rules: AutoConnectRules) -> AutoConnectPlan {
    let ranked = flashes.filter { $0.status != .unavailable }.sorted { a, b in
        switch (a.signal, b.signal) {
        case let (x?, y?): return x != y ? x > y : a.address < b.address
        case (.some, nil): return true
        case (nil, .some): return false
        case (nil, nil): return a.address < b.address
        }
    }
    func qualifies(_ f: AutoConnectCandidate) -> Bool {
        (f.signal.map { $0 >= rules.minSignal } ?? true)
            && (rules.whitelist.isEmpty || rules.whitelist.contains(f.address)) && !rules.blacklist.contains(f.address)
    }
    var plan = AutoConnectPlan()
    var count = 0
    // Existing connections claim their slots first (SDK 2.0.1: don't drop a good link for a closer flash).
    for f in ranked where f.status.isConnected {
        if count < rules.maxFlashes && qualifies(f) { count += 1 } else { plan.disconnect.append(f.address) }
    }
    for f in ranked where !f.status.isConnected {
        if count < rules.maxFlashes && qualifies(f) {
            plan.connect.append(f.address)
            count += 1
        }
    }
    return plan
}
