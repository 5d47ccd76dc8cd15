#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// What a standby instance keeps of the group's traffic so that a takeover loses nothing (design.md §18):
/// the commands with a `transaction` that no result has answered yet (the active instance may have taken
/// them from the broker and died before carrying them out: the broker will not deliver them again), and
/// each device's last retained state (what the new active's adapters start from where an upstream cannot
/// be asked: the virtual devices). A value fed the messages its watching connection reads; bounded in count
/// and bytes. No I/O, no clock of its own (`StandbyJournalTests`).
public struct StandbyJournal: Sendable {
    public struct Entry: Sendable, Equatable {
        public var message: InboundMessage
        public var transaction: JSONValue
        public var resultTopic: String
        public var seenAt: MonotonicInstant
    }

    let scheme: TopicScheme
    /// Commands unanswered, oldest first.
    public private(set) var pending: [Entry] = []
    /// How long an unanswered command is kept (a command older than this is not carried out late).
    public let window: Double
    public let maxEntries: Int
    public let maxBytes: Int
    var bytes = 0
    /// Device state topics (from `bridge/devices`) → (adapter, device id, name).
    var devices: [String: (adapter: String, id: String, name: String)] = [:]
    /// JSON objects under the base that may be device states (the broker replays retained messages
    /// in its own order: a state may come before the list that names its topic), at most `maxStateBytes`.
    var states: [String: [UInt8]] = [:]
    var stateBytes = 0
    public let maxStateBytes: Int
    /// Commands let go past a bound (counted, for the takeover's event).
    public private(set) var dropped = 0

    public init(scheme: TopicScheme, window: Double = 30, maxEntries: Int = 1_000, maxBytes: Int = 1 << 20, maxStateBytes: Int = 32 << 20) {
        self.scheme = scheme
        self.maxStateBytes = maxStateBytes
        self.window = window
        self.maxEntries = maxEntries
        self.maxBytes = maxBytes
    }

    /// A message the watching connection read under `<base>/`.
    public mutating func saw(_ m: InboundMessage, now: MonotonicInstant) {
        expire(now: now)
        if m.topic == scheme.bridge("devices") {
            readDeviceList(m.payload)
            return
        }
        if mayBeState(m) {
            stateBytes -= states[m.topic]?.count ?? 0
            states[m.topic] = nil
            if !m.payload.isEmpty, stateBytes + m.payload.count <= maxStateBytes {
                states[m.topic] = m.payload
                stateBytes += m.payload.count
            }
            return
        }
        guard !m.retain else { return }
        switch scheme.classify(m.topic) {
        case .set(let adapter, let device, _):
            guard let transaction = Self.transaction(m.payload) else { return }
            let entry = Entry(message: m, transaction: transaction, resultTopic: scheme.result(adapter: adapter, name: device), seenAt: now)
            let size = m.payload.count + m.topic.utf8.count
            guard pending.count < maxEntries, bytes + size <= maxBytes else {
                dropped += 1
                return
            }
            pending.append(entry)
            bytes += size
        case .other where m.topic.hasSuffix("/result"):
            guard let answered = Self.transaction(m.payload) else { return }
            if let i = pending.firstIndex(where: { $0.resultTopic == m.topic && $0.transaction == answered }) {
                bytes -= pending[i].message.payload.count + pending[i].message.topic.utf8.count
                pending.remove(at: i)
            }
        default:
            return
        }
    }

    /// The commands to replay at a takeover, handed over once: the new active instance answers them, and
    /// the journal is not fed while it is active, so a later takeover by the same instance must not replay
    /// them again (it would carry out twice what it already answered). Those past the window at `now` are
    /// let go first: a journal that heard nothing for a while (the broker was down) still holds them.
    public mutating func takeOver(now: MonotonicInstant) -> [Entry] {
        expire(now: now)
        let out = pending
        pending.removeAll()
        bytes = 0
        return out
    }

    /// Commands this instance took as the active one and did not answer where anyone heard it: held for a
    /// device not listed yet (a group's or a scene's wait for every adapter) when its active phase ended with
    /// its connection gone, so that the error it answered them with went nowhere. Nobody else may have them:
    /// the journal is fed only while standing by, and a takeover took out what it had. They are kept again as
    /// if seen while standing by, from when they were received (`receivedAtMonotonic`, on the clock `now` is
    /// read from): the instance's next takeover replays them, and another instance's result takes them out, as
    /// for any command the journal keeps. One already kept, or not one the journal keeps, is left out.
    public mutating func handBack(_ messages: [InboundMessage], now: MonotonicInstant) {
        for m in messages where !m.retain {
            guard case .set(let adapter, let device, _) = scheme.classify(m.topic), let transaction = Self.transaction(m.payload) else { continue }
            let resultTopic = scheme.result(adapter: adapter, name: device)
            guard !pending.contains(where: { $0.resultTopic == resultTopic && $0.transaction == transaction }) else { continue }
            let size = m.payload.count + m.topic.utf8.count
            guard pending.count < maxEntries, bytes + size <= maxBytes else {
                dropped += 1
                continue
            }
            let entry = Entry(message: m, transaction: transaction, resultTopic: resultTopic, seenAt: min(now, m.receivedAtMonotonic))
            // Oldest first, as `expire` takes them.
            pending.insert(entry, at: pending.firstIndex { $0.seenAt > entry.seenAt } ?? pending.endIndex)
            bytes += size
        }
        expire(now: now)
    }

    /// Drops what is older than the window.
    public mutating func expire(now: MonotonicInstant) {
        while let first = pending.first, (now - first.seenAt).seconds > window {
            bytes -= first.message.payload.count + first.message.topic.utf8.count
            pending.removeFirst()
        }
    }

    /// Each adapter's devices' last states, by device id: what a new active instance restores.
    public var restorable: [String: [String: [String: JSONValue]]] {
        var out: [String: [String: [String: JSONValue]]] = [:]
        for (topic, payload) in states {
            guard let d = devices[topic], case .object(let o)? = try? JSONValue.parse(payload) else { continue }
            out[d.adapter, default: [:]][d.id] = o
        }
        return out
    }

    /// The devices the active instance listed last (`bridge/devices`), by adapter and name: what a new active
    /// instance's commands may wait for (`BridgeEngine.expectDevices`).
    public var knownDevices: [String: Set<String>] {
        var out: [String: Set<String>] = [:]
        for d in devices.values { out[d.adapter, default: []].insert(d.name) }
        return out
    }

    /// The `transaction` of a command's JSON payload, if it has one (the cheap reader: nothing else is built).
    static func transaction(_ payload: [UInt8]) -> JSONValue? {
        guard case .object(let o)? = try? JSONValue.parse(payload, keeping: { $0 == "transaction" }) else { return nil }
        return o["transaction"]
    }

    mutating func readDeviceList(_ payload: [UInt8]) {
        guard case .array(let list)? = try? JSONValue.parse(payload) else { return }
        var next: [String: (adapter: String, id: String, name: String)] = [:]
        for item in list {
            guard let topic = item["topic"]?.stringValue, let adapter = item["adapter"]?.stringValue, let id = item["id"]?.stringValue,
                  let name = item["name"]?.stringValue else { continue }
            next[topic] = (adapter, id, name)
        }
        devices = next
    }

    /// A JSON object (or a clearing) under the base that is none of the bridge's own topics and no device's
    /// availability, command or result: what a device's state looks like. Retained or live: a subscriber
    /// gets a live change to a retained topic with the retain flag cleared.
    func mayBeState(_ m: InboundMessage) -> Bool {
        guard m.topic.hasPrefix(scheme.base + "/"), !m.topic.hasPrefix(scheme.bridge("")) else { return false }
        if let last = m.topic.split(separator: "/").last, ["availability", "set", "get", "result"].contains(last) { return false }
        return m.payload.isEmpty || m.payload.first == UInt8(ascii: "{")
    }
}
