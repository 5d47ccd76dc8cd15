/// Topic-name rules (design.md §1).
public enum Naming {
    /// Segments a device name may not be, nor end in.
    public static let reservedSegments: Set<String> = ["set", "get", "availability", "result"]

    /// "Hall Lamp" ⇒ "hall_lamp": lower-cased, every run outside [a-z0-9] becomes one `_`, trimmed.
    public static func slug(_ label: String) -> String {
        var out = ""
        var pendingUnderscore = false
        for u in label.lowercased().unicodeScalars {
            if (u >= "a" && u <= "z") || (u >= "0" && u <= "9") {
                if pendingUnderscore && !out.isEmpty { out += "_" }
                pendingUnderscore = false
                out.unicodeScalars.append(u)
            } else {
                pendingUnderscore = true
            }
        }
        return out
    }

    /// A name made readable for people: `_` and `/` become spaces, the first letter upper case
    /// (`key_light` → "Key light", `hall/lamp` → "Hall lamp", `mode_24h` → "Mode 24h").
    public static func readable(_ name: String) -> String {
        let words = name.split(whereSeparator: { $0 == "_" || $0 == "/" || $0 == " " })
            .map { acronyms.contains($0.lowercased()) ? $0.uppercased() : String($0) }.joined(separator: " ")
        return words.prefix(1).uppercased() + words.dropFirst()
    }

    /// Words shown in capitals when a name is made readable (`utc` ⇒ "UTC", `ha_status` ⇒ "HA status").
    static let acronyms: Set<String> = ["ha", "lifx", "utc", "rssi", "id", "ip", "url", "led", "uv", "usb", "co2", "pm25", "tv"]

    /// Ids in discovery topics and unique_id: `[A-Za-z0-9_-]` only ("AA:BB:CC:DD:EE:FF" ⇒ "aabbccddeeff").
    public static func normaliseID(_ id: String) -> String {
        var out = ""
        for u in id.unicodeScalars {
            if (u >= "a" && u <= "z") || (u >= "0" && u <= "9") || u == "_" || u == "-" {
                out.unicodeScalars.append(u)
            } else if u >= "A" && u <= "Z" {
                out += String(u).lowercased()
            } else if u == ":" || u == "." {
                continue
            } else {
                out += "_"
            }
        }
        return out
    }

    /// Problems with a user-given device name, or nil when it is acceptable.
    public static func problem(withName name: String, reservedPrefixes: [String] = []) -> String? {
        if name.isEmpty { return "name is empty" }
        if name.hasPrefix("/") || name.hasSuffix("/") { return "name '\(name)' may not start or end with '/'" }
        if name.contains("+") || name.contains("#") { return "name '\(name)' may not contain '+' or '#'" }
        if name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }) {
            return "name '\(name)' may not contain control characters"
        }
        if name.contains("//") { return "name '\(name)' may not contain an empty segment ('//')" }
        if name == "bridge" { return "name 'bridge' is reserved" }
        for segment in name.split(separator: "/") {
            if reservedSegments.contains(String(segment)) {
                return "name '\(name)' may not contain the reserved segment '\(segment)' (set, get, availability, result)"
            }
        }
        for p in reservedPrefixes where name.hasPrefix(p) {
            return "name '\(name)' may not start with '\(p)'"
        }
        return nil
    }

    public struct Assignment: Sendable, Equatable {
        public var names: [String: String]   // device id -> name (within its namespace)
        public var warnings: [String: String]   // device id -> why its name got a suffix
    }

    /// Assigns names to one adapter's devices, deterministically whatever the listing order.
    /// A configured name wins. Otherwise the slug of the label; an empty slug falls back to the
    /// normalised id; a reserved or clashing slug gets `_<id>` appended for EVERY device that has it,
    /// so no device is privileged by the order in which the upstream listed it.
    public static func assign(_ devices: [DeviceDescriptor], reservedPrefixes: [String] = []) -> Assignment {
        var names: [String: String] = [:]
        var warnings: [String: String] = [:]
        var taken: Set<String> = []   // namespace + name
        for d in devices {
            if let c = d.configuredName { names[d.id] = c; taken.insert(d.namespace + c) }
        }
        var candidates: [String: String] = [:]
        for d in devices where d.configuredName == nil {
            let s = slug(d.label)
            candidates[d.id] = s.isEmpty ? normaliseID(d.id) : s
        }
        var counts: [String: Int] = [:]
        for d in devices where d.configuredName == nil { counts[d.namespace + candidates[d.id]!, default: 0] += 1 }
        for d in devices.sorted(by: { $0.id < $1.id }) where d.configuredName == nil {
            let c = candidates[d.id]!
            let key = d.namespace + c
            let reserved = problem(withName: c, reservedPrefixes: reservedPrefixes) != nil
            if reserved || counts[key]! > 1 || taken.contains(key) {
                let fixed = "\(c)_\(normaliseID(d.id))"
                names[d.id] = fixed
                warnings[d.id] = (reserved
                    ? "device '\(d.label)' (\(d.id)): name '\(c)' is reserved, using '\(fixed)'"
                    : "device '\(d.label)' (\(d.id)): name '\(c)' clashes with another device, using '\(fixed)'")
            } else {
                names[d.id] = c
            }
        }
        return Assignment(names: names, warnings: warnings)
    }
}

/// Every topic string the bridge uses is built here, and nowhere else.
public struct TopicScheme: Sendable, Equatable {
    public var base: String
    public var discoveryPrefix: String
    public var haStatusTopic: String

    public init(base: String, discoveryPrefix: String = "homeassistant", haStatusTopic: String = "homeassistant/status") {
        self.base = base
        self.discoveryPrefix = discoveryPrefix
        self.haStatusTopic = haStatusTopic
    }

    public func bridge(_ leaf: String) -> String { "\(base)/bridge/\(leaf)" }
    public var bridgeState: String { bridge("state") }
    public func response(_ path: String) -> String { "\(base)/bridge/response/\(path)" }
    public func deviceDetails(adapter: String, name: String) -> String { "\(base)/bridge/devices/\(adapter)/\(name)" }
    public func device(adapter: String, name: String) -> String { "\(base)/\(adapter)/\(name)" }
    public func availability(adapter: String, name: String) -> String { device(adapter: adapter, name: name) + "/availability" }
    public func result(adapter: String, name: String) -> String { device(adapter: adapter, name: name) + "/result" }
    public func set(adapter: String, name: String) -> String { device(adapter: adapter, name: name) + "/set" }

    /// The subscriptions the bridge needs for requests and for the commands of devices whose names have
    /// `depths` segments. Never `<base>/#`: under MQTT 3.1.1 that would echo every state we publish back to us.
    public func commandFilters(depths: Set<Int>) -> [String] {
        var out = ["\(base)/bridge/request/#"]
        for d in depths.union([1, 2]).sorted() {
            let stem = "\(base)/+" + String(repeating: "/+", count: d)
            out += [stem + "/set", stem + "/set/+", stem + "/get"]
        }
        return out
    }

    /// What an inbound topic means.
    public enum Inbound: Equatable, Sendable {
        case request(path: String)
        case set(adapter: String, device: String, field: String?)
        case get(adapter: String, device: String)
        case haStatus
        case other
    }

    public func classify(_ topic: String) -> Inbound {
        if topic == haStatusTopic { return .haStatus }
        let prefix = base + "/"
        guard topic.hasPrefix(prefix) else { return .other }
        let rest = topic.dropFirst(prefix.count)
        if rest.hasPrefix("bridge/request/") {
            let path = rest.dropFirst("bridge/request/".count)
            return path.isEmpty ? .other : .request(path: String(path))
        }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, parts[0] != "bridge" else { return .other }
        let adapter = parts[0]
        // <adapter>/<device...>/get
        if parts.last == "get" {
            let device = parts[1..<(parts.count - 1)].joined(separator: "/")
            return device.isEmpty ? .other : .get(adapter: adapter, device: device)
        }
        if parts.last == "set" {
            let device = parts[1..<(parts.count - 1)].joined(separator: "/")
            return device.isEmpty ? .other : .set(adapter: adapter, device: device, field: nil)
        }
        if parts.count >= 4, parts[parts.count - 2] == "set" {
            let device = parts[1..<(parts.count - 2)].joined(separator: "/")
            let field = parts[parts.count - 1]
            return device.isEmpty || field.isEmpty ? .other : .set(adapter: adapter, device: device, field: field)
        }
        return .other
    }
}

extension StringProtocol {
    /// Without leading and trailing whitespace and newlines (Unicode's, as `Character.isWhitespace` says):
    /// the standard library's own, so that trimming a payload never goes through Foundation's NSString.
    public func trimmingWhitespace() -> String {
        guard let first = firstIndex(where: { !$0.isWhitespace }), let last = lastIndex(where: { !$0.isWhitespace }) else { return "" }
        return String(self[first...last])
    }
}

extension StringProtocol {
    /// Percent-encodes every UTF-8 byte except ASCII letters and digits, RFC 3986's unreserved `-._~`
    /// and the characters in `keeping`.
    public func percentEncoded(keeping: String = "") -> String {
        let keep = Set(keeping.utf8)
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count)
        for b in utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            default:
                if keep.contains(b) {
                    out.append(b)
                } else {
                    out += [UInt8(ascii: "%"), hex[Int(b >> 4)], hex[Int(b & 0xF)]]
                }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// Lower-case hex digits, as bytes (shared by `hexString` and the JSON `\u00XX` escape).
let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

extension Sequence<UInt8> {
    /// Lower-case hex, two digits a byte.
    public var hexString: String {
        let hex = hexDigits
        var out: [UInt8] = []
        for b in self { out += [hex[Int(b >> 4)], hex[Int(b & 0xF)]] }
        return String(decoding: out, as: UTF8.self)
    }
}

/// MQTT topic names as the broker accepts them for a PUBLISH.
public enum Topic {
    /// Non-empty, at most 65 535 bytes of UTF-8, no wildcard (`+`, `#`) and no NUL (MQTT 3.1.1 §4.7).
    public static func isPublishable(_ t: String) -> Bool {
        let u = t.utf8
        return !u.isEmpty && u.count <= 65_535 && !u.contains { $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "#") || $0 == 0 }
    }

    /// Whether `s` may be one level of a topic: non-empty, no `/`, and publishable.
    public static func isLevel(_ s: some StringProtocol) -> Bool {
        !s.isEmpty && !s.utf8.contains(UInt8(ascii: "/")) && isPublishable(String(s))
    }
}

extension StringProtocol {
    /// Input quoted in a message: at most `max` bytes of UTF-8, cut at a scalar boundary, then "…".
    /// Counted in bytes, not characters: one character may carry any number of combining marks.
    public func excerpt(_ max: Int = 80) -> String {
        let head = Array(utf8.prefix(max + 1))
        guard head.count > max else { return String(self) }
        // head[end] is the first byte left out: while it continues a scalar, the cut moves back.
        var end = max
        while end > 0, UTF8.isContinuation(head[end]) { end -= 1 }
        return String(decoding: head[..<end], as: UTF8.self) + "…"
    }
}

extension JSONValue {
    /// The value as JSON, quoted in a message: at most 80 bytes (see `excerpt`).
    public var excerpt: String { String(decoding: prefixBytes(80), as: UTF8.self).excerpt() }
}
