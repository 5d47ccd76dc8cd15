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
    /// `bridge/request/<path>` with its payload, and the v5 client's Response Topic if it gave one.
    case request(path: String, payload: [UInt8], replyTo: ReplyTo?)
    /// `bridge/request/<path>` whose Response Topic or Correlation Data is refused (`replyProblem`): answered
    /// with the error on `bridge/response/<path>` only.
    case refusedRequest(path: String, String)
    /// A command for a mirror adapter, raw, relative to `<base>/<adapter>/`.
    case mirror(adapter: String, path: String, topic: String, replyTo: ReplyTo?)
    /// A validated command for a device.
    case command(adapter: String, DeviceCommand, topic: String, transaction: JSONValue?, resultTopic: String, replyTo: ReplyTo?)
    /// `/get`: re-read the device.
    case refresh(adapter: String, deviceID: String, topic: String, replyTo: ReplyTo?)
    /// Refused, with the words for bridge/log (and the result topic when the command gave a transaction, the
    /// Response Topic when it gave one).
    case reject(String, topic: String, transaction: JSONValue?, resultTopic: String?, replyTo: ReplyTo?)
    /// For a device the adapter has not listed: refused once the adapter has listed its devices, held
    /// until then (a command replayed from the session right after a restart). `expected`: a device the
    /// adapter may still list, or lists but is still identifying (`DeviceDescriptor.detecting`), whose
    /// commands wait past the first listing while its start window is open (design.md §18 "What is carried
    /// over"). `resultTopic` is where a command with a transaction is answered (its name as the topic gave it).
    case unknownDevice(adapter: String, String, expected: Bool, topic: String, transaction: JSONValue?, resultTopic: String, replyTo: ReplyTo?)
}

/// How the router sees the running adapters: each adapter's kind and devices by name.
public protocol InboundDirectory {
    func isMirror(_ adapter: String) -> Bool?
    func device(_ adapter: String, named name: String) -> (id: String, descriptor: DeviceDescriptor, name: String)?
    var adapterIDs: [String] { get }
    /// Why no device has this name any more (renamed, disabled), or nil.
    func retired(_ adapter: String, named name: String) -> String?
    /// Whether the adapter may still list a device of this name it has not listed (the group's previous
    /// active instance listed it: design.md §18).
    func expects(_ adapter: String, named name: String) -> Bool
}

extension InboundDirectory {
    public func retired(_ adapter: String, named name: String) -> String? { nil }
    public func expects(_ adapter: String, named name: String) -> Bool { false }
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
                           transaction: nil, resultTopic: nil, replyTo: nil)
        }
        switch scheme.classify(m.topic) {
        case .haStatus:
            let online = discovery && String(decoding: m.payload, as: UTF8.self).trimmingWhitespace() == "online"
            return online ? .homeAssistantOnline : .none
        case .request(let path):
            if m.retain { return .retainedCommand(topic: m.topic) }
            if let r = m.replyTo, let problem = replyProblem(r, answeredOn: scheme.response(path)) { return .refusedRequest(path: path, problem) }
            return .request(path: path, payload: m.payload, replyTo: m.replyTo)
        case .set(let adapter, let device, let field):
            if m.retain { return .retainedCommand(topic: m.topic) }
            if let age = tooOld(m) {
                return .reject("command is \(Int(age)) s old, over mqtt.command_max_age (\(Int(commandMaxAge)) s); dropped",
                               topic: m.topic, transaction: nil, resultTopic: nil,
                               replyTo: validReplyTo(m, answeredOn: scheme.result(adapter: adapter, name: device)))
            }
            if directory.isMirror(adapter) == true {
                let path = "\(device)/set" + (field.map { "/\($0)" } ?? "")
                if let r = m.replyTo, let problem = replyProblem(r, answeredOn: nil) {
                    return .reject(problem, topic: m.topic, transaction: nil, resultTopic: nil, replyTo: nil)
                }
                return .mirror(adapter: adapter, path: path, topic: m.topic, replyTo: m.replyTo)
            }
            return command(adapter: adapter, device: device, field: field, m, directory)
        case .get(let adapter, let device):
            if m.retain { return .retainedCommand(topic: m.topic) }
            if let r = m.replyTo, let problem = replyProblem(r, answeredOn: nil) {
                return .reject(problem, topic: m.topic, transaction: nil, resultTopic: nil, replyTo: nil)
            }
            if directory.isMirror(adapter) == true {
                return .mirror(adapter: adapter, path: "\(device)/get", topic: m.topic, replyTo: m.replyTo)
            }
            if let rejection = unknown(adapter: adapter, device: device, topic: m.topic, transaction: nil, resultTopic: nil,
                                       replyTo: m.replyTo, directory) {
                return rejection
            }
            return .refresh(adapter: adapter, deviceID: directory.device(adapter, named: device)!.id, topic: m.topic, replyTo: m.replyTo)
        case .other:
            return .none
        }
    }

    /// Why a v5 client's Response Topic or Correlation Data is refused, or nil (docs/topics.md "MQTT 5"): each
    /// within its bound (counted as `response_topic`, `correlation_data`), and the topic a topic name a
    /// client may publish to that is none of the bridge's own (under `<base>/`, the discovery prefix, Home
    /// Assistant's status topic), so that no client can make the bridge command itself, announce an entity
    /// or speak on a device's topic. The one exception is the topic the bridge answers on anyway
    /// (`answeredOn`: the command's result topic, the request's response topic): there it answers once.
    public func replyProblem(_ r: ReplyTo, answeredOn: String?) -> String? {
        if r.topicBytes > ReplyTo.maxTopicBytes {
            Bounds.hit("response_topic")
            return "MQTT 5 Response Topic of \(r.topicBytes) bytes is over \(ReplyTo.maxTopicBytes) bytes; refused"
        }
        if r.correlationBytes > ReplyTo.maxCorrelationBytes {
            Bounds.hit("correlation_data")
            return "MQTT 5 Correlation Data of \(r.correlationBytes) bytes is over \(ReplyTo.maxCorrelationBytes) bytes; refused"
        }
        let t = r.topic
        if !Topic.isPublishable(t) || t.hasPrefix("$") || t.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            return "MQTT 5 Response Topic '\(t.excerpt(80))' is not a topic name the bridge may publish to (wildcards, \"$\" or control characters); refused"
        }
        if t == answeredOn { return nil }
        let own = [scheme.base, scheme.discoveryPrefix].contains { t == $0 || t.hasPrefix($0 + "/") } || t == scheme.haStatusTopic
        if own {
            return "MQTT 5 Response Topic '\(t.excerpt(80))' is one of the bridge's own topics (under '\(scheme.base)/' or '\(scheme.discoveryPrefix)/'); refused"
        }
        return nil
    }

    /// The message's Response Topic when it is accepted (to answer a refusal there), else nil.
    func validReplyTo(_ m: InboundMessage, answeredOn: String?) -> ReplyTo? {
        m.replyTo.flatMap { replyProblem($0, answeredOn: answeredOn) == nil ? $0 : nil }
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
        // A refused Response Topic refuses the command (after its transaction is read, to answer it on the result topic).
        let refusal = m.replyTo.flatMap { replyProblem($0, answeredOn: resultTopic) }
        let replyTo = refusal == nil ? m.replyTo : nil
        let parsed: CommandParser.Parsed
        // Only the device's own fields are built (the rest are named as unknown without being read into values);
        // for a device that is not there, only the transaction is.
        switch CommandParser.read(payload: m.payload, field: field, bareWords: known?.descriptor.bareCommands ?? CommandParser.stateWords,
                                  keep: { key in known?.descriptor.capability(key) != nil }) {
        case .success(let p): parsed = p
        case .failure(let f):
            return .reject(f.message, topic: m.topic, transaction: f.transaction, resultTopic: f.transaction == nil ? nil : resultTopic,
                           replyTo: replyTo)
        }
        if let refusal {
            return .reject(refusal, topic: m.topic, transaction: parsed.transaction,
                           resultTopic: parsed.transaction == nil ? nil : resultTopic, replyTo: nil)
        }
        if let rejection = unknown(adapter: adapter, device: device, topic: m.topic, transaction: parsed.transaction,
                                   resultTopic: resultTopic, replyTo: replyTo, directory) {
            return rejection
        }
        let d = known!
        // Its fields are not known yet: judged against them once they are (or refused with this when they never come).
        if d.descriptor.detecting {
            return .unknownDevice(adapter: adapter, "device '\(device)' of adapter '\(adapter)' is still being identified by its upstream (its fields are not known yet)",
                                  expected: true, topic: m.topic, transaction: parsed.transaction, resultTopic: resultTopic, replyTo: replyTo)
        }
        switch CommandParser.validate(parsed.fields, against: d.descriptor) {
        case .failure(let f):
            return .reject(f.message, topic: m.topic, transaction: parsed.transaction, resultTopic: resultTopic, replyTo: replyTo)
        case .success(let fields):
            return .command(adapter: adapter, DeviceCommand(deviceID: d.id, fields: fields), topic: m.topic,
                            transaction: parsed.transaction, resultTopic: resultTopic, replyTo: replyTo)
        }
    }

    func unknown(adapter: String, device: String, topic: String, transaction: JSONValue?, resultTopic: String?, replyTo: ReplyTo?,
                 _ directory: some InboundDirectory) -> InboundRoute? {
        guard directory.isMirror(adapter) != nil else {
            return .reject("unknown adapter '\(adapter)' (running: \(directory.adapterIDs.joined(separator: ", ")))", topic: topic,
                           transaction: transaction, resultTopic: transaction == nil ? nil : resultTopic, replyTo: replyTo)
        }
        guard directory.device(adapter, named: device) != nil else {
            // A name a device had (renamed, disabled): refused at once, saying where it went.
            if let why = directory.retired(adapter, named: device) {
                return .reject("device '\(device)' of adapter '\(adapter)' \(why)", topic: topic, transaction: transaction,
                               resultTopic: transaction == nil ? nil : resultTopic ?? scheme.result(adapter: adapter, name: device), replyTo: replyTo)
            }
            return .unknownDevice(adapter: adapter, "unknown device '\(device)' for adapter '\(adapter)'", expected: directory.expects(adapter, named: device),
                                  topic: topic, transaction: transaction,
                                  resultTopic: resultTopic ?? scheme.result(adapter: adapter, name: device), replyTo: replyTo)
        }
        return nil
    }
}
