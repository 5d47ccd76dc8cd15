#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// `nova:` in the config (seconds unless the key ends in `_ms`; signal in percent).
public struct NovaAdapterSettings: Sendable, Equatable {
    public var adapter = "hci0"
    public var scanDuration = 0.9
    public var scanPeriod = 4.0
    public var scanIntervalMs = 10.0
    public var scanWindowMs = 10.0
    public var autoConnect = true
    public var maxFlashes = 1
    public var minSignal = 10
    /// Addresses, upper case `AA:BB:CC:DD:EE:FF`.
    public var whitelist: [String] = []
    public var blacklist: [String] = []
    public var defaultTimeoutMs = 10_000
    /// Address (upper case) → friendly name.
    public var names: [String: String] = [:]
    public var allowLowPWM = false
    public var connectTimeout = 10.0
    /// The 2 s the SDK waits for an ack.
    public var ackTimeout = 2.0
    /// An unconnected flash not heard for this many scan periods becomes unavailable.
    public var missedScansUnavailable = 3
    public init() {}
}

/// Nova flashes as devices (docs/upstreams/nova.md §2.6–2.8, docs/topics.md "Nova"): a scan window every period, flashes
/// created when first heard, signal from the window's mean RSSI, the SDK's auto-connect after each
/// scan, one radio operation at a time (a scan never overlaps a connect), per-flash command links
/// with acks, `lit` following the ack and the flash's own timeout, and connection RSSI every second.
///
/// `brightness` and `color_temp` are derived from the two LED channels: brightness is the stronger
/// channel in percent; the colour temperature is the channels' mix on the mired scale between the warm
/// LEDs (`warmKelvin`) and the cool ones (`coolKelvin`). Commands with brightness/color_temp set the
/// channels back so that the stronger one carries the brightness.
public actor NovaAdapter: Adapter {
    public static let id = "nova"
    public nonisolated var id: String { Self.id }
    public static let warmKelvin = 2700
    public static let coolKelvin = 6500

    public typealias Status = NovaFlashStatus

    struct Flash {
        var address: String
        var addressType: UInt8
        var model = "Nova"
        var status: Status = .available
        var rssi: Int?
        var missed = 0
        var heard = false
        var lit = false
        var settings: NovaSettings
        var att: ATTClient?
        var link: NovaLink?
        var handles: ATTClient.NovaHandles?
        var generation = 0
        /// Bumped whenever the lit timer is armed or disarmed: only the latest timer turns `lit` off.
        var litToken = 0
        /// `connect: false`: stays disconnected until `connect: true`.
        var userDisconnected = false
        /// `connect: true`: auto-connect never drops it.
        var pinned = false
        var failures = 0
        var retryAfter = MonotonicInstant.distantPast
        var connected: Bool { status.isConnected }
    }

    /// What the ATT links report from their reader threads, handled in order by one child of `run`.
    enum LinkEvent: Sendable {
        case notification(address: String, generation: Int, handle: UInt16, value: [UInt8])
        case closed(address: String, generation: Int, reason: String)
    }

    let settings: NovaAdapterSettings
    let radio: any NovaRadio
    let clock: any BridgeClock
    var context: AdapterContext?
    /// The children of the current run (timers, link closes); nil outside `run`.
    var tasks: ChildTasks?
    let linkEvents: AsyncStream<LinkEvent>
    let linkEventQueue: AsyncStream<LinkEvent>.Continuation
    var flashes: [String: Flash] = [:]
    var scanning = true
    /// Radio work one at a time, in the order asked (a scan never overlaps a connect).
    let radioGate = SerialGate()
    var lastProblem: String?
    var lastNote: String?
    var counters: [String: Int] = ["scans": 0, "reports": 0, "connects": 0, "connect_failures": 0, "acks": 0, "ack_timeouts": 0, "link_losses": 0]
    var lastAckMs: Double?

    public init(settings: NovaAdapterSettings, radio: any NovaRadio, clock: any BridgeClock = SystemClock()) {
        self.settings = settings
        self.radio = radio
        self.clock = clock
        (linkEvents, linkEventQueue) = AsyncStream.makeStream(of: LinkEvent.self)
    }

    // MARK: Running

    public func run(context: AdapterContext) async throws {
        self.context = context
        for (address, _) in settings.names {
            var f = Flash(address: address, addressType: 0, settings: defaultSettings)
            f.status = .unavailable
            flashes[address] = f
        }
        await publishDevices()
        await publish(flashes.keys.sorted())
        try await withChildTasks { tasks in
            self.tasks = tasks
            defer { self.tasks = nil }
            tasks.spawn { await self.rssiLoop() }
            tasks.spawn { for await e in self.linkEvents { await self.handle(e) } }
            while !Task.isCancelled {
                let started = clock.now()
                if scanning { await scanOnce() } else { await context.setStatus(.running) }
                let wait = max(0.05, settings.scanPeriod - (clock.now() - started).seconds)
                try? await clock.sleep(seconds: wait)
            }
            // Every link closed before the run ends: commands still waiting for an ack end now.
            let links = flashes.values.compactMap(\.link)
            for address in flashes.keys { disconnectNow(address) }
            for link in links { await link.close() }
        }
    }

    func handle(_ e: LinkEvent) async {
        switch e {
        case .notification(let address, let generation, let handle, let value): await notified(address, generation, handle, value)
        case .closed(let address, let generation, let reason): await linkClosed(address, generation, reason)
        }
    }

    var defaultSettings: NovaSettings {
        NovaSettings(warm: 255, cool: 255, timeoutMs: UInt16(clamping: settings.defaultTimeoutMs))
    }

    /// Radio work one at a time, in the order asked.
    func serial<T: Sendable>(_ op: @escaping @Sendable () async throws -> T) async throws -> T {
        try await radioGate.run(op)
    }

    func scanOnce() async {
        guard let context else { return }
        let s = settings
        let result: ScanResult
        do {
            let radio = self.radio
            result = try await serial { try await radio.scan(duration: s.scanDuration, intervalMs: s.scanIntervalMs, windowMs: s.scanWindowMs) }
        } catch {
            // The adapter is stopping and its scan was cancelled with it: not a radio failure to report.
            if error is CancellationError || Task.isCancelled { return }
            let f = error as? BluetoothFailure ?? BluetoothFailure(.other, "\(error)")
            let fatal = f.kind == .unsupported || f.kind == .permission
            // The core logs an adapter error and raises the event itself; "disabled" is said here, once.
            if lastProblem != f.message, fatal { await context.log(.error, "nova: disabled: \(f.message)") }
            lastProblem = f.message
            await context.setStatus(fatal ? .disabled(f.message) : .error(f.message))
            await context.recordRequest(error: f.message)
            return
        }
        if lastProblem != nil {
            lastProblem = nil
            await context.log(.info, "nova: Bluetooth adapter \(s.adapter) works again")
        }
        await context.setStatus(.running)
        await context.recordRequest(error: nil)
        if result.note != lastNote {
            lastNote = result.note
            if let note = result.note { await context.log(.warning, "nova: \(note)") }
        }
        counters["scans", default: 0] += 1
        counters["reports", default: 0] += result.reports.count
        var window = ScanWindow()
        for r in result.reports { window.add(r) }
        var added = false
        var changed: [String] = []
        for (address, seen) in window.seen where seen.isNova {
            if flashes[address] == nil {
                flashes[address] = Flash(address: address, addressType: seen.addressType, settings: defaultSettings)
                added = true
            }
            guard var f = flashes[address] else { continue }
            f.addressType = seen.addressType
            if seen.name == "Nova2" || seen.uuids16.contains(0xEFF0) { f.model = "Nova2" }
            if !f.heard { f.heard = true; added = true }
            f.missed = 0
            if !f.connected {
                f.rssi = seen.meanRSSI
                if f.status == .unavailable { f.status = .available }
            }
            flashes[address] = f
            changed.append(address)
        }
        for (address, var f) in flashes where window.seen[address]?.isNova != true && !f.connected {
            // Connected flashes stop advertising: only unconnected ones age out.
            f.missed += 1
            if f.missed >= s.missedScansUnavailable && f.status != .unavailable {
                f.status = .unavailable
                f.rssi = nil
                changed.append(address)
            }
            flashes[address] = f
        }
        if added { await publishDevices() }
        await publish(changed)
        await publishMetrics()
        if s.autoConnect { await autoConnect() }
    }

    func autoConnect() async {
        let rules = AutoConnectRules(maxFlashes: settings.maxFlashes, minSignal: settings.minSignal,
                                     whitelist: Set(settings.whitelist), blacklist: Set(settings.blacklist))
        let candidates = flashes.values.filter { !$0.userDisconnected }.map { f in
            AutoConnectCandidate(address: f.address, status: f.status, signal: f.rssi.flatMap { novaSignal(rssi: $0) })
        }
        let plan = planAutoConnect(candidates, rules: rules)
        for address in plan.disconnect where flashes[address]?.pinned != true {
            disconnectNow(address)
            await context?.log(.info, "nova: \(name(address)) disconnected by auto-connect (no longer qualifies)")
            await publish(address)
        }
        for address in plan.connect {
            guard let f = flashes[address], !f.connected, f.retryAfter <= clock.now() else { continue }
            try? await connect(address)
        }
    }

    // MARK: Connections

    func connect(_ address: String) async throws {
        guard var f = flashes[address] else { throw AdapterError("no such flash") }
        if f.connected { return }
        f.status = .connecting
        flashes[address] = f
        await publish(address)
        let radio = self.radio, timeout = settings.connectTimeout, type = f.addressType
        do {
            let fd = try await serial { try await radio.connect(address: address, addressType: type, timeout: timeout) }
            f.generation += 1
            let generation = f.generation
            let events = linkEventQueue
            let att = ATTClient(fd: fd, onNotification: { handle, value in
                events.yield(.notification(address: address, generation: generation, handle: handle, value: value))
            }, onClose: { reason in
                events.yield(.closed(address: address, generation: generation, reason: reason))
            })
            att.start()
            flashes[address]?.generation = generation
            flashes[address]?.att = att
            let handles: ATTClient.NovaHandles
            do {
                handles = try await att.discoverNova()
            } catch {
                att.close()
                throw error
            }
            guard let tasks else { throw AdapterError("the Nova adapter is stopping") }
            let link = NovaLink(ackTimeout: settings.ackTimeout, tasks: tasks, clock: clock,
                                write: { bytes in try await att.write(handles.request, bytes) },
                                onProtocolError: { reason in await self.protocolError(address, generation, reason) })
            guard var now = flashes[address], now.generation == generation, now.att != nil else {
                throw AdapterError("the link dropped during discovery")
            }
            now.link = link
            now.handles = handles
            now.status = .ready
            now.failures = 0
            // The advertised RSSI stands until the first reading on the link (within a second).
            flashes[address] = now
            counters["connects", default: 0] += 1
            await context?.log(.info, "nova: connected to \(name(address)) (\(address))")
            await publish(address)
        } catch {
            var now = flashes[address] ?? f
            now.att?.close()
            now.att = nil
            now.generation += 1
            now.status = now.heard && now.missed < settings.missedScansUnavailable ? .available : .unavailable
            now.failures += 1
            let backoff = min(60, settings.scanPeriod * pow(2, Double(now.failures - 1)))
            now.retryAfter = clock.now().adding(seconds: backoff)
            flashes[address] = now
            counters["connect_failures", default: 0] += 1
            await context?.log(.warning, "nova: could not connect to \(name(address)) (\(address)): \(error); next try in \(Int(backoff)) s")
            await publish(address)
            throw AdapterError("could not connect to \(name(address)): \(error)")
        }
    }

    /// Drops the link now; the close callback that follows is ignored (the generation moved on).
    func disconnectNow(_ address: String) {
        guard var f = flashes[address] else { return }
        let link = f.link
        f.att?.close()
        f.att = nil
        f.link = nil
        f.handles = nil
        f.generation += 1
        f.litToken += 1
        f.lit = false
        if f.connected { f.status = .available; f.missed = 0; f.rssi = nil }
        flashes[address] = f
        if let link { tasks?.spawn { await link.close() } }
    }

    func linkClosed(_ address: String, _ generation: Int, _ reason: String) async {
        guard let f = flashes[address], f.generation == generation, f.att != nil else { return }
        disconnectNow(address)
        counters["link_losses", default: 0] += 1
        await context?.log(.warning, "nova: link to \(name(address)) lost: \(reason)")
        await publish(address)
    }

    func protocolError(_ address: String, _ generation: Int, _ reason: String) async {
        guard let f = flashes[address], f.generation == generation else { return }
        disconnectNow(address)
        await context?.log(.warning, "nova: \(name(address)) sent a \(reason); disconnected (as the Nova SDK does)")
        await publish(address)
    }

    func notified(_ address: String, _ generation: Int, _ handle: UInt16, _ value: [UInt8]) async {
        guard let f = flashes[address], f.generation == generation, let link = f.link, handle == f.handles?.response else { return }
        await link.received(value)
    }

    func rssiLoop() async {
        while !Task.isCancelled {
            do { try await clock.sleep(seconds: 1) } catch { return }
            var changed: [String] = []
            for (address, f) in flashes where f.status == .ready || f.status == .busy {
                guard let att = f.att else { continue }
                let rssi = await radio.connectionRSSI(of: att)
                // 127 / unknown never disconnects (virtual controllers always say 127).
                guard var now = flashes[address], now.generation == f.generation, now.rssi != rssi else { continue }
                now.rssi = rssi
                flashes[address] = now
                changed.append(address)
            }
            await publish(changed)
        }
    }

    // MARK: Commands

    public func perform(_ command: DeviceCommand, context: AdapterContext) async throws {
        let address = command.deviceID
        guard flashes[address] != nil else { throw AdapterError("unknown flash \(address)") }
        let fields = command.fields
        if let c = fields["connect"]?.boolValue {
            flashes[address]?.userDisconnected = !c
            flashes[address]?.pinned = c
            if c {
                flashes[address]?.retryAfter = .distantPast
                try await connect(address)
            } else {
                disconnectNow(address)
                await publish(address)
            }
        }
        guard var f = flashes[address] else { return }
        var s = f.settings
        var touched = false
        if let p = fields["preset"]?.stringValue, let v = NovaSettings.presets[p] {
            s.warm = v.warm; s.cool = v.cool; touched = true
        }
        if fields["brightness"] != nil || fields["color_temp"] != nil {
            let current = Self.derived(s)
            let b = fields["brightness"]?.intValue ?? current.brightness ?? 100
            let k = fields["color_temp"]?.intValue ?? current.colorTemp ?? Self.mixKelvin
            (s.warm, s.cool) = Self.channels(brightness: b, kelvin: k)
            touched = true
        }
        if let w = fields["warm"]?.intValue { s.warm = UInt8(clamping: w); touched = true }
        if let c = fields["cool"]?.intValue { s.cool = UInt8(clamping: c); touched = true }
        s.timeoutMs = UInt16(clamping: fields["timeout_ms"]?.intValue ?? settings.defaultTimeoutMs)
        if fields["timeout_ms"] != nil { touched = true }
        let (safe, raised) = s.protected(allowLowPWM: settings.allowLowPWM)
        if raised {
            await context.log(.warning, "nova: PWM 1–64 raised to 64 (warm \(s.warm)→\(safe.warm), cool \(s.cool)→\(safe.cool)): the protocol forbids "
                + "holding low PWM; set nova.allow_low_pwm: true to send it as is", deviceID: address)
        }
        s = safe
        var state = fields["state"]?.stringValue
        if state == "TOGGLE" { state = f.lit ? "OFF" : "ON" }
        if state == nil && touched && !f.lit {
            // Settings for the next flash: stored and published, nothing sent.
            f.settings = s
            flashes[address] = f
            await publish(address)
            return
        }
        if state == nil && !touched { return }
        let nova: NovaCommand = state == "OFF" ? .off : .flash(warm: s.warm, cool: s.cool, timeoutMs: s.timeoutMs)
        guard let link = f.link, f.status == .ready || f.status == .busy else {
            throw AdapterError("\(name(address)) is not connected (status \(f.status.rawValue)); send {\"connect\": true} or enable nova.auto_connect")
        }
        if state != "OFF" { f.settings = s }
        f.litToken += 1
        f.lit = nova != .off
        f.status = .busy
        flashes[address] = f
        await publish(address)
        let outcome = await link.send(nova)
        guard var now = flashes[address], now.generation == f.generation else { throw AdapterError("the link to \(name(address)) was lost before the ack") }
        now.status = now.link == nil ? now.status : (await link.status == .busy ? .busy : .ready)
        switch outcome {
        case .acked(let seconds):
            counters["acks", default: 0] += 1
            lastAckMs = (seconds * 10_000).rounded() / 10
            if now.lit {
                now.litToken += 1
                let (ms, token, clock) = (Int(s.timeoutMs), now.litToken, self.clock)
                tasks?.spawn {
                    do { try await clock.sleep(for: .milliseconds(ms)) } catch { return }
                    await self.flashTimedOut(address, token)
                }
            }
            flashes[address] = now
            await publish(address)
            await publishMetrics()
        case .timedOut, .disconnected, .writeFailed:
            now.lit = false
            flashes[address] = now
            await publish(address)
            if outcome == .timedOut { counters["ack_timeouts", default: 0] += 1 }
            await publishMetrics()
            switch outcome {
            case .timedOut: throw AdapterError("no ack from \(name(address)) within \(settings.ackTimeout) s")
            case .writeFailed(let why): throw AdapterError("writing to \(name(address)) failed: \(why)")
            default: throw AdapterError("the link to \(name(address)) was lost before the ack")
            }
        }
    }

    func flashTimedOut(_ address: String, _ token: Int) async {
        guard var f = flashes[address], f.litToken == token, f.lit else { return }
        f.lit = false
        flashes[address] = f
        await publish(address)
    }

    public func refresh(deviceID: String, context: AdapterContext) async throws {
        await publish(deviceID)
    }

    public func request(path: String, payload: JSONValue, context: AdapterContext) async throws -> JSONValue? {
        guard path == "scan" else { return nil }
        if case .object(let o) = payload, let e = o["enabled"] {
            guard let on = e.boolValue else { throw AdapterError("nova/scan: enabled must be true or false") }
            scanning = on
            await context.log(.info, on ? "nova: scanning resumed" : "nova: scanning paused (connected flashes stay connected)")
        }
        return ["scanning": .bool(scanning), "flashes": .array(flashes.keys.sorted().compactMap { a in
            flashes[a].map { f in ["address": .string(a), "name": .string(name(a)), "status": .string(f.status.rawValue)] }
        })]
    }

    // MARK: Publishing

    func name(_ address: String) -> String { settings.names[address] ?? Self.label(address) }
    static func label(_ address: String) -> String { "nova_" + address.replacing(":", with: "").lowercased() }

    static let capabilities: [Capability] = [
        .state(),
        .brightness(),
        .colorTemp(minKelvin: warmKelvin, maxKelvin: coolKelvin),
        .colorMode(["color_temp"]),
        Capability("warm", .integer(min: 0, max: 255), writable: true, role: .hidden),
        Capability("cool", .integer(min: 0, max: 255), writable: true, role: .hidden),
        Capability("timeout_ms", .integer(min: 1, max: 65_535), unit: "ms", writable: true, role: .config, entityName: "Flash timeout"),
        Capability("preset", .enumeration(NovaSettings.presets.keys.sorted()), writable: true, readable: false, role: .hidden),
        Capability("connect", .bool, writable: true, readable: false, role: .hidden),
        Capability("lit", .bool, role: .hidden),
        Capability("status", .enumeration(["available", "unavailable", "connecting", "ready", "busy"]), role: .diagnostic),
        Capability("signal", .integer(min: 0, max: 100), unit: "%", role: .diagnostic),
        Capability("rssi", .integer(min: -127, max: 20), unit: "dBm", role: .diagnostic, deviceClass: "signal_strength", entityName: "RSSI"),
    ]

    func publishDevices() async {
        let devices = flashes.values.sorted { $0.address < $1.address }.map { f in
            // A flash has no name of its own: the configured one made readable, else its model (never its address).
            DeviceDescriptor(id: f.address, label: Self.label(f.address), configuredName: settings.names[f.address], model: f.model,
                             manufacturer: "Sneaky Squid", category: .light, capabilities: Self.capabilities,
                             displayName: settings.names[f.address].map(Naming.readable) ?? "\(f.model) flash")
        }
        var available: [String: Bool] = [:]
        for f in flashes.values { available[f.address] = f.status != .unavailable }
        await context?.setDevices(devices, authoritative: false, available: available)
    }

    func publish(_ address: String) async { await publish([address]) }

    /// The flashes' state and availability, handed over in one report.
    func publish(_ addresses: [String]) async {
        guard let context else { return }
        await context.report(addresses.compactMap(report))
    }

    func report(_ address: String) -> DeviceReport? {
        guard let f = flashes[address] else { return nil }
        let d = Self.derived(f.settings)
        return DeviceReport(address, fields: [
            "status": .string(f.status.rawValue),
            "signal": f.rssi.flatMap { novaSignal(rssi: $0) }.map { JSONValue($0) } ?? .null,
            "rssi": f.rssi.map { JSONValue($0) } ?? .null,
            "lit": .bool(f.lit),
            "state": f.lit ? "ON" : "OFF",
            "warm": JSONValue(Int(f.settings.warm)),
            "cool": JSONValue(Int(f.settings.cool)),
            "timeout_ms": JSONValue(Int(f.settings.timeoutMs)),
            "brightness": d.brightness.map { JSONValue($0) } ?? .null,
            "color_temp": d.colorTemp.map { JSONValue($0) } ?? .null,
            "color_mode": "color_temp",
        ], available: f.status != .unavailable)
    }

    func publishMetrics() async {
        var m: [String: JSONValue] = counters.mapValues { JSONValue($0) }
        m["scanning"] = .bool(scanning)
        m["connected"] = JSONValue(flashes.values.filter(\.connected).count)
        m["last_ack_ms"] = lastAckMs.map { .number($0) } ?? .null
        await context?.setMetrics(m)
    }

    // MARK: Warm/cool ⇄ brightness/colour temperature

    static var mixKelvin: Int { kelvin(coolShare: 0.5) }

    static func kelvin(coolShare t: Double) -> Int {
        let mWarm = 1e6 / Double(warmKelvin), mCool = 1e6 / Double(coolKelvin)
        return Int((1e6 / (mWarm + (mCool - mWarm) * t)).rounded())
    }

    /// Brightness: the stronger channel in percent; colour temperature: the mired-scale mix.
    public static func derived(_ s: NovaSettings) -> (brightness: Int?, colorTemp: Int?) {
        let w = Double(s.warm), c = Double(s.cool)
        guard w + c > 0 else { return (0, nil) }
        return (Int((max(w, c) / 255 * 100).rounded()), kelvin(coolShare: c / (w + c)))
    }

    /// The channels for a brightness (percent) and colour temperature (K, clamped to the LEDs' range).
    public static func channels(brightness: Int, kelvin: Int) -> (warm: UInt8, cool: UInt8) {
        let k = Double(min(max(kelvin, warmKelvin), coolKelvin))
        let mWarm = 1e6 / Double(warmKelvin), mCool = 1e6 / Double(coolKelvin)
        let t = (mWarm - 1e6 / k) / (mWarm - mCool)       // cool share
        let top = Double(min(max(brightness, 0), 100)) / 100 * 255
        let scale = top / max(t, 1 - t)
        return (UInt8((scale * (1 - t)).rounded()), UInt8((scale * t).rounded()))
    }
}
