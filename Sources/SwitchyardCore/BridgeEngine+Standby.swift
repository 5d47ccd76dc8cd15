#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The engine's part in hot standby (design.md §18): carrying out, after a takeover, the commands the
/// previous active instance took from the broker and never answered, without carrying out twice what the
/// broker delivers again; the instance's name and role on `bridge/health` and in the console's snapshot.
extension BridgeEngine {
    /// Commands to replay once the session's own backlog is in, and what the backlog brought meanwhile.
    struct Replay {
        var nonce: String
        var messages: [InboundMessage]
        /// `topic` + the transaction's JSON of every command routed since the connect.
        var seen: Set<String> = []
        var asked = false
    }

    var replayTopic: String { scheme.bridge("standby/replay") }

    /// Sets what `run` replays after its first connect (`StandbyJournal.pending`), before it runs.
    public func prepareReplay(_ messages: [InboundMessage]) {
        guard !messages.isEmpty else { return }
        replay = Replay(nonce: randomHex(bytes: 8), messages: messages)
    }

    /// The key a command is recognised by across instances: its topic and its transaction.
    static func replayKey(_ topic: String, _ payload: [UInt8]) -> String? {
        StandbyJournal.transaction(payload).map { topic + " " + $0.serialized }
    }

    /// On connect: the sentinel goes out behind the backlog the broker delivers for the session.
    func askForReplaySentinel() {
        guard var r = replay, !r.asked else { return }
        r.asked = true
        replay = r
        updateSubscriptions(force: true)
        transport.publish(replayTopic, Array(r.nonce.utf8), qos: 1, retain: false)
    }

    /// The commands a takeover was to replay that were not carried out (the phase ended before the sentinel
    /// came back), less those the broker delivered again meanwhile; the replay is over.
    func unreplayed() -> [InboundMessage] {
        guard let r = replay else { return [] }
        replay = nil
        return r.messages.filter { m in Self.replayKey(m.topic, m.payload).map { !r.seen.contains($0) } ?? false }
    }

    /// A command routed while the backlog comes in is one the broker delivered again: not replayed.
    func noteDelivered(_ m: InboundMessage) {
        guard replay != nil, let key = Self.replayKey(m.topic, m.payload) else { return }
        replay?.seen.insert(key)
    }

    /// The sentinel came back: everything the broker had for the session is in. What it did not deliver is
    /// carried out now, in the order the standby saw it.
    func replayed(_ m: InboundMessage) {
        guard let r = replay, String(decoding: m.payload, as: UTF8.self) == r.nonce else { return }
        replay = nil
        updateSubscriptions(force: true)
        var count = 0
        for message in r.messages {
            guard let key = Self.replayKey(message.topic, message.payload), !r.seen.contains(key) else { continue }
            count += 1
            handle(message)
        }
        standbyReplayed += count
        if count > 0 {
            log(.info, "carried out \(count) command\(count == 1 ? "" : "s") the previous active instance took from the broker and did not answer")
        }
    }

    /// Before `run`, after a takeover: the devices the group's previous active instance listed, by adapter and
    /// name (`StandbyJournal.knownDevices`). A command for one that an adapter has not listed yet (a LIFX light
    /// its LAN has not found again) waits for it, bounded like commands held before a first listing, until
    /// the adapter's settle time after its start; an adapter that lists from its config (authoritative)
    /// expects no more than it lists. The core's own groups and scenes are not among them.
    public func expectDevices(_ devices: [String: Set<String>]) {
        expectedDevices = devices.filter { !GroupCore.ids.contains($0.key) && !$0.value.isEmpty }
    }

    /// Figures the runtime adds to `bridge/health` (the standby instance and its role).
    public func setHealthExtra(_ extra: [String: JSONValue]) { healthExtra = extra }

    /// The standby part of the console's snapshot.
    public func setStandby(_ s: StandbySnapshot?) { standby = s }

    /// A `bridge/event` the runtime raises (a takeover).
    public func announce(event type: String, _ data: [String: JSONValue]) { publishEvent(type, data) }

    /// Commands replayed after takeovers, for the event and the tests.
    public var replayedCommands: Int { standbyReplayed }
}
