import SwitchyardCore

/// The page's WebSocket as data (docs/console.md "The page's WebSocket"), apart from the connection that
/// carries it: what a page's message asks for, what a command becomes for the engine, and the frames
/// of publications. Pure, so that each parser of the page's bytes has a fuzz target (Sources/SwitchyardFuzz).
public enum PageProtocol {
    /// A page's message the console takes; anything else is ignored.
    public enum Request: Equatable, Sendable {
        /// The Home Assistant mirror's topics, or not.
        case sub(mirror: Bool)
        /// A device's discovery configs.
        case disc(id: JSONValue, adapter: String, deviceID: String)
        /// A command or bridge request: the whole message (`topic`, `payload`; see `submission`).
        case cmd(id: JSONValue, JSONValue)
    }

    /// `{"t":"sub","mirror"}`, `{"t":"disc","id","adapter","device_id"}`, `{"t":"cmd","id","topic","payload"}`
    /// → what it asks for; nil for anything else (not JSON, no `t`, an unknown `t`, a `disc` without its
    /// strings).
    public static func request(_ text: String) -> Request? {
        guard let m = try? JSONValue.parse(text), case .string(let t)? = m["t"] else { return nil }
        let id = m["id"] ?? .null
        switch t {
        case "sub": return .sub(mirror: m["mirror"]?.boolValue ?? false)
        case "disc":
            guard case .string(let adapter)? = m["adapter"], case .string(let device)? = m["device_id"] else { return nil }
            return .disc(id: id, adapter: adapter, deviceID: device)
        case "cmd": return .cmd(id: id, m)
        default: return nil
        }
    }

    /// What the console hands the engine for a page's `cmd`: refused, sent as it is (no result will name
    /// it), or sent with the console's `transaction` and answered by the result or response carrying it.
    public enum Submission: Equatable, Sendable {
        case refused(String)
        case send(topic: String, payload: [UInt8])
        case ask(topic: String, payload: [UInt8], transaction: String)
    }

    /// A page's command: a topic the engine takes from MQTT (`…/set`, `…/set/<field>`, `…/get`,
    /// `bridge/request/…`) and its payload (a JSON value, or a string sent as it is), handed to the engine
    /// exactly as a broker would hand it (InboundRouter validates it). A result comes only for a device's
    /// whole `/set` and a bridge request with a JSON object, which gets `transaction`: a mirror's command
    /// (Home Assistant), `/set/<field>` (its payload is the field's value and carries no transaction) and
    /// `/get` are sent, and their errors go to bridge/log.
    public static func submission(_ m: JSONValue, scheme: TopicScheme, mirrors: [String], transaction: String) -> Submission {
        guard case .string(let topic)? = m["topic"] else { return .refused("no topic") }
        let answered: Bool
        switch scheme.classify(topic) {
        case .set(let adapter, _, let field): answered = field == nil && !mirrors.contains(adapter)
        case .get: answered = false
        case .request: answered = true
        default: return .refused("the console sends commands (…/set, …/get) and bridge requests only")
        }
        let body = m["payload"] ?? .object([:])
        guard answered, case .object(var o) = body else {
            if case .string(let s) = body { return .send(topic: topic, payload: Array(s.utf8)) }
            return .send(topic: topic, payload: body.bytes)
        }
        o["transaction"] = .string(transaction)
        return .ask(topic: topic, payload: JSONValue.object(o).bytes, transaction: transaction)
    }

    /// Hands `items` to `emit` in batches of about `budget` bytes of topics and payloads, each payload written
    /// as its batch is made (a source's only then, so that a page opening on ten thousand devices never holds
    /// every device's details at once); one larger than the budget (`bridge/devices` of thousands of
    /// devices) goes in a batch of its own.
    static func inFrames(_ items: [ConsoleFeed.Item], budget: Int, _ emit: ([ConsoleFeed.Item]) async throws -> Void) async rethrows {
        var batch: [ConsoleFeed.Item] = []
        var bytes = 0
        for item in items {
            let written = ConsoleFeed.Item(topic: item.topic, payload: item.payload)
            if written.size >= budget, !batch.isEmpty {
                try await emit(batch)
                batch.removeAll(keepingCapacity: true)
                bytes = 0
            }
            batch.append(written)
            bytes += written.size
            if bytes >= budget {
                try await emit(batch)
                batch.removeAll(keepingCapacity: true)
                bytes = 0
            }
        }
        if !batch.isEmpty { try await emit(batch) }
    }

    /// `{"t":"m","m":[[topic,payload],…]}`: payloads as JSON strings (null: a retained topic was cleared).
    public static func frame(_ items: [ConsoleFeed.Item]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(items.reduce(16) { $0 + $1.size + 12 })   // sizes of written items: exact
        out.append(contentsOf: #"{"t":"m","m":["#.utf8)
        for (i, item) in items.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "["))
            JSONValue.appendString(item.topic.utf8, to: &out)
            out.append(UInt8(ascii: ","))
            if let p = item.payload {
                if String(validating: p, as: UTF8.self) != nil { JSONValue.appendString(p, to: &out) } else {
                    JSONValue.appendString(String(decoding: p, as: UTF8.self).utf8, to: &out)
                }
            } else {
                out.append(contentsOf: "null".utf8)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: "]}".utf8)
        return String(decoding: out, as: UTF8.self)
    }
}
