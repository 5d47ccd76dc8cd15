#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// A command as the model plans it: what it is for, and its fields (validated by the core).
struct LIFXCommand: Sendable, Equatable {
    enum Target: Sendable, Equatable {
        /// A device the adapter declared: a light, a group, a location, a Ceiling's part or a scene.
        case device(String)
        /// Lights of this adapter by id, as one target: the cloud's part is one request (a selector naming
        /// them), and each light the LAN reaches gets its order in the same hand-over.
        case lights([String])
    }

    var target: Target
    var fields: [String: JSONValue]

    init(_ target: Target, _ fields: [String: JSONValue]) {
        self.target = target
        self.fields = fields
    }

    init(_ command: DeviceCommand) { self.init(.device(command.deviceID), command.fields) }
}

/// The transports the adapter has when it plans a command: the routing rule sends a light over the LAN only
/// while a LAN transport runs, and anything else needs the cloud.
struct LIFXTransports: Sendable, Equatable {
    var lan: Bool
    var cloud: Bool
    /// No token is configured (the LAN alone): what the LAN does not reach, nothing reaches.
    var lanOnly = false
}

/// What one command does, decided from the home as it is and before anything changes: the lights as the
/// command leaves them (the router takes them in at once, so the state is published before any transport
/// answers), each LAN light's order, the cloud's requests in the order they go, and what to tell the user.
/// A command that is refused throws instead, and nothing changes and nothing is sent.
struct LIFXPlan: Sendable, Equatable {
    /// The lights the command changes, as it leaves them.
    var lights: [String: LIFXLight] = [:]
    /// One order per light reached over the LAN, in serial order.
    var lan: [LIFXLANOrder] = []
    /// The cloud's requests, in order.
    var cloud: [LIFXCloudOrder] = []
    /// What the user should know that did not stop the command (a clamped colour temperature).
    var notes: [String] = []
    /// Scenes activated: uuid → when (RFC 3339).
    var activated: [String: String] = [:]

    /// The lights whose state (and groups, locations, Ceiling parts) to publish.
    var touched: Set<String> { Set(lights.keys) }

    /// Another plan after this one: its lights as it leaves them, its orders and requests after these.
    mutating func append(_ later: LIFXPlan) {
        lights.merge(later.lights) { $1 }
        lan += later.lan
        cloud += later.cloud
        notes += later.notes
        activated.merge(later.activated) { $1 }
    }
}

/// One LAN light's part of a command: the state it is to show once the command is done (the transport sends
/// only what differs from what the device last reported), with the transition, and a one-shot effect or
/// clean cycle.
struct LIFXLANOrder: Sendable, Equatable {
    var serial: String
    var label: String
    var want: LIFXLANWant
    /// Seconds.
    var duration: Double
    var effect: LIFXEffect?
    var clean: LIFXCleanRequest?
}

/// What a LAN light is to show, from its (optimistic) state: colours as the device takes them (saturation
/// 0 on white-only lights).
struct LIFXLANWant: Sendable, Equatable {
    var on: Bool
    var colour: LIFXZone
    /// A multizone light's zones, once read.
    var zones: [LIFXZone]?
    var infrared: Int?
    /// A LIFX Ceiling's 64 zones, once read.
    var matrix: [LIFXZone]?
}

/// A clean cycle to start (for `seconds`, 0 = the device's default) or to stop.
struct LIFXCleanRequest: Sendable, Equatable {
    var on: Bool
    var seconds: Int
}

/// One request for the cloud: what it changes, on which lights (a selector naming them), and each light's
/// values before the command (restored for the lights the cloud does not reach).
struct LIFXCloudOrder: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        case set(LIFXSet)
        case delta(LIFXDelta)
        case effect(name: String, body: [String: JSONValue])
        case scene(uuid: String, duration: Double)
    }
    var kind: Kind
    var selector: String
    var lights: [String]
    var previous: [String: LIFXLight.Values] = [:]
    var label: String
    /// The lights' labels, for the message naming the ones the cloud did not reach.
    var labels: [String: String] = [:]

    var isSet: Bool { if case .set = kind { return true }; return false }
}

/// Where a `/get` reads a device from.
enum LIFXReadRoute: Sendable, Equatable {
    /// The light's state over the LAN.
    case lan(serial: String)
    /// The lights the selector names, from the cloud.
    case cloud(selector: String)
    /// The scenes, from the cloud.
    case scenes
}

extension LIFXHome {
    /// The most selectors one cloud request combines (docs/upstreams/lifx-cloud.md §1.6).
    static let selectorsPerRequest = 25

    /// Plans commands as one: each on the home as the ones before it leave it. Their cloud requests follow
    /// each other (sets in a row go out as one `PUT /lights/states`), and every LAN order is in the one
    /// hand-over. If any command is refused, they all are.
    func plan(_ commands: [LIFXCommand], transports: LIFXTransports, now: MonotonicInstant, wall: Date,
              defaultTransition: Double) throws(AdapterError) -> LIFXPlan {
        guard commands.count > 1 else {
            guard let c = commands.first else { return LIFXPlan() }
            return try plan(c, transports: transports, now: now, wall: wall, defaultTransition: defaultTransition)
        }
        var home = self
        var all = LIFXPlan()
        for c in commands {
            let p = try home.plan(c, transports: transports, now: now, wall: wall, defaultTransition: defaultTransition)
            home.take(p)
            all.append(p)
        }
        return all
    }

    /// Plans one command: which transport gets what, and the lights as the command leaves them.
    ///
    /// The routing rule, per light: over the LAN while a LAN transport runs and the light is on the LAN's route
    /// (`onLAN`: the LAN identified it and `LIFXPresence.route` says LAN: it answered within `offline_after`,
    /// or no transport sees it and the LAN heard it once); else over the cloud. A group's lights may go both
    /// ways: the LAN's each get an order, the rest share one cloud request per kind of change, named by the
    /// group's selector when they are all its lights and by their ids otherwise. Zones, infrared, a clean
    /// cycle, a Ceiling's parts and the sky effect go over the LAN only; scenes over the cloud only.
    func plan(_ command: LIFXCommand, transports: LIFXTransports, now: MonotonicInstant, wall: Date,
              defaultTransition: Double) throws(AdapterError) -> LIFXPlan {
        switch command.target {
        case .device(let id) where id.hasPrefix("scene_"):
            return try planScene(String(id.dropFirst("scene_".count)), command.fields, transports: transports, wall: wall,
                                 defaultTransition: defaultTransition)
        case .device(let id):
            if let (serial, part) = LIFXCeilingPart.parse(id) {
                return try plan(part, of: serial, command.fields, transports: transports, now: now, defaultTransition: defaultTransition)
            }
            return try plan(command.fields, for: try target(id), transports: transports, now: now, defaultTransition: defaultTransition)
        case .lights(let ids):
            return try plan(command.fields, for: try target(lights: ids), transports: transports, now: now, defaultTransition: defaultTransition)
        }
    }

    /// Where `/get` reads a device from: a light on the LAN's route over the LAN, the rest from the cloud.
    func readRoute(_ deviceID: String, transports: LIFXTransports, now: MonotonicInstant) throws(AdapterError) -> LIFXReadRoute {
        if deviceID.hasPrefix("scene_") {
            guard transports.cloud else { throw AdapterError("the LIFX cloud is not connected") }
            return .scenes
        }
        let id = LIFXCeilingPart.parse(deviceID)?.serial ?? deviceID
        if transports.lan, onLAN(id, now: now) { return .lan(serial: id) }
        guard transports.cloud else { throw AdapterError(unreachable(deviceID, transports)) }
        return .cloud(selector: try target(id).selector)
    }

    func unreachable(_ label: String, _ transports: LIFXTransports) -> String {
        transports.lanOnly ? "\(label) is not reachable on the LAN (and no lifx.token is set)" : "the LIFX cloud is not connected"
    }

    // MARK: lights, groups, locations

    /// Where each light's part of a command goes, and what it is.
    private struct LANPart {
        var duration: Double?
        var effect: LIFXEffect?
        var clean: LIFXCleanRequest?
    }

    private func plan(_ command: [String: JSONValue], for t: LIFXTarget, transports: LIFXTransports, now: MonotonicInstant,
                      defaultTransition: Double) throws(AdapterError) -> LIFXPlan {
        var fields = command
        // Fields only the LAN drives (declared on LAN lights with the feature): checked here, sent below.
        let lanOnly = LANFields(zones: fields.removeValue(forKey: "zones"), infrared: fields.removeValue(forKey: "infrared"),
                                cleanCycle: fields.removeValue(forKey: "clean_cycle"), cleanDuration: fields.removeValue(forKey: "clean_duration"))
        let members = t.lights.compactMap { lights[$0] }
        let changes = fields.keys.contains(where: { $0 != "transition" }) || lanOnly.isEmpty
            ? try LIFXCommandPlanner.plan(fields, target: t, members: members, defaultTransition: defaultTransition)
            : LIFXCommandPlanner.Plan()
        let duration = fields["transition"]?.doubleValue ?? defaultTransition
        let viaLAN = { (id: String) in transports.lan && self.onLAN(id, now: now) }
        let lanIDs = t.lights.filter(viaLAN)
        let onLANSet = Set(lanIDs)
        let cloudIDs = t.lights.filter { !onLANSet.contains($0) }
        let extra = lanOnly.isEmpty ? nil : try planLAN(lanOnly, target: t, after: changes, onLAN: viaLAN)
        if !cloudIDs.isEmpty && !transports.cloud { throw AdapterError(unreachable(t.label, transports)) }
        if let e = changes.effect {
            // An effect a string named (the core passes effect strings through) that no light of the target runs.
            if !members.contains(where: { Self.runs(e, $0) }) {
                throw AdapterError("effect \(e.name): \(t.label) cannot run it (its effects: \(LIFXCommandPlanner.effectNames(for: members).joined(separator: ", ")))")
            }
            if e.name == "sky", !cloudIDs.isEmpty {
                throw AdapterError("effect sky: goes over the LAN only, and \(t.label) is not reachable on the LAN now")
            }
        }

        var plan = LIFXPlan(notes: changes.notes + (extra?.notes ?? []))
        var after = Dictionary(members.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        var touched: Set<String> = []
        var parts: [String: LANPart] = [:]
        let selectors = cloudSelectors(cloudIDs, target: t)
        for kind in changes.kinds {
            switch kind {
            case .set, .delta:
                var previous: [String: LIFXLight.Values] = [:]
                for id in t.lights where after[id] != nil {
                    previous[id] = after[id]!.values
                    if case .set(let s) = kind { after[id]!.apply(s) } else if case .delta(let d) = kind { after[id]!.apply(d) }
                    touched.insert(id)
                }
                var d = duration
                if case .set(let s) = kind { d = s.duration } else if case .delta(let x) = kind { d = x.duration }
                for id in lanIDs { parts[id, default: LANPart()].duration = d }
                for (selector, ids) in selectors {
                    plan.cloud.append(order(kind, selector, ids, t.label, previous: previous.filter { ids.contains($0.key) }))
                }
            case .effect:
                // The LAN's lights that run it take the effect at once; the cloud's show it when it lists them.
                // Its own colour (from_color) is set at once, unless a change before it set a transition.
                let e = changes.effect!
                let changed = changes.kinds.contains { if case .effect = $0 { return false }; return true }
                for id in lanIDs where after[id].map({ Self.runs(e, $0) }) == true {
                    after[id]!.applyEffect(e)
                    touched.insert(id)
                    parts[id, default: LANPart()].effect = e
                    if !changed { parts[id]!.duration = 0 }
                }
                for (selector, ids) in selectors { plan.cloud.append(order(kind, selector, ids, t.label)) }
            case .scene:
                break
            }
        }
        if let extra, var l = after[extra.id] {
            // What planLAN worked out on top of the rest of the command.
            l.zones = extra.light.zones
            l.infrared = extra.light.infrared
            l.clean = extra.light.clean
            if changes.kinds.isEmpty { l.on = extra.light.on }
            after[extra.id] = l
            touched.insert(extra.id)
            parts[extra.id, default: LANPart()].clean = extra.clean
            if parts[extra.id]!.duration == nil { parts[extra.id]!.duration = duration }
        }
        plan.lights = after.filter { touched.contains($0.key) }
        plan.lan = parts.keys.sorted().compactMap { id in
            guard let l = after[id], let p = parts[id] else { return nil }
            return LIFXLANOrder(serial: id, label: l.label.isEmpty ? id : l.label, want: l.lanWant, duration: p.duration ?? 0,
                                effect: p.effect, clean: p.clean)
        }
        return plan
    }

    /// The cloud's selectors for these of the target's lights: the target's own when they are all its lights
    /// and it names few enough, else their ids, at most `selectorsPerRequest` to a request.
    func cloudSelectors(_ ids: [String], target t: LIFXTarget) -> [(selector: String, lights: [String])] {
        guard !ids.isEmpty else { return [] }
        if ids == t.lights, t.selector.split(separator: ",").count <= Self.selectorsPerRequest { return [(t.selector, ids)] }
        return stride(from: 0, to: ids.count, by: Self.selectorsPerRequest).map { i in
            let chunk = Array(ids[i..<min(i + Self.selectorsPerRequest, ids.count)])
            return (chunk.map { "id:\($0)" }.joined(separator: ","), chunk)
        }
    }

    func order(_ kind: LIFXCloudOrder.Kind, _ selector: String, _ ids: [String], _ label: String,
               previous: [String: LIFXLight.Values] = [:]) -> LIFXCloudOrder {
        var o = LIFXCloudOrder(kind: kind, selector: selector, lights: ids, previous: previous, label: label)
        for id in ids { if let l = lights[id], !l.label.isEmpty { o.labels[id] = l.label } }
        return o
    }

    // MARK: a Ceiling's parts, scenes

    /// A command for a LIFX Ceiling's uplight or downlight: its zones of the matrix (and the power), over the LAN.
    private func plan(_ part: LIFXCeilingPart, of serial: String, _ fields: [String: JSONValue], transports: LIFXTransports,
                      now: MonotonicInstant, defaultTransition: Double) throws(AdapterError) -> LIFXPlan {
        guard var l = lights[serial], l.caps.isCeiling, l.matrix != nil else {
            throw AdapterError("the zones of this LIFX Ceiling are not read yet; try again in a moment")
        }
        guard transports.lan, onLAN(serial, now: now) else {
            throw AdapterError("\(l.label)'s \(part.rawValue) is controlled over the LAN only, and the LAN does not reach it now")
        }
        let change = try LIFXCeiling.Change(fields, kelvinRange: l.caps.kelvinRange)
        LIFXCeiling.apply(change, to: part, of: &l)
        let duration = fields["transition"]?.doubleValue ?? defaultTransition
        return LIFXPlan(lights: [serial: l], lan: [LIFXLANOrder(serial: serial, label: l.label.isEmpty ? serial : l.label, want: l.lanWant,
                                                                duration: duration)])
    }

    /// A scene's activation: one cloud request; the scene's lights take its states at once.
    private func planScene(_ uuid: String, _ fields: [String: JSONValue], transports: LIFXTransports, wall: Date,
                           defaultTransition: Double) throws(AdapterError) -> LIFXPlan {
        guard let scene = scenes[uuid] else { throw AdapterError("LIFX scene is not known (refresh with bridge/request/devices/refresh)") }
        let duration = try LIFXCommandPlanner.sceneActivation(fields, defaultTransition: defaultTransition)
        guard transports.cloud else { throw AdapterError("the LIFX cloud is not connected") }
        var after: [String: LIFXLight] = [:]
        var previous: [String: LIFXLight.Values] = [:]
        for st in scene.states {
            for id in lights(matching: st.selector) {
                guard var l = after[id] ?? lights[id] else { continue }
                if previous[id] == nil { previous[id] = l.values }
                l.apply(st.set)
                after[id] = l
            }
        }
        return LIFXPlan(lights: after,
                        cloud: [order(.scene(uuid: uuid, duration: duration), "scene_id:\(uuid)", previous.keys.sorted(), scene.name, previous: previous)],
                        activated: [uuid: Timestamp.rfc3339(wall)])
    }

    // MARK: what only the LAN drives

    /// The fields of a command only the LAN drives.
    struct LANFields {
        var zones: JSONValue?
        var infrared: JSONValue?
        var cleanCycle: JSONValue?
        var cleanDuration: JSONValue?
        var isEmpty: Bool { zones == nil && infrared == nil && cleanCycle == nil && cleanDuration == nil }
    }

    /// What `zones`, `infrared` and `clean_cycle` of a command do to the one LAN light they go to.
    struct LANExtra {
        var id: String
        /// The light as they leave it (on top of the rest of the command).
        var light: LIFXLight
        var clean: LIFXCleanRequest?
        var notes: [String]
    }

    /// `zones`, `infrared`, `clean_cycle`/`clean_duration` of a command, checked against the one LAN light
    /// they go to, on top of the rest of the command (a brightness for the whole strip, then zones).
    func planLAN(_ f: LANFields, target t: LIFXTarget, after plan: LIFXCommandPlanner.Plan,
                 onLAN: (String) -> Bool) throws(AdapterError) -> LANExtra {
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
        return LANExtra(id: id, light: l, clean: clean, notes: notes)
    }
}

extension LIFXLight {
    /// What the LAN is to make the device show: the light's state, white-only lights at saturation 0.
    var lanWant: LIFXLANWant {
        func white(_ z: LIFXZone) -> LIFXZone { var z = z; if !caps.hasColor { z.saturation = 0 }; return z }
        return LIFXLANWant(on: on, colour: white(wholeColour), zones: zones?.map(white), infrared: infrared, matrix: matrix?.map(white))
    }
}
