/// Who asked for a bridge request: a client of the broker, or the operator console (`submit`).
public enum RequestOrigin: String, Sendable, Equatable {
    case mqtt, console
}

/// A bridge request served outside the engine (`BridgeEngine.setRequestHandler`): its path (lower case), its
/// body (a JSON object, `{}` when empty), who sent it and its size in bytes.
public struct BridgeRequest: Sendable {
    public var path: String
    public var body: JSONValue
    public var origin: RequestOrigin
    public var size: Int
    public init(path: String, body: JSONValue, origin: RequestOrigin, size: Int) {
        self.path = path
        self.body = body
        self.origin = origin
        self.size = size
    }
}

extension BridgeEngine {
    /// The requests a handler serves: exact paths, or prefixes ending in `/` (`group/`).
    struct RequestHandler: Sendable {
        let paths: [String]
        let maxPayload: Int
        let handle: @Sendable (BridgeRequest) async throws -> JSONValue

        func handles(_ path: String) -> Bool { paths.contains { $0 == path || ($0.hasSuffix("/") && path.hasPrefix($0)) } }
    }

    /// Serves the requests on `paths` (exact, or a prefix ending in `/`) with `handler`, answered on
    /// `bridge/response/<path>` like the engine's own; their payloads are bounded by `maxPayload` bytes
    /// (refused before they are read, counted as `request_payload`). What the handler throws is the answer's error.
    public func setRequestHandler(paths: [String], maxPayload: Int, _ handler: @escaping @Sendable (BridgeRequest) async throws -> JSONValue) {
        requestHandler = RequestHandler(paths: paths, maxPayload: maxPayload, handle: handler)
    }

    /// A `bridge/event` message (`{"type", "data"}`).
    public func publishBridgeEvent(_ type: String, _ data: [String: JSONValue]) { publishEvent(type, data) }

    // MARK: per-device options

    /// The per-device options from now on, by adapter and stable id (a device with none is left out): every
    /// running adapter's devices are renamed, disabled, enabled or published again as they say
    /// (`DeviceRegistry.setPolicies`), and an adapter started later takes them from the start. `anew`: devices
    /// renamed whose Home Assistant entities are made anew (`homeassistant_rename`), by adapter.
    public func setDevicePolicies(_ policies: [String: [String: DevicePolicy]], anew: [String: Set<String>] = [:]) {
        devicePolicies = policies
        for id in adapterOrder {
            guard let entry = entries[id] else { continue }
            let new = (policies[id] ?? [:]).filter { !$0.value.isDefault }
            let renewed = anew[id] ?? []
            guard new != entry.registry.policies || !renewed.isEmpty else { continue }
            let disabledBefore = Set(entry.registry.policies.filter(\.value.disabled).keys)
            var out: [RegistryOutput] = []
            let change = entry.registry.setPolicies(new, anew: renewed, into: &out)
            emit(out)
            if change.listChanged {
                publishDeviceList()
                updateSubscriptions()
            }
            if !change.announceLater.isEmpty {
                childJobQueue.yield(.announceAnew(adapter: id, devices: change.announceLater, after: settings.migrationGrace))
            }
            if !entry.registry.pendingAnnouncements.isEmpty { childJobQueue.yield(.announce(adapter: id, generation: entry.generation)) }
            // A device enabled again: its adapter is asked for its state (the bridge dropped what it reported meanwhile).
            for d in change.enabled {
                guard let name = entry.registry.devices[d]?.name else { continue }
                enqueue(entry, .refresh(deviceID: d, topic: scheme.device(adapter: id, name: name), replyTo: nil))
            }
            let disabled = Set(entry.registry.policies.filter(\.value.disabled).keys)
            if disabled != disabledBefore { childJobQueue.yield(.disable(adapter: id, generation: entry.generation, devices: disabled)) }
            for key in pacing.keys where key.adapter == id && entry.registry.policy(of: key.device)?.paced != true {
                if pacing[key]?.due != nil, let p = entry.registry.state(key.device, force: true) { publish(p) }
                pacing[key] = nil
            }
        }
    }

    func tellDisabled(_ adapterID: String, _ generation: UInt64, _ devices: Set<String>) async {
        guard let entry = current(adapterID, generation) else { return }
        await entry.adapter.setDisabled(devices)
    }

    /// Devices renamed with `homeassistant_rename`: announced now that Home Assistant has let go of the old configs.
    func announceAnew(_ adapterID: String, _ devices: [String]) {
        guard let entry = entries[adapterID], !stopped else { return }
        var out: [RegistryOutput] = []
        entry.registry.republish(devices, configsOnly: true, into: &out)
        emit(out)
    }

    /// Forgets a device now (`device/remove`): its topics cleared (discovery first), `device_removed`. An
    /// upstream that lists it again brings it back. False when the adapter has no such device.
    public func removeDevice(adapter adapterID: String, id: String, reason: String) -> Bool {
        guard let entry = entries[adapterID], entry.registry.devices[id] != nil else { return false }
        var out: [RegistryOutput] = []
        entry.registry.remove(id, reason: reason, into: &out)
        emit(out)
        publishDeviceList()
        updateSubscriptions()
        return true
    }

    /// One adapter's devices as management sees them.
    public struct ManagedAdapter: Sendable, Equatable {
        public var id: String
        /// Name prefixes its devices may not take (`group/`).
        public var reservedPrefixes: [String]
        /// Stable id → name, of every device it has now.
        public var devices: [String: String]
        /// Stable ids of the devices it listed while they were disabled.
        public var disabled: Set<String>
        /// It lists its devices from the config (a device it does not list is gone).
        public var listsFromConfig: Bool
        /// Stable id → the name the device would have without its `name` option.
        public var plainNames: [String: String]
        /// Stable id → the namespace its name is in (`group/`), for those that have one.
        public var namespaces: [String: String]
    }

    /// Whether the adapter has made its first listing (or given up on it, or its settle time passed); true
    /// for an adapter that is not running. A management request waits for it: right after a start or a
    /// standby takeover a device the adapter is about to list is not unknown.
    public func hasListed(_ adapterID: String) -> Bool { entries[adapterID]?.life.isSettled ?? true }

    /// Every adapter's devices, for management requests (which device a request means, which names are taken).
    public func managedAdapters() -> [ManagedAdapter] {
        adapterOrder.compactMap { id in
            guard let e = entries[id] else { return nil }
            var plain: [String: String] = [:]
            for d in e.registry.policies.keys where e.registry.policies[d]?.name != nil {
                if let n = e.registry.nameWithoutOption(d) { plain[d] = n }
            }
            var namespaces: [String: String] = [:]
            for (d, r) in e.registry.devices where !r.descriptor.namespace.isEmpty { namespaces[d] = r.descriptor.namespace }
            return ManagedAdapter(id: id, reservedPrefixes: e.adapter.reservedPrefixes, devices: e.registry.devices.mapValues(\.name),
                                  disabled: Set(e.registry.disabledDevices), listsFromConfig: e.registry.listsFromConfig, plainNames: plain,
                                  namespaces: namespaces)
        }
    }

    // MARK: pacing (debounce, throttle)

    struct PaceKey: Hashable, Sendable {
        let adapter: String
        let device: String
    }

    /// A paced device: when its state last went out, and when the state waiting goes (nil: none waits).
    struct Pace {
        var lastSent: MonotonicInstant?
        var due: MonotonicInstant?
        /// A timer (`ChildJob.pace`) is out for it: at most one a device.
        var timer = false
    }

    /// Whether a new state of a device with `debounce` or `throttle` waits (true: it goes when due, as the
    /// state the device has then); false: it goes now. Debounce: a change within the time of the last one
    /// moves the publish later; throttle: never sooner than its time after the last publish.
    func paced(_ entry: AdapterEntry, _ deviceID: String) -> Bool {
        guard !entry.registry.policies.isEmpty, let policy = entry.registry.policy(of: deviceID), policy.paced else { return false }
        let key = PaceKey(adapter: entry.adapter.id, device: deviceID)
        let now = clock.now()
        var pace = pacing[key] ?? Pace()
        var due = policy.debounce > 0 ? now.adding(seconds: policy.debounce) : now
        if policy.throttle > 0, let last = pace.lastSent { due = max(due, last.adding(seconds: policy.throttle)) }
        if due <= now {
            pace.lastSent = now
            pace.due = nil
            pacing[key] = pace
            return false
        }
        pace.due = due
        let schedule = !pace.timer
        pace.timer = true
        pacing[key] = pace
        if schedule { childJobQueue.yield(.pace(adapter: key.adapter, device: deviceID, at: due)) }
        return true
    }

    /// A paced device's timer: its state goes now, unless a later change moved it (then the timer waits again).
    func paceDue(_ adapterID: String, _ deviceID: String) {
        let key = PaceKey(adapter: adapterID, device: deviceID)
        guard var pace = pacing[key], !stopped else { return }
        guard let due = pace.due else {
            pace.timer = false
            pacing[key] = pace
            return
        }
        let now = clock.now()
        if now < due {
            childJobQueue.yield(.pace(adapter: adapterID, device: deviceID, at: due))
            return
        }
        pace.due = nil
        pace.timer = false
        pace.lastSent = now
        pacing[key] = pace
        if let p = entries[adapterID]?.registry.state(deviceID, force: true) { publish(p) }
    }

    /// States still waiting go now (the bridge is stopping).
    func flushPaced() {
        for (key, pace) in pacing where pace.due != nil {
            if let p = entries[key.adapter]?.registry.state(key.device, force: true) { publish(p) }
        }
        pacing.removeAll()
    }
}
