import SwitchyardCore

/// What a transport tells the router. Both transports report only so, each through the one closure it is
/// given (`LIFXReporter`), in order: what it saw of the lights, in its own terms (`LIFXLAN.Event`,
/// `LIFXCloud.Event`), or what the bridge shows of the transport. Neither holds the adapter's context: the
/// router is the one that talks to the engine.
enum LIFXReport<Saw: Sendable>: Sendable {
    case saw(Saw)
    /// The transport's figures, for bridge/health.
    case metrics([String: JSONValue])
    /// An upstream request went out; `error` nil when it went well (bridge/health's counts).
    case request(error: String?)
    /// A warning or error for bridge/log.
    case log(BridgeLogLevel, String)
    /// The adapter's status as the transport sees it (the cloud's listing, its token).
    case status(AdapterStatus)
}

/// Runs on the transport's executor until it reaches the router's (`nonisolated(nonsending)`), so that what
/// a transport's tasks report (a command's revert, a poll's reading) reaches the router in the order the
/// transport made it, as `AdapterHost` does for the engine.
typealias LIFXReporter<Saw: Sendable> = nonisolated(nonsending) @Sendable (LIFXReport<Saw>) async -> Void
