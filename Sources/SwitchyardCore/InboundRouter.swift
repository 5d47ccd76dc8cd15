#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What an inbound message asks for, decided without touching anything: the checks of docs/topics.md
/// (size, retained commands, age) and of the command itself (parsing, the device, its capabilities).
public enum InboundRoute: Sendable, Equatable {
    /// Not addressed to the bridge, or nothing to do.
    case none
    /// `homeassistant/status` said `online`: announce again.
    case homeAssistantOnline
    /// A command or request replayed from the broker's retained store (ignored, logged once per topic).
    case retainedCommand(topic: String)
    /// `bridge/request/<path>` with its payload.
    case request(path: String, payload: [UInt8])
    /// A command for a mirror adapter, raw, relative to `<base>/<adapter>/`.
    case mirror(adapter: String, path: String, topic: String)
    /// A validated command for a device.
    case command(adapter: String, DeviceCommand, topic: String, transaction: JSONValue?, resultTopic: String)
    /// `/get`: re-read the device.
    case refresh(adapter: String, deviceID: String, topic: String)
    /// Refused, with the words for bridge/log (and the result topic when the command gave a transaction).
    case reject(String, topic: String, transaction: JSONValue?, resultTopic: String?)
    /// For a device the adapter has not listed: refused once the adapter has listed its devices, held
    /// until then (a command replayed from the session right after a restart). `resultTopic` is where a
    /// command with a transaction is answered (its name as the topic gave it).
    case unknownDevice(adapter: String, String, topic: String, transaction: JSONValue?, resultTopic: String)
}

/// How the router sees the running adapters: each adapter's kind and devices by name.
public protocol InboundDirectory {
    func isMirror(_ adapter: String) -> Bool?
    func device(_ adapter: String, named name: String) -> (id: String, descriptor: DeviceDescriptor, name: String)?
    var adapterIDs: [String] { get }
}

public struct InboundRouter: Sendable {
    public var scheme: TopicScheme
    public var maxPayload: Int
    public var commandMaxAge: Double
    public var discovery: Bool

    public init(scheme: TopicScheme, maxPayload: Int, commandMaxAge: Double, discovery: Bool) {
        self.scheme = scheme
        self.maxPayload = maxPayload
        self.commandMaxAge = commandMaxAge
        self.discovery = discovery
    }

    public func route(_ m: InboundMessage, in directory: some InboundDirectory) -> InboundRoute {
        if m.size > maxPayload {
            return .reject("payload of \(m.size) bytes is over mqtt.max_payload (\(maxPayload)); ignored", topic: m.topic,
                           transaction: nil, resultTopic: nil)
        }
        switch scheme.classify(m.topic) {
        case .haStatus:
            let online = discovery && String(decoding: m.payload, as: UTF8.self).trimmingWhitespace() == "online"
            return online ? .homeAssistantOnline : .none
        case .request(let path):
            return m.retain ? .retainedCommand(topic: m.topic) : .request(path: path, payload: m.payload)
        case .set(let adapter, let device, let field):
            if m.retain { return .retainedCommand(topic: m.topic) }
            if let age = tooOld(m) {
                return .reject("command is \(Int(age)) s old, over mqtt.command_max_age (\(Int(commandMaxAge)) s); dropped",
                               topic: m.topic, transaction: nil, resultTopic: nil)
            }
            if directory.isMirror(adapter) == true {
                return .mirror(adapter: adapter, path: "\(device)/set" + (field.map { "/\($0)" } ?? ""), topic: m.topic)
            }
            return command(adapter: adapter, device: device, field: field, m, directory)
        case .get(let adapter, let device):
            if m.retain { return .retainedCommand(topic: m.topic) }
            if directory.isMirror(adapter) == true { return .mirror(adapter: adapter, path: "\(device)/get", topic: m.topic) }
            if let rejection = unknown(adapter: adapter, device: device, topic: m.topic, transaction: nil, resultTopic: nil, directory) {
                return rejection
            }
            return .refresh(adapter: adapter, deviceID: directory.device(adapter, named: device)!.id, topic: m.topic)
        case .other:
            return .none
        }
    }

    /// docs/design.md §3: the age is known when the publisher sets an MQTT v5 user property
    /// `timestamp` (RFC 3339 or epoch seconds). Under 3.1.1 it is unknowable and the command is applied.
    func tooOld(_ m: InboundMessage) -> Double? {
        guard let ts = m.userProperties["timestamp"], let sent = Timestamp.parse(ts) else { return nil }
        let age = m.receivedAt.timeIntervalSince(sent)
        return age > commandMaxAge ? age : nil
    }

    func command(adapter: String, device: String, field: String?, _ m: InboundMessage, _ directory: some InboundDirectory) -> InboundRoute {
        let known = directory.device(adapter, named: device)
        // Every command that carries a transaction is answered, an unknown device's or adapter's included:
        // on the result topic of the name the command was sent to.
        let resultTopic = scheme.result(adapter: adapter, name: device)
        let parsed: CommandParser.Parsed
        // Only the device's own fields are built (the rest are named as unknown without being read into values);
        // for a device that is not there, only the transaction is.
        switch CommandParser.read(payload: m.payload, field: field, bareWords: known?.descriptor.bareCommands ?? CommandParser.stateWords,
                                  keep: { key in known?.descriptor.capability(key) != nil }) {
        case .success(let p): parsed = p
        case .failure(let f):
            return .reject(f.message, topic: m.topic, transaction: f.transaction, resultTopic: f.transaction == nil ? nil : resultTopic)
        }
        if let rejection = unknown(adapter: adapter, device: device, topic: m.topic, transaction: parsed.transaction,
                                   resultTopic: resultTopic, directory) {
            return rejection
        }
        let d = known!
        switch CommandParser.validate(parsed.fields, against: d.descriptor) {
        case .failure(let f):
            return .reject(f.message, topic: m.topic, transaction: parsed.transaction, resultTopic: resultTopic)
        case .success(let fields):
            return .command(adapter: adapter, DeviceCommand(deviceID: d.id, fields: fields), topic: m.topic,
                            transaction: parsed.transaction, resultTopic: resultTopic)
        }
    }

    func unknown(adapter: String, device: String, topic: String, transaction: JSONValue?, resultTopic: String?,
                 _ directory: some InboundDirectory) -> InboundRoute? {
        guard directory.isMirror(adapter) != nil else {
            return .reject("unknown adapter '\(adapter)' (running: \(directory.adapterIDs.joined(separator: ", ")))", topic: topic,
                           transaction: transaction, resultTopic: transaction == nil ? nil : resultTopic)
        }
        guard directory.device(adapter, named: device) != nil else {
            return .unknownDevice(adapter: adapter, "unknown device '\(device)' for adapter '\(adapter)'", topic: topic, transaction: transaction,
                                  resultTopic: resultTopic ?? scheme.result(adapter: adapter, name: device))
        }
        return nil
    }
}
