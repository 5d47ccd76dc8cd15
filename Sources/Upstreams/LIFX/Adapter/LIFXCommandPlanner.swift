import SwitchyardCore

/// What a light, group or location command is sent to: a LIFX selector and the lights it covers.
struct LIFXTarget: Sendable, Equatable {
    var selector: String
    var lights: [String]
    var label: String
}

/// Turns a validated command into the cloud requests it needs (docs/upstreams/lifx-cloud.md "Commands"),
/// from the target's lights as they are now. Pure: no queue, no network, no publishing.
enum LIFXCommandPlanner {
    struct Plan: Equatable {
        /// In the order they are queued: an absolute set, a relative change, an effect.
        var kinds: [LIFXOp.Kind] = []
        /// What the user should know that did not stop the command (a clamped colour temperature).
        var notes: [String] = []
    }

    static let effectNames = ["breathe", "pulse", "off"]

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
            let (name, body) = try effect(fx)
            plan.kinds.append(.effect(name: name, body: body))
        }
        if plan.kinds.isEmpty { throw AdapterError("nothing to do: the command changes no field") }
        return plan
    }

    /// `"breathe"` or `{"name": "pulse", "color": "red", "period": 2, "cycles": 3, …}` → request body.
    static func effect(_ v: JSONValue) throws(AdapterError) -> (String, [String: JSONValue]) {
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
        guard effectNames.contains(name) else {
            throw AdapterError("effect: unknown effect '\(name)' (expected \(effectNames.joined(separator: ", ")))")
        }
        if name == "off" {
            let extra = options.keys.filter { $0 != "power_off" }
            if !extra.isEmpty { throw AdapterError("effect off: unknown option \(extra.sorted().joined(separator: ", ")) (expected power_off)") }
            return (name, ["power_off": options["power_off"] ?? .bool(false)])
        }
        var body: [String: JSONValue] = [:]
        func colour(_ key: String) throws(AdapterError) -> String? {
            guard case .string(let text)? = options[key] else { return nil }
            do {
                let c = try LIFXColorChange.parse(text)
                var parts = c.wireString.map { [$0] } ?? []
                if let b = c.brightness { parts.append("brightness:\(LIFXColorChange.format(b))") }
                return parts.joined(separator: " ")
            } catch {
                throw AdapterError("effect \(key): \(error.description); nothing was sent")
            }
        }
        // Without a colour, breathe and pulse dip to 10 % brightness and back.
        body["color"] = .string(try colour("color") ?? "brightness:0.1")
        if let from = try colour("from_color") { body["from_color"] = .string(from) }
        for key in ["period", "cycles", "persist", "power_on"] { if let v = options[key] { body[key] = v } }
        if let peak = options["peak"] {
            guard name == "breathe" else { throw AdapterError("effect pulse: peak applies to breathe only") }
            body["peak"] = peak
        }
        return (name, body)
    }

    /// A scene command: `{"activate": true}` (or ACTIVATE) with an optional transition → its duration.
    static func sceneActivation(_ command: [String: JSONValue], defaultTransition: Double) throws(AdapterError) -> Double {
        guard command["activate"] == .bool(true) else { throw AdapterError("scene: send ACTIVATE or {\"activate\": true}") }
        return command["transition"]?.doubleValue ?? defaultTransition
    }
}
