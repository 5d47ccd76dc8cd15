/// One typed field of a device's state, as an adapter declares it. The core validates commands,
/// rounds values and builds Home Assistant discovery from these; adapters never see raw payloads.
public struct Capability: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// "ON"/"OFF" (and "TOGGLE" in commands when `toggle` is true).
        case binary(toggle: Bool)
        case bool
        case integer(min: Int, max: Int)
        /// A number rounded to `precision` decimal places before comparing and publishing.
        case number(min: Double, max: Double, precision: Int)
        case enumeration([String])
        case text(maxLength: Int)
        /// A JSON object with typed members; `acceptsText` lets a plain string through to the adapter
        /// (e.g. a colour given as `#rrggbb`), which then validates it itself.
        case object([Capability], acceptsText: Bool)
        /// A one-shot action: the command value must be one of these; never part of the state.
        case action([String])
        /// A JSON array of at most `maxCount` items, each validated as `item` (a strip's zone segments).
        indirect case list(Capability, maxCount: Int)
    }

    public enum Role: Sendable, Equatable {
        /// Part of the device's main entity (a light's brightness, a switch's state).
        case main
        /// Exposed as its own read-only entity (a sensor).
        case sensor
        /// Read-only, diagnostic (signal, last_seen); a diagnostic sensor in discovery.
        case diagnostic
        /// A setting of the device (a flash's auto-off time, a clock's 24-hour mode): announced with
        /// `entity_category: config`, so Home Assistant shows it with the device's settings.
        case config
        /// Kept in the state but not announced on its own.
        case hidden
    }

    public var name: String
    public var kind: Kind
    public var unit: String?
    public var writable: Bool
    public var readable: Bool
    public var role: Role
    /// Home Assistant device class for sensors (`temperature`, `signal_strength`, …).
    public var deviceClass: String?
    /// The entity's name in Home Assistant when the field's name made readable is not right (`RSSI`).
    public var entityName: String?

    public init(_ name: String, _ kind: Kind, unit: String? = nil, writable: Bool = false, readable: Bool = true,
                role: Role = .main, deviceClass: String? = nil, entityName: String? = nil) {
        self.name = name
        self.kind = kind
        self.unit = unit
        self.writable = writable
        self.readable = readable
        self.role = role
        self.deviceClass = deviceClass
        self.entityName = entityName
    }

    // Common fields, in the user's units (docs/topics.md "Devices").
    public static func state(writable: Bool = true) -> Capability {
        Capability("state", .binary(toggle: true), writable: writable)
    }
    public static func brightness(writable: Bool = true) -> Capability {
        Capability("brightness", .integer(min: 0, max: 100), unit: "%", writable: writable)
    }
    public static func colorTemp(minKelvin: Int = 1500, maxKelvin: Int = 9000, writable: Bool = true) -> Capability {
        Capability("color_temp", .integer(min: minKelvin, max: maxKelvin), unit: "K", writable: writable)
    }
    public static func color(writable: Bool = true, acceptsText: Bool = false) -> Capability {
        Capability("color", .object([
            Capability("h", .integer(min: 0, max: 360), unit: "°", writable: writable),
            Capability("s", .integer(min: 0, max: 100), unit: "%", writable: writable),
        ], acceptsText: acceptsText), writable: writable)
    }
    public static func colorMode(_ modes: [String] = ["hs", "color_temp"]) -> Capability {
        Capability("color_mode", .enumeration(modes), role: .main)
    }
    public static func transition() -> Capability {
        Capability("transition", .number(min: 0, max: 3600, precision: 2), unit: "s", writable: true, readable: false)
    }

    /// A JSON description published in `bridge/devices/<adapter>/<name>`.
    public var descriptor: JSONValue {
        var o: [String: JSONValue] = ["name": .string(name), "writable": .bool(writable), "readable": .bool(readable)]
        if let unit { o["unit"] = .string(unit) }
        switch kind {
        case .binary(let toggle):
            o["type"] = "binary"; o["values"] = toggle ? ["ON", "OFF", "TOGGLE"] : ["ON", "OFF"]
        case .bool: o["type"] = "bool"
        case .integer(let lo, let hi): o["type"] = "integer"; o["min"] = JSONValue(lo); o["max"] = JSONValue(hi)
        case .number(let lo, let hi, let p):
            o["type"] = "number"; o["min"] = .number(lo); o["max"] = .number(hi); o["precision"] = JSONValue(p)
        case .enumeration(let v): o["type"] = "enum"; o["values"] = .array(v.map(JSONValue.string))
        case .text(let n): o["type"] = "text"; o["max_length"] = JSONValue(n)
        case .object(let members, _): o["type"] = "object"; o["members"] = .array(members.map(\.descriptor))
        case .action(let v): o["type"] = "action"; o["values"] = .array(v.map(JSONValue.string))
        case .list(let item, let n): o["type"] = "list"; o["items"] = item.descriptor; o["max_count"] = JSONValue(n)
        }
        return .object(o)
    }
}

/// What a command value failed on, phrased for a user reading bridge/log.
public struct ValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    public let field: String
    public let reason: String
    public var description: String { "\(field): \(reason)" }
}

extension Capability {
    /// Validates and normalises a command value for this field (units are the user's units).
    public func validate(_ value: JSONValue, path: String? = nil) throws(ValidationError) -> JSONValue {
        let field = path ?? name
        func fail(_ reason: String) -> ValidationError { ValidationError(field: field, reason: reason) }
        if !writable { throw fail("is read-only") }
        switch kind {
        case .binary(let toggle):
            var word: String?
            // Case is folded only in what could be a word (a long string from a flood is not upper-cased whole).
            if case .string(let s) = value, s.utf8.count <= 24 { word = s.uppercased() }
            if case .bool(let b) = value { word = b ? "ON" : "OFF" }
            let allowed = toggle ? ["ON", "OFF", "TOGGLE"] : ["ON", "OFF"]
            guard let w = word, allowed.contains(w) else {
                throw fail("expected one of \(allowed.joined(separator: ", ")), got \(value.excerpt)")
            }
            return .string(w)
        case .bool:
            if case .bool = value { return value }
            if case .string(let s) = value, s.utf8.count <= 16, ["true", "false"].contains(s.lowercased()) { return .bool(s.lowercased() == "true") }
            throw fail("expected true or false, got \(value.excerpt)")
        case .integer(let lo, let hi):
            guard case .number(let n) = value, n.isFinite else { throw fail("expected an integer \(lo)–\(hi), got \(value.excerpt)") }
            let r = n.rounded()
            guard r >= Double(lo), r <= Double(hi) else { throw fail("\(JSONValue.format(n)) is out of range \(lo)–\(hi)") }
            return .number(r)
        case .number(let lo, let hi, let p):
            guard case .number(let n) = value, n.isFinite else {
                throw fail("expected a number \(JSONValue.format(lo))–\(JSONValue.format(hi)), got \(value.excerpt)")
            }
            guard n >= lo, n <= hi else { throw fail("\(JSONValue.format(n)) is out of range \(JSONValue.format(lo))–\(JSONValue.format(hi))") }
            return .number(Capability.round(n, precision: p))
        case .enumeration(let values), .action(let values):
            let folded: String? = if case .string(let s) = value, s.utf8.count <= 3 * (values.map(\.utf8.count).max() ?? 0) { s.lowercased() } else { nil }
            guard let folded, let match = values.first(where: { $0.lowercased() == folded }) else {
                throw fail("expected one of \(values.joined(separator: ", ")), got \(value.excerpt)")
            }
            return .string(match)
        case .text(let maxLength):
            guard case .string(let s) = value else { throw fail("expected a string, got \(value.excerpt)") }
            // Counted up to one past the limit at most (a long string's characters are never all counted).
            guard s.utf8.count <= maxLength || s.prefix(maxLength + 1).count <= maxLength else {
                throw fail("longer than \(maxLength) characters")
            }
            return value
        case .object(let members, let acceptsText):
            if acceptsText, case .string = value { return value }
            guard case .object(let o) = value else {
                throw fail(acceptsText ? "expected an object or a string, got \(value.excerpt)" : "expected an object, got \(value.excerpt)")
            }
            var out: [String: JSONValue] = [:]
            for key in o.keys.sorted() {
                guard let m = members.first(where: { $0.name == key }) else {
                    throw ValidationError(field: "\(field).\(key.excerpt(40))",
                                          reason: "unknown member (expected \(members.map(\.name).joined(separator: ", ")))")
                }
                out[key] = try m.validate(o[key]!, path: "\(field).\(key.excerpt(40))")
            }
            if out.isEmpty { throw fail("empty object") }
            return .object(out)
        case .list(let item, let maxCount):
            guard case .array(let a) = value else { throw fail("expected a list, got \(value.excerpt)") }
            guard !a.isEmpty else { throw fail("empty list") }
            guard a.count <= maxCount else { throw fail("\(a.count) items is over \(maxCount)") }
            var out: [JSONValue] = []
            out.reserveCapacity(a.count)
            for (i, v) in a.enumerated() { out.append(try item.validate(v, path: "\(field)[\(i)]")) }
            return .array(out)
        }
    }

    /// Rounds a reported value the way the published state shows it, so that upstream quantisation
    /// (0.29999237…) never causes a publish.
    public func normalise(_ value: JSONValue) -> JSONValue {
        switch (kind, value) {
        case (.integer, .number(let n)): return .number(n.rounded())
        case (.number(_, _, let p), .number(let n)): return .number(Capability.round(n, precision: p))
        case (.object(let members, _), .object(let o)):
            var out = o
            for m in members { if let v = o[m.name] { out[m.name] = m.normalise(v) } }
            return .object(out)
        case (.list(let item, _), .array(let a)): return .array(a.map(item.normalise))
        default: return value
        }
    }

    static func round(_ n: Double, precision: Int) -> Double {
        if precision <= 0 { return n.rounded() }
        var scale = 1.0
        for _ in 0..<precision { scale *= 10 }
        return (n * scale).rounded() / scale
    }
}
