// swift-tools-version:6.2
import PackageDescription

let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

/// One upstream = one folder, `Sources/Upstreams/<Folder>`: its adapter target in `Adapter/` (which also
/// registers it: config section, secrets, restart rule, the adapter itself) and, when it has one, the
/// loopback simulator that plays it in tests and the demo in `Simulators/`. Outside the folder only the
/// registration list (SwitchyardCLI), the demo and its executable, the fuzz targets, the soak run and the
/// tests depend on the adapter (docs/architecture.md "Adding an upstream"; ArchitecturePageTests checks it).
func upstream(_ folder: String, adapter: String, simulators: String? = nil,
              dependencies: [Target.Dependency] = [], simulatorDependencies: [Target.Dependency] = []) -> [Target] {
    var targets: [Target] = [
        .target(name: adapter, dependencies: ["SwitchyardCore", "SwitchyardConfig"] + dependencies,
                path: "Sources/Upstreams/\(folder)/Adapter", swiftSettings: strict),
    ]
    if let simulators {
        targets.append(.target(name: simulators, dependencies: ["SwitchyardCore", "SimulatorSupport"] + simulatorDependencies,
                               path: "Sources/Upstreams/\(folder)/Simulators", swiftSettings: strict))
    }
    return targets
}

let package = Package(
    name: "switchyard",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "switchyard", targets: ["switchyard"]),
        .executable(name: "switchyard-sim", targets: ["switchyard-sim"]),
        .executable(name: "switchyard-bench", targets: ["switchyard-bench"]),
        .executable(name: "switchyard-fuzz", targets: ["switchyard-fuzz"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", exact: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", exact: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", exact: "2.37.6"),
        // The operator console (docs/console.md). Hummingbird without its default traits: no swift-configuration
        // and no full Foundation (FoundationEssentials only, like the rest of the daemon).
        .package(url: "https://github.com/hummingbird-project/hummingbird", exact: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", exact: "2.8.1"),
        .package(url: "https://github.com/apple/swift-metrics", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-http-types", exact: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio", exact: "2.101.3"),
    ],
    targets: [
        // C libraries: module maps and tiny shims (CCurl also loads libcurl on first use).
        .systemLibrary(name: "CMosquitto", pkgConfig: "libmosquitto", providers: [.apt(["libmosquitto-dev"])]),
        // libcurl is loaded on first use (dlopen), not linked: see Sources/CCurl/include/ccurl.h.
        .target(name: "CCurl"),
        .systemLibrary(name: "CBluetooth", pkgConfig: "bluez", providers: [.apt(["libbluetooth-dev"])]),
        .systemLibrary(name: "CYAML", pkgConfig: "yaml-0.1", providers: [.apt(["libyaml-dev"])]),
        .systemLibrary(name: "CMalloc"),
        // The commit `switchyard --version` names: "unknown" unless `make release` gives it (Sources/CBuildInfo).
        .target(name: "CBuildInfo"),

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
        // YAML -> typed config for the bridge's own sections, ${ENV} and *_file secrets, positions for
        // every problem, the derived redacted view; the `Upstream` registration each adapter implements.
        .target(name: "SwitchyardConfig", dependencies: ["SwitchyardCore", "CYAML"], swiftSettings: strict),
        // Management: changes asked for on bridge/request/… or in the console, planned as minimal edits of the
        // user's YAML, written, and applied like a reload, one at a time (the requests and their plumbing).
        .target(name: "SwitchyardManage", dependencies: ["SwitchyardCore", "SwitchyardConfig"], swiftSettings: strict),
        // What every upstream simulator builds on: a loopback server over Hummingbird's core (the console's
        // server library), and on it an HTTP server with recorded requests and knobs, which also answers in
        // memory as the peer of SwitchyardHTTP's twin.
        .target(name: "SimulatorSupport", dependencies: [
            "SwitchyardCore", "SwitchyardHTTP",
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
    ]
    // The upstreams, one folder each.
    + upstream("LIFX", adapter: "LIFXAdapter", simulators: "LIFXSimulators", dependencies: ["SwitchyardHTTP"])
    + upstream("Imp", adapter: "ImpAdapter", simulators: "ImpSimulators", dependencies: ["SwitchyardHTTP"])
    + upstream("Livecoding", adapter: "LivecodingAdapter", simulators: "LivecodingSimulators", dependencies: ["SwitchyardHTTP"])
    + upstream("HomeAssistant", adapter: "HomeAssistantMirror", simulators: "HomeAssistantSimulators", dependencies: [
        .product(name: "WSClient", package: "swift-websocket"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
        .product(name: "Logging", package: "swift-log"),
    ], simulatorDependencies: [
        .product(name: "HummingbirdCore", package: "hummingbird"),
        .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
        .product(name: "HTTPTypes", package: "swift-http-types"),
    ])
    + upstream("Nova", adapter: "NovaAdapter", simulators: "NovaSimulators", dependencies: ["CBluetooth"],
               simulatorDependencies: ["NovaAdapter", "CBluetooth"])
    + upstream("Virtual", adapter: "VirtualAdapter")
    + [
        // The operator console: the page, /metrics, /livez and /readyz over Hummingbird, as one Service.
        .target(name: "SwitchyardWeb", dependencies: [
            "SwitchyardCore", "SwitchyardConfig",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "HummingbirdTLS", package: "hummingbird"),
            .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ], resources: [.embedInCode("Page/index.html"), .embedInCode("Page/console.css"), .embedInCode("Page/console.js")], swiftSettings: strict),
        // Wiring: config -> transport + engine + adapters as Services under one ServiceGroup. Knows no adapter.
        .target(name: "SwitchyardRuntime", dependencies: [
            "CMalloc", "SwitchyardCore", "SwitchyardMQTT", "SwitchyardConfig", "SwitchyardWeb", "SwitchyardManage",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ], swiftSettings: strict),
        // What both executables share: the registration list of upstreams, log options, config loading.
        .target(name: "SwitchyardCLI", dependencies: [
            "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore",
            "VirtualAdapter", "LIFXAdapter", "ImpAdapter", "LivecodingAdapter", "HomeAssistantMirror", "NovaAdapter",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // The daemon: run, check-config, auth, healthcheck. No simulators, no Foundation (FoundationEssentials only).
        .executableTarget(name: "switchyard", dependencies: [
            "SwitchyardCLI", "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore", "SwitchyardWeb", "CBuildInfo",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // The demo's home: every upstream's simulator and the config that points the bridge at them.
        .target(name: "SwitchyardDemo", dependencies: [
            "SwitchyardCore", "SwitchyardHTTP", "LIFXSimulators", "ImpSimulators", "LivecodingSimulators", "HomeAssistantSimulators",
            "NovaSimulators", "LivecodingAdapter",
        ], swiftSettings: strict),
        // The simulators' executable: `demo` (the bridge against every simulated upstream), `bridge` (a config
        // file with the simulated Nova radio, for the soak run) and `nova`.
        .executableTarget(name: "switchyard-sim", dependencies: [
            "SwitchyardCLI", "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore", "SwitchyardDemo",
            "NovaSimulators", "LivecodingAdapter", "NovaAdapter",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ], swiftSettings: strict),
        // The soak run: the demo's home for minutes or hours under commands, reloads, broker restarts and
        // upstream outages, with a checker holding the invariants (docs/testing.md).
        .target(name: "SwitchyardSoak", dependencies: [
            "SwitchyardDemo", "SwitchyardTestSupport", "SwitchyardCore", "LivecodingAdapter", "LIFXSimulators", "SwitchyardWebTesting",
            "SimulatorSupport", "ImpSimulators", "LivecodingSimulators",
            .product(name: "HTTPTypes", package: "swift-http-types"),
        ], path: "Tests/SwitchyardSoak", swiftSettings: strict),

        // Benchmarks: figures as ratios to raw libmosquitto measured in the same run (`swift run -c release switchyard-bench`).
        // Adapters are built from YAML through the registration list, like the daemon builds them.
        .executableTarget(name: "switchyard-bench", dependencies: [
            "SwitchyardCore", "SwitchyardMQTT", "SwitchyardConfig", "SwitchyardCLI", "SwitchyardTestSupport", "CMosquitto",
            "LIFXSimulators", "HomeAssistantSimulators", "SwitchyardSoak", "SwitchyardWebTesting",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "UnixSignals", package: "swift-service-lifecycle"),
        ], swiftSettings: strict),

        // Fuzz targets for every parser of outside bytes, and the libFuzzer / replay program (`make fuzz`).
        .target(name: "SwitchyardFuzz", dependencies: [
            "SwitchyardCore", "SwitchyardConfig", "SwitchyardCLI", "HomeAssistantMirror", "ImpAdapter", "LIFXAdapter", "NovaAdapter",
            "SwitchyardWeb", "SwitchyardManage",
        ], swiftSettings: strict),
        .executableTarget(name: "switchyard-fuzz", dependencies: ["SwitchyardFuzz"], swiftSettings: strict),
        // Test helpers shared by every test target: broker launcher, free port, MQTT probe, the bridge in-process
        // over a broker or over the in-memory transport, a scripted adapter.
        // Which test runs in which tier (`make test-unit`, `make test`): docs/testing.md "Two tiers".
        .target(name: "SwitchyardTestSupport", dependencies: [
            "SwitchyardCore", "SwitchyardMQTT", "CMosquitto",
            .product(name: "Logging", package: "swift-log"),
        ], path: "Tests/SwitchyardTestSupport", swiftSettings: strict),
        // What the console's tests, the bench and the soak use to talk to it: a page's WebSocket, plain HTTP, the bridge process.
        .target(name: "SwitchyardWebTesting", dependencies: [
            "SwitchyardCore", "SwitchyardTestSupport",
            .product(name: "WSClient", package: "swift-websocket"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "Logging", package: "swift-log"),
        ], path: "Tests/SwitchyardWebTesting", swiftSettings: strict),
        .testTarget(name: "SwitchyardWebTests", dependencies: [
            "SwitchyardWeb", "SwitchyardWebTesting", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardConfig", "SwitchyardCLI",
        ], swiftSettings: strict),
        .testTarget(name: "SwitchyardCoreTests", dependencies: [
            "SwitchyardCore", "SwitchyardTestSupport",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        .testTarget(name: "SwitchyardMQTTTests", dependencies: ["SwitchyardMQTT", "SwitchyardCore", "CMosquitto", "SwitchyardTestSupport"], swiftSettings: strict),
        .testTarget(name: "SwitchyardConfigTests", dependencies: ["SwitchyardConfig", "SwitchyardCore", "SwitchyardCLI", "ImpAdapter",
                                                                  "LivecodingAdapter", "HomeAssistantMirror", "LIFXAdapter", "NovaAdapter",
                                                                  "VirtualAdapter"],
                    swiftSettings: strict),
        .testTarget(name: "SwitchyardManageTests", dependencies: [
            "SwitchyardManage", "SwitchyardRuntime", "SwitchyardConfig", "SwitchyardCore", "SwitchyardCLI", "SwitchyardTestSupport",
            "SwitchyardDemo", "VirtualAdapter", "SwitchyardMQTT",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        .testTarget(name: "SwitchyardHTTPTests", dependencies: ["SwitchyardHTTP", "SwitchyardCore", "SimulatorSupport"], swiftSettings: strict),
        .testTarget(name: "ImpTests", dependencies: [
            "ImpAdapter", "ImpSimulators", "SwitchyardConfig", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardMQTT",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        .testTarget(name: "NovaTests", dependencies: [
            "NovaAdapter", "NovaSimulators", "SwitchyardTestSupport", "SwitchyardConfig", "SwitchyardCore", "CBluetooth",
        ], swiftSettings: strict),
        .testTarget(name: "HATests", dependencies: [
            "HomeAssistantMirror", "HomeAssistantSimulators", "SwitchyardConfig", "SwitchyardTestSupport", "SwitchyardCore",
        ], swiftSettings: strict),
        .testTarget(name: "LivecodingTests", dependencies: [
            "LivecodingAdapter", "LivecodingSimulators", "SwitchyardConfig", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardHTTP",
        ], swiftSettings: strict),
        .testTarget(name: "VirtualTests", dependencies: ["VirtualAdapter", "SwitchyardTestSupport", "SwitchyardCore"], swiftSettings: strict),
        .testTarget(name: "LIFXTests", dependencies: [
            "LIFXAdapter", "LIFXSimulators", "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardMQTT", "SwitchyardHTTP",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
        // Groups and scenes across upstreams over a real broker: the simulators and lifx-emulator, in-process and as the daemon.
        .testTarget(name: "GroupTests", dependencies: [
            "SwitchyardTestSupport", "SwitchyardCore", "SwitchyardConfig", "SwitchyardCLI", "LIFXSimulators", "ImpSimulators",
        ], swiftSettings: strict),
        .testTarget(name: "FuzzCorpusTests", dependencies: ["SwitchyardFuzz", "SwitchyardCore", "SwitchyardTestSupport"], path: "Tests/Fuzz",
                    exclude: ["corpus"], swiftSettings: strict),
        .testTarget(name: "SwitchyardIntegrationTests", dependencies: [
            "SwitchyardTestSupport", "SwitchyardRuntime", "SwitchyardCore", "SwitchyardMQTT", "SwitchyardConfig",
            "LIFXSimulators", "ImpSimulators", "LivecodingSimulators", "HomeAssistantSimulators", "SwitchyardSoak",
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: strict),
    ]
)
