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
        // <adapter>/<device...>/(get|set|set/<field>), read by its first and last separators: no array of
        // levels is made for every message (an allocation on the path of every command, for a topic that
        // needs only its first and last levels split off).
        let u = rest.utf8, slash = UInt8(ascii: "/")
        guard let first = u.firstIndex(of: slash), let last = u.lastIndex(of: slash), first != last else { return .other }
        let adapter = rest[..<first]
        guard adapter != "bridge" else { return .other }
        let middle = rest[u.index(after: first)..<last], tail = rest[u.index(after: last)...]
        if tail == "get" { return middle.isEmpty ? .other : .get(adapter: String(adapter), device: String(middle)) }
        if tail == "set" { return middle.isEmpty ? .other : .set(adapter: String(adapter), device: String(middle), field: nil) }
        if let split = middle.utf8.lastIndex(of: slash), middle[middle.utf8.index(after: split)...] == "set" {
            let device = middle[..<split]
            return device.isEmpty || tail.isEmpty ? .other : .set(adapter: String(adapter), device: String(device), field: String(tail))
        }
        return .other
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
