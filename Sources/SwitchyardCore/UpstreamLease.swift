/// Whether this bridge may send anything to an upstream now. Without hot standby there is no lease and the
/// answer is always yes. Under hot standby (design.md §18) the active instance holds the bridge's client
/// id, and the broker takes it away when it stops hearing from the instance (1.5 × keepalive): the lease is
/// valid only while the instance has heard from the broker recently enough that the broker cannot have
/// given the id to another instance yet. An instance that was paused (SIGSTOP, a frozen VM) and resumes
/// therefore sends nothing upstream, even before its network thread has read that its connection is gone.
///
/// The runtime binds one for the engine's run (`UpstreamLease.$current`); every task under it (adapters,
/// their workers and transports) inherits it, and the places that send to an upstream ask `check()` right
/// before they send: the HTTP client, the LIFX LAN socket, Home Assistant's service calls. The HTTP client
/// asks `valid` again on its transfer thread right before a request is started (a pause may fall between).
public final class UpstreamLease: Sendable {
    @TaskLocal public static var current: UpstreamLease?

    let isValid: @Sendable () -> Bool
    let begins: (@Sendable () async -> Void)?
    public let name: String

    /// `isValid` must be cheap and safe from any thread. `begins` returns once the lease has begun: the
    /// engine starts each adapter, and carries out its commands, only then (a new active instance's hand-over
    /// pause, design.md §18 rule 3); it returns at once when its task is cancelled.
    public init(name: String, begins: (@Sendable () async -> Void)? = nil, isValid: @escaping @Sendable () -> Bool) {
        self.name = name
        self.begins = begins
        self.isValid = isValid
    }

    public var valid: Bool { isValid() }

    /// Waits until the lease bound to this task (if any) has begun.
    public static func begun() async {
        await current?.begins?()
    }

    /// Throws when a lease is bound and no longer valid.
    public static func check() throws {
        if let lease = current, !lease.isValid() {
            throw AdapterError(refusal(lease))
        }
    }

    /// What a request refused for an invalid lease says.
    public static func refusal(_ lease: UpstreamLease) -> String {
        "instance '\(lease.name)' is no longer sure to be the active bridge: nothing is sent upstream"
    }
}
