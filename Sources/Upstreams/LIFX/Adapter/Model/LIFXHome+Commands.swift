import SwitchyardCore

/// The fields of a command only the LAN path drives.
struct LIFXLANFields {
    var zones: JSONValue?
    var infrared: JSONValue?
    var cleanCycle: JSONValue?
    var cleanDuration: JSONValue?
    var isEmpty: Bool { zones == nil && infrared == nil && cleanCycle == nil && cleanDuration == nil }
}

/// What `zones`, `infrared` and `clean_cycle` of a command do to the one LAN light they go to.
struct LIFXLANExtra {
    var id: String
    /// The light as they leave it (on top of the rest of the command).
    var light: LIFXLight
    var clean: LIFXCleanRequest?
    var notes: [String]
}

/// Commands against the model: what a device id names, and the optimistic changes (pure).
extension LIFXHome {
    /// What a command for `deviceID` is sent to: a light, or a group's or location's lights.
    func target(_ deviceID: String) throws(AdapterError) -> LIFXTarget {
        if let l = lights[deviceID] { return LIFXTarget(selector: "id:\(l.id)", lights: [l.id], label: l.label.isEmpty ? l.id : l.label) }
        for (kind, sel) in [(CollectionKind.group, "group_id:"), (.location, "location_id:")] where deviceID.hasPrefix("\(kind.rawValue)_") {
            guard let c = collection(deviceID) else { throw AdapterError("LIFX \(kind.rawValue) has no lights") }
            return LIFXTarget(selector: sel + c.id, lights: c.members, label: c.name)
        }
        throw AdapterError("LIFX device '\(deviceID)' is not known")
    }

    /// The lights a cloud selector names (a scene's states name lights so).
    func lights(matching selector: String) -> [String] {
        let parts = selector.split(separator: ":", maxSplits: 1).map(String.init)
        let all = lights.values
        switch (parts.first ?? "", parts.count > 1 ? parts[1] : "") {
        case ("all", _): return all.map(\.id).sorted()
        case ("id", let v): return all.filter { $0.id == v }.map(\.id)
        case ("group_id", let v): return all.filter { $0.group?.id == v }.map(\.id).sorted()
        case ("location_id", let v): return all.filter { $0.location?.id == v }.map(\.id).sorted()
        case ("label", let v): return all.filter { $0.label == v }.map(\.id).sorted()
        case ("group", let v): return all.filter { $0.group?.name == v }.map(\.id).sorted()
        case ("location", let v): return all.filter { $0.location?.name == v }.map(\.id).sorted()
        default: return []
        }
    }

    func sceneLights(_ s: LIFXScene) -> [String] {
        Array(Set(s.states.flatMap { lights(matching: $0.selector) })).sorted()
    }

    func sceneFields(_ s: LIFXScene) -> [String: JSONValue] {
        ["name": .string(s.name), "lights": JSONValue(sceneLights(s).count),
         "last_activated": lastActivated[s.uuid].map(JSONValue.string) ?? .null]
    }

    /// Whether a light can run an effect (move needs zones, morph and flame a matrix, sky a Ceiling).
    static func runs(_ e: LIFXEffect, _ l: LIFXLight) -> Bool {
        switch e.name {
        case "move": return l.caps.hasMultizone
        case "morph", "flame": return l.caps.hasMatrix
        case "sky": return l.caps.hasSky
        default: return true
        }
    }

    /// Applies an effect to a LAN light's optimistic state (power, the colour it starts from, its name);
    /// false when the light cannot run it (a group's member without zones or a matrix).
    mutating func applyEffect(_ e: LIFXEffect, to id: String) -> Bool {
        guard let l = lights[id], Self.runs(e, l) else { return false }
        return edit(id) { l in
            if e.name == "off" {
                l.effect = "off"
                if e.powerOff { l.on = false }
            } else {
                l.effect = e.name
                if e.powerOn { l.on = true }
                if let from = e.fromColor { l.apply(LIFXSet(color: from, duration: 0)) }
            }
        }
    }

    /// `zones`, `infrared`, `clean_cycle`/`clean_duration` of a command, checked against the one LAN light
    /// they go to, on top of the rest of the command (a brightness for the whole strip, then zones).
    func planLAN(_ f: LIFXLANFields, target t: LIFXTarget, after plan: LIFXCommandPlanner.Plan,
                 onLAN: (String) -> Bool) throws(AdapterError) -> LIFXLANExtra {
        guard t.lights.count == 1, let id = t.lights.first, onLAN(id), var l = lights[id] else {
            throw AdapterError("zones, infrared and the clean cycle go to one light reached over the LAN")
        }
        for kind in plan.kinds {
            if case .set(let s) = kind { l.apply(s) } else if case .delta(let d) = kind { l.apply(d) }
        }
        var notes: [String] = []
        if let z = f.zones {
            guard var zones = l.zones else { throw AdapterError("the zones of \(t.label) are not read yet; try again in a moment") }
            notes = try LIFXZone.apply(segments: z.arrayValue ?? [], to: &zones, kelvinRange: l.caps.kelvinRange)
            l.zones = zones
            // Like a colour without a state: the light comes on.
            if plan.kinds.isEmpty { l.on = true }
        }
        if let ir = f.infrared?.intValue { l.infrared = ir }
        var clean: LIFXCleanRequest?
        if let c = f.cleanCycle {
            let on = c == "ON"
            clean = LIFXCleanRequest(on: on, seconds: f.cleanDuration?.intValue ?? 0)
            var state = l.clean ?? LIFXClean()
            state.active = on
            if !on { state.remaining = 0 } else if let s = f.cleanDuration?.intValue, s > 0 { state.remaining = s }
            l.clean = state
        } else if f.cleanDuration != nil {
            throw AdapterError("clean_duration goes with clean_cycle ON (e.g. {\"clean_cycle\": \"ON\", \"clean_duration\": 3600})")
        }
        return LIFXLANExtra(id: id, light: l, clean: clean, notes: notes)
    }

    /// Lights one cloud request read (`/get`): taken in like a listing's, without counting as one.
    mutating func cloudRead(_ listed: [LIFXLight], pending: Set<String>, now: MonotonicInstant) -> Changes {
        var c = Changes()
        for l in listed where lights[l.id] != nil {
            mergeListed(l, pending: pending.contains(l.id), now: now)
            c.touched.insert(l.id)
        }
        c.touched.formUnion(settle(now: now))
        return c
    }
}

extension LIFXLight {
    /// What the LAN is to make the device show: the light's state, white-only lights at saturation 0.
    var lanWant: LIFXLANWant {
        func white(_ z: LIFXZone) -> LIFXZone { var z = z; if !caps.hasColor { z.saturation = 0 }; return z }
        return LIFXLANWant(on: on, colour: white(wholeColour), zones: zones?.map(white), infrared: infrared, matrix: matrix?.map(white))
    }
}
