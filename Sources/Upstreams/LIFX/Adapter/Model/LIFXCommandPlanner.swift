import SwitchyardCore

/// What a light, group or location command is sent to: a LIFX selector and the lights it covers.
struct LIFXTarget: Sendable, Equatable {
    var selector: String
    var lights: [String]
    var label: String
}

/// Reads a validated command's fields into the changes it makes (an absolute set, a relative change, an
/// effect: the kinds of the cloud's requests, docs/upstreams/lifx-cloud.md "Commands"), from the target's lights
/// as they are now. Pure: `LIFXHome.plan` (LIFXPlan.swift) decides from these which transport carries what.
enum LIFXCommandPlanner {
    struct Plan: Equatable {
        /// In the order they are queued: an absolute set, a relative change, an effect.
        var kinds: [LIFXCloudOrder.Kind] = []
        /// What the user should know that did not stop the command (a clamped colour temperature).
        var notes: [String] = []
        /// The effect, read: the LAN path sends it as a waveform or a firmware effect.
        var effect: LIFXEffect?
    }

    static func plan(_ command: [String: JSONValue], target t: LIFXTarget, members: [LIFXLight],
                     defaultTransition: Double) throws(AdapterError) -> Plan {
        var f = command
        let duration = f.removeValue(forKey: "transition")?.doubleValue ?? defaultTransition
        let single = members.count == 1 && t.selector.hasPrefix("id:")
        var set = LIFXSet(duration: duration)
        var delta = LIFXDelta(duration: duration)
        var plan = Plan()

        if case .string(let s) = f["state"] {
            switch s {
            case "TOGGLE":
                // Against the optimistic state: off if any (connected) light is on, as LIFX's own toggle does.
                let reachable = members.contains(where: \.connected) ? members.filter(\.connected) : members
                set.power = !reachable.contains { $0.on }
            default: set.power = s == "ON"
            }
        }
        if case .number(let b) = f["brightness"] {
            if b == 0 && set.power == nil { set.power = false } else { set.brightness = b / 100 }
        }
        switch f["color"] {
        case .object(let o)?:
            if let h = o["h"]?.doubleValue { set.color.hue = h }
            if let s = o["s"]?.doubleValue { set.color.saturation = s / 100 }
        case .string(let text)?:
            do {
                set.color = try LIFXColorChange.parse(text)
            } catch {
                throw AdapterError("\(error.description); nothing was sent")
            }
        default: break
        }
        let lo = members.map(\.caps.minKelvin).max() ?? 1500
        let hi = members.map(\.caps.maxKelvin).min() ?? 9000
        if var k = f["color_temp"]?.doubleValue.map({ Int($0) }) ?? set.color.kelvin {
            if k < lo || k > hi {
                let c = min(max(k, lo), hi)
                plan.notes.append("color_temp \(k) K is outside \(t.label)'s range \(lo)–\(hi) K; clamped to \(c) K")
                k = c
            }
            set.color = set.color.merged(with: LIFXColorChange(kelvin: k))
        }
        if let step = f["brightness_step"]?.doubleValue {
            if single {
                let base = set.brightness.map { Int(($0 * 100).rounded()) } ?? members[0].brightness
                set.brightness = Double(min(100, max(0, base + Int(step)))) / 100
            } else {
                delta.brightness = step / 100
            }
        }
        if let step = f["color_temp_step"]?.doubleValue {
            if single {
                let base = set.color.kelvin ?? members[0].kelvin
                set.color = set.color.merged(with: LIFXColorChange(kelvin: min(hi, max(lo, base + Int(step)))))
            } else {
                delta.kelvin = Int(step)
            }
        }
        // Like HA and zigbee2mqtt: a brightness or colour without a state turns the light on.
        if set.power == nil, set.brightness != nil || !set.color.isEmpty { set.power = true }

        if set.power != nil || set.brightness != nil || !set.color.isEmpty { plan.kinds.append(.set(set)) }
        if delta.brightness != nil || delta.kelvin != nil { plan.kinds.append(.delta(delta)) }
        if let fx = f["effect"] {
            let e = try effect(fx)
            plan.effect = e
            plan.kinds.append(.effect(name: e.name, body: e.cloudBody))
        }
        if plan.kinds.isEmpty { throw AdapterError("nothing to do: the command changes no field") }
        return plan
    }

    /// The options each effect takes (docs/topics.md "LIFX"): breathe and pulse are waveforms on any light;
    /// move runs on multizone lights, morph and flame on matrix lights, sky on a LIFX Ceiling (firmware effects).
    static let effectOptions: [String: [String]] = [
        "breathe": ["color", "from_color", "period", "cycles", "persist", "power_on", "peak"],
        "pulse": ["color", "from_color", "period", "cycles", "persist", "power_on"],
        "move": ["direction", "period", "cycles", "power_on"],
        "morph": ["period", "duration", "palette", "power_on"],
        "flame": ["period", "duration", "power_on"],
        "sky": ["sky_type", "cloud_saturation_min", "cloud_saturation_max", "period", "duration", "power_on"],
        "off": ["power_off"],
    ]

    /// The effects a light (or a group with such members) can run.
    static func effectNames(multizone: Bool, matrix: Bool, sky: Bool = false) -> [String] {
        ["breathe", "pulse"] + (multizone ? ["move"] : []) + (matrix ? ["morph", "flame"] : []) + (sky ? ["sky"] : []) + ["off"]
    }

    /// The effects any of these lights runs.
    static func effectNames(for lights: [LIFXLight]) -> [String] {
        effectNames(multizone: lights.contains { $0.caps.hasMultizone }, matrix: lights.contains { $0.caps.hasMatrix },
                    sky: lights.contains { $0.caps.hasSky })
    }

    /// `"breathe"` or `{"name": "pulse", "color": "red", "period": 2, "cycles": 3, …}`: the effect with its
    /// options read, and the body of the cloud's `POST /lights/<selector>/effects/<name>`.
    static func effect(_ v: JSONValue) throws(AdapterError) -> LIFXEffect {
        var options: [String: JSONValue] = [:]
        let name: String
        switch v {
        case .string(let s): name = s.lowercased()
        case .object(let o):
            options = o
            guard case .string(let n)? = options.removeValue(forKey: "name") else {
                throw AdapterError("effect: give a name (\(effectNames.joined(separator: ", "))), e.g. {\"name\": \"breathe\", \"color\": \"red\"}")
            }
            name = n.lowercased()
        default: throw AdapterError("effect: expected a name or an object")
        }
        guard let allowed = effectOptions[name] else {
            throw AdapterError("effect: unknown effect '\(name.excerpt(40))' (expected \(effectNames.joined(separator: ", ")))")
        }
        let extra = options.keys.filter { !allowed.contains($0) }
        if !extra.isEmpty {
            throw AdapterError("effect \(name): unknown option \(extra.sorted().joined(separator: ", ")) (expected \(allowed.joined(separator: ", ")))")
        }
        var e = LIFXEffect(name: name)
        func colour(_ key: String, _ text: String) throws(AdapterError) -> LIFXColorChange {
            let c: LIFXColorChange
            do { c = try LIFXColorChange.parse(text) } catch { throw AdapterError("effect \(key): \(error.description); nothing was sent") }
            if c.random && name == "morph" { throw AdapterError("effect \(key): random is not a palette colour; nothing was sent") }
            return c
        }
        if case .string(let t)? = options["color"] { e.color = try colour("color", t) }
        if case .string(let t)? = options["from_color"] { e.fromColor = try colour("from_color", t) }
        if let p = options["period"]?.doubleValue { e.period = p }
        if let c = options["cycles"]?.doubleValue { e.cycles = c }
        if let d = options["duration"]?.doubleValue { e.duration = d }
        if case .bool(let b)? = options["persist"] { e.persist = b }
        if case .bool(let b)? = options["power_on"] { e.powerOn = b }
        if case .bool(let b)? = options["power_off"] { e.powerOff = b }
        if let p = options["peak"]?.doubleValue { e.peak = p }
        if case .string(let d)? = options["direction"] { e.forward = d.lowercased() != "backward" }
        if case .string(let t)? = options["sky_type"] {
            guard let type = LIFXEffect.SkyType.allCases.first(where: { $0.name == t.lowercased() }) else {
                throw AdapterError("effect sky: sky_type is sunrise, sunset or clouds, not '\(t.excerpt(40))'")
            }
            e.sky.type = type
        }
        if let v = options["cloud_saturation_min"]?.intValue { e.sky.saturationMin = UInt8(clamping: v) }
        if let v = options["cloud_saturation_max"]?.intValue { e.sky.saturationMax = UInt8(clamping: v) }
        if case .array(let list)? = options["palette"] {
            for (i, item) in list.enumerated() {
                guard case .string(let t) = item else { throw AdapterError("effect palette[\(i)]: expected a colour string") }
                e.palette.append(try colour("palette[\(i)]", t))
            }
        }
        // The cloud's body: what was given, colours re-encoded canonically.
        var body: [String: JSONValue] = [:]
        func wire(_ c: LIFXColorChange) -> String {
            var parts = c.wireString.map { [$0] } ?? []
            if let b = c.brightness { parts.append("brightness:\(LIFXColorChange.format(b))") }
            return parts.joined(separator: " ")
        }
        switch name {
        case "off":
            body["power_off"] = .bool(e.powerOff)
        case "breathe", "pulse":
            // Without a colour, breathe and pulse dip to 10 % brightness and back.
            body["color"] = .string(e.color.map(wire) ?? "brightness:0.1")
            if let f = e.fromColor { body["from_color"] = .string(wire(f)) }
            for key in ["period", "cycles", "persist", "power_on", "peak"] { if let v = options[key] { body[key] = v } }
        default:
            for key in ["direction", "period", "cycles", "duration", "power_on"] { if let v = options[key] { body[key] = v } }
            if !e.palette.isEmpty { body["palette"] = .array(e.palette.map { .string(wire($0)) }) }
        }
        e.cloudBody = body
        return e
    }

    static var effectNames: [String] { ["breathe", "pulse", "move", "morph", "flame", "sky", "off"] }

    /// A scene command: `{"activate": true}` (or ACTIVATE) with an optional transition → its duration.
    static func sceneActivation(_ command: [String: JSONValue], defaultTransition: Double) throws(AdapterError) -> Double {
        guard command["activate"] == .bool(true) else { throw AdapterError("scene: send ACTIVATE or {\"activate\": true}") }
        return command["transition"]?.doubleValue ?? defaultTransition
    }
}

/// An effect as a command asks for it (docs/topics.md "LIFX", effects), in the user's units: seconds, 0–1.
struct LIFXEffect: Sendable, Equatable {
    var name: String
    /// breathe / pulse: the colour to go to (nil: 10 % brightness), and where to start from.
    var color: LIFXColorChange?
    var fromColor: LIFXColorChange?
    var period = 1.0
    /// nil: the cloud's default (one for breathe and pulse, until stopped for firmware effects).
    var cycles: Double?
    var persist = false
    var powerOn = true
    var peak = 0.5
    var powerOff = false
    /// move: forward (towards the far end) or backward.
    var forward = true
    /// morph / flame: seconds to run, nil = until stopped.
    var duration: Double?
    var palette: [LIFXColorChange] = []
    /// sky: which sky, and how saturated its clouds are (0–255; the Ceiling's defaults 50 and 180).
    var sky = Sky()
    var cloudBody: [String: JSONValue] = [:]

    enum SkyType: UInt8, CaseIterable, Sendable {
        case sunrise = 0, sunset = 1, clouds = 2
        var name: String { "\(self)" }
    }

    struct Sky: Sendable, Equatable {
        var type = SkyType.clouds
        var saturationMin: UInt8 = 50
        var saturationMax: UInt8 = 180
    }

    /// Morph without a palette: LIFX's named colours, as the app's default morph cycles through hues.
    static let morphPalette: [LIFXColorChange] = [0, 36, 60, 120, 180, 250, 280, 325].map { LIFXColorChange(hue: $0, saturation: 1) }

    var isWaveform: Bool { name == "breathe" || name == "pulse" }
    var isFirmware: Bool { name == "move" || name == "morph" || name == "flame" || name == "sky" }

    /// Seconds the effect runs, when it ends by itself.
    var runs: Double? {
        if isWaveform { return period * (cycles ?? 1) }
        if name == "move" { return cycles.map { $0 * period } }
        return duration
    }
}
