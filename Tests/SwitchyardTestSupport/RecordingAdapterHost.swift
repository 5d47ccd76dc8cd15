import Foundation
import SwitchyardCore

/// The in-memory twin of the engine as an adapter sees it (`AdapterHost`): it records every call in order
/// and keeps each device's state merged as the engine's registry would, so that an adapter can run in the
/// unit tier with no engine, transport or broker. Its `context` is what the adapter's `run`, `accept` and
/// `refresh` are given.
///
/// What it does not do is the engine's part: names, topics, discovery, publishing. Those keep their tests
/// through the engine (`InMemoryBridge`) and over a real broker.
public final class RecordingAdapterHost: AdapterHost, @unchecked Sendable {
    /// One call of the adapter, as it made it.
    public enum Call: Sendable, Equatable {
        case setDevices([DeviceDescriptor], authoritative: Bool, available: [String: Bool])
        case report([DeviceReport])
        case status(AdapterStatus)
        case request(error: String?)
        case log(BridgeLogLevel, String, deviceID: String?)
        case publish([MirrorMessage])
        case mirrorAvailable(Bool)
        case metrics([String: JSONValue])
        case event(String, [String: JSONValue])
    }

    struct Book {
        var calls: [Call] = []
        var devices: [String: DeviceDescriptor] = [:]
        var states: [String: [String: JSONValue]] = [:]
        var available: [String: Bool] = [:]
        var status: AdapterStatus = .starting
        var mirror: [String: [UInt8]] = [:]
    }
    let book = Locked(Book())
    public let adapterID: String

    public init(adapterID: String) { self.adapterID = adapterID }

    public var context: AdapterContext { AdapterContext(adapterID: adapterID, host: self) }

    // MARK: what was recorded

    public var calls: [Call] { book.withLock { $0.calls } }
    public var devices: [String: DeviceDescriptor] { book.withLock { $0.devices } }
    public var status: AdapterStatus { book.withLock { $0.status } }
    public func available(_ deviceID: String) -> Bool? { book.withLock { $0.available[deviceID] } }
    public func stateNow(_ deviceID: String) -> [String: JSONValue]? { book.withLock { $0.states[deviceID] } }
    /// A mirror's retained tree as published (relative topics; an empty payload clears).
    public var mirrorTree: [String: [UInt8]] { book.withLock { $0.mirror } }
    /// Every report of one device's fields, in order (`update` and `report` alike).
    public func reports(of deviceID: String) -> [[String: JSONValue]] {
        calls.flatMap { c -> [[String: JSONValue]] in
            guard case .report(let rs) = c else { return [] }
            return rs.filter { $0.deviceID == deviceID && !$0.fields.isEmpty }.map(\.fields)
        }
    }
    public var logs: [(BridgeLogLevel, String)] {
        calls.compactMap { if case .log(let l, let m, _) = $0 { return (l, m) } else { return nil } }
    }
    public var requests: (ok: Int, failed: Int) {
        calls.reduce(into: (0, 0)) { n, c in
            if case .request(let e) = c { if e == nil { n.0 += 1 } else { n.1 += 1 } }
        }
    }

    /// Waits (at most `timeout` seconds) until `condition` holds of what was recorded.
    public func wait(_ what: String, timeout: Double = 10, until condition: @escaping @Sendable (RecordingAdapterHost) -> Bool) async throws {
        try await waitUntil(what, timeout: timeout) { condition(self) }
    }

    // MARK: AdapterHost

    public nonisolated(nonsending) func setDevices(_ devices: [DeviceDescriptor], authoritative: Bool, available: [String: Bool]) async {
        book.withLock { b in
            b.calls.append(.setDevices(devices, authoritative: authoritative, available: available))
            // Authoritative listings replace; upstream listings here keep what they do not name (the engine's
            // three-listing grace is the registry's, tested there).
            if authoritative { b.devices = [:] }
            for d in devices where b.devices[d.id] == nil {
                b.devices[d.id] = d
                b.available[d.id] = available[d.id] ?? true
            }
            for d in devices { b.devices[d.id] = d }
        }
    }

    public nonisolated(nonsending) func update(_ deviceID: String, _ fields: [String: JSONValue]) async {
        await report([DeviceReport(deviceID, fields: fields)])
    }

    public nonisolated(nonsending) func setAvailable(_ deviceID: String, _ available: Bool) async {
        await report([DeviceReport(deviceID, available: available)])
    }

    public nonisolated(nonsending) func report(_ reports: [DeviceReport]) async {
        book.withLock { b in
            b.calls.append(.report(reports))
            for r in reports {
                if !r.fields.isEmpty { b.states[r.deviceID, default: [:]].merge(r.fields) { $1 } }
                if let a = r.available { b.available[r.deviceID] = a }
            }
        }
    }

    public nonisolated(nonsending) func setStatus(_ status: AdapterStatus) async {
        book.withLock { $0.calls.append(.status(status)); $0.status = status }
    }

    public nonisolated(nonsending) func recordRequest(error: String?) async { book.withLock { $0.calls.append(.request(error: error)) } }

    public nonisolated(nonsending) func log(_ level: BridgeLogLevel, _ message: String, deviceID: String?) async {
        book.withLock { $0.calls.append(.log(level, message, deviceID: deviceID)) }
    }

    public nonisolated(nonsending) func publish(_ messages: [MirrorMessage]) async {
        book.withLock { b in
            b.calls.append(.publish(messages))
            for m in messages where m.retain {
                if m.payload.isEmpty { b.mirror[m.relative] = nil } else { b.mirror[m.relative] = m.payload }
            }
        }
    }

    public nonisolated(nonsending) func setMirrorAvailable(_ available: Bool) async { book.withLock { $0.calls.append(.mirrorAvailable(available)) } }

    public nonisolated(nonsending) func setMetrics(_ metrics: [String: JSONValue]) async { book.withLock { $0.calls.append(.metrics(metrics)) } }

    public nonisolated(nonsending) func event(_ type: String, _ data: [String: JSONValue]) async { book.withLock { $0.calls.append(.event(type, data)) } }

    public nonisolated(nonsending) func state(of deviceID: String) async -> [String: JSONValue]? { book.withLock { $0.states[deviceID] } }
}
