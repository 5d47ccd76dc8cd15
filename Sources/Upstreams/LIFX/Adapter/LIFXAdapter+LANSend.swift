import SwitchyardCore

extension LIFXLANMessage.HSBK {
    /// This colour with what a colour change names replaced, as a zone takes it (kelvin alone means white).
    func applying(_ c: LIFXColorChange) -> LIFXLANMessage.HSBK {
        var z = LIFXZone(self)
        z.apply(c, brightness: nil, kelvinRange: 1500...9000)
        return z.hsbk
    }
}

extension LIFXAdapter {
    /// Queues the light's (already applied, optimistic) state to be sent over the LAN, with a one-shot effect
    /// or clean cycle; a newer command before the send replaces what it changes. Returns the ticket its
    /// outcome arrives under. `duration` nil keeps the one a change queued before it gave (an effect after a
    /// brightness with a transition in one command).
    func lanCommand(_ id: String, duration: Double?, effect: LIFXEffect? = nil, clean: (on: Bool, seconds: Int)? = nil) -> Int {
        let ticket = nextLANTicket
        nextLANTicket -= 1
        lanDevices[id]?.dirty = true
        if let duration { lanDevices[id]?.duration = duration }
        lanDevices[id]?.waiters.append(ticket)
        if let effect { lanDevices[id]?.effect = effect }
        if let clean { lanDevices[id]?.clean = clean }
        if lanDevices[id]?.sending == false {
            lanDevices[id]?.sending = true
            lanWork?.yield(.send(id))
        }
        return ticket
    }

    /// Applies an effect to a LAN light's optimistic state (power, the colour it starts from, its name);
    /// false when the light cannot run it (a group's member without zones or a matrix).
    func applyEffect(_ e: LIFXEffect, to id: String) -> Bool {
        guard var l = lights[id] else { return false }
        switch e.name {
        case "move" where !l.caps.hasMultizone: return false
        case "morph" where !l.caps.hasMatrix, "flame" where !l.caps.hasMatrix: return false
        default: break
        }
        if e.name == "off" {
            l.effect = "off"
            if e.powerOff { l.on = false }
        } else {
            l.effect = e.name
            if e.powerOn { l.on = true }
            if let from = e.fromColor { l.apply(LIFXSet(color: from, duration: 0)) }
        }
        lights[id] = l
        return true
    }

    /// Makes the device match the light's state, in order: its colour (SetColor, or the zones that differ),
    /// power, infrared, then an effect and a clean cycle; each acknowledged, retried, and only what differs
    /// from what the device last reported. Repeats while commands keep arriving.
    func lanSend(_ serial: String) async {
        while let d = lanDevices[serial], d.dirty, let l = lights[serial] {
            lanDevices[serial]?.dirty = false
            let tickets = d.waiters
            lanDevices[serial]?.waiters = []
            let effect = d.effect, clean = d.clean
            lanDevices[serial]?.effect = nil
            lanDevices[serial]?.clean = nil
            let ms = UInt32(min(max(d.duration, 0), 86_400) * 1000)
            // Stopping a waveform: the colour is set again, which ends it where it is.
            var ok = await sendColor(serial, l, ms: ms, force: effect?.name == "off")
            if ok, lanDevices[serial]?.known?.on != l.on {
                ok = await lanSet(serial, LIFXLANMessage.lightSetPower, LIFXLANMessage.setPower(on: l.on, durationMs: ms))
                if ok, let k = lanDevices[serial]?.known { lanDevices[serial]?.known = (l.on, k.color) }
            }
            if ok, let ir = l.infrared, lanDevices[serial]?.knownInfrared != ir {
                ok = await lanSet(serial, LIFXLANMessage.setInfrared, LIFXLANMessage.setInfrared(UInt16((Double(ir) * 655.35).rounded())))
                if ok { lanDevices[serial]?.knownInfrared = ir }
            }
            if ok, let effect { ok = await sendEffect(serial, effect, l) }
            if ok, let clean {
                ok = await lanSet(serial, LIFXLANMessage.setHevCycle, LIFXLANMessage.setHevCycle(enable: clean.on, durationS: UInt32(clean.seconds)))
            }
            if ok {
                finish(tickets, .success(()))
            } else {
                finish(tickets, .failure(AdapterError("\(l.label.isEmpty ? serial : l.label) did not answer over the LAN (timeout)")))
                // What the light shows is what it last told us, unless a newer command is on its way.
                if lanDevices[serial]?.dirty == false, let k = lanDevices[serial]?.known {
                    lights[serial]?.show(on: k.on, k.color)
                    if let z = lanDevices[serial]?.knownZones, lights[serial]?.zones != nil { lights[serial]?.zones = z }
                    if let ir = lanDevices[serial]?.knownInfrared, lights[serial]?.infrared != nil { lights[serial]?.infrared = ir }
                    await publish([serial])
                }
            }
        }
        lanDevices[serial]?.sending = false
    }

    /// The light's colour: for a multizone light whose zones are known, its zones (one SetColor when they
    /// are all alike, else the zones that differ); otherwise SetColor. `force` sends even what matches.
    func sendColor(_ serial: String, _ l: LIFXLight, ms: UInt32, force: Bool) async -> Bool {
        guard let d = lanDevices[serial] else { return false }
        func white(_ z: LIFXZone) -> LIFXZone { var z = z; if !l.caps.hasColor { z.saturation = 0 }; return z }
        if let zones = l.zones?.map(white), let first = zones.first {
            if zones.allSatisfy({ $0 == first }) {
                if !force, d.knownZones == zones { return true }
                guard await setColor(serial, first.hsbk, ms: ms) else { return false }
                lanDevices[serial]?.knownZones = zones
                return true
            }
            let known = d.knownZones
            let changed = force || known?.count != zones.count ? Array(zones.indices) : zones.indices.filter { zones[$0] != known![$0] }
            guard let lo = changed.first, let hi = changed.last else { return true }
            guard await sendZones(serial, zones.map(\.hsbk), lo...hi, ms: ms) else { return false }
            lanDevices[serial]?.knownZones = zones
            return true
        }
        let color = white(l.wholeColour)
        if !force, let k = d.known, LIFXZone(k.color) == color { return true }
        return await setColor(serial, color.hsbk, ms: ms)
    }

    /// A Set, sent with ack_required: true once the device acknowledged it.
    func lanSet(_ serial: String, _ type: UInt16, _ payload: [UInt8]) async -> Bool {
        await lanRequest(serial, type, payload, expect: LIFXLANMessage.acknowledgement, ack: true) != nil
    }

    func setColor(_ serial: String, _ color: LIFXLANMessage.HSBK, ms: UInt32) async -> Bool {
        let ok = await lanSet(serial, LIFXLANMessage.setColor, LIFXLANMessage.setColor(color, durationMs: ms))
        if ok, let d = lanDevices[serial] {
            // Power not known yet: taken as the opposite of the light's, so that it is sent too.
            lanDevices[serial]?.known = (d.known?.on ?? !(lights[serial]?.on ?? false), color)
        }
        return ok
    }

    /// Zones `range` of `target`: ExtendedSetColorZones in pieces of 82 where the product has it (falling
    /// back for good when the device answers StateUnhandled), else SetColorZones per run of equal zones.
    /// Every piece but the last only stages its colours; the last shows them all at once.
    func sendZones(_ serial: String, _ target: [LIFXLANMessage.HSBK], _ range: ClosedRange<Int>, ms: UInt32) async -> Bool {
        guard let d = lanDevices[serial], let p = d.product else { return false }
        if p.extendedMultizone && !d.legacyZones {
            var i = range.lowerBound
            while i <= range.upperBound {
                let n = min(LIFXLANMessage.extendedZones, range.upperBound - i + 1)
                let last = i + n > range.upperBound
                let payload = LIFXLANMessage.extendedSetColorZones(index: UInt16(i), colors: target[i..<(i + n)], durationMs: ms,
                                                                    apply: last ? .apply : .noApply)
                let r = await lanRead(serial, LIFXLANMessage.extendedSetColorZones, payload, expect: [LIFXLANMessage.acknowledgement],
                                      ack: true, complete: LIFXLANClient.one)
                if r?.first?.header.type == LIFXLANMessage.stateUnhandled {
                    lanDevices[serial]?.legacyZones = true
                    return await sendZones(serial, target, range, ms: ms)
                }
                guard r?.first?.header.type == LIFXLANMessage.acknowledgement else { return false }
                i += n
            }
            return true
        }
        // Legacy messages address zones with one byte.
        guard range.upperBound <= 255 else { return false }
        var runs: [ClosedRange<Int>] = []
        var start = range.lowerBound
        for i in range where i == range.upperBound || target[i + 1] != target[i] {
            runs.append(start...i)
            start = i + 1
        }
        for (n, run) in runs.enumerated() {
            let payload = LIFXLANMessage.setColorZones(start: UInt8(run.lowerBound), end: UInt8(run.upperBound), color: target[run.lowerBound],
                                                       durationMs: ms, apply: n == runs.count - 1 ? .apply : .noApply)
            guard await lanSet(serial, LIFXLANMessage.setColorZones, payload) else { return false }
        }
        return true
    }

    /// Breathe and pulse as SetWaveformOptional (only the components the colour names change; without a
    /// colour, brightness dips to 10 %), move as the multizone firmware effect, morph and flame as the matrix
    /// one, off as both effects off (the waveform was ended by the colour sent before).
    func sendEffect(_ serial: String, _ e: LIFXEffect, _ l: LIFXLight) async -> Bool {
        guard let p = lanDevices[serial]?.product else { return false }
        let base = lanDevices[serial]?.known?.color ?? l.wholeColour.hsbk
        let instance = UInt32.random(in: 1...UInt32.max)
        let periodMs = UInt32(min(max(e.period, 0.05), 86_400) * 1000)
        func ns(_ seconds: Double?) -> UInt64 { seconds.map { UInt64(min(max($0, 0), 86_400 * 365) * 1_000_000_000) } ?? 0 }
        switch e.name {
        case "breathe", "pulse":
            let c = e.color ?? LIFXColorChange(brightness: 0.1)
            let flags = (hue: c.hue != nil, saturation: c.saturation != nil || c.kelvin != nil, brightness: c.brightness != nil, kelvin: c.kelvin != nil)
            // breathe peaks where `peak` says (skew 0…1 → −32768…32767); pulse is on half of each period.
            let skew = e.name == "breathe" ? Int16(clamping: Int((min(max(e.peak, 0), 1) * 65535).rounded()) - 32768) : 0
            let payload = LIFXLANMessage.waveformOptional(transient: !e.persist, color: base.applying(c), periodMs: periodMs,
                                                          cycles: Float(e.cycles ?? 1), skew: skew,
                                                          waveform: e.name == "breathe" ? .sine : .pulse, set: flags)
            guard await lanSet(serial, LIFXLANMessage.setWaveformOptional, payload) else { return false }
            lanDevices[serial]?.waveformUntil = clock.now().adding(seconds: e.runs ?? 0)
            return true
        case "move":
            return await lanSet(serial, LIFXLANMessage.setMultiZoneEffect, LIFXLANMessage.setMultiZoneEffect(
                instance: instance, type: 1, speedMs: periodMs, durationNs: ns(e.runs), parameters: [0, e.forward ? 1 : 0]))
        case "morph", "flame":
            let palette = e.name == "morph" ? (e.palette.isEmpty ? Self.morphPalette : e.palette).map { base.applying($0) } : []
            return await lanSet(serial, LIFXLANMessage.tileSetEffect, LIFXLANMessage.tileSetEffect(
                instance: instance, type: e.name == "morph" ? 2 : 3, speedMs: periodMs, durationNs: ns(e.duration), palette: palette))
        default:
            lanDevices[serial]?.waveformUntil = nil
            if p.multizone, !(await lanSet(serial, LIFXLANMessage.setMultiZoneEffect, LIFXLANMessage.setMultiZoneEffect(
                instance: instance, type: 0, speedMs: 0, durationNs: 0, parameters: []))) { return false }
            if p.matrix, !(await lanSet(serial, LIFXLANMessage.tileSetEffect, LIFXLANMessage.tileSetEffect(
                instance: instance, type: 0, speedMs: 0, durationNs: 0, palette: []))) { return false }
            return true
        }
    }

    /// Morph without a palette: LIFX's named colours, as the app's default morph cycles through hues.
    static let morphPalette: [LIFXColorChange] = [0, 36, 60, 120, 180, 250, 280, 325].map { LIFXColorChange(hue: $0, saturation: 1) }
}
