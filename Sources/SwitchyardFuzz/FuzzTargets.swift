#if canImport(Glibc)
import Glibc
#endif
import HomeAssistantMirror
import ImpAdapter
import LIFXAdapter
import NovaAdapter
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore

/// Every parser of bytes a peer (or a config file) hands us, as a fuzz target: the input must never
/// crash it, and each target checks what must hold of its output whatever the input (a JSON value
/// re-reads as itself, an error message quotes the input only briefly, every topic the HA mirror makes
/// is a legal MQTT topic name). A broken property stops the process like a crash does (`precondition`),
/// so libFuzzer keeps the input. Run by `switchyard-fuzz` (libFuzzer, `make fuzz`) and, over the stored
/// corpus and every crash found so far, by `swift test` (Tests/Fuzz, FuzzCorpusTests).
public enum FuzzTargets {
    public typealias Target = @Sendable ([UInt8]) -> Void

    public static let all: [String: Target] = [
        "json": json, "json-stream": jsonStream, "command": command, "bridge-request": bridgeRequest, "reply-to": replyTo,
        "config": config, "hci": hci, "att": att, "nova": nova, "imp": imp, "ha": ha, "lifx-color": lifxColor, "lifx-lan": lifxLAN, "lifx-zones": lifxZones,
        "console-auth": consoleAuth, "console-page": consolePage, "yaml-edit": yamlEdit, "manage-request": manageRequest,
        "group-request": groupRequest,
    ]

    /// Longest error message any parser may make from hostile input: messages quote input cut short.
    public static let maxMessage = 600

    static func check(_ ok: Bool, _ what: @autoclosure () -> String) {
        precondition(ok, what())
    }

    /// JSON documents: whatever parses serialises to text that parses back to the same value; the reader
    /// that builds only some members (`parse(_:keeping:)`, the flood's cheap path) accepts exactly what the
    /// whole reader accepts, builds the kept members as it does, and quotes any other value as its excerpt.
    static let json: Target = { bytes in
        let keep: (String) -> Bool = { $0.utf8.count % 2 == 0 }
        let lazy = try? JSONValue.parse(bytes, keeping: keep)
        guard let v = try? JSONValue.parse(bytes) else {
            check(lazy == nil, "the cheap reader accepted what the whole reader refuses")
            return
        }
        let again = try? JSONValue.parse(v.bytes)
        check(again == v, "JSON round trip changed \(v.serialized.prefix(200))")
        switch lazy {
        case .object(let o)?:
            check(v.objectValue.map { whole in o.keys.sorted() == whole.keys.sorted() && whole.allSatisfy { keep($0.key) ? o[$0.key] == $0.value : o[$0.key] == .null } } == true,
                  "the cheap reader built an object other than the whole reader's")
        case .other(let excerpt)?:
            check(v.objectValue == nil && excerpt == v.excerpt, "the cheap reader quoted \(excerpt.prefix(100)) for \(v.excerpt)")
        case nil:
            check(false, "the cheap reader refused what the whole reader accepts")
        }
    }

    /// The streaming reader (HA's entities snapshot): it accepts what the whole-document reader accepts,
    /// and visits members only of the streamed path.
    static let jsonStream: Target = { bytes in
        var visited = 0
        let streamed = try? JSONValue.parse(bytes, streaming: [["event", "a"]], visit: { _ in visited += 1 })
        let whole = try? JSONValue.parse(bytes)
        check((streamed == nil) == (whole == nil), "the streaming and whole readers disagree on validity")
        if whole != nil, visited > 0 {
            // Members of a streamed object, or elements of a streamed array.
            let members = (whole?.arrayValue ?? [whole!]).reduce(0) { n, doc in
                let a = doc["event"]?["a"]
                return n + (a?.objectValue?.count ?? a?.arrayValue?.count ?? 0)
            }
            check(visited <= members, "visited \(visited) members of \(members)")
        }
    }

    static let light = DeviceDescriptor(id: "l", label: "Lamp", category: .light, capabilities: [
        .state(), .brightness(), .colorTemp(minKelvin: 2500, maxKelvin: 9000), .color(), .colorMode(), .transition(),
    ])

    /// A command as the core reads it: the first byte picks `/set` (whole) or `/set/<field>`. The router's
    /// cheap read (only the light's own fields built) ends exactly as the full read does: the same error,
    /// or the same transaction and the same outcome of validation.
    static let command: Target = { bytes in
        let fields = [nil, "state", "brightness", "color", "color_temp", "nope"]
        let field = bytes.first.map { fields[Int($0) % fields.count] } ?? nil
        let payload = Array(bytes.dropFirst())
        let cheap = CommandParser.read(payload: payload, field: field, bareWords: light.bareCommands, keep: { light.capability($0) != nil })
        switch CommandParser.read(payload: payload, field: field, bareWords: light.bareCommands) {
        case .failure(let f):
            check(f.message.utf8.count <= maxMessage, "an error message of \(f.message.utf8.count) bytes")
            check(cheap == .failure(f), "the cheap read ended otherwise than the full one: \(f.message)")
        case .success(let parsed):
            if let t = parsed.transaction { check(t.serialized.utf8.count <= CommandParser.maxTransactionBytes, "a long transaction accepted") }
            let outcome = CommandParser.validate(parsed.fields, against: light)
            if case .failure(let f) = outcome {
                check(f.message.utf8.count <= maxMessage, "a validation message of \(f.message.utf8.count) bytes")
            }
            guard case .success(let c) = cheap else { return check(false, "the cheap read failed where the full one did not") }
            check(c.transaction == parsed.transaction && CommandParser.validate(c.fields, against: light) == outcome,
                  "the cheap read validated otherwise than the full one")
        }
    }

    /// An MQTT 5 Response Topic and Correlation Data as a client sends them (the first byte splits the input
    /// into the two; a second byte of 0 means no Correlation Data), as the transport copies them and the router
    /// judges them: what is accepted is within its bounds, a topic name the bridge may publish to and none of
    /// its own topics (but the one it answers on anyway); a refusal says so in a short message.
    static let replyTo: Target = { bytes in
        guard let first = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        let split = min(rest.count, Int(first) * 4)
        let topic = Array(rest[..<split]), data = Array(rest[split...])
        let r = topic.withUnsafeBytes { t in
            data.withUnsafeBytes { d in ReplyTo(topic: t, correlation: data.first == 0 ? nil : d) }
        }
        check(r.topic.utf8.count <= ReplyTo.maxTopicBytes && (r.correlationData?.count ?? 0) <= ReplyTo.maxCorrelationBytes,
              "a response topic or correlation data copied past its bound")
        let scheme = TopicScheme(base: "b")
        let router = InboundRouter(scheme: scheme, maxPayload: 1 << 16, commandMaxAge: 30, discovery: true)
        let answeredOn = "b/test/lamp/result"
        if let problem = router.replyProblem(r, answeredOn: answeredOn) {
            check(problem.utf8.count <= maxMessage, "a refusal of \(problem.utf8.count) bytes")
            return
        }
        check(r.topicBytes <= ReplyTo.maxTopicBytes && r.correlationBytes <= ReplyTo.maxCorrelationBytes, "an oversized reply accepted")
        check(Topic.isPublishable(r.topic) && !r.topic.hasPrefix("$"), "an unpublishable response topic accepted")
        check(r.topic == answeredOn || (scheme.classify(r.topic) == .other && !r.topic.hasPrefix("b/") && !r.topic.hasPrefix("homeassistant/")),
              "one of the bridge's own topics accepted as a response topic: \(r.topic.excerpt(80))")
    }

    static let bridgeRequest: Target = { bytes in
        if case .failure(let e) = BridgeAPI.parse(bytes) {
            check(e.message.utf8.count <= maxMessage, "an error message of \(e.message.utf8.count) bytes")
        }
    }

    /// The YAML config with every registered upstream's section.
    static let config: Target = { bytes in
        do {
            _ = try SwitchyardConfig.parse(yaml: String(decoding: bytes, as: UTF8.self), file: "fuzz.yaml", upstreams: upstreams,
                                           environment: ["HA_TOKEN": "t", "LIFX_TOKEN": "t"])
        } catch {
            // Problems are the expected outcome for most inputs.
        }
    }

    /// HCI LE Meta events (legacy and extended advertising reports) and their advertising data.
    static let hci: Target = { bytes in
        for r in HCIAdvertising.reports(bytes) {
            check(r.data.count <= 255, "an advertising report of \(r.data.count) bytes")
            _ = AdvertisingData.parse(r.data)
        }
        _ = HCIAdvertising.commandComplete(bytes)
        _ = AdvertisingData.parse(bytes)
    }

    /// ATT PDUs from a peripheral: classified, and read as each discovery response.
    static let att: Target = { bytes in
        if case .notification(_, let value, _) = ATTPDU.classify(bytes) { check(value.count == bytes.count - 3, "a notification lost bytes") }
        _ = try? ATTPDU.groups(bytes)
        _ = try? ATTPDU.characteristics(bytes)
        _ = try? ATTPDU.descriptors(bytes)
    }

    static let nova: Target = { bytes in
        if let id = NovaCodec.ack(bytes) { check(NovaCodec.encode(.ping, id: id).count > 0 && bytes.count == 6, "an ack of \(bytes.count) bytes") }
    }

    /// Imp agent state bodies (JSON, "1"/"0", dotted settings) under every built-in profile.
    static let imp: Target = { bytes in
        for p in ImpProfile.builtIn {
            do throws(AdapterError) { _ = try p.read(bytes) } catch {
                check(error.message.utf8.count <= maxMessage, "an error message of \(error.message.utf8.count) bytes")
            }
        }
    }

    /// A frame from Home Assistant: whatever it holds, the mirror only makes legal MQTT topic names, and
    /// packs every entity's topics without loss.
    static let ha: Target = { bytes in
        for m in HAMirrorModel.digest(bytes) {
            check(Topic.isPublishable(m.relative), "the mirror made the topic '\(m.relative.prefix(200))'")
        }
        check(HAMirrorModel.packsLosslessly(bytes), "an entity's topics changed in packing")
    }

    /// A UDP datagram from the LAN: decoded, and its payload read as every message the bridge reads. A
    /// packet that decodes re-encodes to the same bytes.
    static let lifxLAN: Target = { bytes in
        guard let p = LIFXLANPacket.decode(bytes) else { return }
        check(p.header.size == bytes.count && p.payload.count == bytes.count - LIFXLANHeader.length, "a packet of the wrong size decoded")
        var again = LIFXLANPacket(type: p.header.type, source: p.header.source, target: p.header.target, sequence: p.header.sequence,
                                  tagged: p.header.tagged, ackRequired: p.header.ackRequired, resRequired: p.header.resRequired, payload: p.payload).bytes
        // Reserved bits and fields are not kept: compare what the bridge reads.
        for i in [3, 22] { again[i] = bytes[i] }
        check(LIFXLANPacket.decode(again) == p, "a decoded packet re-encodes differently")
        _ = LIFXLANMessage.service(p.payload)
        if let st = LIFXLANMessage.lightState(p.payload) { check((0...100).contains(st.color.brightnessPercent) && (0..<360).contains(st.color.degrees), "a state out of range") }
        _ = LIFXLANMessage.stateLabel(p.payload)
        _ = LIFXLANMessage.version(p.payload)
        _ = LIFXLANMessage.firmware(p.payload)
        _ = LIFXLANMessage.membership(p.payload)
        _ = LIFXLANMessage.infrared(p.payload)
        _ = LIFXLANMessage.hevCycle(p.payload)
        _ = LIFXLANMessage.hevResult(p.payload)
        _ = LIFXLANMessage.effectType(p)
        if let m = LIFXLANMessage.state64(p.payload) { check(m.count == 64, "a TileState64 of another size than 64 zones") }
        if let z = LIFXLANMessage.zoneChunk(p) {
            check(z.count <= LIFXLANMessage.maxZones && z.index + z.colors.count <= z.count, "a zone reply past its own count")
        }
    }

    /// Several datagrams (each after a 2-byte little-endian length) as the replies to one zone read: whatever
    /// they say, the read ends complete with exactly its zone count of plausible colours, or not at all.
    static let lifxZones: Target = { bytes in
        var a = LIFXZoneAssembler()
        var i = 0
        while i + 2 <= bytes.count {
            let n = Int(bytes[i]) | Int(bytes[i + 1]) << 8
            i += 2
            let end = min(bytes.count, i + n)
            if let p = LIFXLANPacket.decode(Array(bytes[i..<end])) { a.add(p) }
            i = end
        }
        if let zones = a.complete {
            check(zones.count == a.count && zones.count <= LIFXLANMessage.maxZones && zones.allSatisfy(\.plausible), "a read completed with \(zones.count) zones")
        }
        check(!(a.invalid && a.isComplete), "an invalid read called complete")
    }

    static let lifxColor: Target = { bytes in
        do throws(LIFXColorError) { _ = try LIFXColorChange.parse(String(decoding: bytes, as: UTF8.self)) } catch {
            check(error.description.utf8.count <= maxMessage, "an error message of \(error.description.utf8.count) bytes")
        }
    }
}

/// Reading a corpus (a file, or every file of a directory) without Foundation.
public enum FuzzCorpus {
    public static func files(at path: String) -> [String] {
        guard let dir = opendir(path) else { return [path] }
        defer { closedir(dir) }
        var out: [String] = []
        while let e = readdir(dir) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if !name.hasPrefix(".") { out.append(path + "/" + name) }
        }
        return out.sorted()
    }

    public static func read(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return out
    }
}
