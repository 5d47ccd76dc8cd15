import Foundation
import SwitchyardCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// LIFX devices on one loopback UDP port, speaking the LAN protocol (docs/upstreams/lifx-lan.md): for the demo
/// (`switchyard-sim demo`) and the benchmark's `lifx-lan` scenario. Its packets are read and written here
/// from the protocol's layouts, independently of the bridge's codec, so that one cannot hide a mistake of
/// the other. (The integration tests use a peer we did not write,
/// lifx-emulator.) In memory (`inMemory`, `answer`) it is the LAN of the unit tier, through the bridge's `LIFXLANTwin`. Every device answers discovery, Get,
/// version, firmware, label, group, location; colour lights the Sets; strips zones (extended and legacy)
/// and move; matrix lights morph/flame; a LIFX Ceiling (176, 177) its 8 × 8 zones (Get64, Set64; the uplight
/// is the last zone) and, from firmware 4.4, the sky effect; IR and HEV lights their messages. Anything
/// else: StateUnhandled.
public final class LIFXLANSimulator: Sendable {
    public struct Device: Sendable {
        public var serial: String
        public var label: String
        public var product: UInt32
        public var firmware: (major: UInt16, minor: UInt16) = (3, 70)
        public var group = "Living Room"
        public var location = "Home"
        /// The 16-byte ids as 32 hex digits, as the cloud lists them; nil: derived from the name.
        public var groupID: String?
        public var locationID: String?
        /// Hue, saturation, brightness (0–65535) and kelvin.
        public var color: [UInt16] = [0, 0, 65535, 3500]
        public var power: UInt16 = 65535
        /// A strip's zones (each as `color`); empty for other lights.
        public var zones: [[UInt16]] = []
        public var infrared: UInt16 = 0
        public var hevRemaining: UInt32 = 0
        public var effect: UInt8 = 0
        /// The matrix effect's first parameters (sky: its type, the clouds' minimum and maximum saturation).
        public var effectParameters: [UInt32] = []
        /// A Ceiling's 64 zones, row by row (each as `color`); empty for other lights.
        public var matrix: [[UInt16]] = []

        public init(serial: String, label: String, product: UInt32, zones: Int = 0) {
            self.serial = serial
            self.label = label
            self.product = product
            // A strip starts as a rainbow, as LIFX's own app shows a new one.
            self.zones = (0..<zones).map { [UInt16(65536 * $0 / max(zones, 1)), 65535, 65535, 3500] }
            if LIFXLANSimulator.ceilings.contains(product) {
                // A Ceiling: a warm downlight, a blue uplight, on firmware with the sky effect.
                matrix = (0..<64).map { $0 == 63 ? [43690, 65535, 32768, 3500] : [0, 0, 52428, 2700] }
                firmware = (4, 10)
            }
        }
    }

    /// The demo's LAN lights: a bulb, a LIFX Z strip of 16 zones (group Study), a Candle (matrix), a Night Vision
    /// bulb (infrared), a Clean (HEV) and a Ceiling (uplight and downlight).
    public static func demoDevices() -> [Device] {
        var strip = Device(serial: "d073d5100002", label: "Shelf Strip", product: 32, zones: 16)
        strip.group = "Study"
        // One home: the cloud's location (LIFXCloudSimulator.demoLights), under the same 16-byte id, as the
        // LAN and the cloud of one real account agree.
        return [
            Device(serial: "d073d5100001", label: "Desk", product: 27), strip,
            Device(serial: "d073d5100003", label: "Candle", product: 57),
            Device(serial: "d073d5100004", label: "Porch", product: 29),
            Device(serial: "d073d5100005", label: "Clean", product: 90),
            Device(serial: "d073d5100006", label: "Living Ceiling", product: 176),
        ].map { d in
            var d = d
            d.location = LIFXCloudSimulator.demoHome.name
            d.locationID = LIFXCloudSimulator.demoHome.id
            return d
        }
    }

    /// A datagram that reached the simulator: its type and when (uptime, ns), dropped or not.
    public struct Arrival: Sendable {
        public var type: UInt16
        public var nanos: UInt64
        public var dropped: Bool
    }

    public let port: Int
    let fd: Int32
    let state: Locked<[String: Device]>
    let lossRate: Locked<Double>
    let counts: Locked<[UInt16: Int]> = Locked([:])
    let stopping = Atomic<Bool>(false)
    let finished = Atomic<Bool>(false)
    public let arrivals: AsyncStream<Arrival>
    let arrivalsContinuation: AsyncStream<Arrival>.Continuation

    private init(fd: Int32, port: Int, devices: [Device]) {
        self.fd = fd
        self.port = port
        state = Locked(Dictionary(devices.map { ($0.serial.lowercased(), $0) }, uniquingKeysWith: { a, _ in a }))
        lossRate = Locked(0)
        (arrivals, arrivalsContinuation) = AsyncStream.makeStream(of: Arrival.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    /// Opens the socket on 127.0.0.1 (`port` 0: any free one) and starts answering.
    public static func start(devices: [Device], port: Int = 0) throws -> LIFXLANSimulator {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SimulatorError("LIFX LAN simulator: no socket") }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok else { close(fd); throw SimulatorError("LIFX LAN simulator: cannot bind 127.0.0.1:\(port)") }
        let sim = LIFXLANSimulator(fd: fd, port: Int(UInt16(bigEndian: addr.sin_port)), devices: devices)
        let t = Thread { sim.serve() }
        t.name = "lifx-lan-sim"
        t.start()
        return sim
    }

    /// The same devices with no socket: `answer` takes each datagram in memory (through the bridge's
    /// `LIFXLANTwin` in the unit tier). `port` is the one its devices name in StateService.
    public static func inMemory(devices: [Device], port: Int = 56700) -> LIFXLANSimulator {
        let sim = LIFXLANSimulator(fd: -1, port: port, devices: devices)
        sim.finished.store(true, ordering: .relaxed)
        return sim
    }

    /// What the devices answer to one datagram (none to what is not a LIFX packet, or is lost under
    /// `setLoss`), counted and recorded in `arrivals` as one read from the socket is.
    public func answer(_ datagram: [UInt8]) -> [[UInt8]] {
        let now = DispatchTime.now().uptimeNanoseconds
        let d = datagram
        guard d.count >= 36, Int(le16(d, 0)) == d.count, le16(d, 2) & 0x0FFF == 1024 else { return [] }
        let type = le16(d, 32)
        let dropped = type != 2 && Double.random(in: 0..<1) < lossRate.withLock { $0 }
        arrivalsContinuation.yield(Arrival(type: type, nanos: now, dropped: dropped))
        counts.withLock { $0[type, default: 0] += 1 }
        return dropped ? [] : handle(d)
    }

    public func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        guard fd >= 0 else {
            arrivalsContinuation.finish()
            return
        }
        // The thread polls every 50 ms; give it the time to see `stopping` before the descriptor goes.
        for _ in 0..<40 where !finished.load(ordering: .relaxed) { usleep(10_000) }
        close(fd)
        arrivalsContinuation.finish()
    }

    /// Requests (not discovery) lost on arrival, as a lossy Wi-Fi loses them: no answer, no acknowledgement.
    public func setLoss(_ rate: Double) { lossRate.withLock { $0 = rate } }

    public func device(_ serial: String) -> Device? { state.withLock { $0[serial.lowercased()] } }

    /// Datagrams of a type that reached the simulator so far (lost ones included).
    public func received(_ type: UInt16) -> Int { counts.withLock { $0[type, default: 0] } }

    // MARK: serving

    func serve() {
        defer { finished.store(true, ordering: .relaxed) }
        var buf = [UInt8](repeating: 0, count: 1500)
        while !stopping.load(ordering: .relaxed) {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 50) <= 0 { continue }
            var from = sockaddr_in()
            var len = socklen_t(MemoryLayout<sockaddr_in>.size)
            let n = buf.withUnsafeMutableBytes { b in
                withUnsafeMutablePointer(to: &from) { f in f.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, b.baseAddress, b.count, 0, $0, &len) } }
            }
            guard n > 0 else { continue }
            for reply in answer(Array(buf[0..<n])) {
                _ = reply.withUnsafeBytes { b in
                    withUnsafePointer(to: &from) { f in f.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, b.baseAddress, b.count, 0, $0, len) } }
                }
            }
        }
    }

    /// The replies to one request: per addressed device (all of them for a tagged one).
    func handle(_ d: [UInt8]) -> [[UInt8]] {
        let tagged = le16(d, 2) & 0x2000 != 0
        let source = le32(d, 4)
        let target = Array(d[8..<14])
        let ack = d[22] & 2 != 0, res = d[22] & 1 != 0
        let seq = d[23]
        let type = le16(d, 32)
        let payload = Array(d[36...])
        return state.withLock { devices -> [[UInt8]] in
            var out: [[UInt8]] = []
            for key in devices.keys.sorted() {
                let serialBytes = hexBytes(key)
                guard tagged || serialBytes == target else { continue }
                func reply(_ t: UInt16, _ p: [UInt8]) -> [UInt8] { header(size: 36 + p.count, source: source, target: serialBytes, seq: seq, type: t) + p }
                var dev = devices[key]!
                let before = stateBytes(dev)
                var answer: [[UInt8]] = []
                if ack && Self.sets.contains(type) { answer.append(reply(45, [])) }
                switch type {
                case 2: answer.append(reply(3, [1] + u32(UInt32(port))))
                case 14: answer.append(reply(15, [UInt8](repeating: 0, count: 16) + u16(dev.firmware.minor) + u16(dev.firmware.major)))
                case 20, 116: answer.append(reply(type == 20 ? 22 : 118, u16(dev.power)))
                case 23: answer.append(reply(25, label(dev.label)))
                case 32: answer.append(reply(33, u32(1) + u32(dev.product) + u32(0)))
                case 48: answer.append(reply(50, id(dev.location, dev.locationID) + label(dev.location) + u64(1)))
                case 51: answer.append(reply(53, id(dev.group, dev.groupID) + label(dev.group) + u64(1)))
                case 101: answer.append(reply(107, before))
                case 102 where payload.count == 13:
                    dev.color = (0..<4).map { le16(payload, 1 + 2 * $0) }
                    if !dev.zones.isEmpty { dev.zones = dev.zones.map { _ in dev.color } }
                    if !dev.matrix.isEmpty { dev.matrix = dev.matrix.map { _ in dev.color } }
                    if res { answer.append(reply(107, before)) }
                case 117 where payload.count == 6, 21 where payload.count >= 2:
                    dev.power = le16(payload, 0) > 0 ? 65535 : 0
                case 119 where payload.count == 25: break   // a waveform: acknowledged, not played
                case 120: answer.append(reply(121, u16(dev.infrared)))
                case 122 where payload.count == 2: dev.infrared = le16(payload, 0)
                case 142: answer.append(reply(144, u32(7200) + u32(dev.hevRemaining) + [1]))
                case 143 where payload.count == 5: dev.hevRemaining = payload[0] != 0 ? max(le32(payload, 1), 1) : 0
                case 148: answer.append(reply(149, [0]))
                case 501 where payload.count == 15 && !dev.zones.isEmpty:
                    for i in Int(payload[0])...Int(max(payload[0], payload[1])) where i < dev.zones.count {
                        dev.zones[i] = (0..<4).map { le16(payload, 2 + 2 * $0) }
                    }
                case 502 where !dev.zones.isEmpty:
                    for start in stride(from: 0, to: dev.zones.count, by: 8) {
                        let colors = (start..<(start + 8)).flatMap { $0 < dev.zones.count ? dev.zones[$0].flatMap(u16) : [UInt8](repeating: 0, count: 8) }
                        answer.append(reply(506, [UInt8(dev.zones.count), UInt8(start)] + colors))
                    }
                case 507 where !dev.zones.isEmpty: answer.append(reply(509, u32(1) + [dev.effect] + [UInt8](repeating: 0, count: 54)))
                case 508 where payload.count == 59 && !dev.zones.isEmpty: dev.effect = payload[4]
                case 510 where payload.count == 664 && !dev.zones.isEmpty:
                    let index = Int(le16(payload, 5)), n = Int(payload[7])
                    for i in 0..<min(n, 82) where index + i < dev.zones.count {
                        dev.zones[index + i] = (0..<4).map { le16(payload, 8 + 8 * i + 2 * $0) }
                    }
                case 511 where !dev.zones.isEmpty:
                    for start in stride(from: 0, to: dev.zones.count, by: 82) {
                        let n = min(82, dev.zones.count - start)
                        let colors = (0..<82).flatMap { $0 < n ? dev.zones[start + $0].flatMap(u16) : [UInt8](repeating: 0, count: 8) }
                        answer.append(reply(512, u16(UInt16(dev.zones.count)) + u16(UInt16(start)) + [UInt8(n)] + colors))
                    }
                case 707 where payload.count == 6 && !dev.matrix.isEmpty:
                    // Get64: the rectangle (x, y, width) of frame buffer 0, row by row, 64 colours.
                    let (x, y, w) = (Int(payload[3]), Int(payload[4]), max(Int(payload[5]), 1))
                    var colors: [UInt8] = []
                    for i in 0..<64 {
                        let (cx, cy) = (x + i % w, y + i / w)
                        colors += cx < 8 && cy < 8 ? dev.matrix[cy * 8 + cx].flatMap(u16) : [UInt8](repeating: 0, count: 8)
                    }
                    answer.append(reply(711, [payload[0], 0, payload[3], payload[4], payload[5]] + colors))
                case 715 where payload.count == 522 && !dev.matrix.isEmpty:
                    // Set64: the colours fill the rectangle row by row; what falls outside the 8 × 8 tile is dropped.
                    let (x, y, w) = (Int(payload[3]), Int(payload[4]), max(Int(payload[5]), 1))
                    for i in 0..<64 {
                        let (cx, cy) = (x + i % w, y + i / w)
                        if cx < 8 && cy < 8 { dev.matrix[cy * 8 + cx] = (0..<4).map { le16(payload, 10 + 8 * i + 2 * $0) } }
                    }
                case 718 where Self.matrixProducts.contains(dev.product):
                    answer.append(reply(720, [0] + u32(1) + [dev.effect] + [UInt8](repeating: 0, count: 181)))
                case 719 where payload.count == 188 && Self.matrixProducts.contains(dev.product):
                    // Sky (5) only on a Ceiling from firmware 4.4; anything else is acknowledged and ignored.
                    let sky = payload[6] == 5
                    if !sky || (Self.ceilings.contains(dev.product) && (dev.firmware.major, dev.firmware.minor) >= (4, 4)) {
                        dev.effect = payload[6]
                        dev.effectParameters = (0..<3).map { le32(payload, 27 + 4 * $0) }
                    }
                default:
                    if !Self.sets.contains(type) || answer.isEmpty { answer = [reply(223, u16(type))] }
                }
                devices[key] = dev
                out += answer
            }
            return out
        }
    }

    static let sets: Set<UInt16> = [21, 102, 117, 119, 122, 143, 501, 508, 510, 715, 719]
    static let ceilings: Set<UInt32> = [176, 177]
    static let matrixProducts: Set<UInt32> = [55, 57, 68, 137, 138, 171, 173, 174, 176, 177, 185, 186, 215, 216, 217, 218]

    func stateBytes(_ d: Device) -> [UInt8] { d.color.flatMap(u16) + [0, 0] + u16(d.power) + label(d.label) + [UInt8](repeating: 0, count: 8) }

    func header(size: Int, source: UInt32, target: [UInt8], seq: UInt8, type: UInt16) -> [UInt8] {
        u16(UInt16(size)) + u16(0x1400) + u32(source) + target + [0, 0] + [UInt8](repeating: 0, count: 6) + [0, seq] + u64(0) + u16(type) + [0, 0]
    }

    func label(_ s: String) -> [UInt8] { Array(Array(s.utf8).prefix(32)) + [UInt8](repeating: 0, count: max(0, 32 - s.utf8.count)) }
    /// A group or location id: the 16 bytes `hex` gives, else derived from its name, so devices of one group share it.
    func id(_ s: String, _ hex: String?) -> [UInt8] {
        if let hex, hex.utf8.count == 32 {
            return stride(from: 0, to: 32, by: 2).map { UInt8(hex.dropFirst($0).prefix(2), radix: 16) ?? 0 }
        }
        return (0..<16).map { i in s.utf8.enumerated().reduce(UInt8(i)) { $0 &* 31 &+ $1.element &+ UInt8($1.offset & 0xFF) } }
    }
    func hexBytes(_ s: String) -> [UInt8] { stride(from: 0, to: 12, by: 2).map { UInt8(s.dropFirst($0).prefix(2), radix: 16) ?? 0 } }
    func u16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
    func u32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
    func u64(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
    func le16(_ d: [UInt8], _ i: Int) -> UInt16 { UInt16(d[i]) | UInt16(d[i + 1]) << 8 }
    func le32(_ d: [UInt8], _ i: Int) -> UInt32 { (0..<4).reduce(0) { $0 | UInt32(d[i + $1]) << (8 * $1) } }
}

struct SimulatorError: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}
