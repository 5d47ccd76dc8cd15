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
