#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Groups and scenes (design.md §20, docs/topics.md "Groups and scenes"): devices of the core itself, under
/// the adapter ids `group` and `scene`. Each is an entry like an adapter's (its registry makes its topics,
/// details, discovery and `bridge/devices` lines; its lifecycle holds commands until it is listed), hosted
/// by a `CoreDevices` adapter that does nothing: the engine lists them once the adapters they reach have listed, derives
/// a group's state whenever a device it reaches reports, and fans a group's command or a scene's recall out
/// to the members' adapters in one step, one `batch` per adapter, answering once when every member has.
struct GroupCore {
    var book = GroupBook(GroupsConfig())
    /// `serve` has started: until then `setGroups` only records.
    var started = false
    /// Listed once: before, the adapters the groups and scenes reach had not all listed, and their commands wait.
    var listed = false
    /// Which groups reach each device, by adapter and device id: what to derive again when it reports.
    var watch: [String: [String: Set<String>]] = [:]
    /// Each group's descriptor as last listed.
    var descriptors: [String: DeviceDescriptor] = [:]
    /// When each scene was last activated (RFC 3339), since the bridge started.
    var activated: [String: String] = [:]
    /// Group commands and scene recalls whose members have not all answered, by the key their members'
    /// replies carry (`Reply.parent`).
    var fanOuts: [UInt64: FanOut] = [:]
    /// The requests that change `groups:` or `scenes:` in the config file: the runtime's (it owns the file),
    /// with the bound of their payloads.
    var editor: BridgeEngine.RequestHandler?

    static let ids = [GroupsConfig.groupAdapter, GroupsConfig.sceneAdapter]
    /// What the config-writing requests are called (`bridge/request/<path>`).
    static let editingPaths = ["group/add", "group/remove", "group/rename", "group/members/add", "group/members/remove",
                                      "scene/store", "scene/remove"]
    static let requestPaths = editingPaths + ["scene/recall"]

    func serves(_ adapter: String) -> Bool { Self.ids.contains(adapter) }

    /// One group command or scene recall on its way: the members still to answer, and what went wrong.
    struct FanOut {
        enum Completion {
            /// A `/set`: answered on its result topic (with a transaction) and its Response Topic.
            case command(BridgeEngine.Reply)
            /// A bridge request: its response is made of the outcome.
            case request(CheckedContinuation<JSONValue, Never>)
        }
        var completion: Completion
        /// `group/<name>` or `scene/<name>`, for the log line.
        var label: String
        var pending: [UInt64: MemberRef] = [:]
        var failures: [FanOutPlan.Failure]
        var ok = 0
        /// Still being handed to the adapters: a refusal on the way must not end it before the rest are sent.
        var dispatching = true
    }
}

/// The adapter the engine hosts its own devices under (`group`, `scene`): it lists and carries out nothing
/// itself; the engine does (above). It says it is running, and `/get` republishes the state the engine keeps.
actor CoreDevices: Adapter {
    nonisolated let id: String
    let clock: any BridgeClock

    init(id: String, clock: any BridgeClock) {
        self.id = id
        self.clock = clock
    }

    func run(context: AdapterContext) async throws {
        await context.setStatus(.running)
        while !Task.isCancelled { try await clock.sleep(seconds: 3600) }
    }

    func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        throw AdapterError("\(id) commands are carried out by the bridge's core")
    }

    func refresh(deviceID: String, context: AdapterContext) async throws {}
}

extension BridgeEngine {
    /// The groups and scenes to serve: from the config at start (before `run`) and after every reload. Their
    /// entries come and go with them; what changed is listed, and each group's state derived again.
    public func setGroups(_ config: GroupsConfig) async {
        groupCore.book = GroupBook(config)
        guard groupCore.started, !stopped else { return }
        var remove: Set<String> = []
        for (id, wanted) in [(GroupsConfig.groupAdapter, !config.groups.isEmpty), (GroupsConfig.sceneAdapter, !config.scenes.isEmpty)] {
            if wanted && entries[id] == nil { startAdapter(CoreDevices(id: id, clock: clock)) }
            if !wanted && entries[id] != nil { remove.insert(id) }
        }
        if !remove.isEmpty { await replace(start: [], remove: remove) }
        if groupCore.listed { listGroups() } else { groupsSettled() }
    }

    /// Sets who carries out the requests that write `groups:` and `scenes:` into the config file, and the bound
    /// of their payloads: refused before they are read, counted as `request_payload`, as the management
    /// requests' are (`setRequestHandler`).
    public func setGroupEditor(maxPayload: Int, _ editor: @escaping @Sendable (BridgeRequest) async throws -> JSONValue) {
        groupCore.editor = RequestHandler(paths: GroupCore.editingPaths, maxPayload: maxPayload, handle: editor)
    }

    /// From `serve`: the entries of the groups and scenes configured, listed once the adapters they reach have listed.
    func startGroups() {
        groupCore.started = true
        if !groupCore.book.config.groups.isEmpty { startAdapter(CoreDevices(id: GroupsConfig.groupAdapter, clock: clock)) }
        if !groupCore.book.config.scenes.isEmpty { startAdapter(CoreDevices(id: GroupsConfig.sceneAdapter, clock: clock)) }
        groupsSettled()
    }

    /// Once every adapter a group or scene reaches has listed (or given up, or its settle time passed), groups
    /// and scenes are listed: before, their members are not known, and commands for them wait in their
    /// entries. An adapter none of them reaches is not waited for: a mirror (Home Assistant) lists no device
    /// and settles only when its settle time passes, and every group would stay silent that long after each
    /// start (a standby's takeover among them) while its members changed.
    /// After a takeover, a member the group's previous active instance knew (`expectedDevices`: a LIFX light
    /// only the LAN sees) is waited for too, until its adapter lists it or its start window closes: a
    /// command fanned out before would find it `missing` (§18 "Ready from the first command").
    func groupsSettled() {
        guard groupCore.started, !groupCore.listed, GroupCore.ids.contains(where: { entries[$0] != nil }) else { return }
        let members = groupCore.book.memberDevices
        guard Set(members.map(\.adapter)).allSatisfy({ groupCore.serves($0) || entries[$0]?.life.isSettled ?? true }) else { return }
        guard !members.contains(where: { expectedDevices[$0.adapter]?.contains($0.name) == true && memberView($0) == nil }) else { return }
        listGroups()
    }

    /// An adapter's listing changed (or it was removed): members may have come, gone or been renamed; or,
    /// before the groups are listed, a member they waited for has come.
    func groupsRelisted(_ adapterID: String) {
        guard !groupCore.serves(adapterID) else { return }
        guard groupCore.listed else { return groupsSettled() }
        listGroups()
    }

    /// Devices of an adapter reported: the groups that reach them derive their state again.
    func groupsSaw(_ adapterID: String, _ deviceIDs: [String]) {
        guard groupCore.listed, let watched = groupCore.watch[adapterID] else { return }
        var affected: Set<String> = []
        for id in deviceIDs { if let g = watched[id] { affected.formUnion(g) } }
        if !affected.isEmpty { publishGroupStates(affected) }
    }

    /// What the registries say of a device a group or scene names; nil when its adapter does not list it.
    func memberView(_ ref: MemberRef) -> MemberView? {
        guard !groupCore.serves(ref.adapter), let r = entries[ref.adapter]?.registry.record(named: ref.name) else { return nil }
        return MemberView(ref: ref, deviceID: r.descriptor.id, descriptor: r.descriptor, state: r.state, available: r.available)
    }

    /// Lists every group and scene as they are now (descriptors from the members listed now), then their states.
    func listGroups() {
        guard groupCore.started else { return }
        groupCore.listed = true
        let book = groupCore.book
        var watch: [String: [String: Set<String>]] = [:]
        var leafViews: [String: [MemberView]] = [:]
        for g in book.config.groups {
            let views = book.leaves(of: g.name).compactMap { memberView($0) }
            leafViews[g.name] = views
            for v in views { watch[v.ref.adapter, default: [:]][v.deviceID, default: []].insert(g.name) }
        }
        groupCore.watch = watch
        // Twice: a group's members' entity ids include its nested groups', which need those groups' descriptors.
        var descriptors: [String: DeviceDescriptor] = [:]
        for g in book.config.groups { descriptors[g.name] = book.descriptor(g, members: leafViews[g.name] ?? []) }
        for g in book.config.groups {
            descriptors[g.name] = book.descriptor(g, members: leafViews[g.name] ?? [], entityIDs: entityIDs(of: g, descriptors))
        }
        groupCore.descriptors = descriptors
        if let entry = entries[GroupsConfig.groupAdapter] {
            var available: [String: Bool] = [:]
            for g in book.config.groups { available[g.name] = leafViews[g.name]?.contains { $0.available == true } ?? false }
            setDevices(GroupsConfig.groupAdapter, entry.generation, book.config.groups.compactMap { descriptors[$0.name] }, authoritative: true,
                       available: available)
            publishGroupStates(Set(book.config.groups.map(\.name)))
        }
        if let entry = entries[GroupsConfig.sceneAdapter] {
            setDevices(GroupsConfig.sceneAdapter, entry.generation, book.config.scenes.map(GroupBook.descriptor), authoritative: true, available: [:])
            report(GroupsConfig.sceneAdapter, entry.generation, book.config.scenes.map { DeviceReport($0.name, fields: sceneState($0)) })
        }
    }

    /// The Home Assistant entities of a group's members, as they were announced (`entity_id` of the group's
    /// entity): the members that have a main entity, nested groups included; none without discovery.
    func entityIDs(of g: GroupDefinition, _ descriptors: [String: DeviceDescriptor]) -> [String] {
        guard settings.discovery else { return [] }
        return g.members.compactMap { m in
            if m.isGroup { return descriptors[m.name].flatMap { discovery.mainEntityID(adapter: m.adapter, name: m.name, device: $0) } }
            return memberView(m).flatMap { discovery.mainEntityID(adapter: m.adapter, name: m.name, device: $0.descriptor) }
        }
    }

    /// Derives the groups' states and availability and publishes what changed.
    func publishGroupStates(_ names: Set<String>) {
        guard let entry = entries[GroupsConfig.groupAdapter] else { return }
        var batch: [Publication] = []
        for name in names.sorted() {
            guard let g = groupCore.book.group(name), let d = groupCore.descriptors[name] else { continue }
            let (fields, available) = groupCore.book.state(of: g, descriptor: d, view: { memberView($0) })
            if let p = entry.registry.update(name, fields) { batch.append(p) }
            if let p = entry.registry.setAvailable(name, available) { batch.append(p) }
        }
        transport.publish(batch)
        flushAnnouncements(GroupsConfig.groupAdapter, entry.generation)
    }

    func sceneState(_ s: SceneDefinition) -> [String: JSONValue] {
        ["members": .array(s.entries.map { .string($0.member.description) }),
         "last_activated": groupCore.activated[s.name].map(JSONValue.string) ?? .null]
    }

    // MARK: fan-out

    /// A `/set` of a group or a scene: planned on the members' states now, and handed to their adapters.
    func fanOut(_ adapter: String, _ command: DeviceCommand, _ reply: Reply) {
        let name = command.deviceID
        if adapter == GroupsConfig.groupAdapter {
            guard groupCore.book.group(name) != nil, let d = groupCore.descriptors[name] else {
                return answerAtOnce(reply, "unknown group '\(name)'")
            }
            let plan = groupCore.book.plan(group: name, fields: command.fields, descriptor: d, view: { memberView($0) })
            dispatch(plan, label: "group/\(name)", .command(reply))
        } else {
            guard let s = groupCore.book.config.scene(name) else { return answerAtOnce(reply, "unknown scene '\(name)'") }
            guard command.fields["activate"] == .bool(true) else {
                return answerAtOnce(reply, "a scene is recalled with ACTIVATE or {\"activate\": true} (and an optional \"transition\")")
            }
            dispatch(recall(s, transition: command.fields["transition"]?.doubleValue), label: "scene/\(name)", .command(reply))
        }
    }

    /// A scene's recall as a plan; the scene's `last_activated` says now.
    func recall(_ s: SceneDefinition, transition: Double?) -> FanOutPlan {
        let plan = groupCore.book.plan(scene: s, transition: transition, view: { memberView($0) })
        groupCore.activated[s.name] = Timestamp.rfc3339(Date())
        if let entry = entries[GroupsConfig.sceneAdapter], let p = entry.registry.update(s.name, sceneState(s)) { publish(p) }
        return plan
    }

    func answerAtOnce(_ reply: Reply, _ message: String) {
        observers.commandFinished(reply, ok: false, at: clock.now())
        reportError(message, topic: reply.topic, transaction: reply.transaction, resultTopic: reply.resultTopic, replyTo: reply.replyTo)
    }

    /// Hands each member's command to its adapter, in one step: an adapter with several members gets them
    /// as one `batch` (`Adapter.acceptBatch`). Each member's reply carries the fan-out's key, so its outcome
    /// comes back here (`memberAnswered`) however it ends: answered, refused, or cut short by its adapter
    /// stopping (the engine's `awaiting` book answers it then, as any command).
    func dispatch(_ plan: FanOutPlan, label: String, _ completion: GroupCore.FanOut.Completion) {
        nextTicket += 1
        let key = nextTicket
        groupCore.fanOuts[key] = GroupCore.FanOut(completion: completion, label: label, failures: plan.failures)
        let now = clock.now()
        var order: [String] = []
        var byAdapter: [String: [(DeviceCommand, Reply)]] = [:]
        for c in plan.commands {
            nextTicket += 1
            let r = Reply(ticket: nextTicket, adapter: c.ref.adapter, routedAt: now, topic: scheme.set(adapter: c.ref.adapter, name: c.ref.name),
                          transaction: nil, resultTopic: scheme.result(adapter: c.ref.adapter, name: c.ref.name), replyTo: nil, parent: key)
            groupCore.fanOuts[key]!.pending[r.ticket] = c.ref
            if byAdapter[c.ref.adapter] == nil { order.append(c.ref.adapter) }
            byAdapter[c.ref.adapter, default: []].append((DeviceCommand(deviceID: c.deviceID, fields: c.fields), r))
        }
        for adapter in order {
            let items = byAdapter[adapter]!
            guard let entry = entries[adapter] else {
                for (_, r) in items { answer(r, error: "adapter '\(adapter)' is not running") }
                continue
            }
            if items.count == 1 {
                enqueue(entry, .command(items[0].0, items[0].1))
            } else {
                enqueue(entry, .batch(items.map(\.0), items.map(\.1)))
            }
        }
        groupCore.fanOuts[key]?.dispatching = false
        finishFanOut(key)
    }

    /// One member's outcome (from `answer`, for a reply with a `parent`); the first one counts.
    func memberAnswered(_ r: Reply, parent: UInt64, error: String?) {
        awaiting[r.ticket] = nil
        guard var f = groupCore.fanOuts[parent], let ref = f.pending.removeValue(forKey: r.ticket) else { return }
        observers.commandFinished(r, ok: error == nil, at: clock.now())
        if let error { f.failures.append(FanOutPlan.Failure(ref: ref, message: error)) } else { f.ok += 1 }
        groupCore.fanOuts[parent] = f
        finishFanOut(parent)
    }

    /// Once every member has answered: the one answer, `ok`, or `partial` with each member that failed and why
    /// (also one error line on bridge/log).
    func finishFanOut(_ key: UInt64) {
        guard let f = groupCore.fanOuts[key], !f.dispatching, f.pending.isEmpty else { return }
        groupCore.fanOuts[key] = nil
        var result: [String: JSONValue] = ["status": f.failures.isEmpty ? "ok" : "partial"]
        var summary = ""
        if !f.failures.isEmpty {
            let total = f.ok + f.failures.count
            result["failed"] = .array(f.failures.map { ["member": .string($0.ref.description), "error": .string($0.message)] })
            summary = "\(f.label): \(f.failures.count) of \(total) members failed: "
                + f.failures.map { "\($0.ref): \($0.message)" }.joined(separator: "; ")
            result["error"] = .string(summary)
        }
        switch f.completion {
        case .command(let reply):
            observers.commandFinished(reply, ok: f.failures.isEmpty, at: clock.now())
            if !f.failures.isEmpty { reportError(summary, topic: reply.topic, transaction: nil, resultTopic: nil) }
            guard reply.wantsAnswer else { return }
            if let t = reply.transaction { result["transaction"] = t }
            publishAnswer(.object(result), on: reply.transaction == nil ? nil : reply.resultTopic, replyTo: reply.replyTo)
        case .request(let c):
            c.resume(returning: .object(result))
        }
    }

    // MARK: requests

    /// `scene/recall` (answered when every device has), and the requests that write the config file (handed
    /// to the runtime's editor, with who asked); nil for any other path.
    func groupRequest(_ req: BridgeRequest) async throws -> JSONValue? {
        let (path, body) = (req.path, req.body)
        switch path {
        case "scene/recall":
            guard case .string(let name)? = body["name"] else { throw AdapterError("scene/recall needs {\"name\": \"<scene>\"}") }
            guard let s = groupCore.book.config.scene(name) else {
                throw AdapterError("unknown scene '\(name)' (scenes: \(groupCore.book.config.scenes.map(\.name).joined(separator: ", ")))")
            }
            var transition: Double?
            if let t = body["transition"] {
                guard let v = t.doubleValue, v >= 0, v <= 3600 else { throw AdapterError("transition: expected seconds 0–3600, got \(t.excerpt)") }
                transition = v
            }
            let plan = recall(s, transition: transition)
            var outcome = await withCheckedContinuation { c in dispatch(plan, label: "scene/\(name)", .request(c)) }
            if case .object(var o) = outcome { o["scene"] = .string(name); outcome = .object(o) }
            return outcome
        case _ where GroupCore.editingPaths.contains(path):
            guard let editor = groupCore.editor else {
                throw AdapterError("\(path) writes the config file, and this bridge was started without one")
            }
            return try await editor.handle(req)
        default:
            return nil
        }
    }

    /// What `scene/store` writes for each device or group: its state now in the groups' fields
    /// (`GroupBook.capture`); nil for one that is not listed (or defined).
    public func captureScene(_ members: [MemberRef]) -> [(MemberRef, [String: JSONValue]?)] {
        members.map { m in (m, groupCore.book.capture(m, groupDescriptor: { groupCore.descriptors[$0] }, view: { memberView($0) })) }
    }
}
