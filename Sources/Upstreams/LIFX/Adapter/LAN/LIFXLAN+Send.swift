import SwitchyardCore

/// One command's part for one LAN light (the plan's order) with the outcome the command waits for.
struct LIFXLANSubmission: Sendable {
    var order: LIFXLANOrder
    var outcome: LIFXOutcome
}

/// A device's commands: the newest state asked for and not yet on the wire, the round on the wire, and
/// the commands waiting. A newer command replaces what was not sent yet, and every command whose state went
/// with a round gets that round's outcome.
struct LIFXLANSendState {
    var want: LIFXLANWant?
    var label = ""
    var duration = 0.0
    var effect: LIFXEffect?
    var clean: LIFXCleanRequest?
    var next: [LIFXOutcome] = []
    var round: LIFXLANRound?
    /// A command's task is sending the round.
    var driven = false
    /// Commands waiting for their outcome, or for their turn to send the next round.
    var turnWaiters: [CheckedContinuation<Void, Never>] = []
}

/// The messages that make a device show one state, in order: colour (or zones, or the Ceiling's matrix),
/// power, infrared, then an effect and a clean cycle; each acknowledged.
struct LIFXLANRound: Sendable {
    enum Step: Sendable {
        /// One Set, and what the device shows once it acknowledged it.
        case message(LIFXLANRequest, Learned)
        /// A multizone light's zones `range` (extended messages, or the legacy ones where it has no extended).
        case zones([LIFXZone], ClosedRange<Int>, ms: UInt32)
    }

    enum Learned: Sendable {
        case colour(LIFXLANMessage.HSBK, zones: [LIFXZone]?, matrix: [LIFXZone]?)
        case power(Bool)
        case infrared(Int)
        case matrix([LIFXZone])
        case waveform(until: Double?)
        case nothing
    }

    var steps: [Step]
    var outcomes: [LIFXOutcome]
    var label: String
    /// The first message, sent when the round began (when the device's pace allowed it).
    var started: LIFXLANRequests.Attempt?
}

extension LIFXLAN {
    /// Takes commands' parts in. A device with nothing on the wire begins its round at once, and its first
    /// datagram leaves now when the device's pace allows it, before anyone waits for the outcome. A part for
    /// a device the LAN does not know fails at once.
    func submit(_ parts: [LIFXLANSubmission]) {
        for part in parts {
            let p = part.order
            guard devices[p.serial]?.identified == true, socket != nil else {
                part.outcome.fail("\(p.label) is not reachable on the LAN")
                continue
            }
            devices[p.serial]!.send.want = p.want
            devices[p.serial]!.send.label = p.label
            devices[p.serial]!.send.duration = p.duration
            if let e = p.effect { devices[p.serial]!.send.effect = e }
            if let c = p.clean { devices[p.serial]!.send.clean = c }
            devices[p.serial]!.send.next.append(part.outcome)
            if devices[p.serial]!.send.round == nil { beginRound(p.serial) }
        }
    }

    /// Waits for a part's outcome. The first command of a round to wait sends it (its task carries the
    /// retries); the others wait for it, and when it ends one of them sends the next round, if any.
    func complete(_ serial: String, _ outcome: LIFXOutcome) async throws {
        while !outcome.isResolved {
            guard let d = devices[serial], socket != nil else {
                outcome.fail("\(serial) is no longer reachable on the LAN")
                break
            }
            if d.send.round != nil, !d.send.driven {
                await drive(serial)
                continue
            }
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                if devices[serial] == nil { c.resume() } else { devices[serial]!.send.turnWaiters.append(c) }
            }
        }
        try await outcome.wait()
    }

    /// The next round from what was asked for; its first message goes at once if it can.
    func beginRound(_ serial: String) {
        guard let d = devices[serial], let want = d.send.want else { return }
        let ms = UInt32(min(max(d.send.duration, 0), 86_400) * 1000)
        var steps = colourSteps(want, d, ms: ms, force: d.send.effect?.name == "off")
        if d.known?.on != want.on {
            steps.append(.message(.set(LIFXLANMessage.lightSetPower, LIFXLANMessage.setPower(on: want.on, durationMs: ms)), .power(want.on)))
        }
        if let ir = want.infrared, d.knownInfrared != ir {
            steps.append(.message(.set(LIFXLANMessage.setInfrared, LIFXLANMessage.setInfrared(UInt16((Double(ir) * 655.35).rounded()))), .infrared(ir)))
        }
        if let e = d.send.effect, let p = d.product { steps += effectSteps(e, product: p, base: want.colour.hsbk) }
        // Stopping effects ends a waveform too (the colour was sent again above).
        if d.send.effect?.name == "off" { devices[serial]!.waveformUntil = nil }
        if let c = d.send.clean {
            steps.append(.message(.set(LIFXLANMessage.setHevCycle, LIFXLANMessage.setHevCycle(enable: c.on, durationS: UInt32(c.seconds))), .nothing))
        }
        var round = LIFXLANRound(steps: steps, outcomes: d.send.next, label: d.send.label.isEmpty ? serial : d.send.label)
        devices[serial]!.send.want = nil
        devices[serial]!.send.effect = nil
        devices[serial]!.send.clean = nil
        devices[serial]!.send.next = []
        if case .message(let r, _)? = steps.first { round.started = start(r, serial: serial) }
        devices[serial]!.send.round = round
        devices[serial]!.send.driven = false
    }

    /// Sends the device's round, answers its commands, and begins the next round if commands arrived
    /// meanwhile (whoever waits for it sends it). On a failure the light shows again what the device last
    /// reported, unless a newer command is on its way.
    func drive(_ serial: String) async {
        guard let round = devices[serial]?.send.round else { return }
        devices[serial]!.send.driven = true
        var ok = true
        for (i, step) in round.steps.enumerated() {
            ok = await run(step, serial: serial, started: i == 0 ? round.started : nil)
            if !ok { break }
        }
        if !ok, devices[serial]?.send.want == nil, let r = lastReported(serial) { await report(.saw(.reverted(serial, r))) }
        for o in round.outcomes {
            if ok { o.succeed() } else { o.fail("\(round.label) did not answer over the LAN (timeout)") }
        }
        guard devices[serial] != nil else { return }
        devices[serial]!.send.round = nil
        devices[serial]!.send.driven = false
        if devices[serial]!.send.want != nil { beginRound(serial) }
        let waiters = devices[serial]!.send.turnWaiters
        devices[serial]!.send.turnWaiters = []
        for w in waiters { w.resume() }
    }

    /// One step of a round; false when the device did not acknowledge it.
    func run(_ step: LIFXLANRound.Step, serial: String, started: LIFXLANRequests.Attempt?) async -> Bool {
        switch step {
        case .zones(let zones, let range, let ms):
            guard await sendZones(serial, zones.map(\.hsbk), range, ms: ms) else { return false }
            devices[serial]?.knownZones = zones
            return true
        case .message(let r, let learned):
            guard await request(r, serial: serial, started: started)?.first?.header.type == LIFXLANMessage.acknowledgement else { return false }
            learn(learned, serial)
            return true
        }
    }

    /// What the device shows once it acknowledged a Set.
    func learn(_ l: LIFXLANRound.Learned, _ serial: String) {
        guard let d = devices[serial] else { return }
        switch l {
        case .colour(let c, let zones, let matrix):
            // Power not known yet: taken as off, so that the power step (planned for that case) still holds.
            devices[serial]!.known = (d.known?.on ?? false, c)
            if let zones { devices[serial]!.knownZones = zones }
            if let matrix { devices[serial]!.knownMatrix = matrix }
        case .power(let on):
            if let k = d.known { devices[serial]!.known = (on, k.color) }
        case .infrared(let ir): devices[serial]!.knownInfrared = ir
        case .matrix(let m): devices[serial]!.knownMatrix = m
        case .waveform(let until): devices[serial]!.waveformUntil = until.map { clock.now().adding(seconds: $0) }
        case .nothing: break
        }
    }

    /// The light's colour: a multizone light whose zones are known gets its zones (one SetColor when they
    /// are all alike, else the zones that differ), a Ceiling its 64 zones (one SetColor when alike, else
    /// Set64: the uplight alone when only it changed); any other light SetColor. `force` sends even what
    /// matches (stopping a waveform: the colour set again ends it where it is).
    func colourSteps(_ want: LIFXLANWant, _ d: LIFXLANDevice, ms: UInt32, force: Bool) -> [LIFXLANRound.Step] {
        func setColor(_ c: LIFXZone, zones: [LIFXZone]? = nil, matrix: [LIFXZone]? = nil) -> LIFXLANRound.Step {
            .message(.set(LIFXLANMessage.setColor, LIFXLANMessage.setColor(c.hsbk, durationMs: ms)), .colour(c.hsbk, zones: zones, matrix: matrix))
        }
        if let zones = want.zones, let first = zones.first {
            if zones.allSatisfy({ $0 == first }) {
                return !force && d.knownZones == zones ? [] : [setColor(first, zones: zones)]
            }
            let known = d.knownZones
            let changed = force || known?.count != zones.count ? Array(zones.indices) : zones.indices.filter { zones[$0] != known![$0] }
            guard let lo = changed.first, let hi = changed.last else { return [] }
            return [.zones(zones, lo...hi, ms: ms)]
        }
        if let matrix = want.matrix, matrix.count == LIFXCeiling.zones, let first = matrix.first {
            if !force, d.knownMatrix == matrix { return [] }
            if matrix.allSatisfy({ $0 == first }) { return [setColor(first, matrix: matrix)] }
            let uplightOnly = !force && d.knownMatrix.map { Array($0.prefix(LIFXCeiling.uplight)) == Array(matrix.prefix(LIFXCeiling.uplight)) } == true
            let payload = uplightOnly
                ? LIFXLANMessage.tileSet64(x: LIFXCeiling.width - 1, y: LIFXCeiling.width - 1, width: LIFXCeiling.width,
                                           durationMs: ms, colors: [matrix[LIFXCeiling.uplight].hsbk])
                : LIFXLANMessage.tileSet64(x: 0, y: 0, width: LIFXCeiling.width, durationMs: ms, colors: matrix.map(\.hsbk))
            return [.message(.set(LIFXLANMessage.tileSet64, payload), .matrix(matrix))]
        }
        if !force, let k = d.known, LIFXZone(k.color) == want.colour { return [] }
        return [setColor(want.colour)]
    }

    /// Zones `range` of `target`: ExtendedSetColorZones in pieces of 82 where the product has it (falling
    /// back for good when the device answers StateUnhandled), else SetColorZones per run of equal zones.
    /// Every piece but the last only stages its colours; the last shows them all at once.
    func sendZones(_ serial: String, _ target: [LIFXLANMessage.HSBK], _ range: ClosedRange<Int>, ms: UInt32) async -> Bool {
        guard let d = devices[serial], let p = d.product else { return false }
        if p.extendedMultizone && !d.legacyZones {
            var i = range.lowerBound
            while i <= range.upperBound {
                let n = min(LIFXLANMessage.extendedZones, range.upperBound - i + 1)
                let last = i + n > range.upperBound
                let payload = LIFXLANMessage.extendedSetColorZones(index: UInt16(i), colors: target[i..<(i + n)], durationMs: ms,
                                                                    apply: last ? .apply : .noApply)
                let r = await request(.set(LIFXLANMessage.extendedSetColorZones, payload), serial: serial)
                if r?.first?.header.type == LIFXLANMessage.stateUnhandled {
                    devices[serial]?.legacyZones = true
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
            guard await request(.set(LIFXLANMessage.setColorZones, payload), serial: serial)?.first?.header.type == LIFXLANMessage.acknowledgement
            else { return false }
        }
        return true
    }

    /// Breathe and pulse as SetWaveformOptional (only the components the colour names change; without a
    /// colour, brightness dips to 10 %), move as the multizone firmware effect, morph, flame and sky as the
    /// matrix one, off as both firmware effects off (a waveform was ended by the colour sent before it).
    func effectSteps(_ e: LIFXEffect, product p: LIFXProduct, base: LIFXLANMessage.HSBK) -> [LIFXLANRound.Step] {
        let instance = UInt32.random(in: 1...UInt32.max)
        let periodMs = UInt32(min(max(e.period, 0.05), 86_400) * 1000)
        func ns(_ seconds: Double?) -> UInt64 { seconds.map { UInt64(min(max($0, 0), 86_400 * 365) * 1_000_000_000) } ?? 0 }
        func tile(_ type: UInt8, palette: [LIFXLANMessage.HSBK] = [], parameters: [UInt32] = [], duration: Double? = nil) -> LIFXLANRound.Step {
            .message(.set(LIFXLANMessage.tileSetEffect, LIFXLANMessage.tileSetEffect(
                instance: instance, type: type, speedMs: type == 0 ? 0 : periodMs, durationNs: ns(duration), parameters: parameters, palette: palette)), .nothing)
        }
        func multizone(_ type: UInt8, parameters: [UInt32] = [], duration: Double? = nil) -> LIFXLANRound.Step {
            .message(.set(LIFXLANMessage.setMultiZoneEffect, LIFXLANMessage.setMultiZoneEffect(
                instance: instance, type: type, speedMs: type == 0 ? 0 : periodMs, durationNs: ns(duration), parameters: parameters)), .nothing)
        }
        switch e.name {
        case "breathe", "pulse":
            let c = e.color ?? LIFXColorChange(brightness: 0.1)
            let flags = (hue: c.hue != nil, saturation: c.saturation != nil || c.kelvin != nil, brightness: c.brightness != nil, kelvin: c.kelvin != nil)
            // breathe peaks where `peak` says (skew 0…1 → −32768…32767); pulse is on half of each period.
            let skew = e.name == "breathe" ? Int16(clamping: Int((min(max(e.peak, 0), 1) * 65535).rounded()) - 32768) : 0
            let payload = LIFXLANMessage.waveformOptional(transient: !e.persist, color: base.applying(c), periodMs: periodMs,
                                                          cycles: Float(e.cycles ?? 1), skew: skew,
                                                          waveform: e.name == "breathe" ? .sine : .pulse, set: flags)
            return [.message(.set(LIFXLANMessage.setWaveformOptional, payload), .waveform(until: e.runs ?? 0))]
        case "move":
            return [multizone(1, parameters: [0, e.forward ? 1 : 0], duration: e.runs)]
        case "morph":
            return [tile(2, palette: (e.palette.isEmpty ? LIFXEffect.morphPalette : e.palette).map { base.applying($0) }, duration: e.duration)]
        case "flame":
            return [tile(3, duration: e.duration)]
        case "sky":
            return [tile(5, parameters: [UInt32(e.sky.type.rawValue), UInt32(e.sky.saturationMin), UInt32(e.sky.saturationMax)], duration: e.duration)]
        default:
            var steps: [LIFXLANRound.Step] = []
            if p.multizone { steps.append(multizone(0)) }
            if p.matrix { steps.append(tile(0)) }
            return steps
        }
    }

    /// The transport stops: every command still waiting is answered, and every request.
    func stopAll() {
        finishRequests()
        for (serial, d) in devices {
            for o in d.send.next + (d.send.round?.outcomes ?? []) { o.fail("the LIFX adapter stopped before the command was answered") }
            for w in d.send.turnWaiters { w.resume() }
            devices[serial]?.send = LIFXLANSendState()
        }
    }
}
