import Foundation
import SwitchyardCore

/// The invariants a soak run holds over time (docs/testing.md "The soak run"), as plain values fed what
/// a subscriber to `#` sees, in order. Each `see` returns the breach it found, if any, in words. The same
/// checks run in unit tests over a list of publications and in `switchyard-bench --scenario soak` over a
/// real broker's traffic.

/// No topic that a retained discovery config reads is emptied while that config stands: Home Assistant
/// reads an empty retained state or availability as a value, and its templates fail on it.
public struct DiscoveryReadWatch: Sendable {
    let prefix: String
    /// Config topic → the topics it reads.
    public private(set) var configs: [String: Set<String>] = [:]
    /// Read topic → how many standing configs read it.
    var readers: [String: Int] = [:]

    public init(discoveryPrefix: String = "homeassistant") { prefix = discoveryPrefix + "/" }

    /// The topics a discovery payload reads: every `*_topic` but `command_topic`, and each `availability`
    /// entry's `topic`, at any depth (device-based configs nest their components).
    public static func readTopics(_ payload: JSONValue) -> Set<String> {
        var out: Set<String> = []
        func walk(_ v: JSONValue, key: String?) {
            switch v {
            case .object(let o):
                for (k, x) in o { walk(x, key: k) }
            case .array(let a):
                for x in a {
                    if key == "availability", case .string(let t)? = x["topic"] { out.insert(t) } else { walk(x, key: key) }
                }
            case .string(let s):
                if let key, key.hasSuffix("_topic"), !key.hasSuffix("command_topic") { out.insert(s) }
            default: break
            }
        }
        walk(payload, key: nil)
        return out
    }

    public mutating func see(topic: String, payload: [UInt8], retain: Bool) -> String? {
        if topic.hasPrefix(prefix), topic.hasSuffix("/config") {
            for t in configs[topic] ?? [] { readers[t, default: 1] -= 1; if readers[t] == 0 { readers[t] = nil } }
            configs[topic] = nil
            guard !payload.isEmpty, let json = try? JSONValue.parse(payload) else { return nil }
            let reads = Self.readTopics(json)
            configs[topic] = reads
            for t in reads { readers[t, default: 0] += 1 }
            return nil
        }
        // A clear reaches a live subscriber without its retain flag (MQTT 3.1.1): any empty payload counts.
        guard payload.isEmpty, readers[topic] != nil else { return nil }
        let by = configs.filter { $0.value.contains(topic) }.keys.sorted()
        return "\(topic) emptied while \(by.count) discovery config(s) read it (\(by.first ?? ""))"
    }
}

/// Every command sent with a transaction gets exactly one result, and "not running" is never the answer.
/// One repeat is not the bridge's: results go out at QoS 1, and one the broker passed on but did not
/// acknowledge before it stopped is sent again after the reconnect (docs/topics.md "Outbox"). A second
/// result identical to the first, while a broker restart makes that possible, is counted (`redelivered`);
/// so is one second result, whatever it says, of a command that was still unanswered when the schedule
/// killed or paused the active instance of a standby group (`handOver`), until the instance that takes over
/// has had time to carry out again what the stopped one had taken and not answered (design.md §18 "What is
/// at-least-once"), counted as `answeredTwice`. Any other second result, and any third, is a breach.
public struct TransactionLedger: Sendable {
    public struct Sent: Sendable {
        public var topic: String
        public var at: Double
    }
    /// Transaction → what was sent and when (seconds on the run's clock); removed when answered.
    public private(set) var open: [String: Sent] = [:]
    public private(set) var answered = 0
    public private(set) var ok = 0
    public private(set) var redelivered = 0
    /// Second results of commands unanswered at a hand-over.
    public private(set) var answeredTwice = 0
    /// The most commands unanswered at one hand-over (what `answeredTwice` may reach per hand-over).
    public private(set) var openAtHandOver = 0
    /// Answered (or reported overdue) transactions and their first result (empty when overdue).
    var done: [String: [UInt8]] = [:]
    /// When each answered transaction was sent, and when its first result came (for the breach's words).
    var times: [String: (sent: Double, answered: Double)] = [:]
    /// Transactions unanswered at a hand-over: each may be answered a second time, once, until its time.
    var mayRepeat: [String: Double] = [:]

    public init() {}

    /// The active instance of a standby group was killed or paused: what is unanswered now may have been
    /// taken by it, and is then carried out again by the instance that takes over, by `until` (seconds on
    /// the run's clock, as `result`'s `at`).
    public mutating func handOver(until: Double) {
        for t in open.keys { mayRepeat[t] = until }
        openAtHandOver = max(openAtHandOver, open.count)
    }

    public mutating func sent(_ transaction: String, topic: String, at: Double) { open[transaction] = Sent(topic: topic, at: at) }

    /// A message on a `…/result` topic seen at `at`; `redeliveryPossible`: a broker restart is under way or
    /// just over.
    public mutating func result(_ payload: [UInt8], at: Double = 0, redeliveryPossible: Bool = false) -> String? {
        guard let json = try? JSONValue.parse(payload), case .string(let t)? = json["transaction"] else { return nil }
        if let first = done[t] {
            if redeliveryPossible && first == payload {
                redelivered += 1
                return nil
            }
            if let until = mayRepeat.removeValue(forKey: t), at <= until {
                answeredTwice += 1
                return nil
            }
            let when = times[t].map { String(format: " (sent at %.1f s, first answered at %.1f s)", $0.sent, $0.answered) } ?? ""
            return "transaction \(t) answered twice\(when): \(String(decoding: payload, as: UTF8.self))"
        }
        guard let sent = open.removeValue(forKey: t) else { return nil }   // not one of ours
        done[t] = payload
        times[t] = (sent.at, at)
        answered += 1
        if case .string("ok")? = json["status"] { ok += 1 }
        if case .string(let e)? = json["error"], e.contains("is not running") { return "transaction \(t) refused: \(e)" }
        return nil
    }

    /// The transactions sent more than `olderThan` seconds before `now` and still unanswered (each
    /// reported once: they are then forgotten).
    public mutating func overdue(now: Double, olderThan: Double) -> [String] {
        let late = open.filter { now - $0.value.at > olderThan }
        for k in late.keys { open[k] = nil; done[k] = [] }
        return late.sorted { $0.value.at < $1.value.at }.map { "transaction \($0.key) (\($0.value.topic)) unanswered after \(Int(olderThan)) s" }
    }
}

/// The LIFX adapter's command outcomes not yet taken (`bridge/health` `adapters.lifx.outcomes`) stay
/// bounded: under steady commands a few are always on their way, but an outcome kept after its command was
/// answered (an orphan) would make the count climb for as long as the run lasts.
public struct LIFXOutcomeWatch: Sendable {
    public let bound: Int
    public private(set) var highest = 0
    public init(bound: Int = 100) { self.bound = bound }

    /// A `bridge/health` payload; a breach in words when the count is past the bound.
    public mutating func health(_ payload: [UInt8]) -> String? {
        guard let j = try? JSONValue.parse(payload), let n = j["adapters"]?["lifx"]?["outcomes"]?.intValue else { return nil }
        highest = max(highest, n)
        return n > bound ? "LIFX outcomes not taken: \(n) (bound \(bound)); an outcome is kept after its command was answered" : nil
    }
}

/// Least-squares slope of (x, y) samples: y units per x unit.
public func slope(_ samples: [(x: Double, y: Double)]) -> Double {
    guard samples.count >= 2 else { return 0 }
    let n = Double(samples.count)
    let mx = samples.map(\.x).reduce(0, +) / n, my = samples.map(\.y).reduce(0, +) / n
    let sxx = samples.map { ($0.x - mx) * ($0.x - mx) }.reduce(0, +)
    guard sxx > 0 else { return 0 }
    return samples.map { ($0.x - mx) * ($0.y - my) }.reduce(0, +) / sxx
}

/// The slope within groups of samples (the pooled within-group least-squares slope): how fast `y` grows
/// inside each group, whatever level each group is at. For a resource held in phases (an active instance's
/// phases, each started afresh at its own level by the faults it met), growth within phases is a leak; a
/// phase at another level than the last is not.
public func pooledSlope(_ groups: [[(x: Double, y: Double)]]) -> Double {
    var num = 0.0, den = 0.0
    for g in groups where g.count >= 2 {
        let n = Double(g.count)
        let mx = g.map(\.x).reduce(0, +) / n, my = g.map(\.y).reduce(0, +) / n
        num += g.map { ($0.x - mx) * ($0.y - my) }.reduce(0, +)
        den += g.map { ($0.x - mx) * ($0.x - mx) }.reduce(0, +)
    }
    return den > 0 ? num / den : 0
}

/// Management changes (docs/topics.md "Management") disturb nothing but what they change: every
/// `device_renamed` on `bridge/event` is one the schedule asked for, in its order; every `config_changed` is
/// one of its requests; no device a change is about (`watched`, `adapter/name`) is added or removed while it is
/// made (a rename is no removal). What was asked for and never seen is `unmet`.
public struct ManagementWatch: Sendable {
    /// Renames asked for and not seen yet, `adapter/from→adapter/to`, in order.
    public private(set) var expected: [String] = []
    /// `config_changed` events the schedule's requests may still make.
    public private(set) var changesAllowed = 0
    /// The devices a change being made is about: they must neither come nor go meanwhile.
    public var watched: Set<String> = []

    public init() {}

    public mutating func expectRename(adapter: String, from: String, to: String) { expected.append("\(adapter)/\(from)→\(adapter)/\(to)") }
    public mutating func expectChange() { changesAllowed += 1 }

    /// A `bridge/event` payload; the breach it is, if any. `firstListing`: a new active instance of a
    /// standby group may still be listing its devices for the first time (it has taken over within its
    /// settle time), and each device it lists is `device_added` (docs/topics.md "Device lifecycle"), not a
    /// change's doing.
    public mutating func event(_ payload: [UInt8], firstListing: Bool = false) -> String? {
        guard let j = try? JSONValue.parse(payload), case .string(let type)? = j["type"] else { return nil }
        let d = j["data"]
        switch type {
        case "device_renamed":
            let key = "\(d?["adapter"]?.stringValue ?? "?")/\(d?["from"]?.stringValue ?? "?")→\(d?["adapter"]?.stringValue ?? "?")/\(d?["to"]?.stringValue ?? "?")"
            guard expected.first == key else { return "a rename nobody asked for: \(key) (expected: \(expected.first ?? "none"))" }
            expected.removeFirst()
        case "config_changed":
            guard changesAllowed > 0 else { return "a config change nobody asked for: \(d?["request"]?.stringValue ?? "?") \(d?["paths"].map { "\($0)" } ?? "")" }
            changesAllowed -= 1
        case "device_added" where firstListing:
            break
        case "device_added", "device_removed":
            if watched.contains("\(d?["adapter"]?.stringValue ?? "?")/\(d?["name"]?.stringValue ?? "?")") { return "\(type) \(d?["adapter"]?.stringValue ?? "?")/\(d?["name"]?.stringValue ?? "?") while a management change was made" }
        default: break
        }
        return nil
    }

    public var unmet: [String] { expected }
}

/// Groups (design.md §20): a group's state is what its devices' last published states and availability make
/// it, and a group's command is answered with its members' outcomes: `ok`, or `partial` naming only devices
/// the group reaches, each failed for a reason the schedule gives (the caller judges the adapters named).
public struct GroupWatch: Sendable {
    public struct Group: Sendable {
        /// The devices the group reaches (`adapter/name`), nested groups flattened, in the group's order.
        public var leaves: [String]
        /// `any` or `all`.
        public var mode: String
        public init(leaves: [String], mode: String = "any") {
            self.leaves = leaves
            self.mode = mode
        }
    }

    /// By the group's topic relative to the base (`group/downstairs`).
    public let groups: [String: Group]
    /// How long a group's state may disagree with its members' before that is a breach (seconds).
    public let window: Double
    var states: [String: JSONValue] = [:]
    var availability: [String: String] = [:]
    /// Groups whose last state disagreed with their members' when it came: since when, and why.
    var pending: [String: (since: Double, why: String)] = [:]
    var last: [String: JSONValue] = [:]
    /// Group states compared with their members'.
    public private(set) var checked = 0
    /// Group states that disagreed when they came and agreed within the window.
    public private(set) var converged = 0

    public init(groups: [String: Group], window: Double = 5) {
        self.groups = groups
        self.window = window
    }

    /// A message under the base (`rel` relative to it) at `at` seconds. Devices' states and availability are
    /// kept; a group's state is judged against them: its `state` (any member on, or all, among those online;
    /// all of them when none is) and `brightness` (their mean). Not judged while a device it reaches has no
    /// state or availability seen yet (the first moments, or after a broker restart lost the retained topics).
    ///
    /// A group's state must agree with its members' within `window`, not at once (docs/testing.md, rule 13:
    /// a run under AddressSanitizer saw a group's state one update behind its members', put right by its
    /// next state; the cause is not found yet, and `converged` counts such cases). A disagreement (a group state that does not agree, or a member's change the group's last
    /// state no longer agrees with) is pending until a later message makes the group's last state agree; a
    /// breach (returned once) when it is still pending `window` seconds on.
    public mutating func see(rel: String, payload: [UInt8], at: Double = 0) -> String? {
        if rel.hasSuffix("/availability") {
            availability[String(rel.dropLast("/availability".count))] = String(decoding: payload, as: UTF8.self)
        } else if !payload.isEmpty, let state = try? JSONValue.parse(payload) {
            if groups[rel] != nil {
                last[rel] = state
                if let why = judge(rel) {
                    checked += 1
                    if pending[rel] == nil { pending[rel] = (at, why) } else { pending[rel]?.why = why }
                } else if judgeable(rel) {
                    checked += 1
                    if pending.removeValue(forKey: rel) != nil { converged += 1 }
                }
            } else if state.objectValue != nil {
                states[rel] = state
            }
        } else {
            states[rel] = nil
            last[rel] = nil
        }
        // A member's change may settle a pending group, or unsettle one: the group's next state must follow.
        for (group, _) in pending where judge(group) == nil {
            pending[group] = nil
            converged += 1
        }
        let device = rel.hasSuffix("/availability") ? String(rel.dropLast("/availability".count)) : rel
        for (group, g) in groups where pending[group] == nil && g.leaves.contains(device) {
            if let why = judge(group) { pending[group] = (at, why) }
        }
        return due(at: at)
    }

    /// Disagreements under way are forgotten (a broker restart: the retained topics come back in the broker's order).
    public mutating func forgetPending() { pending.removeAll() }

    /// The active instance is stopped (kill -9 or SIGSTOP) until another takes over. A member's state and
    /// its group's next state are two publications; a stop can fall between them, and nobody publishes the
    /// group's until the takeover. Meanwhile nothing is due.
    var activeStopped = false
    public mutating func activeStops() { activeStopped = true }

    /// The stop is over at `from`: at a takeover, that plus the new instance's settle time (what is pending, or
    /// comes pending while it settles, is its to put right within `window` after); or the schedule's stop ended
    /// with no takeover seen (a breach of its own). Nothing happens when nothing was stopped (a broker
    /// restart's takeover).
    public mutating func resume(deadlinesFrom from: Double) {
        guard activeStopped else { return }
        activeStopped = false
        settledAt = from
    }
    var settledAt = -Double.infinity

    /// The first group still disagreeing with its members `window` seconds after it began (or after the new
    /// active instance settled), then forgotten.
    public mutating func due(at: Double) -> String? {
        guard !activeStopped, let (group, p) = pending.first(where: { at - max($0.value.since, settledAt) > window }) else { return nil }
        pending[group] = nil
        return String(format: "%@ for %.1f s: ", group, at - p.since) + p.why
    }

    func judgeable(_ rel: String) -> Bool {
        guard let g = groups[rel], last[rel]?["state"]?.stringValue != nil else { return false }
        return g.leaves.allSatisfy { states[$0] != nil && availability[$0] != nil }
    }

    /// Why the group's last state disagrees with its members' now; nil when it agrees or cannot be judged.
    func judge(_ rel: String) -> String? {
        guard judgeable(rel), let g = groups[rel], let state = last[rel], let s = state["state"]?.stringValue else { return nil }
        var seen: [(on: Bool?, brightness: Double?, online: Bool)] = []
        for leaf in g.leaves {
            guard let st = states[leaf], let a = availability[leaf] else { return nil }
            let word = (st["state"] ?? st["power"])?.stringValue
            seen.append((word.map { $0.uppercased() == "ON" }, st["brightness"]?.doubleValue, a == "online"))
        }
        let online = seen.filter(\.online)
        let use = online.isEmpty ? seen : online
        let on = use.compactMap(\.on)
        let lit = g.mode == "all" ? !on.isEmpty && !on.contains(false) : on.contains(true)
        if s != (lit ? "ON" : "OFF") {
            return "\(rel) is \(s) although its members say \(lit ? "ON" : "OFF") (\(g.mode): \(use.map { $0.on.map { $0 ? "ON" : "OFF" } ?? "-" }))"
        }
        let levels = use.compactMap(\.brightness)
        if let b = state["brightness"]?.doubleValue, !levels.isEmpty {
            let mean = (levels.reduce(0, +) / Double(levels.count)).rounded()
            if b != mean {
                return "\(rel) has brightness \(JSONValue.format(b)) although its members' mean is \(JSONValue.format(mean)) (\(levels)); "
                    + "the group's members: \(state["members"]?.serialized ?? "-")"
            }
        }
        return nil
    }

    /// The devices a group's result says failed (`partial`), and a breach when it names one the group does
    /// not reach, or is neither `ok` nor `partial` nor a refusal of the whole command (`error`).
    public func failed(group rel: String, result payload: [UInt8]) -> (members: [String], breach: String?) {
        guard let j = try? JSONValue.parse(payload), let g = groups[rel] else { return ([], nil) }
        switch j["status"]?.stringValue {
        case "ok", "error": return ([], nil)
        case "partial":
            let members = (j["failed"]?.arrayValue ?? []).compactMap { $0["member"]?.stringValue }
            if members.isEmpty { return ([], "\(rel): partial without a failed member: \(String(decoding: payload, as: UTF8.self))") }
            if let stranger = members.first(where: { !g.leaves.contains($0) }) {
                return (members, "\(rel): partial naming \(stranger), which it does not reach")
            }
            return (members, nil)
        default:
            return ([], "\(rel): a result that is neither ok, partial nor error: \(String(decoding: payload, as: UTF8.self))")
        }
    }

    /// The devices a group's (or scene's) error line on bridge/log names as failed
    /// (`group/<name>: N of M members failed: a/b: …; c/d: …`); nil for any other line.
    public static func failedInLog(_ message: String) -> [String]? {
        guard let r = message.range(of: " members failed: ") else { return nil }
        return message[r.upperBound...].components(separatedBy: "; ").compactMap { part in
            guard let colon = part.range(of: ": ") else { return nil }
            let member = String(part[..<colon.lowerBound])
            return member.contains("/") ? member : nil
        }
    }
}

/// Hot standby (design.md §18), as a subscriber sees a group: every takeover is announced on `bridge/event`
/// (`takeover {from, to, reason, gap_ms}`), and each one the schedule causes (a kill -9 or a pause of the active
/// instance) comes from that instance, goes to another, and is seen within its bound of the fault; no takeover
/// happens that nothing caused (the first start, a broker restart's window: every instance lost its
/// connection and the group picks one again); and no two instances claim `active` at once on
/// `bridge/instances/<name>` outside a broker restart's window. Times are seconds on the run's clock.
public struct TakeoverWatch: Sendable {
    public struct Takeover: Sendable {
        public var from: String?
        public var to: String
        public var at: Double
        /// `gap_ms` as the event says it.
        public var gapMs: Double
        /// Seconds from the fault that caused it to the event (nil: a start or a broker restart's).
        public var afterFault: Double?
    }
    struct Expected {
        var from: String
        var what: String
        var at: Double
        var within: Double
    }
    public private(set) var takeovers: [Takeover] = []
    var expected: [Expected] = []
    /// Each instance's last claim (`standby`, `active`, `offline`, `cleared`).
    public private(set) var claims: [String: String] = [:]
    /// Two instances claiming `active` at once inside a broker restart's window.
    public private(set) var overlapsExplained = 0
    /// The instance last named active (by a takeover event or its claim).
    public private(set) var active: String?

    public init() {}

    /// The schedule stopped the active instance `from` (`what`: "kill -9", "SIGSTOP") at `at`: a takeover from
    /// it to another instance is due on `bridge/event` within `within` seconds.
    public mutating func expect(from: String, what: String, at: Double, within: Double) {
        expected.append(Expected(from: from, what: what, at: at, within: within))
    }

    /// A `bridge/event` payload seen at `at`; `explained`: inside a broker restart's window.
    public mutating func event(_ payload: [UInt8], at: Double, explained: Bool) -> String? {
        guard let j = try? JSONValue.parse(payload), j["type"] == "takeover", let d = j["data"] else { return nil }
        guard let to = d["to"]?.stringValue else { return "a takeover event that names no instance: \(String(decoding: payload, as: UTF8.self))" }
        let from = d["from"]?.stringValue
        var t = Takeover(from: from, to: to, at: at, gapMs: d["gap_ms"]?.doubleValue ?? -1)
        active = to
        if let i = expected.firstIndex(where: { $0.from == from }) {
            let e = expected.remove(at: i)
            t.afterFault = at - e.at
            takeovers.append(t)
            if to == e.from { return "the takeover after \(e.what) of \(e.from) went back to it" }
            if at - e.at > e.within {
                return "the takeover from \(e.from) was announced \(String(format: "%.1f", at - e.at)) s after its \(e.what) (bound \(String(format: "%.1f", e.within)) s)"
            }
            return nil
        }
        takeovers.append(t)
        if explained || (takeovers.count == 1 && from == nil) { return nil }
        return "a takeover nothing caused: \(from ?? "none") → \(to) (\(d["reason"]?.stringValue ?? ""))"
    }

    /// A `bridge/instances/<name>` payload seen at `at` (empty: the claim was cleared).
    public mutating func claim(_ name: String, payload: [UInt8], explained: Bool) -> String? {
        let role = payload.isEmpty ? "cleared" : (try? JSONValue.parse(payload))?["role"]?.stringValue ?? "?"
        claims[name] = role
        guard role == "active" else { return nil }
        active = name
        let others = claims.filter { $0.key != name && $0.value == "active" }.keys.sorted()
        guard !others.isEmpty else { return nil }
        if explained {
            overlapsExplained += 1
            return nil
        }
        return "\(name) claims active while \(others.joined(separator: ", ")) still does"
    }

    /// The takeovers due by `now` and not announced: each a breach, once.
    public mutating func overdue(now: Double) -> [String] {
        let late = expected.filter { now - $0.at > $0.within }
        expected.removeAll { now - $0.at > $0.within }
        return late.map { "no takeover from \($0.from) announced within \(String(format: "%.1f", $0.within)) s of its \($0.what)" }
    }
}

/// Hot standby's safety as the upstreams see it: the requests of two instances of a group never interleave.
/// Each upstream HTTP request names its instance (`X-Switchyard-Instance`, design.md §18); an instance may
/// send from the moment it is seen active (its takeover event or its `active` claim, less `slack` for the
/// race between that publication and its first request) until another instance is; a request of one instance
/// after another's since it was last seen active is a breach, and so is a request that names no instance
/// (one made outside the upstream lease). An activation seen inside a broker restart's window is `uncertain`:
/// the caller dates it at the window's start (the subscriber may have been cut off itself when the group
/// picked one), and there two instances can each take the client id, one after the other, before either
/// hears the other (design.md §18 "One `active` claim at a time"). Such an activation counts from the
/// instance's first request after it: a hand-over inside the window (one instance's requests, then the
/// other's) is not a breach; a request of the first after the second's is.
/// Requests are judged in time order once every activation before them can have been seen (`judge`).
public struct UpstreamInstanceWatch: Sendable {
    public let slack: Double
    var activations: [String: [(at: Double, uncertain: Bool)]] = [:]
    /// For an uncertain activation (by instance and its date), the instance's first request after it.
    var firstAfter: [String: [Double: Double]] = [:]
    var pending: [(instance: String?, at: Double, what: String)] = []
    var last: [String: (at: Double, what: String)] = [:]
    /// Requests judged, by instance.
    public private(set) var judged: [String: Int] = [:]

    public init(slack: Double = 1) { self.slack = slack }

    /// `uncertain`: seen inside a broker restart's window and dated at its start (above).
    public mutating func activated(_ name: String, at: Double, uncertain: Bool = false) {
        if activations[name]?.last.map({ $0.at < at }) ?? true { activations[name, default: []].append((at, uncertain)) }
    }

    /// A request an upstream received at `at`, with the instance it named (nil: none).
    public mutating func request(instance: String?, at: Double, what: String) { pending.append((instance, at, what)) }

    /// Judges, in time order, the requests made before `horizon`.
    public mutating func judge(before horizon: Double) -> [String] {
        let now = pending.filter { $0.at < horizon }.sorted { $0.at < $1.at }
        pending.removeAll { $0.at < horizon }
        var out: [String] = []
        for r in now {
            let when = String(format: "%.2f s", r.at)
            guard let x = r.instance else {
                out.append("an upstream request that names no instance at \(when): \(r.what)")
                continue
            }
            judged[x, default: 0] += 1
            guard let activation = activations[x]?.last(where: { $0.at <= r.at + slack }) else {
                out.append("\(x) sent an upstream request at \(when) before it was ever seen active: \(r.what)")
                continue
            }
            var since = activation.at
            if activation.uncertain {
                since = firstAfter[x, default: [:]][activation.at] ?? r.at
                firstAfter[x, default: [:]][activation.at] = since
            }
            for (y, l) in last where y != x && l.at >= since {
                out.append("upstream requests of two instances interleave: \(y) at \(String(format: "%.2f s", l.at)) (\(l.what)), "
                           + "\(x) at \(when) (\(r.what)), \(x) active since \(String(format: "%.2f s", since))")
                last[y] = nil   // each interleaving once
            }
            last[x] = (r.at, r.what)
        }
        return out
    }
}
