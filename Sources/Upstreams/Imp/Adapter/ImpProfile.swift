#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// How one imp app's agent is read and driven (docs/upstreams/imp-livecoding.md §1.4). A profile is data: the
/// built-in apps below and the profiles users declare in YAML (`imp.profiles`) are the same thing.
public struct ImpProfile: Sendable, Equatable {
    /// How the state endpoint's body is read. Bodies are parsed whatever the Content-Type.
    public enum Format: String, Sendable, Equatable, CaseIterable {
        /// A JSON object; fields are JSON Pointers (`/world/utc`).
        case json
        /// `"1"` / `"0"`: the body is whether the device is connected.
        case flag
        /// BigClock's `1.1.1.1.8.0.12.1.c.0`; fields are indexes.
        case dotted
    }

    public enum Kind: Sendable, Equatable {
        /// Published "ON"/"OFF" from a bool, 1/0, "1"/"0" or "on"/"off"; written as a JSON bool.
        case power
        case bool
        /// The app's raw 0…rawMax published as percent `brightness` with `brightness_raw` beside it.
        case brightness(rawMax: Int)
        case integer(min: Int, max: Int)
        case text
    }

    /// A request the bridge sends: POST `path` with `body`, in which every string `"{{value}}"` is
    /// replaced by the typed JSON value.
    public struct Request: Sendable, Equatable {
        public var path: String
        public var body: JSONValue
        public init(path: String, body: JSONValue) {
            self.path = path
            self.body = body
        }

        public func body(with value: JSONValue) -> JSONValue {
            func walk(_ v: JSONValue) -> JSONValue {
                switch v {
                case .string("{{value}}"): return value
                case .array(let a): return .array(a.map(walk))
                case .object(let o): return .object(o.mapValues(walk))
                default: return v
                }
            }
            return walk(body)
        }
    }

    public struct Field: Sendable, Equatable {
        public var name: String
        /// A JSON Pointer (json) or an index (dotted).
        public var from: String
        public var kind: Kind
        /// Added to the value read (BigClock reports brightness + 1: offset −1).
        public var readOffset: Int
        /// Added to the raw value written (Clock and BigClock store value − 1: offset +1).
        public var setOffset: Int
        public var set: Request?
        public init(_ name: String, from: String, _ kind: Kind, readOffset: Int = 0, setOffset: Int = 0, set: Request? = nil) {
            self.name = name
            self.from = from
            self.kind = kind
            self.readOffset = readOffset
            self.setOffset = setOffset
            self.set = set
        }
    }

    public struct Action: Sendable, Equatable {
        public var name: String
        public var request: Request
        /// Reset and reboot change everything: the state is read again afterwards (as Controller does).
        public var repoll: Bool
        public init(_ name: String, _ request: Request, repoll: Bool = true) {
            self.name = name
            self.request = request
            self.repoll = repoll
        }
    }

    public var name: String
    public var statePath: String
    public var format: Format
    /// Where "device connected" is read (pointer or index; `c` means connected in dotted state).
    public var connected: String?
    public var fields: [Field]
    public var actions: [Action]
    /// Unknown apps: every top-level member of a JSON state is mirrored as is.
    public var mirror: Bool

    public init(name: String, statePath: String = "/controller/state", format: Format = .json, connected: String? = nil,
                fields: [Field] = [], actions: [Action] = [], mirror: Bool = false) {
        self.name = name
        self.statePath = statePath
        self.format = format
        self.connected = connected
        self.fields = fields
        self.actions = actions
        self.mirror = mirror
    }

    // MARK: reading

    public struct Reading: Sendable, Equatable {
        public var fields: [String: JSONValue]
        public var connected: Bool?
    }

    /// Reads a state body. Throws a message when the body is not what the profile expects.
    public func read(_ body: [UInt8]) throws(AdapterError) -> Reading {
        let text = String(decoding: body, as: UTF8.self).trimmingWhitespace()
        var out: [String: JSONValue] = [:]
        var connected: Bool?
        let raw: (String) -> JSONValue?
        switch format {
        case .flag:
            guard text == "1" || text == "0" else { throw AdapterError("expected \"1\" or \"0\" from \(statePath), got '\(text.excerpt(40))'") }
            return Reading(fields: [:], connected: text == "1")
        case .json:
            guard let v = try? JSONValue.parse(text), case .object(let o) = v else {
                if mirror, text == "1" || text == "0" { return Reading(fields: [:], connected: text == "1") }
                throw AdapterError("expected a JSON object from \(statePath), got '\(text.excerpt(40))'")
            }
            raw = { Self.pointer(v, $0) }
            if mirror {
                for (k, m) in o where !["isconnected", "connected"].contains(k) { out[k] = m }
                connected = (o["isconnected"] ?? o["connected"]).flatMap(Self.truth)
            }
        case .dotted:
            let parts = text.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
            guard parts.count >= 2 else { throw AdapterError("expected a dotted settings string from \(statePath), got '\(text.excerpt(40))'") }
            raw = { key in Int(key).flatMap { $0 >= 0 && $0 < parts.count ? .string(parts[$0]) : nil } }
        }
        if let c = readConnected(raw) { connected = c }
        for f in fields {
            guard let v = raw(f.from) else { continue }
            switch f.kind {
            case .power:
                if let b = Self.truth(v) { out[f.name] = b ? "ON" : "OFF" }
            case .bool:
                if let b = Self.truth(v) { out[f.name] = .bool(b) }
            case .brightness(let rawMax):
                if let n = Self.number(v) {
                    let r = min(max(Int(n.rounded()) + f.readOffset, 0), rawMax)
                    out[f.name] = JSONValue(Int((Double(r) * 100 / Double(rawMax)).rounded()))
                    out["\(f.name)_raw"] = JSONValue(r)
                }
            case .integer(let lo, let hi):
                if let n = Self.number(v) { out[f.name] = JSONValue(min(max(Int(n.rounded()) + f.readOffset, lo), hi)) }
            case .text:
                if case .string = v { out[f.name] = v } else { out[f.name] = .string(v.serialized) }
            }
        }
        return Reading(fields: out, connected: connected)
    }

    func readConnected(_ raw: (String) -> JSONValue?) -> Bool? {
        guard let c = connected, let v = raw(c) else { return nil }
        if format == .dotted, case .string(let s) = v { return s == "c" || s == "1" }
        return Self.truth(v)
    }

    /// RFC 6901.
    static func pointer(_ v: JSONValue, _ p: String) -> JSONValue? {
        if p.isEmpty { return v }
        guard p.hasPrefix("/") else { return nil }
        var cur = v
        for token in p.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            let key = String(token.replacing("~1", with: "/").replacing("~0", with: "~"))
            switch cur {
            case .object(let o): guard let n = o[key] else { return nil }; cur = n
            case .array(let a): guard let i = Int(key), i >= 0, i < a.count else { return nil }; cur = a[i]
            default: return nil
            }
        }
        return cur
    }

    static func truth(_ v: JSONValue) -> Bool? {
        switch v {
        case .bool(let b): return b
        case .number(let n): return n != 0
        case .string(let s):
            switch s.lowercased() {
            case "1", "true", "on", "yes", "c": return true
            case "0", "false", "off", "no", "d": return false
            default: return nil
            }
        default: return nil
        }
    }

    /// A number an agent sent (or a numeric string), when an Int can hold it: "1e300" or "nan" from a
    /// broken agent is no reading, and must not trap in Int(_:) (the imp fuzz target's corpus has such bodies).
    static func number(_ v: JSONValue) -> Double? {
        let n: Double?
        switch v {
        case .number(let x): n = x
        case .string(let s): n = Double(s)
        default: n = nil
        }
        guard let n, n.isFinite, abs(n) < 1e15 else { return nil }
        return n
    }

    // MARK: writing

    /// The wire value for a validated command value, in the app's unit.
    public func wireValue(_ f: Field, _ value: JSONValue, current: JSONValue?) -> JSONValue {
        switch f.kind {
        case .power:
            if value == "TOGGLE" { return .bool(current != "ON") }
            return .bool(value == "ON")
        case .bool:
            return value
        case .brightness(let rawMax):
            let p = value.doubleValue ?? 0
            return JSONValue(Int((p * Double(rawMax) / 100).rounded()) + f.setOffset)
        case .integer:
            return JSONValue(Int((value.doubleValue ?? 0).rounded()) + f.setOffset)
        case .text:
            return value
        }
    }

    // MARK: built-in apps

    static func settings(_ key: String) -> Request { Request(path: "/settings", body: .object([key: "{{value}}"])) }
    static func post(_ path: String, _ body: JSONValue) -> Request { Request(path: path, body: body) }

    public static let matrixClock = ImpProfile(
        name: "matrixclock", connected: "/isconnected",
        fields: [
            Field("power", from: "/on", .power, set: settings("setlight")),
            Field("brightness", from: "/bright", .brightness(rawMax: 15), set: settings("setbright")),
            Field("mode_24h", from: "/mode", .bool, set: settings("setmode")),
            Field("utc", from: "/world/utc", .bool),
        ],
        actions: [Action("reset", post("/action", ["action": "reset"])), Action("reboot", post("/action", ["action": "reboot"]))])

    /// Clock: state shows brightness 0–15, `setbright` stores value − 1. Its `/action` treats any
    /// action but reset as "world" (an assignment bug), so no reboot is offered.
    public static let clock = ImpProfile(
        name: "clock", connected: "/isconnected",
        fields: [
            Field("power", from: "/on", .power, set: settings("setlight")),
            Field("brightness", from: "/bright", .brightness(rawMax: 15), setOffset: 1, set: settings("setbright")),
            Field("mode_24h", from: "/mode", .bool, set: settings("setmode")),
            Field("utc", from: "/world/utc", .bool),
        ],
        actions: [Action("reset", post("/action", ["action": "reset"])), Action("world", post("/action", ["action": "world"]))])

    /// BigClock: no JSON state; `/settings` is a dotted string (mode.bst.flash.colon.bright+1.utc.offset+12.on.c|d.debug).
    public static let bigClock = ImpProfile(
        name: "bigclock", statePath: "/settings", format: .dotted, connected: "8",
        fields: [
            Field("power", from: "7", .power, set: settings("setlight")),
            Field("brightness", from: "4", .brightness(rawMax: 15), readOffset: -1, setOffset: 1, set: settings("setbright")),
            Field("mode_24h", from: "0", .bool, set: settings("setmode")),
            Field("utc", from: "5", .bool),
        ],
        actions: [Action("reset", post("/action", ["action": "reset"]))])

    /// Weather: power through the idempotent `/settings {"power": bool}`, never the `/update` toggle.
    public static let weather = ImpProfile(
        name: "weather", connected: "/isconnected",
        fields: [Field("power", from: "/ispowered", .power, set: settings("power"))],
        actions: [
            Action("update", post("/update", ["action": "update"]), repoll: false),
            Action("reboot", post("/update", ["action": "reboot"])),
            Action("reset", post("/update", ["action": "reset"])),
        ])

    public static let homeWeather = ImpProfile(
        name: "homeweather", format: .flag,
        actions: [Action("advance", post("/dimmer", ["advance": "advance"]), repoll: false), Action("reset", post("/reset", ["reset": "reset"]))])

    /// ThermalForecast: power as a JSON bool (the watch's "1"/"0" strings are stored as is by the agent).
    public static let thermalForecast = ImpProfile(
        name: "thermalforecast", connected: "/isconnected",
        fields: [
            Field("power", from: "/ispowered", .power, set: post("/actions", ["action": "power", "power": "{{value}}"])),
            Field("brightness", from: "/brightness", .brightness(rawMax: 15), set: settings("bright")),
            Field("orientation", from: "/ledorient", .text),
        ],
        actions: [Action("reboot", post("/actions", ["action": "reboot"]))])

    /// Any other app: the state endpoint mirrored as is, `"1"`/`"0"` or a JSON object.
    public static let generic = ImpProfile(name: "generic", mirror: true)

    public static let builtIn: [ImpProfile] = [matrixClock, clock, bigClock, weather, homeWeather, thermalForecast, generic]

    /// App codes that are published (Clock's UUID; Weather's literal code).
    public static let knownCodes: [String: String] = [
        "B14E7692-6D05-4AC6-B66A-AB40C98E3D5B": "clock",
        "Weather": "weather",
    ]
}
