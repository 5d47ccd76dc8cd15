#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif

/// What a group or a scene knows of one device it names: the record its adapter keeps in the engine (the
/// descriptor, the state as last published, the availability).
public struct MemberView: Sendable, Equatable {
    public var ref: MemberRef
    public var deviceID: String
    public var descriptor: DeviceDescriptor
    public var state: [String: JSONValue]
    public var available: Bool?

    public init(ref: MemberRef, deviceID: String, descriptor: DeviceDescriptor, state: [String: JSONValue], available: Bool?) {
        self.ref = ref
        self.deviceID = deviceID
        self.descriptor = descriptor
        self.state = state
        self.available = available
    }
}

/// What one group command or scene recall sends: each member's command, in its own fields and units, and the
/// members that cannot take it, with the reason.
public struct FanOutPlan: Sendable, Equatable {
    public struct Command: Sendable, Equatable {
        public var ref: MemberRef
        public var deviceID: String
        public var fields: [String: JSONValue]
    }
    public struct Failure: Sendable, Equatable {
        public var ref: MemberRef
        public var message: String
    }
    public var commands: [Command] = []
    public var failures: [Failure] = []
}

/// How one device's fields map onto the groups' (`GroupFields`): its on/off field (`state`, else the one
/// writable ON/OFF field of its main entity: an Imp clock's `power`), its brightness (percent, or a range of
/// its own that percent is scaled onto), its colour temperature (kelvin, or mired) and whether it takes a
/// colour, each with its range.
struct MemberFields {
    var onOff: String?
    var brightness: (lo: Double, hi: Double, percent: Bool)?
    var colorTemp: (lo: Double, hi: Double, mired: Bool)?
    var color = false
    var transition: (lo: Double, hi: Double)?

    init(_ d: DeviceDescriptor) {
        func writable(_ name: String) -> Capability? { d.capability(name).flatMap { $0.writable ? $0 : nil } }
        func range(_ c: Capability) -> (Double, Double)? {
            switch c.kind {
            case .integer(let lo, let hi): return (Double(lo), Double(hi))
            case .number(let lo, let hi, _): return (lo, hi)
            default: return nil
            }
        }
        if let s = writable("state"), case .binary = s.kind {
            onOff = "state"
        } else {
            onOff = d.capabilities.first { c in
                if case .binary = c.kind { return c.writable && c.readable && c.role == .main }
                return false
            }?.name
        }
        if let b = writable("brightness"), let (lo, hi) = range(b) {
            brightness = (lo, hi, b.unit == "%" || (lo == 0 && hi == 100))
        }
        if let k = writable("color_temp"), let (lo, hi) = range(k) {
            let mired = ["mired", "mireds"].contains(k.unit?.lowercased() ?? "")
            colorTemp = (lo, hi, mired)
        }
        if let c = writable("color"), case .object = c.kind { color = true }
        if let t = writable("transition"), let (lo, hi) = range(t) { transition = (lo, hi) }
    }

    /// The colour-temperature range in kelvin.
    var kelvinRange: (lo: Double, hi: Double)? {
        guard let k = colorTemp else { return nil }
        return k.mired ? (1_000_000 / max(k.hi, 1), 1_000_000 / max(k.lo, 1)) : (k.lo, k.hi)
    }

    /// A group's command (its fields, `state` already ON or OFF) as this device takes it: the fields it has,
    /// renamed and converted to its units and clamped to its ranges. Empty when it has none of them.
    func command(_ fields: [String: JSONValue]) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        if let s = fields["state"], let f = onOff { out[f] = s }
        if let b = fields["brightness"]?.doubleValue, let r = brightness {
            let v = r.percent ? b : r.lo + b / 100 * (r.hi - r.lo)
            out["brightness"] = .number(min(max(v, r.lo), r.hi).rounded())
        }
        if let k = fields["color_temp"]?.doubleValue, let r = colorTemp {
            let v = r.mired ? 1_000_000 / max(k, 1) : k
            out["color_temp"] = .number(min(max(v, r.lo), r.hi).rounded())
        }
        if let c = fields["color"], color { out["color"] = c }
        // A transition alone changes nothing: it goes only with a change.
        if let t = fields["transition"]?.doubleValue, let r = transition, !out.isEmpty {
            out["transition"] = .number(min(max(t, r.lo), r.hi))
        }
        return out
    }

    /// What the device's state says in the groups' fields and units (`state` ON/OFF, `brightness` percent,
    /// `color_mode`, `color_temp` kelvin, `color`).
    func reading(_ state: [String: JSONValue]) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        if let f = onOff, case .string(let s)? = state[f] { out["state"] = .string(s.uppercased() == "ON" ? "ON" : "OFF") }
        if let r = brightness, let b = state["brightness"]?.doubleValue {
            out["brightness"] = .number(r.percent ? b : (r.hi > r.lo ? (b - r.lo) / (r.hi - r.lo) * 100 : 0))
        }
        if let r = colorTemp, let k = state["color_temp"]?.doubleValue, k > 0 {
            out["color_temp"] = .number(r.mired ? 1_000_000 / k : k)
        }
        if color, case .object(let c)? = state["color"], c["h"]?.doubleValue != nil, c["s"]?.doubleValue != nil { out["color"] = .object(c) }
        if case .string(let m)? = state["color_mode"], ["hs", "color_temp"].contains(m) { out["color_mode"] = .string(m) }
        return out
    }
}

/// Groups and scenes as values: what a group reaches, what it is (its descriptor: the fields its members
/// have), what its state is (derived from its members'), what a command or a recall sends to each member,
/// and what a scene stores. No actor, no I/O: the engine asks it with a view of its registries
/// (BridgeEngine+Groups.swift), and the unit tests with a table.
public struct GroupBook: Sendable {
    public let config: GroupsConfig
    let groups: [String: GroupDefinition]

    public init(_ config: GroupsConfig) {
        self.config = config
        groups = Dictionary(config.groups.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
    }

    public func group(_ name: String) -> GroupDefinition? { groups[name] }

    /// The devices a group reaches: its members, each nested group's in its place, every device once, in order.
    /// A cycle (refused by the config's reading) ends where it would repeat a group.
    public func leaves(of name: String) -> [MemberRef] {
        var out: [MemberRef] = []
        var seen: Set<MemberRef> = []
        var visiting: Set<String> = []
        func walk(_ g: String) {
            guard visiting.insert(g).inserted, let def = groups[g] else { return }
            for m in def.members {
                if m.isGroup { walk(m.name) } else if seen.insert(m).inserted { out.append(m) }
            }
        }
        walk(name)
        return out
    }

    /// The devices the groups and scenes reach (nested groups flattened; a device may come more than once):
    /// what their listing waits for, with their adapters.
    public var memberDevices: [MemberRef] {
        config.groups.flatMap { leaves(of: $0.name) }
            + config.scenes.flatMap { s in s.entries.flatMap { $0.member.isGroup ? leaves(of: $0.member.name) : [$0.member] } }
    }

    // MARK: what a group is

    /// The group as a device: the groups' fields that any member it reaches has (`color_temp` over the
    /// widest range among them), a light when a member has a brightness or a colour, else a switch when one
    /// has an on/off field. `entityIDs`: the Home Assistant entities of its members, shown in its entity's
    /// `entity_id` attribute (as Home Assistant's own groups do).
    public func descriptor(_ g: GroupDefinition, members: [MemberView], entityIDs: [String] = []) -> DeviceDescriptor {
        let fields = members.map { MemberFields($0.descriptor) }
        var caps: [Capability] = []
        let onOff = fields.contains { $0.onOff != nil }
        let brightness = fields.contains { $0.brightness != nil }
        let color = fields.contains { $0.color }
        let kelvin = fields.compactMap(\.kelvinRange)
        if onOff { caps.append(.state()) }
        if brightness { caps.append(.brightness()) }
        if !kelvin.isEmpty {
            caps.append(.colorTemp(minKelvin: Int(kelvin.map(\.lo).min()!.rounded()), maxKelvin: Int(kelvin.map(\.hi).max()!.rounded())))
        }
        if color { caps.append(.color()) }
        if color || !kelvin.isEmpty { caps.append(.colorMode((color ? ["hs"] : []) + (kelvin.isEmpty ? [] : ["color_temp"]))) }
        if fields.contains(where: { $0.transition != nil }) { caps.append(.transition()) }
        caps.append(Capability("members", .object([], acceptsText: false), role: .hidden))
        let category: DeviceCategory = brightness || color || !kelvin.isEmpty ? .light : onOff ? .switch : .generic
        return DeviceDescriptor(id: g.name, label: g.name, configuredName: g.name, model: "Switchyard group", manufacturer: "Switchyard",
                                category: category, capabilities: caps,
                                entityAttributes: entityIDs.isEmpty ? [:] : ["entity_id": .array(entityIDs.map(JSONValue.string))])
    }

    /// A scene as a device: activated by `ACTIVATE` (or `{"activate": true, "transition": 2}`).
    public static func descriptor(_ s: SceneDefinition) -> DeviceDescriptor {
        DeviceDescriptor(id: s.name, label: s.name, configuredName: s.name, model: "Switchyard scene", manufacturer: "Switchyard",
                         category: .scene, capabilities: [
                            Capability("activate", .bool, writable: true, readable: false), .transition(),
                            Capability("members", .list(Capability("member", .text(maxLength: 256)), maxCount: 10_000), role: .hidden),
                            Capability("last_activated", .text(maxLength: 40), role: .hidden),
                         ], bareCommands: ["ACTIVATE": ["activate": true]])
    }

    /// A group's state from its members' (design.md §20): `state` ON while any member is on (`state_mode:
    /// any`) or while all are (`all`), `brightness` the mean, `color_temp` the mean and `color` the circular
    /// mean over the members in that colour mode, `color_mode` the mode most members are in, each among the
    /// members that are online (all members when none is); `members` each direct member's `online`,
    /// `offline` or `missing`. Available while any member is. Only the fields `descriptor` declares.
    public func state(of g: GroupDefinition, descriptor d: DeviceDescriptor,
                      view: (MemberRef) -> MemberView?) -> (fields: [String: JSONValue], available: Bool) {
        let views = leaves(of: g.name).compactMap(view)
        let readings = views.map { MemberFields($0.descriptor).reading($0.state) }
        let online = views.indices.filter { views[$0].available == true }
        let use = online.isEmpty ? Array(readings) : online.map { readings[$0] }
        var out: [String: JSONValue] = [:]
        if d.capability("state") != nil {
            let on = use.compactMap { $0["state"] }.map { $0 == "ON" }
            let lit = g.stateMode == .any ? on.contains(true) : !on.isEmpty && !on.contains(false)
            out["state"] = lit ? "ON" : "OFF"
        }
        if d.capability("brightness") != nil, let b = Self.mean(use.compactMap { $0["brightness"]?.doubleValue }) {
            out["brightness"] = .number(b.rounded())
        }
        let hasColor = d.capability("color") != nil, hasKelvin = d.capability("color_temp") != nil
        if hasColor || hasKelvin {
            let hs = use.filter { $0["color_mode"] == "hs" || ($0["color_mode"] == nil && $0["color"] != nil && $0["color_temp"] == nil) }
            let ct = use.filter { $0["color_mode"] == "color_temp" || ($0["color_mode"] == nil && $0["color_temp"] != nil) }
            let mode = hasColor && (!hasKelvin || hs.count > ct.count) ? "hs" : "color_temp"
            if hasKelvin, let k = Self.mean((ct.isEmpty ? use : ct).compactMap { $0["color_temp"]?.doubleValue }) {
                out["color_temp"] = .number(k.rounded())
            }
            if hasColor, let c = Self.meanColor((hs.isEmpty ? use : hs).compactMap { $0["color"] }) { out["color"] = c }
            // The mode only with its value (Home Assistant reads the one the mode names).
            if mode == "hs" ? out["color"] != nil : out["color_temp"] != nil { out["color_mode"] = .string(mode) }
        }
        var members: [String: JSONValue] = [:]
        for m in g.members { members[m.description] = .string(status(of: m, view: view)) }
        out["members"] = .object(members)
        return (out, views.contains { $0.available == true })
    }

    /// `online`, `offline` or `missing` (its adapter does not list it; a group: none of its devices is listed).
    public func status(of m: MemberRef, view: (MemberRef) -> MemberView?) -> String {
        let views = m.isGroup ? leaves(of: m.name).compactMap(view) : [view(m)].compactMap { $0 }
        if views.contains(where: { $0.available == true }) { return "online" }
        return views.isEmpty ? "missing" : "offline"
    }

    static func mean(_ values: [Double]) -> Double? { values.isEmpty ? nil : values.reduce(0, +) / Double(values.count) }

    /// Hue as a circular mean (350° and 10° make 0°, not 180°), saturation as the mean.
    static func meanColor(_ colors: [JSONValue]) -> JSONValue? {
        let hs = colors.compactMap { c -> (Double, Double)? in
            guard let h = c["h"]?.doubleValue, let s = c["s"]?.doubleValue else { return nil }
            return (h, s)
        }
        guard !hs.isEmpty else { return nil }
        let x = hs.reduce(0) { $0 + cos($1.0 * .pi / 180) }, y = hs.reduce(0) { $0 + sin($1.0 * .pi / 180) }
        var h = (atan2(y, x) * 180 / .pi).rounded()
        if h < 0 { h += 360 }
        if h >= 360 { h -= 360 }
        return ["h": .number(h), "s": .number((hs.reduce(0) { $0 + $1.1 } / Double(hs.count)).rounded())]
    }

    // MARK: commands

    /// A group's command as its members take it: `TOGGLE` resolved against the group's state first (every
    /// member ends the same way), then each device it reaches gets the fields it has, converted
    /// (`MemberFields.command`) and validated against its own capabilities. A device that has none of the
    /// fields is left alone; one that is missing, or that refuses its fields, is a failure.
    public func plan(group name: String, fields: [String: JSONValue], descriptor: DeviceDescriptor,
                     view: (MemberRef) -> MemberView?) -> FanOutPlan {
        guard let g = groups[name] else { return FanOutPlan() }
        var fields = fields
        if fields["state"] == "TOGGLE" {
            fields["state"] = state(of: g, descriptor: descriptor, view: view).fields["state"] == "ON" ? "OFF" : "ON"
        }
        return plan(leaves(of: name).map { ($0, fields) }, view: view)
    }

    /// A scene's recall: each of its devices and groups takes its stored fields, a group's through its
    /// members; a device named twice (itself and in a group) takes what comes last. `transition` (the
    /// recall's, else the scene's) goes to every device that has one.
    public func plan(scene s: SceneDefinition, transition: Double?, view: (MemberRef) -> MemberView?) -> FanOutPlan {
        var order: [MemberRef] = []
        var wanted: [MemberRef: [String: JSONValue]] = [:]
        for e in s.entries {
            var f = e.fields
            if let t = transition ?? s.transition { f["transition"] = .number(t) }
            for target in e.member.isGroup ? leaves(of: e.member.name) : [e.member] {
                if wanted[target] == nil { order.append(target) }
                wanted[target, default: [:]].merge(f) { $1 }
            }
        }
        return plan(order.map { ($0, wanted[$0]!) }, view: view)
    }

    func plan(_ targets: [(MemberRef, [String: JSONValue])], view: (MemberRef) -> MemberView?) -> FanOutPlan {
        var out = FanOutPlan()
        for (ref, fields) in targets {
            guard let v = view(ref) else {
                out.failures.append(.init(ref: ref, message: "missing: \(ref.adapter) does not list it"))
                continue
            }
            let converted = MemberFields(v.descriptor).command(fields)
            if converted.isEmpty { continue }
            switch CommandParser.validate(converted, against: v.descriptor) {
            case .success(let valid): out.commands.append(.init(ref: ref, deviceID: v.deviceID, fields: valid))
            case .failure(let f): out.failures.append(.init(ref: ref, message: f.message))
            }
        }
        return out
    }

    // MARK: scenes

    /// What a scene stores of a device or a group now, in the groups' fields: `state: OFF` alone for one that
    /// is off; else its state, brightness, and the colour its colour mode shows (`color` or `color_temp`).
    /// Nil for a device that is not listed, a group that is not defined, or one with none of the fields.
    public func capture(_ ref: MemberRef, groupDescriptor: (String) -> DeviceDescriptor?, view: (MemberRef) -> MemberView?) -> [String: JSONValue]? {
        let reading: [String: JSONValue]
        if ref.isGroup {
            guard let g = groups[ref.name], let d = groupDescriptor(ref.name) else { return nil }
            reading = state(of: g, descriptor: d, view: view).fields
        } else {
            guard let v = view(ref) else { return nil }
            reading = MemberFields(v.descriptor).reading(v.state)
        }
        if reading["state"] == "OFF" { return ["state": "OFF"] }
        var out: [String: JSONValue] = [:]
        if let s = reading["state"] { out["state"] = s }
        if let b = reading["brightness"]?.doubleValue { out["brightness"] = .number(min(max(b.rounded(), 0), 100)) }
        let mode = reading["color_mode"]?.stringValue ?? (reading["color"] != nil ? "hs" : "color_temp")
        if mode == "hs", let c = reading["color"], let h = c["h"]?.doubleValue, let s = c["s"]?.doubleValue {
            out["color"] = ["h": .number(h.rounded()), "s": .number(s.rounded())]
        } else if let k = reading["color_temp"]?.doubleValue {
            out["color_temp"] = .number(k.rounded())
        }
        return out.isEmpty ? nil : out
    }
}
