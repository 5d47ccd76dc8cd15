/// How Home Assistant should see a device's main entity.
public enum DeviceCategory: String, Sendable, Equatable {
    case light
    case `switch`
    case sensor
    /// A Home Assistant `scene`: activated by a bare word (`ACTIVATE`), no on/off state.
    case scene
    /// No main entity: only the capabilities' own entities (sensors, buttons) are announced.
    case generic
}

/// A device as an adapter declares it. The core turns it into topics, names and discovery.
public struct DeviceDescriptor: Sendable, Equatable {
    /// Stable upstream id (LIFX id, Nova MAC, Imp configured name). Never changes for a device.
    public var id: String
    /// The upstream's own label, slugged into the topic name unless the user configured a name.
    public var label: String
    /// A friendly name the user configured (`/` allowed for folders); wins over the label.
    public var configuredName: String?
    /// A topic sub-path inside the adapter (`group/` for LIFX groups), or empty.
    public var namespace: String
    public var model: String?
    public var manufacturer: String?
    public var category: DeviceCategory
    public var capabilities: [Capability]
    /// Bare (non-JSON) payloads `/set` accepts and the fields each stands for. Devices with a `state`
    /// field take ON, OFF and TOGGLE; a scene takes ACTIVATE.
    public var bareCommands: [String: [String: JSONValue]]
    /// The device's name in Home Assistant when neither the upstream's label nor the configured name
    /// made readable is right (a flash known only by its address: never show the address).
    public var displayName: String?
    /// Firmware and hardware versions, where the upstream says them.
    public var swVersion: String?
    public var hwVersion: String?
    /// The room Home Assistant should put the device in (a LIFX group), where the upstream knows it.
    public var suggestedArea: String?
    /// Set when this device is one part of another device of the same adapter (a LIFX Ceiling's uplight):
    /// it keeps its own topics, and Home Assistant shows it as one more entity of that device.
    public var partOf: DevicePart?
    /// Attributes Home Assistant shows on the device's main entity, whatever its state (a group's members'
    /// entity ids, as `entity_id`: Home Assistant's own groups say their members so).
    public var entityAttributes: [String: JSONValue]
    /// Listed before its upstream has said what it is (an Imp whose app is still being detected): its
    /// capabilities are not final, so a command for it waits (like one for a device not listed yet) until it
    /// is listed without this, or its adapter's start window closes (docs/topics.md "Devices").
    public var detecting = false

    public init(id: String, label: String, configuredName: String? = nil, namespace: String = "", model: String? = nil,
                manufacturer: String? = nil, category: DeviceCategory, capabilities: [Capability],
                bareCommands: [String: [String: JSONValue]]? = nil, displayName: String? = nil, swVersion: String? = nil,
                hwVersion: String? = nil, suggestedArea: String? = nil, partOf: DevicePart? = nil,
                entityAttributes: [String: JSONValue] = [:]) {
        self.id = id
        self.label = label
        self.configuredName = configuredName
        self.namespace = namespace
        self.model = model
        self.manufacturer = manufacturer
        self.category = category
        self.capabilities = capabilities
        self.bareCommands = bareCommands ?? (capabilities.contains { $0.name == "state" && $0.writable } ? CommandParser.stateWords : [:])
        self.displayName = displayName
        self.swVersion = swVersion
        self.hwVersion = hwVersion
        self.suggestedArea = suggestedArea
        self.partOf = partOf
        self.entityAttributes = entityAttributes
    }

    /// The device's name for people (Home Assistant's device name): `displayName`; else the upstream's
    /// own label; else the configured name made readable (`key_light` → "Key light"). Never an id.
    public var humanName: String {
        if let displayName, !displayName.isEmpty { return displayName }
        if !label.isEmpty, label != configuredName, label != id { return label }
        return Naming.readable(configuredName ?? label)
    }

    public func capability(_ name: String) -> Capability? { capabilities.first { $0.name == name } }
}

/// The device another device is a part of, as Home Assistant should show it (docs/design.md "Discovery"):
/// the part's discovery configs name that device (`identifiers`, `name`), and its main entity is called by
/// the part's own name instead of the device's.
public struct DevicePart: Sendable, Equatable {
    /// The id of the device this one is part of (same adapter).
    public var parentID: String
    /// That device's name for people (its `humanName`).
    public var parentName: String
    /// This part's entity name inside that device ("Uplight").
    public var name: String

    public init(parentID: String, parentName: String, name: String) {
        self.parentID = parentID
        self.parentName = parentName
        self.name = name
    }
}

/// A command after parsing and validation: every field is known, writable and in range.
public struct DeviceCommand: Sendable, Equatable {
    public var deviceID: String
    public var fields: [String: JSONValue]
    public init(deviceID: String, fields: [String: JSONValue]) {
        self.deviceID = deviceID
        self.fields = fields
    }
}

/// An error an adapter reports for a command or a request; the message reaches bridge/log as is.
public struct AdapterError: Error, Sendable, CustomStringConvertible {
    public var message: String
    /// What a request's answer carries beside the message (`bridge/response/<path>` `details`): a management
    /// request's problems by key, for a form to show each next to its key.
    public var details: JSONValue?
    public init(_ message: String, details: JSONValue? = nil) {
        self.message = message
        self.details = details
    }
    public var description: String { message }
}

public enum AdapterStatus: Sendable, Equatable, CustomStringConvertible {
    case starting
    case running
    case disabled(String)
    case error(String)

    /// The status without its reason: `starting`, `running`, `disabled` or `error` (one of `kinds`).
    public var kind: String {
        switch self {
        case .starting: return "starting"
        case .running: return "running"
        case .disabled: return "disabled"
        case .error: return "error"
        }
    }

    public static let kinds = ["starting", "running", "disabled", "error"]

    public var description: String {
        switch self {
        case .starting, .running: return kind
        case .disabled(let r), .error(let r): return "\(kind): \(r)"
        }
    }
}
