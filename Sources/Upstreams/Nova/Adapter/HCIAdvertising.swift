/// 16-bit UUIDs, also when written in full on the Bluetooth base UUID
/// (0000xxxx-0000-1000-8000-00805f9b34fb, little-endian on the wire).
enum BluetoothUUID {
    static let base: [UInt8] = [0xFB, 0x34, 0x9B, 0x5F, 0x80, 0x00, 0x00, 0x80, 0x00, 0x10, 0x00, 0x00]

    static func short(_ bytes: ArraySlice<UInt8>) -> UInt16? {
        let b = Array(bytes)
        if b.count == 2 { return UInt16(b[0]) | UInt16(b[1]) << 8 }
        if b.count == 16, Array(b[0..<12]) == base, b[14] == 0, b[15] == 0 { return UInt16(b[12]) | UInt16(b[13]) << 8 }
        return nil
    }
}

/// LE advertising reports and scan commands at the byte level (docs/upstreams/nova.md §3.3): both the legacy
/// report (LE meta subevent 0x02) and the extended one (0x0D), because another scanner may have
/// switched the controller to extended scanning; every report of an event, bounds-checked.
public struct AdvertisingReport: Sendable, Equatable {
    public var address: String          // "AA:BB:CC:DD:EE:FF", most significant byte first
    /// 0 public, 1 random (the HCI meaning; L2CAP wants +1).
    public var addressType: UInt8
    public var eventType: UInt16
    /// dBm; nil when the controller reports 127 ("not available").
    public var rssi: Int?
    public var data: [UInt8]

    public var isScanResponse: Bool { eventType == 0x04 || eventType == 0x001B }
}

public struct AdvertisingData: Sendable, Equatable {
    public var flags: UInt8?
    public var name: String?
    public var uuids16: [UInt16] = []

    /// `len type value…` structures; stops at a zero length or an overflow.
    public static func parse(_ d: [UInt8]) -> AdvertisingData {
        var out = AdvertisingData()
        var i = 0
        while i < d.count {
            let len = Int(d[i])
            if len == 0 || i + 1 + len > d.count { break }
            let type = d[i + 1]
            let value = Array(d[(i + 2)..<(i + 1 + len)])
            switch type {
            case 0x01: out.flags = value.first
            case 0x02, 0x03:
                var j = 0
                while j + 1 < value.count { out.uuids16.append(UInt16(value[j]) | UInt16(value[j + 1]) << 8); j += 2 }
            case 0x06, 0x07:
                var j = 0
                while j + 16 <= value.count {
                    if let u = BluetoothUUID.short(value[j..<(j + 16)]) { out.uuids16.append(u) }
                    j += 16
                }
            case 0x08, 0x09:
                if type == 0x09 || out.name == nil { out.name = String(decoding: value, as: UTF8.self) }
            default: break
            }
            i += 1 + len
        }
        return out
    }

    /// A Nova V1 ("Nova", FFF0) or V2 ("Nova2", EFF0), by name or by service UUID.
    public var isNova: Bool { Self.isNova(name: name, uuids16: uuids16) }

    static func isNova(name: String?, uuids16: some Sequence<UInt16>) -> Bool {
        name == "Nova" || name == "Nova2" || uuids16.contains(0xFFF0) || uuids16.contains(0xEFF0)
    }
}

public enum HCIAdvertising {
    /// `AA:BB:…` from the little-endian bytes of a report or a `bdaddr_t`.
    package static func address(_ b: some BidirectionalCollection<UInt8>) -> String {
        b.reversed().map { NovaCodec.hex(Int($0), 2) }.joined(separator: ":")
    }

    /// Reports in one HCI event (`04 3E plen sub …`); empty for anything else or a malformed event.
    public static func reports(_ e: [UInt8]) -> [AdvertisingReport] {
        guard e.count >= 5, e[0] == 0x04, e[1] == 0x3E, Int(e[2]) == e.count - 3 else { return [] }
        let n = Int(e[4])
        var out: [AdvertisingReport] = []
        var i = 5
        switch e[3] {
        case 0x02:
            for _ in 0..<n {
                guard i + 9 <= e.count else { return out }
                let len = Int(e[i + 8])
                guard i + 9 + len + 1 <= e.count else { return out }
                let rssi = Int(Int8(bitPattern: e[i + 9 + len]))
                out.append(AdvertisingReport(address: address(e[(i + 2)..<(i + 8)]), addressType: e[i + 1], eventType: UInt16(e[i]),
                                             rssi: rssi == 127 ? nil : rssi, data: Array(e[(i + 9)..<(i + 9 + len)])))
                i += 10 + len
            }
        case 0x0D:
            for _ in 0..<n {
                guard i + 24 <= e.count else { return out }
                let len = Int(e[i + 23])
                guard i + 24 + len <= e.count else { return out }
                let rssi = Int(Int8(bitPattern: e[i + 13]))
                out.append(AdvertisingReport(address: address(e[(i + 3)..<(i + 9)]), addressType: e[i + 2],
                                             eventType: UInt16(e[i]) | UInt16(e[i + 1]) << 8, rssi: rssi == 127 ? nil : rssi,
                                             data: Array(e[(i + 24)..<(i + 24 + len)])))
                i += 24 + len
            }
        default:
            break
        }
        return out
    }

    // Commands, with the H:4 packet type byte (what a raw HCI socket writes).
    package static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }

    /// interval/window in 0.625 ms units.
    public static func setScanParameters(active: Bool, interval: UInt16, window: UInt16) -> [UInt8] {
        [0x01, 0x0B, 0x20, 0x07, active ? 1 : 0] + le16(interval) + le16(window) + [0x00, 0x00]
    }
    public static func setScanEnable(_ on: Bool) -> [UInt8] { [0x01, 0x0C, 0x20, 0x02, on ? 1 : 0, 0x00] }
    public static func setExtendedScanParameters(active: Bool, interval: UInt16, window: UInt16) -> [UInt8] {
        [0x01, 0x41, 0x20, 0x08, 0x00, 0x00, 0x01, active ? 1 : 0] + le16(interval) + le16(window)
    }
    public static func setExtendedScanEnable(_ on: Bool) -> [UInt8] { [0x01, 0x42, 0x20, 0x06, on ? 1 : 0, 0x00, 0x00, 0x00, 0x00, 0x00] }

    /// `04 0E 04 ncmd opcode(2) status` → (opcode, status); the status that hci_send_req would hide.
    public static func commandComplete(_ e: [UInt8]) -> (opcode: UInt16, status: UInt8)? {
        guard e.count >= 7, e[0] == 0x04, e[1] == 0x0E else { return nil }
        return (UInt16(e[4]) | UInt16(e[5]) << 8, e[6])
    }
}

/// One scan window's samples per address (docs/upstreams/nova.md §2.7): the mean RSSI of the samples that are
/// not 127, and what the advertisements said (ADV_IND and SCAN_RSP merged).
public struct ScanWindow: Sendable {
    public struct Seen: Sendable, Equatable {
        public var addressType: UInt8
        public var name: String?
        public var uuids16: Set<UInt16> = []
        public var rssiSamples: [Int] = []
        public var reports = 0
        public var meanRSSI: Int? { rssiSamples.isEmpty ? nil : Int((Double(rssiSamples.reduce(0, +)) / Double(rssiSamples.count)).rounded()) }
        public var isNova: Bool { AdvertisingData.isNova(name: name, uuids16: uuids16) }
    }

    public private(set) var seen: [String: Seen] = [:]
    public init() {}

    public mutating func add(_ r: AdvertisingReport) {
        let ad = AdvertisingData.parse(r.data)
        var s = seen[r.address] ?? Seen(addressType: r.addressType)
        if let n = ad.name { s.name = n }
        s.uuids16.formUnion(ad.uuids16)
        if let rssi = r.rssi { s.rssiSamples.append(rssi) }
        s.reports += 1
        seen[r.address] = s
    }
}
