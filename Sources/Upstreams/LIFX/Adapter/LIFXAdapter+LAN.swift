#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import SwitchyardCore

/// What the LAN path knows of one device (keyed by serial, which is also the cloud's light id).
struct LIFXLANDevice {
    var endpoint: LIFXLANEndpoint
    var target: UInt64
    /// The product as the device's firmware has it (the products list's upgrades applied).
    var product: LIFXProduct?
    var nextPoll: MonotonicInstant
    var polling = false
    var identified = false
    /// Not a light (a LIFX Switch): heard, never declared.
    var ignored = false
    /// What the device last told us (a Get's reply, or a Set it acknowledged), in the user's units for zones.
    var known: (on: Bool, color: LIFXLANMessage.HSBK)?
    var knownZones: [LIFXZone]?
    var knownInfrared: Int?
    /// The device answered extended multizone with StateUnhandled: the legacy messages from then on.
    var legacyZones = false
    /// A command changed the light's optimistic state; the sender makes the device match it.
    var dirty = false
    var duration = 0.0
    var waiters: [Int] = []
    var sending = false
    /// One-shot requests for the next send (a newer one replaces one not yet sent).
    var effect: LIFXEffect?
    var clean: (on: Bool, seconds: Int)?
    /// A waveform (breathe, pulse) runs until then: the state names it meanwhile.
    var waveformUntil: MonotonicInstant?
    var groupUpdated: UInt64 = 0
    var locationUpdated: UInt64 = 0
}

extension LIFXLight {
    /// Takes what a device reported over the LAN, in the user's units.
    mutating func show(on: Bool, _ c: LIFXLANMessage.HSBK) {
        self.on = on
        wholeColour = LIFXZone(c)
    }
}

enum LANWork: Sendable {
    case identify(String)
    case poll(String)
    case send(String)
}

extension LIFXAdapter {
    /// Runs `body` with the LAN path running beside it (when `lifx.lan.enabled`): the socket, its
    /// reader, discovery, polling and senders are children of this call and stop with it.
    func withLAN(_ body: () async throws -> Void) async throws {
        guard settings.lan.enabled else { return try await body() }
        try await LIFXLANSocket.with(localPort: UInt16(settings.lan.localPort)) { socket in
            let client = LIFXLANClient(socket: socket, clock: clock) { [weak self] p, from in await self?.lanHeard(p, from: from) }
            self.lan = client
            let (work, continuation) = AsyncStream.makeStream(of: LANWork.self)
            self.lanWork = continuation
            defer {
                self.lan = nil
                self.lanWork = nil
                continuation.finish()
            }
            try await withThrowingTaskGroup(of: Void.self) { g in
                g.addTask { await client.receiveLoop() }
                g.addTask { await self.lanLoop() }
                g.addTask {
                    await withDiscardingTaskGroup { workers in
                        for await w in work {
                            workers.addTask {
                                switch w {
                                case .identify(let serial): await self.identify(serial)
                                case .poll(let serial): await self.poll(serial)
                                case .send(let serial): await self.lanSend(serial)
                                }
                            }
                        }
                    }
                }
                defer { g.cancelAll() }
                try await body()
            }
            await client.finishAll()
        }
    }

    var discoveryTargets: [LIFXLANEndpoint] {
        let broadcast = settings.lan.broadcast.map { $0.compactMap { LIFXLANEndpoint($0) } } ?? LIFXLANEndpoint.interfaceBroadcasts()
        return broadcast + settings.lan.hosts.compactMap { LIFXLANEndpoint($0) }
    }

    /// Discovery after 0, 1, 2, 4, 8, 15 and 30 s, then every 60 s (devices asleep on Wi-Fi miss a short
    /// window); polls when due; availability after `offline_after` without any answer. A device that stops
    /// answering starts the fast rounds again (at most once a minute), so one that moved to another address
    /// is found there before it would be marked offline.
    func lanLoop() async {
        let gaps = settings.lan.discoveryGaps.isEmpty ? [60] : settings.lan.discoveryGaps
        var round = 0
        var nextDiscovery = clock.now()
        var nextMetrics = clock.now()
        var lastRestart = MonotonicInstant.distantPast
        while !Task.isCancelled {
            let now = clock.now()
            if lanLost {
                lanLost = false
                if round > 1, (now - lastRestart).seconds >= 60 {
                    round = 0
                    nextDiscovery = now
                    lastRestart = now
                }
            }
            if now >= nextDiscovery {
                await lan?.discover(discoveryTargets)
                nextDiscovery = now.adding(seconds: gaps[min(round, gaps.count - 1)])
                round += 1
            }
            var changed: Set<String> = []
            for (serial, d) in lanDevices where d.identified {
                if !d.polling, now >= d.nextPoll {
                    lanDevices[serial]?.polling = true
                    lanWork?.yield(.poll(serial))
                }
                // Reachability and route as the presence model has them now (the LAN's grace is offline_after).
                if var l = lights[serial] {
                    let online = presence.available(serial, now: now), via = presence.route(serial, now: now).rawValue
                    if l.connected != online || l.via != via {
                        l.connected = online
                        l.via = via
                        lights[serial] = l
                        changed.insert(serial)
                    }
                }
            }
            if !changed.isEmpty { await publish(changed) }
            // The figures are read with bridge/health: once a second is plenty.
            if now >= nextMetrics {
                await reportLANMetrics()
                nextMetrics = now.adding(seconds: 1)
            }
            try? await clock.sleep(seconds: 0.25)
        }
    }

    /// Something from a device that no request was waiting for: a StateService (discovery) or a state.
    func lanHeard(_ p: LIFXLANPacket, from: LIFXLANEndpoint) async {
        let serial = LIFXSerial.serial(p.header.target)
        guard p.header.type == LIFXLANMessage.stateService, p.header.target != 0,
              let (service, port) = LIFXLANMessage.service(p.payload) else { return }
        // Only the UDP service, on the port it names (some firmware lists others, or port 0).
        guard service == 1, port > 0, port <= 65535 else { return }
        let endpoint = LIFXLANEndpoint(host: from.host, port: UInt16(port))
        if lanDevices[serial] == nil {
            lanDevices[serial] = LIFXLANDevice(endpoint: endpoint, target: p.header.target, nextPoll: clock.now())
            heard(serial)
            lanWork?.yield(.identify(serial))
        } else {
            // The device may have moved (a new DHCP lease): its requests follow it, retries included.
            if lanDevices[serial]?.endpoint != endpoint {
                lanDevices[serial]?.endpoint = endpoint
                await lan?.moved(p.header.target, to: endpoint)
            }
            heard(serial)
        }
    }

    /// Any answer from a device: it is there.
    func heard(_ serial: String) {
        guard lanDevices[serial] != nil else { return }
        presence.lanHeard(serial, at: clock.now())
    }

    /// One request and its reply of type `expect`; nil on time-out or when the device does not know the type.
    func lanRequest(_ serial: String, _ type: UInt16, _ payload: [UInt8] = [], expect: UInt16, ack: Bool = false) async -> LIFXLANPacket? {
        let r = await lanRead(serial, type, payload, expect: [expect], ack: ack, complete: LIFXLANClient.one)?.first
        return r?.header.type == expect ? r : nil
    }

    /// A request answered by one packet or several (`complete` says when they are all in). The replies, or
    /// a lone StateUnhandled when the device does not know the type; nil when it did not answer.
    func lanRead(_ serial: String, _ type: UInt16, _ payload: [UInt8] = [], expect: Set<UInt16>, ack: Bool = false,
                 complete: @escaping @Sendable ([LIFXLANPacket]) -> Bool) async -> [LIFXLANPacket]? {
        guard let lan, let d = lanDevices[serial] else { return nil }
        let r = await lan.request(type, payload: payload, serial: d.target, to: d.endpoint, expect: expect, ack: ack, complete: complete)
        if r != nil { heard(serial) } else { lanLost = true }
        return r
    }

    /// A newly discovered device: product and firmware (the product's upgrades for that firmware), group,
    /// location, then its state.
    func identify(_ serial: String) async {
        var product: LIFXProduct?
        if let v = await lanRequest(serial, LIFXLANMessage.getVersion, expect: LIFXLANMessage.stateVersion),
           let (_, pid) = LIFXLANMessage.version(v.payload) {
            product = LIFXProduct.lookup(pid)
        }
        let fw = await lanRequest(serial, LIFXLANMessage.getHostFirmware, expect: LIFXLANMessage.stateHostFirmware)
            .flatMap { LIFXLANMessage.firmware($0.payload) }
        product = product?.at(firmware: fw)
        if let product, !product.isLight {
            // A LIFX Switch answers discovery too; it has no light to bridge.
            lanDevices[serial]?.ignored = true
            return
        }
        let group = await lanRequest(serial, LIFXLANMessage.getGroup, expect: LIFXLANMessage.stateGroup).flatMap { LIFXLANMessage.membership($0.payload) }
        let location = await lanRequest(serial, LIFXLANMessage.getLocation, expect: LIFXLANMessage.stateLocation)
            .flatMap { LIFXLANMessage.membership($0.payload) }
        // The light is declared only with its label (its topic name comes from it).
        let state = await lanRequest(serial, LIFXLANMessage.lightGet, expect: LIFXLANMessage.lightState).flatMap { LIFXLANMessage.lightState($0.payload) }
        guard lanDevices[serial] != nil else { return }
        guard let state else {
            // Not answering yet: forget it; the next discovery round tries again.
            lanDevices[serial] = nil
            return
        }
        lanDevices[serial]?.product = product
        var l = lights[serial] ?? LIFXLight(id: serial)
        if let product {
            l.caps.hasColor = product.hasColor
            l.caps.hasVariableColorTemp = product.minKelvin < product.maxKelvin
            l.caps.minKelvin = product.minKelvin
            l.caps.maxKelvin = product.maxKelvin
            l.caps.hasIR = product.infrared
            l.caps.hasMultizone = product.multizone
            l.caps.hasMatrix = product.matrix
            l.caps.hasHEV = product.hev
            if l.model == nil || l.via == "cloud" { l.model = product.name }
        }
        if let fw { l.firmware = "\(fw.major).\(fw.minor)" }
        // Groups and locations from the LAN labels: the newest `updated_at` among the lights wins.
        if let g = group, !g.label.isEmpty { l.group = newest(g, \.group, \.groupUpdated) }
        if let loc = location, !loc.label.isEmpty { l.location = newest(loc, \.location, \.locationUpdated) }
        if let g = group { lanDevices[serial]?.groupUpdated = g.updatedAt }
        if let loc = location { lanDevices[serial]?.locationUpdated = loc.updatedAt }
        l.via = "lan"
        if !state.label.isEmpty { l.label = state.label }
        lights[serial] = l
        lanDevices[serial]?.identified = true
        await poll(serial)
        await declare()
        await publish([serial])
    }

    /// The name of a group (or location) as the device with the newest `updated_at` for that id has it.
    func newest(_ m: (id: String, label: String, updatedAt: UInt64), _ key: KeyPath<LIFXLight, LIFXRef?>,
                _ stamp: KeyPath<LIFXLANDevice, UInt64>) -> LIFXRef {
        var name = m.label
        var best = m.updatedAt
        for (serial, d) in lanDevices where d[keyPath: stamp] > best {
            if let r = lights[serial]?[keyPath: key], r.id == m.id { name = r.name; best = d[keyPath: stamp] }
        }
        return LIFXRef(id: m.id, name: name)
    }

    /// Reads a device's state: the light, and per product its zones, infrared level, clean cycle and
    /// firmware effect. While a command is changing the light, its optimistic values stay. A reply with a
    /// value no device reports (kelvin outside 1000–12000 K, zones that contradict each other) is dropped
    /// and counted (`invalid`).
    func poll(_ serial: String) async {
        defer {
            lanDevices[serial]?.polling = false
            lanDevices[serial]?.nextPoll = clock.now().adding(seconds: settings.lan.pollInterval)
        }
        guard let r = await lanRequest(serial, LIFXLANMessage.lightGet, expect: LIFXLANMessage.lightState) else { return }
        guard let st = LIFXLANMessage.lightState(r.payload), st.color.plausible else { lanInvalid += 1; return }
        guard let product = lanDevices[serial]?.product else { return }
        let zones = product.multizone ? await readZones(serial) : nil
        // The infrared level in percent, as the state shows it.
        let infrared = product.infrared
            ? await lanRequest(serial, LIFXLANMessage.getInfrared, expect: LIFXLANMessage.stateInfrared)
                .flatMap { LIFXLANMessage.infrared($0.payload) }.map { LIFXLight.percent(Double($0) / 65535) }
            : nil
        var clean: LIFXClean?
        if product.hev, let h = await lanRequest(serial, LIFXLANMessage.getHevCycle, expect: LIFXLANMessage.stateHevCycle),
           let cycle = LIFXLANMessage.hevCycle(h.payload) {
            let result = await lanRequest(serial, LIFXLANMessage.getLastHevCycleResult, expect: LIFXLANMessage.stateLastHevCycleResult)
                .flatMap { LIFXLANMessage.hevResult($0.payload) }
            clean = LIFXClean(active: cycle.remainingS > 0, remaining: Int(min(cycle.remainingS, 86_400)), lastResult: result)
        }
        var firmwareEffect: UInt8?
        if product.multizone {
            firmwareEffect = await lanRequest(serial, LIFXLANMessage.getMultiZoneEffect, expect: LIFXLANMessage.stateMultiZoneEffect)
                .flatMap(LIFXLANMessage.effectType)
        } else if product.matrix {
            firmwareEffect = await lanRequest(serial, LIFXLANMessage.tileGetEffect, LIFXLANMessage.tileGetEffectPayload,
                                              expect: LIFXLANMessage.tileStateEffect).flatMap(LIFXLANMessage.effectType)
        }
        guard var l = lights[serial], let d = lanDevices[serial] else { return }
        lanDevices[serial]?.known = (st.on, st.color)
        if let zones { lanDevices[serial]?.knownZones = zones.map(LIFXZone.init) }
        if let infrared { lanDevices[serial]?.knownInfrared = infrared }
        let before = l
        if !d.dirty && !d.sending {
            l.show(on: st.on, st.color)
            if let zones { l.zones = zones.map(LIFXZone.init) }
            if let infrared { l.infrared = infrared }
            if let clean { l.clean = clean }
        }
        // The effect the light runs: a waveform the bridge started, else what its firmware says.
        if let until = d.waveformUntil, clock.now() < until {
            // still running
        } else {
            lanDevices[serial]?.waveformUntil = nil
            switch firmwareEffect {
            case 1?: l.effect = "move"
            case 2?: l.effect = "morph"
            case 3?: l.effect = "flame"
            case 5?: l.effect = "sky"
            default: if !d.dirty && !d.sending { l.effect = "off" }
            }
        }
        if !st.label.isEmpty { l.label = st.label }
        l.connected = true
        l.via = "lan"
        // When the light last answered: moved along with another change, or hourly (as the cloud's), so a
        // steady light publishes nothing.
        let seen = l.lastSeen.flatMap(Timestamp.parse)
        if l != before || seen == nil || Date().timeIntervalSince(seen!) >= 3600 { l.lastSeen = Timestamp.rfc3339(Date()) }
        lights[serial] = l
        if l != before {
            if l.label != before.label { await declare() }
            await publish([serial])
        }
    }

    /// A multizone light's zones: extended multizone where the product (at its firmware) has it, else, or
    /// when the device answers StateUnhandled, the legacy messages (8 zones a reply). Replies are taken in any
    /// order and over as many packets as the zone count needs.
    func readZones(_ serial: String) async -> [LIFXLANMessage.HSBK]? {
        guard let d = lanDevices[serial], let p = d.product, p.multizone else { return nil }
        let done: @Sendable ([LIFXLANPacket]) -> Bool = { packets in
            let a = LIFXZoneAssembler(packets)
            return a.isComplete || a.invalid
        }
        var replies: [LIFXLANPacket]?
        if p.extendedMultizone && !d.legacyZones {
            replies = await lanRead(serial, LIFXLANMessage.extendedGetColorZones, expect: [LIFXLANMessage.extendedStateMultiZone], complete: done)
            if replies?.first?.header.type == LIFXLANMessage.stateUnhandled {
                lanDevices[serial]?.legacyZones = true
                replies = nil
            } else {
                return assemble(replies)
            }
        }
        replies = await lanRead(serial, LIFXLANMessage.getColorZones, LIFXLANMessage.getColorZones(start: 0, end: 255),
                                expect: [LIFXLANMessage.stateZone, LIFXLANMessage.stateMultiZone], complete: done)
        return assemble(replies)
    }

    func assemble(_ replies: [LIFXLANPacket]?) -> [LIFXLANMessage.HSBK]? {
        guard let replies else { return nil }
        let a = LIFXZoneAssembler(replies)
        if a.invalid { lanInvalid += 1 }
        return a.complete
    }

    /// Whether a light is reached over the LAN now: identified there, and the routing rule says LAN (a light
    /// the LAN has not heard within offline_after goes over the cloud while the cloud lists it).
    func onLAN(_ id: String) -> Bool {
        lanDevices[id]?.identified == true && presence.route(id, now: clock.now()) == .lan
    }

    func reportLANMetrics() async {
        guard let lan else { return }
        var m = await lan.metrics
        m["devices"] = JSONValue(lanDevices.values.filter(\.identified).count)
        m["invalid"] = JSONValue(lanInvalid)
        lanMetrics = m
        await reportMetrics()
    }
}
