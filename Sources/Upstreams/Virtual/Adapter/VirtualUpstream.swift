import SwitchyardConfig
import SwitchyardCore

/// `virtual:` — in-memory lights, switches and sensors (one reading or four), for trying the bridge without hardware.
public struct VirtualUpstream: Upstream {
    public init() {}
    public var key: String { VirtualAdapter.id }
    public var summary: String { "In-memory lights, switches and sensors, for trying the bridge without hardware." }

    public struct Settings: Sendable, Equatable {
        public var devices: [VirtualAdapter.Device] = []
        public var sensorInterval = 30.0
        public init(devices: [VirtualAdapter.Device] = [], sensorInterval: Double = 30) {
            self.devices = devices
            self.sensorInterval = sensorInterval
        }
    }

    public func read(_ v: ConfigSection, bridge: BridgeConfigContext) -> Settings {
        var out = Settings()
        out.sensorInterval = v.double("sensor_interval", 30, min: 0.1, max: 86_400, doc: "Seconds between sensor readings.")
        var seen: Set<String> = []
        for d in v.list("devices", doc: "The in-memory devices.") {
            let name = d.deviceName(seen: &seen, missing: "every device needs a name")
            let type = d.choice("type", "light", ["light", "switch", "sensor", "multisensor"],
                                doc: "What the device is (a multisensor: temperature, humidity, pressure and battery).")
            let label = d.string("label", name, doc: "Shown in Home Assistant; default the name.")
            d.finish()
            out.devices.append(VirtualAdapter.Device(name: name, label: label, type: type))
        }
        v.finish()
        return out
    }

    public func configEntry(ofDevice id: String, in s: Settings) -> ConfigPath? {
        s.devices.contains { $0.name == id } ? ConfigPath([.key(key), .key("devices"), .item(key: "name", equals: id)]) : nil
    }

    public func makeAdapter(_ s: Settings) -> any Adapter { VirtualAdapter(devices: s.devices, sensorInterval: s.sensorInterval) }
}
