/// What the bridge knows of LIFX products: the public products list (github.com/LIFX/products,
/// `products.json`, vendor 1; docs/upstreams/lifx-lan.md "Capabilities"), transcribed with its firmware
/// upgrades, which `at(firmware:)` applies: a LIFX Z (32) gains extended multizone at 2.77, many
/// bulbs reach 1500 K at 2.80, a Mini White to Warm (50) reaches 9000 K at 3.70.
public struct LIFXProduct: Sendable, Equatable {
    public struct Features: OptionSet, Sendable, Hashable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        public static let color = Features(rawValue: 1)
        public static let infrared = Features(rawValue: 2)
        public static let multizone = Features(rawValue: 4)
        public static let extendedMultizone = Features(rawValue: 8)
        public static let matrix = Features(rawValue: 16)
        public static let chain = Features(rawValue: 32)
        public static let hev = Features(rawValue: 64)
        /// A LIFX Switch: relays and buttons, no light.
        public static let relays = Features(rawValue: 128)
        /// The matrix firmware effect SKY (sunrise, sunset, clouds): LIFX Ceiling from firmware 4.4.
        public static let sky = Features(rawValue: 256)
    }

    /// A change the list makes from a firmware version on.
    public struct Upgrade: Sendable, Equatable {
        public var major: Int
        public var minor: Int
        public var adds: Features = []
        public var kelvin: ClosedRange<Int>?
    }

    public var id: UInt32
    public var name: String
    public var features: Features
    public var kelvin: ClosedRange<Int>
    public var upgrades: [Upgrade] = []
    /// Not in the bundled list: taken as a colour light with the common range.
    public var known = true

    public var hasColor: Bool { features.contains(.color) }
    public var minKelvin: Int { kelvin.lowerBound }
    public var maxKelvin: Int { kelvin.upperBound }
    public var multizone: Bool { features.contains(.multizone) }
    public var extendedMultizone: Bool { features.contains(.extendedMultizone) }
    public var matrix: Bool { features.contains(.matrix) }
    public var infrared: Bool { features.contains(.infrared) }
    public var hev: Bool { features.contains(.hev) }
    public var isLight: Bool { !features.contains(.relays) }
    public var sky: Bool { features.contains(.sky) }
    /// A LIFX Ceiling (8 × 8 matrix: downlight zones 0–62, uplight zone 63).
    public var ceiling: Bool { Self.ceilings.contains(id) }
    public static let ceilings: Set<UInt32> = [176, 177]

    /// The product as a device running this firmware has it: every upgrade at or below the version applied.
    public func at(firmware: (major: Int, minor: Int)?) -> LIFXProduct {
        guard let fw = firmware else { return self }
        var p = self
        for u in upgrades where (fw.major, fw.minor) >= (u.major, u.minor) {
            p.features.formUnion(u.adds)
            if let k = u.kelvin { p.kelvin = k }
        }
        return p
    }

    public static func lookup(_ id: UInt32) -> LIFXProduct {
        table[id] ?? LIFXProduct(id: id, name: "LIFX product \(id)", features: .color, kelvin: 2500...9000, known: false)
    }

    // MARK: the list

    static let wide = 1500...9000
    /// The Ceiling runs the sky effect from firmware 4.4 (as lifx-emulator 4.11.0 has it: docs/upstreams/lifx-lan.md).
    static let skyFrom44: [Upgrade] = [Upgrade(major: 4, minor: 4, adds: .sky)]
    /// Firmware 2.80 took these bulbs to 1500 K.
    static let to1500: [Upgrade] = [Upgrade(major: 2, minor: 80, kelvin: 1500...9000)]
    /// A LIFX Z or Beam of the first hardware: extended multizone from 2.77, 1500 K from 2.80.
    static let zUpgrades: [Upgrade] = [Upgrade(major: 2, minor: 77, adds: .extendedMultizone), Upgrade(major: 2, minor: 80, kelvin: 1500...9000)]

    static func entry(_ id: UInt32, _ name: String, _ f: Features, _ k: ClosedRange<Int>, _ up: [Upgrade] = []) -> (UInt32, LIFXProduct) {
        (id, LIFXProduct(id: id, name: name, features: f, kelvin: k, upgrades: up))
    }

    public static let table: [UInt32: LIFXProduct] = {
        let c: Features = .color, w: Features = [], ir: Features = [.color, .infrared]
        let mz: Features = [.color, .multizone], emz: Features = [.color, .multizone, .extendedMultizone]
        let mx: Features = [.color, .matrix], sw: Features = [.relays]
        let old = 2500...9000
        let entries: [(UInt32, LIFXProduct)] = [
            entry(1, "LIFX Original 1000", c, old), entry(3, "LIFX Color 650", c, old),
            entry(10, "LIFX White 800 (Low Voltage)", w, 2700...6500), entry(11, "LIFX White 800 (High Voltage)", w, 2700...6500),
            entry(15, "LIFX Color 1000", c, old),
            entry(18, "LIFX White 900 BR30 (Low Voltage)", w, old), entry(19, "LIFX White 900 BR30 (High Voltage)", w, old),
            entry(20, "LIFX Color 1000 BR30", c, old), entry(22, "LIFX Color 1000", c, old),
            entry(27, "LIFX A19", c, old, to1500), entry(28, "LIFX BR30", c, old, to1500),
            entry(29, "LIFX A19 Night Vision", ir, old, to1500), entry(30, "LIFX BR30 Night Vision", ir, old, to1500),
            entry(31, "LIFX Z", mz, old), entry(32, "LIFX Z", mz, old, zUpgrades),
            entry(36, "LIFX Downlight", c, old, to1500), entry(37, "LIFX Downlight", c, old, to1500),
            entry(38, "LIFX Beam", mz, old, zUpgrades),
            entry(39, "LIFX Downlight White to Warm", w, old, to1500), entry(40, "LIFX Downlight", c, old, to1500),
            entry(43, "LIFX A19", c, old, to1500), entry(44, "LIFX BR30", c, old, to1500),
            entry(45, "LIFX A19 Night Vision", ir, old, to1500), entry(46, "LIFX BR30 Night Vision", ir, old, to1500),
            entry(49, "LIFX Mini Color", c, wide),
            entry(50, "LIFX Mini White to Warm", w, 1500...6500, [Upgrade(major: 3, minor: 70, kelvin: 1500...9000)]),
            entry(51, "LIFX Mini White", w, 2700...2700), entry(52, "LIFX GU10", c, wide), entry(53, "LIFX GU10", c, wide),
            entry(55, "LIFX Tile", [.color, .matrix, .chain], old), entry(57, "LIFX Candle", mx, wide),
            entry(59, "LIFX Mini Color", c, wide),
            entry(60, "LIFX Mini White to Warm", w, 1500...6500, [Upgrade(major: 3, minor: 70, kelvin: 1500...9000)]),
            entry(61, "LIFX Mini White", w, 2700...2700), entry(62, "LIFX A19", c, wide), entry(63, "LIFX BR30", c, wide),
            entry(64, "LIFX A19 Night Vision", ir, wide), entry(65, "LIFX BR30 Night Vision", ir, wide),
            entry(66, "LIFX Mini White", w, 2700...2700), entry(68, "LIFX Candle", mx, wide),
            entry(70, "LIFX Switch", sw, 0...0), entry(71, "LIFX Switch", sw, 0...0),
            entry(81, "LIFX Candle White to Warm", w, 2200...6500), entry(82, "LIFX Filament Clear", w, 2100...2100),
            entry(85, "LIFX Filament Amber", w, 2000...2000), entry(87, "LIFX Mini White", w, 2700...2700),
            entry(88, "LIFX Mini White", w, 2700...2700), entry(89, "LIFX Switch", sw, 0...0),
            entry(90, "LIFX Clean", [.color, .hev], wide), entry(91, "LIFX Color", c, wide), entry(92, "LIFX Color", c, wide),
            entry(93, "LIFX A19 US", c, wide), entry(94, "LIFX BR30", c, wide), entry(96, "LIFX Candle White to Warm", w, 2200...6500),
            entry(97, "LIFX A19", c, wide), entry(98, "LIFX BR30", c, wide), entry(99, "LIFX Clean", [.color, .hev], wide),
            entry(100, "LIFX Filament Clear", w, 2100...2100), entry(101, "LIFX Filament Amber", w, 2000...2000),
            entry(109, "LIFX A19 Night Vision", ir, wide), entry(110, "LIFX BR30 Night Vision", ir, wide),
            entry(111, "LIFX A19 Night Vision", ir, wide), entry(112, "LIFX BR30 Night Vision Intl", ir, wide),
            entry(113, "LIFX Mini WW US", w, wide), entry(114, "LIFX Mini WW Intl", w, wide),
            entry(115, "LIFX Switch", sw, 0...0), entry(116, "LIFX Switch", sw, 0...0),
            entry(117, "LIFX Z US", emz, wide), entry(118, "LIFX Z Intl", emz, wide),
            entry(119, "LIFX Beam US", emz, wide), entry(120, "LIFX Beam Intl", emz, wide),
            entry(121, "LIFX Downlight Intl", c, wide), entry(122, "LIFX Downlight US", c, wide),
            entry(123, "LIFX Color US", c, wide), entry(124, "LIFX Colour Intl", c, wide),
            entry(125, "LIFX White to Warm US", w, wide), entry(126, "LIFX White to Warm Intl", w, wide),
            entry(127, "LIFX White US", w, 2700...2700), entry(128, "LIFX White Intl", w, 2700...2700),
            entry(129, "LIFX Color US", c, wide), entry(130, "LIFX Colour Intl", c, wide),
            entry(131, "LIFX White To Warm US", w, wide), entry(132, "LIFX White To Warm Intl", w, wide),
            entry(133, "LIFX White US", w, 2700...2700), entry(134, "LIFX White Intl", w, 2700...2700),
            entry(135, "LIFX GU10 Color US", c, wide), entry(136, "LIFX GU10 Colour Intl", c, wide),
            entry(137, "LIFX Candle Color US", mx, wide), entry(138, "LIFX Candle Colour Intl", mx, wide),
            entry(141, "LIFX Neon US", emz, wide), entry(142, "LIFX Neon Intl", emz, wide),
            entry(143, "LIFX String US", emz, wide), entry(144, "LIFX String Intl", emz, wide),
            entry(161, "LIFX Outdoor Neon US", emz, wide), entry(162, "LIFX Outdoor Neon Intl", emz, wide),
            entry(163, "LIFX A19 US", c, wide), entry(164, "LIFX BR30 US", c, wide),
            entry(165, "LIFX A19 Intl", c, wide), entry(166, "LIFX BR30 Intl", c, wide),
            entry(167, "LIFX Downlight", c, wide), entry(168, "LIFX Downlight", c, wide),
            entry(169, "LIFX A21 1600lm US", c, wide), entry(170, "LIFX A21 1600lm Intl", c, wide),
            entry(171, "LIFX Round Spot US", mx, wide), entry(173, "LIFX Round Path US", mx, wide),
            entry(174, "LIFX Square Path US", mx, wide), entry(175, "LIFX PAR38 US", c, wide),
            entry(176, "LIFX Ceiling US", mx, wide, skyFrom44), entry(177, "LIFX Ceiling Intl", mx, wide, skyFrom44),
            entry(181, "LIFX Color US", c, wide), entry(182, "LIFX Colour Intl", c, wide),
            entry(185, "LIFX Candle Color US", mx, wide), entry(186, "LIFX Candle Colour Intl", mx, wide),
            entry(187, "LIFX Candle Color US", c, wide), entry(188, "LIFX Candle Colour Intl", c, wide),
            entry(203, "LIFX String US", emz, wide), entry(204, "LIFX String Intl", emz, wide),
            entry(205, "LIFX Indoor Neon US", emz, wide), entry(206, "LIFX Indoor Neon Intl", emz, wide),
            entry(215, "LIFX Candle Color US", mx, wide), entry(216, "LIFX Candle Colour Intl", mx, wide),
            entry(217, "LIFX Tube US", mx, wide), entry(218, "LIFX Tube Intl", mx, wide),
        ]
        return Dictionary(entries, uniquingKeysWith: { a, _ in a })
    }()
}

extension LIFXProduct {
    /// What a light of this product can do, in the model's terms.
    var caps: LIFXCaps {
        var c = LIFXCaps()
        c.hasColor = hasColor
        c.hasVariableColorTemp = minKelvin < maxKelvin
        c.minKelvin = minKelvin
        c.maxKelvin = maxKelvin
        c.hasIR = infrared
        c.hasMultizone = multizone
        c.hasMatrix = matrix
        c.hasHEV = hev
        c.hasSky = sky
        c.isCeiling = ceiling
        return c
    }
}
