import SwitchyardCore

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

    /// Lights by id as one target: a single light's own, else `id:a,id:b,…` (a cloud request names at most
    /// `LIFXHome.selectorsPerRequest` of them: LIFXPlan.swift splits the list). Refuses an empty list and a
    /// light it does not know; a light named twice counts once.
    func target(lights ids: [String]) throws(AdapterError) -> LIFXTarget {
        var seen: Set<String> = []
        let unique = ids.filter { seen.insert($0).inserted }
        guard !unique.isEmpty else { throw AdapterError("no LIFX light given") }
        if let unknown = unique.first(where: { lights[$0] == nil }) { throw AdapterError("LIFX device '\(unknown)' is not known") }
        if unique.count == 1 { return try target(unique[0]) }
        let labels = unique.map { id in lights[id].map { $0.label.isEmpty ? id : $0.label } ?? id }
        let label = labels.count <= 3 ? labels.joined(separator: ", ") : "\(labels.prefix(3).joined(separator: ", ")) and \(labels.count - 3) more"
        return LIFXTarget(selector: unique.map { "id:\($0)" }.joined(separator: ","), lights: unique, label: label)
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
    /// Applies an effect to the light's optimistic state (power, the colour it starts from, its name).
    mutating func applyEffect(_ e: LIFXEffect) {
        if e.name == "off" {
            effect = "off"
            if e.powerOff { on = false }
        } else {
            effect = e.name
            if e.powerOn { on = true }
            if let from = e.fromColor { apply(LIFXSet(color: from, duration: 0)) }
        }
    }
}
