#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// The LAN transport (`lifx.lan`, docs/upstreams/lifx-lan.md): one UDP socket, discovery, identification,
/// polling, and commands to the devices on the local network. It owns what it knows of each device and
/// the requests on the wire, and tells the router what it found through `report` (`LIFXReport`, as the
/// cloud does); the router never reaches into it. Requests (matching, pacing, retries) are in
/// LIFXLAN+Requests.swift, commands in LIFXLAN+Send.swift. Its socket comes from `network` for each run:
/// the kernel's UDP (`LIFXUDPNetwork`), or `LIFXLANTwin` in the unit tier.
actor LIFXLAN {
    /// What the LAN saw of the lights.
    enum Event: Sendable, Equatable {
        /// A new device identified, with its first reading.
        case found(String, LIFXIdentity, LIFXReading)
        /// A poll's reading; `commandPending`: a command is on its way, its optimistic values stay.
        case read(String, LIFXReading, commandPending: Bool)
        /// Devices heard since the last time (any answer), and when; at least once a second, empty when
        /// nothing was (the model's availability follows time).
        case heard([String: MonotonicInstant])
        /// A send failed and no newer command is on its way: the device's last reported state.
        case reverted(String, LIFXReading)
    }

    /// What a reload's new instance keeps of a device: where it answers and what it is.
    struct Seed: Sendable {
        var serial: String
        var endpoint: LIFXLANEndpoint
        var target: UInt64
        var product: LIFXProduct?
    }

    let settings: LIFXLANSettings
    let clock: any BridgeClock
    let network: any LIFXLANNetwork
    let report: LIFXReporter<Event>
    /// The socket of the current run (opened and closed by `run`).
    var socket: (any LIFXLANSocket)?
    /// Signalled once the socket is open: a command's LAN part before it would find no socket.
    let opened = Latch()
    var requests = LIFXLANRequests()
    var devices: [String: LIFXLANDevice] = [:]
    /// Identified devices heard since the last `heard` event.
    var heardSince: [String: MonotonicInstant] = [:]
    /// A request timed out since the loop last looked: discovery goes quick again (the device may have moved).
    var requestTimedOut = false
    /// Replies with values no device reports, dropped.
    var invalid = 0

    init(settings: LIFXLANSettings, clock: any BridgeClock, network: any LIFXLANNetwork, seeds: [Seed],
         report: @escaping LIFXReporter<Event>) {
        self.settings = settings
        self.clock = clock
        self.network = network
        self.report = report
        let now = clock.now()
        for s in seeds {
            var d = LIFXLANDevice(endpoint: s.endpoint, target: s.target, nextPoll: now)
            d.product = s.product
            d.identified = true
            devices[s.serial] = d
            requests.endpoints[s.target] = s.endpoint
        }
    }

    /// The devices as a reload's new instance takes them over (without anything in flight).
    var seeds: [Seed] {
        devices.filter { $0.value.identified }.map { Seed(serial: $0.key, endpoint: $0.value.endpoint, target: $0.value.target, product: $0.value.product) }
    }

    /// Opens the socket and runs its reader, discovery and polling until cancelled; every command still
    /// waiting is then answered (the adapter stopped), and the socket closes.
    func run() async throws {
        try await network.withSocket(localPort: UInt16(settings.localPort), isolation: #isolation) { socket in
            self.socket = socket
            opened.signal()
            defer {
                self.socket = nil
                stopAll()
            }
            await withDiscardingTaskGroup { g in
                g.addTask { await self.receive(socket.datagrams) }
                await loop(&g)
                g.cancelAll()
            }
        }
    }

    var discoveryTargets: [LIFXLANEndpoint] {
        let broadcast = settings.broadcast.map { $0.compactMap { LIFXLANEndpoint($0) } } ?? LIFXLANEndpoint.interfaceBroadcasts()
        return broadcast + settings.hosts.compactMap { LIFXLANEndpoint($0) }
    }

    /// Discovery after 0, 1, 2, 4, 8, 15 and 30 s, then every 60 s (devices asleep on Wi-Fi miss a short
    /// window); identification of what answered; polls when due; what was heard handed on. A request that
    /// times out starts the quick rounds again (at most once a minute), so a device that moved to another
    /// address is found there before it would go offline.
    func loop(_ g: inout DiscardingTaskGroup) async {
        let gaps = settings.discoveryGaps.isEmpty ? [60] : settings.discoveryGaps
        var round = 0
        var nextDiscovery = clock.now()
        var nextMetrics = clock.now()
        var lastRestart = MonotonicInstant.distantPast
        while !Task.isCancelled {
            let now = clock.now()
            if requestTimedOut {
                requestTimedOut = false
                if round > 1, (now - lastRestart).seconds >= 60 {
                    round = 0
                    nextDiscovery = now
                    lastRestart = now
                }
            }
            if now >= nextDiscovery {
                discover(discoveryTargets)
                nextDiscovery = now.adding(seconds: gaps[min(round, gaps.count - 1)])
                round += 1
            }
            for (serial, d) in devices where !d.busy {
                if !d.identified && !d.ignored {
                    devices[serial]?.identifying = true
                    g.addTask { await self.identify(serial) }
                } else if d.identified, now >= d.nextPoll {
                    devices[serial]?.polling = true
                    g.addTask { await self.poll(serial) }
                }
            }
            // The figures are read with bridge/health: once a second is plenty.
            let metrics = now >= nextMetrics ? self.metrics : nil
            if metrics != nil { nextMetrics = now.adding(seconds: 1) }
            // What was heard, at least once a second: time passing is news too (a silent device goes offline).
            if !heardSince.isEmpty || metrics != nil {
                let heard = heardSince
                heardSince = [:]
                await report(.saw(.heard(heard)))
            }
            if let metrics { await report(.metrics(metrics)) }
            try? await clock.sleep(seconds: 0.25)
        }
    }

    /// A StateService (discovery): a new device is identified by the loop; a known one may have moved.
    func discovered(_ p: LIFXLANPacket, from: LIFXLANEndpoint) {
        guard p.header.target != 0, let (service, port) = LIFXLANMessage.service(p.payload) else { return }
        // Only the UDP service, on the port it names (some firmware lists others, or port 0).
        guard service == 1, port > 0, port <= 65535 else { return }
        let serial = LIFXSerial.serial(p.header.target)
        let endpoint = LIFXLANEndpoint(host: from.host, port: UInt16(port))
        guard devices[serial] != nil else {
            devices[serial] = LIFXLANDevice(endpoint: endpoint, target: p.header.target, nextPoll: clock.now())
            requests.endpoints[p.header.target] = endpoint
            return
        }
        // The device may have moved (a new DHCP lease): its requests follow it, retries included.
        if devices[serial]?.endpoint != endpoint {
            devices[serial]?.endpoint = endpoint
            requests.endpoints[p.header.target] = endpoint
        }
        heard(serial)
    }

    /// Any answer from a device: it is there.
    func heard(_ serial: String) {
        guard devices[serial]?.identified == true else { return }
        heardSince[serial] = clock.now()
    }

    /// Forgets devices the adapter no longer knows (heard again, they are identified again).
    func forget(_ serials: [String]) {
        for s in serials {
            guard let d = devices.removeValue(forKey: s) else { continue }
            for o in d.send.next + (d.send.round?.outcomes ?? []) { o.fail("\(s) is no longer known") }
            for w in d.send.turnWaiters { w.resume() }
        }
    }

    /// A newly discovered device: product and firmware (the product's upgrades for that firmware), group,
    /// location, then its state. A device that does not answer is forgotten (the next discovery round
    /// tries again); a LIFX Switch answers discovery too but has no light to bridge.
    func identify(_ serial: String) async {
        defer { devices[serial]?.identifying = false }
        var product: LIFXProduct?
        if let v = await ask(serial, LIFXLANMessage.getVersion, expect: LIFXLANMessage.stateVersion),
           let (_, pid) = LIFXLANMessage.version(v.payload) {
            product = LIFXProduct.lookup(pid)
        }
        let fw = await ask(serial, LIFXLANMessage.getHostFirmware, expect: LIFXLANMessage.stateHostFirmware).flatMap { LIFXLANMessage.firmware($0.payload) }
        product = product?.at(firmware: fw)
        if let product, !product.isLight {
            devices[serial]?.ignored = true
            return
        }
        func ref(_ m: (id: String, label: String, updatedAt: UInt64)?) -> LIFXRef? {
            guard let m, !m.label.isEmpty else { return nil }
            return LIFXRef(id: m.id, name: m.label, updatedAt: m.updatedAt)
        }
        let group = await ask(serial, LIFXLANMessage.getGroup, expect: LIFXLANMessage.stateGroup).flatMap { LIFXLANMessage.membership($0.payload) }
        let location = await ask(serial, LIFXLANMessage.getLocation, expect: LIFXLANMessage.stateLocation).flatMap { LIFXLANMessage.membership($0.payload) }
        devices[serial]?.product = product
        // The light is declared only with its label (its topic name comes from it).
        guard devices[serial] != nil, let reading = await readState(serial) else {
            devices[serial] = nil
            return
        }
        devices[serial]?.identified = true
        devices[serial]?.nextPoll = clock.now().adding(seconds: settings.pollInterval)
        heard(serial)
        let identity = LIFXIdentity(caps: product?.caps, model: product?.name, firmware: fw.map { "\($0.major).\($0.minor)" },
                                    group: ref(group), location: ref(location))
        await report(.saw(.found(serial, identity, reading)))
    }

    /// `devices/refresh`: every device read now, and a discovery round.
    func refresh() async {
        for serial in devices.keys.sorted() where devices[serial]?.identified == true { await poll(serial) }
        discover(discoveryTargets)
    }

    /// Reads a device's state and hands it on.
    func poll(_ serial: String) async {
        defer {
            devices[serial]?.polling = false
            devices[serial]?.nextPoll = clock.now().adding(seconds: settings.pollInterval)
        }
        guard let r = await readState(serial), let d = devices[serial] else { return }
        await report(.saw(.read(serial, r, commandPending: d.commandPending)))
    }

    /// The light, and per product its zones, the Ceiling's matrix, infrared level, clean cycle and
    /// firmware effect; nil when it did not answer. What was read becomes what the device is known to show
    /// (commands send only what differs). A reply with a value no device reports (kelvin outside
    /// 1000–12000 K, zones that contradict each other) is dropped and counted (`invalid`).
    func readState(_ serial: String) async -> LIFXReading? {
        guard let r = await ask(serial, LIFXLANMessage.lightGet, expect: LIFXLANMessage.lightState) else { return nil }
        guard let st = LIFXLANMessage.lightState(r.payload), st.color.plausible else { invalid += 1; return nil }
        guard let product = devices[serial]?.product else {
            return LIFXReading(on: st.on, colour: LIFXZone(st.color), label: st.label)
        }
        let zones = product.multizone ? await readZones(serial) : nil
        let matrix = product.ceiling ? await readMatrix(serial) : nil
        let infrared = product.infrared
            ? await ask(serial, LIFXLANMessage.getInfrared, expect: LIFXLANMessage.stateInfrared)
                .flatMap { LIFXLANMessage.infrared($0.payload) }.map { LIFXLight.percent(Double($0) / 65535) }
            : nil
        var clean: LIFXClean?
        if product.hev, let h = await ask(serial, LIFXLANMessage.getHevCycle, expect: LIFXLANMessage.stateHevCycle),
           let cycle = LIFXLANMessage.hevCycle(h.payload) {
            let result = await ask(serial, LIFXLANMessage.getLastHevCycleResult, expect: LIFXLANMessage.stateLastHevCycleResult)
                .flatMap { LIFXLANMessage.hevResult($0.payload) }
            clean = LIFXClean(active: cycle.remainingS > 0, remaining: Int(min(cycle.remainingS, 86_400)), lastResult: result)
        }
        var firmwareEffect: UInt8?
        if product.multizone {
            firmwareEffect = await ask(serial, LIFXLANMessage.getMultiZoneEffect, expect: LIFXLANMessage.stateMultiZoneEffect)
                .flatMap(LIFXLANMessage.effectType)
        } else if product.matrix {
            firmwareEffect = await ask(serial, LIFXLANMessage.tileGetEffect, LIFXLANMessage.tileGetEffectPayload,
                                       expect: LIFXLANMessage.tileStateEffect).flatMap(LIFXLANMessage.effectType)
        }
        guard let d = devices[serial] else { return nil }
        devices[serial]?.known = (st.on, st.color)
        if let zones { devices[serial]?.knownZones = zones }
        if let matrix { devices[serial]?.knownMatrix = matrix }
        if let infrared { devices[serial]?.knownInfrared = infrared }
        var reading = LIFXReading(on: st.on, colour: LIFXZone(st.color), label: st.label, zones: zones, infrared: infrared,
                                     clean: clean, matrix: matrix)
        // The effect the light runs: a waveform the bridge started (until it ends), else what its firmware says.
        if let until = d.waveformUntil, clock.now() < until {
            reading.effect = nil
        } else {
            devices[serial]?.waveformUntil = nil
            switch firmwareEffect {
            case 1?: reading.effect = "move"
            case 2?: reading.effect = "morph"
            case 3?: reading.effect = "flame"
            case 5?: reading.effect = "sky"
            default: reading.effect = d.commandPending ? nil : "off"
            }
        }
        return reading
    }

    /// What the device last reported, as a reading (for a revert after a failed send).
    func lastReported(_ serial: String) -> LIFXReading? {
        guard let d = devices[serial], let k = d.known else { return nil }
        return LIFXReading(on: k.on, colour: LIFXZone(k.color), label: "", zones: d.knownZones, infrared: d.knownInfrared,
                              matrix: d.knownMatrix)
    }

    /// A multizone light's zones: extended multizone where the product (at its firmware) has it, else, or
    /// when the device answers StateUnhandled, the legacy messages (8 zones a reply). Replies are taken in
    /// any order and over as many packets as the zone count needs.
    func readZones(_ serial: String) async -> [LIFXZone]? {
        guard let d = devices[serial], let p = d.product, p.multizone else { return nil }
        let done: @Sendable ([LIFXLANPacket]) -> Bool = { packets in
            let a = LIFXZoneAssembler(packets)
            return a.isComplete || a.invalid
        }
        if p.extendedMultizone && !d.legacyZones {
            let replies = await ask(serial, LIFXLANMessage.extendedGetColorZones, expect: [LIFXLANMessage.extendedStateMultiZone], complete: done)
            if replies?.first?.header.type != LIFXLANMessage.stateUnhandled { return assemble(replies) }
            devices[serial]?.legacyZones = true
        }
        return assemble(await ask(serial, LIFXLANMessage.getColorZones, LIFXLANMessage.getColorZones(start: 0, end: 255),
                                  expect: [LIFXLANMessage.stateZone, LIFXLANMessage.stateMultiZone], complete: done))
    }

    func assemble(_ replies: [LIFXLANPacket]?) -> [LIFXZone]? {
        guard let replies else { return nil }
        let a = LIFXZoneAssembler(replies)
        if a.invalid { invalid += 1 }
        return a.complete?.map(LIFXZone.init)
    }

    /// A LIFX Ceiling's 64 zones (8 × 8): one Get64 of the whole tile (docs/upstreams/lifx-lan.md "Ceiling").
    func readMatrix(_ serial: String) async -> [LIFXZone]? {
        guard let r = await ask(serial, LIFXLANMessage.tileGet64, LIFXLANMessage.tileGet64(x: 0, y: 0, width: LIFXCeiling.width),
                                expect: LIFXLANMessage.tileState64),
              let colors = LIFXLANMessage.state64(r.payload) else { return nil }
        guard colors.allSatisfy(\.plausible) else { invalid += 1; return nil }
        return colors.map(LIFXZone.init)
    }

    var metrics: [String: JSONValue] {
        var m = requests.metrics
        m["dropped"] = JSONValue(socket?.dropped ?? 0)
        m["devices"] = JSONValue(devices.values.filter(\.identified).count)
        m["invalid"] = JSONValue(invalid)
        return m
    }
}

/// What the LAN path knows of one device (keyed by serial, which is also the cloud's light id).
struct LIFXLANDevice {
    var endpoint: LIFXLANEndpoint
    var target: UInt64
    /// The product as the device's firmware has it (the products list's upgrades applied).
    var product: LIFXProduct?
    var nextPoll: MonotonicInstant
    var identifying = false
    var polling = false
    var identified = false
    /// Not a light (a LIFX Switch): heard, never declared.
    var ignored = false
    /// What the device last told us (a Get's reply, or a Set it acknowledged).
    var known: (on: Bool, color: LIFXLANMessage.HSBK)?
    var knownZones: [LIFXZone]?
    var knownMatrix: [LIFXZone]?
    var knownInfrared: Int?
    /// The device answered extended multizone with StateUnhandled: the legacy messages from then on.
    var legacyZones = false
    /// A waveform (breathe, pulse) runs until then: the state names it meanwhile.
    var waveformUntil: MonotonicInstant?
    /// Commands (LIFXLAN+Send.swift): what the device is to show next and who waits for it.
    var send = LIFXLANSendState()

    var busy: Bool { identifying || polling }
    var commandPending: Bool { send.round != nil || send.want != nil }
}
