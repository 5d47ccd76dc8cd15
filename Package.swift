// swift-tools-version:6.2
import PackageDescription

let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "switchyard",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "switchyard", targets: ["switchyard"]),
        .executable(name: "switchyard-sim", targets: ["switchyard-sim"]),
        .executable(name: "switchyard-bench", targets: ["switchyard-bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swhitty/FlyingFox", from: "0.27.1"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    ],
    targets: [
        // C libraries: module maps and tiny shims (CCurl also loads libcurl on first use).
        .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        // libcurl is loaded on first use (dlopen), not linked: see Sources/CCurl/include/ccurl.h.
        .target(name: "CCurl"),
        .systemLibrary(name: "CBluetooth", pkgConfig: "bluez", providers: [.apt(["libbluetooth-dev"])]),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        .systemLibrary(name: "CMalloc"),

        // Device model, topic scheme, command parsing, the Adapter protocol and the bridge engine.
        .target(name: "SwitchyardCore", dependencies: [
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // MQTT transport over libmosquitto: own network thread, outbox, retained ledger, reconnect supervisor.
        .target(name: "SwitchyardMQTT", dependencies: [
            "SwitchyardCore", "CMosquitto",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // Async HTTP client over the libcurl multi interface, shared by the cloud adapters.
        .target(name: "SwitchyardHTTP", dependencies: [
            "CCurl", "SwitchyardCore",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // YAML -> typed config, ${ENV} and *_file secrets, validation with file:line:column, redaction.
        .target(name: "SwitchyardConfig", dependencies: [
            "SwitchyardCore", "ImpAdapter", "LivecodingAdapter", "HomeAssistantMirror", "LIFXAdapter", "NovaAdapter",
            "CYAML",
        ], swiftSettings: strict),
        // Loopback servers that speak each upstream's real protocol (tests and `switchyard demo`).
        .target(name: "SwitchyardSimulators", dependencies: [
            "SwitchyardCore", "NovaAdapter", "CBluetooth",
            .product(name: "FlyingFox", package: "FlyingFox"),
            .product(name: "FlyingSocks", package: "FlyingFox"),
        ], swiftSettings: strict),
        // LIFX lights, groups, locations and scenes over the LIFX cloud HTTP API.
        .target(name: "LIFXAdapter", dependencies: ["SwitchyardCore", "SwitchyardHTTP"], swiftSettings: strict),
        // Electric Imp devices through their agents' HTTPS endpoints, with per-app profiles.
        .target(name: "ImpAdapter", dependencies: ["SwitchyardCore", "SwitchyardHTTP"], swiftSettings: strict),
        // Livecoding.tv stream status: OAuth2 (authorisation command, rotating refresh tokens), paginated on-air list.
        .target(name: "LivecodingAdapter", dependencies: ["SwitchyardCore", "SwitchyardHTTP"], swiftSettings: strict),
        // Home Assistant mirror over the WebSocket API (states, events, allowed service calls).
        .target(name: "HomeAssistantMirror", dependencies: [
            "SwitchyardCore",
            .product(name: "WSClient", package: "swift-websocket"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // Nova BLE flashes: HCI LE scanning and ATT over L2CAP through libbluetooth, the V1 text protocol,
        // per-flash command links with acks, and the SDK's auto-connect rules.
        .target(name: "NovaAdapter", dependencies: ["SwitchyardCore", "CBluetooth"], swiftSettings: strict),
        // In-memory devices: for trying the bridge (`switchyard demo`) and for process-level tests.
        .target(name: "VirtualAdapter", dependencies: ["SwitchyardCore"], swiftSettings: strict),
        // Wiring: config -> transport + engine + adapters as Services under one ServiceGroup.
        .target(name: "SwitchyardRuntime", dependencies: [
            "CMalloc", "SwitchyardCore", "SwitchyardMQTT", "SwitchyardConfig", "SwitchyardHTTP", "VirtualAdapter", "LIFXAdapter", "ImpAdapter",
            "LivecodingAdapter", "HomeAssistantMirror", "NovaAdapter",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ], swiftSettings: strict),
        // What both executables share: log options, config loading, console output.
        .target(name: "SwitchyardCLI", dependencies: [
            "SwitchyardRuntime", "SwitchyardConfig",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // The daemon: run, check-config, auth. No simulators, no Foundation (FoundationEssentials only).
        .executableTarget(name: "switchyard", dependencies: [
            "SwitchyardCLI", "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore", "LivecodingAdapter",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // The simulators' executable: `demo` (the bridge against every simulated upstream) and `nova`.
        .executableTarget(name: "switchyard-sim", dependencies: [
            "SwitchyardCLI", "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore", "SwitchyardSimulators", "ImpAdapter",
            "LivecodingAdapter", "SwitchyardHTTP", "HomeAssistantMirror", "LIFXAdapter", "NovaAdapter",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ], swiftSettings: strict),

        // Benchmarks: figures as ratios to raw libmosquitto measured in the same run (`swift run -c release switchyard-bench`).
        .executableTarget(name: "switchyard-bench", dependencies: [
            "SwitchyardCore", "SwitchyardMQTT", "SwitchyardTestSupport", "CMosquitto", "LIFXAdapter", "SwitchyardSimulators",
            "HomeAssistantMirror",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),

        // Test helpers shared by every test target: broker launcher, free port, MQTT probe client.
        .target(name: "SwitchyardTestSupport", dependencies: [
            "SwitchyardCore", "SwitchyardMQTT", "CMosquitto",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Tests/SwitchyardTestSupport", swiftSettings: strict),
        .testTarget(name: "SwitchyardCoreTests", dependencies: ["SwitchyardCore"], swiftSettings: strict),
        .testTarget(name: "SwitchyardConfigTests", dependencies: ["SwitchyardConfig", "SwitchyardCore", "ImpAdapter", "LivecodingAdapter",
                                                          "HomeAssistantMirror", "LIFXAdapter", "NovaAdapter"],
                    swiftSettings: strict),
        .testTarget(name: "SwitchyardHTTPTests", dependencies: ["SwitchyardHTTP", "SwitchyardSimulators"], swiftSettings: strict),
        .testTarget(name: "ImpTests", dependencies: [
            "ImpAdapter", "SwitchyardConfig", "SwitchyardSimulators", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardMQTT",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        .testTarget(name: "NovaTests", dependencies: [
            "NovaAdapter", "SwitchyardSimulators", "SwitchyardTestSupport", "SwitchyardConfig", "SwitchyardCore", "CBluetooth",
        ], swiftSettings: strict),
        .testTarget(name: "HATests", dependencies: [
            "HomeAssistantMirror", "SwitchyardConfig", "SwitchyardSimulators", "SwitchyardTestSupport", "SwitchyardCore",
        ], swiftSettings: strict),
        .testTarget(name: "LivecodingTests", dependencies: [
            "LivecodingAdapter", "SwitchyardConfig", "SwitchyardSimulators", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardHTTP",
        ], swiftSettings: strict),
        .testTarget(name: "LIFXTests", dependencies: [
            "LIFXAdapter", "SwitchyardSimulators", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardMQTT",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        .testTarget(name: "SwitchyardIntegrationTests", dependencies: [
            "SwitchyardTestSupport", "SwitchyardRuntime", "SwitchyardCore", "SwitchyardMQTT", "SwitchyardConfig",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
    ]
)
