/// One upstream (LIFX cloud, Nova BLE, an Imp agent…). An adapter never builds a topic, never
/// publishes and never parses an MQTT payload: it declares devices and capabilities, receives typed,
/// already-validated commands, and reports state and availability through its `AdapterContext`.
public protocol Adapter: Sendable {
    /// The topic segment and config key: `lifx`, `nova`, `imp`, `virtual`. Written once, as the adapter
    /// type's `static let id`, which its `Upstream.key` returns too.
    var id: String { get }
    /// Name prefixes the adapter uses as namespaces (`group/`), refused for device names.
    var reservedPrefixes: [String] { get }
    /// Runs until cancelled: lists devices, polls, keeps connections. Report through `context`.
    func run(context: AdapterContext) async throws
    /// Carries out a validated command. Throw `AdapterError` with a message a user can act on.
    func perform(_ command: DeviceCommand, context: AdapterContext) async throws
    /// Takes a command in, in arrival order, and returns what to wait on for its outcome. The core
    /// calls this for every command and waits for the outcome off its queue, so an adapter that queues
    /// and merges requests (LIFX) sees the next command while the previous one is still on the wire.
    /// The default carries the command out at once with `perform`.
    func accept(_ command: DeviceCommand, context: AdapterContext) async throws -> PendingCommand
    /// Takes one command for each of several of this adapter's devices at once (a group's or a scene's
    /// devices: design.md §20), and returns what to wait on for each, in the same order. An adapter whose
    /// upstream takes one request for many devices makes it one (LIFX: one cloud request whose selector
    /// names them, one LAN hand-over). The default takes them one by one with `accept`. A command it refuses
    /// is a `PendingCommand` that throws: the others still go.
    func acceptBatch(_ commands: [DeviceCommand], context: AdapterContext) async -> [PendingCommand]
    /// Re-reads one device from upstream now (`/get`).
    func refresh(deviceID: String, context: AdapterContext) async throws
    /// Re-lists every device now (`bridge/request/devices/refresh`).
    func refreshAll(context: AdapterContext) async throws
    /// Adapter-specific bridge requests (`bridge/request/<adapter>/<path>`); nil when unknown.
    func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue?
    /// Called before `run` when a reload replaces `previous` (stopped by now, same id) with this adapter:
    /// takes over what the old instance knew of its upstream that no single listing says again. The
    /// default takes nothing.
    func inherit(from previous: any Adapter) async
    /// Called before `run` when a standby instance takes over (design.md §18): the last states the group's
    /// previous active instance published for this adapter's devices, by device id. An adapter whose devices'
    /// truth is upstream ignores them (the default); one that keeps state itself (the virtual devices) starts
    /// from them.
    func restore(states: [String: [String: JSONValue]]) async

    /// The devices the user disabled (the `disabled` device option, by stable id), before `run` and whenever
    /// they change: an adapter that can leaves them alone (no polling, no connection). The engine ignores
    /// what it reports for them either way. The default does nothing.
    func setDisabled(_ deviceIDs: Set<String>) async
}

/// An adapter that mirrors an upstream's own topic tree under `<base>/<id>/` (the Home Assistant
/// mirror) instead of declaring devices. The core still owns the publishing (through
/// `AdapterContext.publish`), the outbox and the inbound checks; commands under `<base>/<id>/…/set`
/// (and `/get`) reach `command(path:payload:)` raw, in arrival order, after the retained-flag, age and
/// size checks.
public protocol MirrorAdapter: Adapter {
    /// `path` is relative to `<base>/<id>/`, e.g. `light/kitchen/set`.
    func command(path: String, payload: [UInt8], context: AdapterContext) async throws
}

/// The outcome of an accepted command, still to come.
public struct PendingCommand: Sendable {
    public let wait: @Sendable () async throws -> Void
    /// Carried out already (`done`): the core does not wait on it.
    let isDone: Bool
    public init(_ wait: @escaping @Sendable () async throws -> Void) {
        self.wait = wait
        isDone = false
    }
    private init(done: Void) {
        wait = {}
        isDone = true
    }
    /// A command carried out by the time `accept` returned (what the default `accept` gives).
    public static let done = PendingCommand(done: ())
    /// A command refused: waiting on it throws `error`.
    public static func failed(_ error: any Error) -> PendingCommand { PendingCommand { throw error } }
}

extension Adapter {
    public var reservedPrefixes: [String] { [] }
    public func accept(_ command: DeviceCommand, context: AdapterContext) async throws -> PendingCommand {
        try await perform(command, context: context)
        return .done
    }
    public func acceptBatch(_ commands: [DeviceCommand], context: AdapterContext) async -> [PendingCommand] {
        var out: [PendingCommand] = []
        out.reserveCapacity(commands.count)
        for c in commands {
            do { out.append(try await accept(c, context: context)) } catch { out.append(.failed(error)) }
        }
        return out
    }
    public func refreshAll(context: AdapterContext) async throws {}
    public func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? { nil }
    public func inherit(from previous: any Adapter) async {}
    public func restore(states: [String: [String: JSONValue]]) async {}
    public func setDisabled(_ deviceIDs: Set<String>) async {}
}

/// One device's fields to merge into its state and, when known, its availability (`AdapterContext.report`).
public struct DeviceReport: Sendable, Equatable {
    public var deviceID: String
    public var fields: [String: JSONValue]
    public var available: Bool?
    public init(_ deviceID: String, fields: [String: JSONValue] = [:], available: Bool? = nil) {
        self.deviceID = deviceID
        self.fields = fields
        self.available = available
    }
}

/// A message a mirror adapter publishes under `<base>/<adapter>/`.
public struct MirrorMessage: Sendable, Equatable {
    /// Relative to `<base>/<adapter>/`, e.g. `light/kitchen/state`.
    public var relative: String
    public var payload: [UInt8]
    public var retain: Bool
    public init(_ relative: String, _ payload: [UInt8], retain: Bool) {
        self.relative = relative
        self.payload = payload
        self.retain = retain
    }
}

/// What an adapter's reports go to: the engine (`BridgeEngine.Host`, one per adapter instance), or in a
/// test a twin that records them (`RecordingAdapterHost` in SwitchyardTestSupport). Each call is what the
/// `AdapterContext` method of the same name documents. Every call runs on the caller's executor until it
/// reaches the host's own (`nonisolated(nonsending)`, as the context's methods do), with no stop on the
/// global executor where a later report could overtake an earlier one: an adapter actor's reports from
/// several of its tasks arrive in the order the actor made them (ReportOrderTests), as long as those tasks
/// have one priority (an actor runs its queue by priority; the engine's adapter tasks all inherit one).
/// A witness must say `nonisolated(nonsending)` too: a plain `async` one brings the hop back.
public protocol AdapterHost: Sendable {
    nonisolated(nonsending) func setDevices(_ devices: [DeviceDescriptor], authoritative: Bool, available: [String: Bool]) async
    nonisolated(nonsending) func update(_ deviceID: String, _ fields: [String: JSONValue]) async
    nonisolated(nonsending) func setAvailable(_ deviceID: String, _ available: Bool) async
    nonisolated(nonsending) func report(_ reports: [DeviceReport]) async
    nonisolated(nonsending) func setStatus(_ status: AdapterStatus) async
    nonisolated(nonsending) func recordRequest(error: String?) async
    nonisolated(nonsending) func log(_ level: BridgeLogLevel, _ message: String, deviceID: String?) async
    nonisolated(nonsending) func publish(_ messages: [MirrorMessage]) async
    nonisolated(nonsending) func setMirrorAvailable(_ available: Bool) async
    nonisolated(nonsending) func setMetrics(_ metrics: [String: JSONValue]) async
    nonisolated(nonsending) func event(_ type: String, _ data: [String: JSONValue]) async
    nonisolated(nonsending) func state(of deviceID: String) async -> [String: JSONValue]?
}

/// The adapter's only way out: every call goes to its host (the core, which owns topics and publishing).
/// A context belongs to one run of one adapter: once the engine has stopped (or replaced) that adapter,
/// its calls change nothing.
public struct AdapterContext: Sendable {
    let host: any AdapterHost
    public let adapterID: String

    public init(adapterID: String, host: any AdapterHost) {
        self.adapterID = adapterID
        self.host = host
    }

    /// A complete listing. `authoritative` listings (from config) remove missing devices at once;
    /// upstream listings remove a device only after it is absent from 3 consecutive listings.
    /// `available` gives new devices their first availability (default online), so a device listed as
    /// unreachable never flashes `online`.
    public nonisolated(nonsending) func setDevices(_ devices: [DeviceDescriptor], authoritative: Bool, available: [String: Bool] = [:]) async {
        await host.setDevices(devices, authoritative: authoritative, available: available)
    }
    /// Merges fields into the device's state and publishes the full state if a rounded value changed.
    public nonisolated(nonsending) func update(_ deviceID: String, _ fields: [String: JSONValue]) async {
        await host.update(deviceID, fields)
    }
    public nonisolated(nonsending) func setAvailable(_ deviceID: String, _ available: Bool) async {
        await host.setAvailable(deviceID, available)
    }
    /// Several devices' new state and availability in one hand-over (one hop to the engine, not one per
    /// field or per device): each is merged and published as `update` and `setAvailable` would, in order.
    public nonisolated(nonsending) func report(_ reports: [DeviceReport]) async {
        guard !reports.isEmpty else { return }
        await host.report(reports)
    }
    public nonisolated(nonsending) func setStatus(_ status: AdapterStatus) async {
        await host.setStatus(status)
    }
    /// Counts an upstream request for bridge/health (`error` nil on success).
    public nonisolated(nonsending) func recordRequest(error: String?) async {
        await host.recordRequest(error: error)
    }
    /// A warning or error a user should see on bridge/log (and in the process log, with the adapter and
    /// device as metadata).
    public nonisolated(nonsending) func log(_ level: BridgeLogLevel, _ message: String, deviceID: String? = nil) async {
        await host.log(level, message, deviceID: deviceID)
    }
    /// Mirror adapters: publishes each message under `<base>/<adapter>/` (QoS 1), in order, in one call.
    /// An empty retained payload clears.
    public nonisolated(nonsending) func publish(_ messages: [MirrorMessage]) async {
        await host.publish(messages)
    }
    /// Mirror adapters: `<base>/<adapter>/availability`, set `offline` by the core on clean shutdown.
    public nonisolated(nonsending) func setMirrorAvailable(_ available: Bool) async {
        await host.setMirrorAvailable(available)
    }
    /// Adapter figures merged into this adapter's entry in bridge/health (rate budget, queue depth).
    public nonisolated(nonsending) func setMetrics(_ metrics: [String: JSONValue]) async {
        await host.setMetrics(metrics)
    }
    /// A `bridge/event` message (`{"type", "data"}`), not retained.
    public nonisolated(nonsending) func event(_ type: String, _ data: [String: JSONValue]) async {
        await host.event(type, data)
    }
    /// The device's current state as last reported or commanded.
    public nonisolated(nonsending) func state(of deviceID: String) async -> [String: JSONValue]? {
        await host.state(of: deviceID)
    }
}

public enum BridgeLogLevel: String, Sendable {
    case info, warning, error
}
