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
    var product: LIFXProduct?
    var firmware: (major: Int, minor: Int)?
    var lastHeard: MonotonicInstant
    var nextPoll: MonotonicInstant
    var polling = false
    var identified = false
    /// What the device last told us (a Get's reply, or a Set it acknowledged).
    var known: (on: Bool, color: LIFXLANMessage.HSBK)?
    /// A command changed the light's optimistic state; the sender makes the device match it.
    var dirty = false
    var duration = 0.0
    var waiters: [Int] = []
    var sending = false
    var groupUpdated: UInt64 = 0
    var locationUpdated: UInt64 = 0
}

extension LIFXLight {
    /// Takes what a device reported over the LAN, in the user's units.
    mutating func show(on: Bool, _ c: LIFXLANMessage.HSBK) {
        self.on = on
        hue = c.degrees
        saturation = c.saturationPercent
        brightness = c.brightnessPercent
        kelvin = Int(c.kelvin)
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

    /// Discovery with growing gaps (devices asleep on Wi-Fi miss a short window), polls when due,
    /// availability after `offline_after` without any answer.
    func lanLoop() async {
        let gaps: [Double] = [1, 2, 4, 8, 15, 30, 60]
        var round = 0
        var nextDiscovery = clock.now()
        var nextMetrics = clock.now()
        while !Task.isCancelled {
            let now = clock.now()
            if now >= nextDiscovery {
                await lan?.discover(discoveryTargets)
                nextDiscovery = now.adding(seconds: gaps[min(round, gaps.count - 1)])
                round += 1
            }
            var changed: Set<String> = []
            for (serial, d) in lanDevices {
                if d.identified, !d.polling, now >= d.nextPoll {
                    lanDevices[serial]?.polling = true
                    lanWork?.yield(.poll(serial))
                }
                if (now - d.lastHeard).seconds > settings.lan.offlineAfter, lights[serial]?.connected == true {
                    lights[serial]?.connected = false
                    changed.insert(serial)
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
            lanDevices[serial] = LIFXLANDevice(endpoint: endpoint, target: p.header.target, lastHeard: clock.now(), nextPoll: clock.now())
            lanWork?.yield(.identify(serial))
        } else {
            lanDevices[serial]?.endpoint = endpoint
            heard(serial)
        }
    }

    /// Any answer from a device: it is there.
    func heard(_ serial: String) {
        lanDevices[serial]?.lastHeard = clock.now()
    }

    func lanRequest(_ serial: String, _ type: UInt16, _ payload: [UInt8] = [], expect: UInt16, ack: Bool = false) async -> LIFXLANPacket? {
        guard let lan, let d = lanDevices[serial] else { return nil }
        let r = await lan.request(type, payload: payload, serial: d.target, to: d.endpoint, expect: [expect], ack: ack)
        if r != nil { heard(serial) }
        return r
    }

    /// A newly discovered device: product, firmware, group, location, then its state.
    func identify(_ serial: String) async {
        var product: LIFXProduct?
        if let v = await lanRequest(serial, LIFXLANMessage.getVersion, expect: LIFXLANMessage.stateVersion),
           let (_, pid) = LIFXLANMessage.version(v.payload) {
            product = LIFXProduct.lookup(pid)
        }
        let fw = await lanRequest(serial, LIFXLANMessage.getHostFirmware, expect: LIFXLANMessage.stateHostFirmware)
            .flatMap { LIFXLANMessage.firmware($0.payload) }
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
        lanDevices[serial]?.firmware = fw
        var l = lights[serial] ?? LIFXLight(id: serial)
        if let product {
            l.caps.hasColor = product.hasColor
            l.caps.hasVariableColorTemp = product.minKelvin < product.maxKelvin
            l.caps.minKelvin = product.minKelvin
            l.caps.maxKelvin = product.maxKelvin
            l.caps.hasIR = product.infrared
            l.caps.hasMultizone = product.multizone
            l.caps.hasMatrix = product.matrix
            if l.model == nil { l.model = product.name }
        }
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

    /// Reads a device's state. While a command is changing the light, its optimistic values stay.
    func poll(_ serial: String) async {
        defer {
            lanDevices[serial]?.polling = false
            lanDevices[serial]?.nextPoll = clock.now().adding(seconds: settings.lan.pollInterval)
        }
        guard let r = await lanRequest(serial, LIFXLANMessage.lightGet, expect: LIFXLANMessage.lightState),
              let st = LIFXLANMessage.lightState(r.payload), st.color.kelvin >= 1000, st.color.kelvin <= 12000 else { return }
        guard var l = lights[serial], let d = lanDevices[serial] else { return }
        lanDevices[serial]?.known = (st.on, st.color)
        let before = l
        if !d.dirty && !d.sending {
            l.show(on: st.on, st.color)
        }
        if !st.label.isEmpty { l.label = st.label }
        l.connected = true
        l.via = "lan"
        lights[serial] = l
        if l != before {
            if l.label != before.label { await declare() }
            await publish([serial])
        }
    }

    /// Whether a light is reached over the LAN now.
    func onLAN(_ id: String) -> Bool { lanDevices[id]?.identified == true }

    /// Queues the light's (already applied, optimistic) state to be sent over the LAN; a newer command
    /// before the send replaces it. Returns the ticket its outcome arrives under.
    func lanCommand(_ id: String, duration: Double) -> Int {
        let ticket = nextLANTicket
        nextLANTicket -= 1
        lanDevices[id]?.dirty = true
        lanDevices[id]?.duration = duration
        lanDevices[id]?.waiters.append(ticket)
        if lanDevices[id]?.sending == false {
            lanDevices[id]?.sending = true
            lanWork?.yield(.send(id))
        }
        return ticket
    }

    /// Makes the device match the light's state: SetColor and SetPower (each acknowledged, retried),
    /// only what differs from what the device last told us. Repeats while commands keep arriving.
    func lanSend(_ serial: String) async {
        while let d = lanDevices[serial], d.dirty, let l = lights[serial] {
            lanDevices[serial]?.dirty = false
            let tickets = d.waiters
            lanDevices[serial]?.waiters = []
            let ms = UInt32(min(max(d.duration, 0), 86_400) * 1000)
            let color = LIFXLANMessage.HSBK(degrees: l.hue, saturationPercent: l.caps.hasColor ? l.saturation : 0,
                                            brightnessPercent: l.brightness, kelvin: l.kelvin)
            var ok = true
            let sameColor = d.known.map { k in
                k.color.degrees == color.degrees && k.color.saturationPercent == color.saturationPercent
                    && k.color.brightnessPercent == color.brightnessPercent && k.color.kelvin == color.kelvin
            } ?? false
            if !sameColor {
                ok = await lanRequest(serial, LIFXLANMessage.setColor, LIFXLANMessage.setColor(color, durationMs: ms),
                                      expect: LIFXLANMessage.acknowledgement, ack: true) != nil
                if ok { lanDevices[serial]?.known = (d.known?.on ?? !l.on, color) }
            }
            if ok && d.known?.on != l.on {
                ok = await lanRequest(serial, LIFXLANMessage.lightSetPower, LIFXLANMessage.setPower(on: l.on, durationMs: ms),
                                      expect: LIFXLANMessage.acknowledgement, ack: true) != nil
                if ok {
                    let knownColor = lanDevices[serial]?.known?.color ?? color
                    lanDevices[serial]?.known = (l.on, knownColor)
                }
            }
            if ok {
                finish(tickets, .success(()))
            } else {
                finish(tickets, .failure(AdapterError("\(l.label.isEmpty ? serial : l.label) did not answer over the LAN (timeout)")))
                // What the light shows is what it last told us, unless a newer command is on its way.
                if lanDevices[serial]?.dirty == false, let k = lanDevices[serial]?.known {
                    lights[serial]?.show(on: k.on, k.color)
                    await publish([serial])
                }
            }
        }
        lanDevices[serial]?.sending = false
    }

    func reportLANMetrics() async {
        guard let lan else { return }
        var m = await lan.metrics
        m["devices"] = JSONValue(lanDevices.count)
        lanMetrics = m
        await reportMetrics()
    }
}
