import ArgumentParser
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import LivecodingAdapter
import Logging
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardRuntime

// The daemon. Nothing here imports Foundation, the simulators or their HTTP server (FlyingFox, which
// links FoundationNetworking and with it libcurl): `switchyard-sim` has the demo and the simulators.

@main
struct Switchyard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchyard",
        abstract: "Bridges LIFX, Nova, Electric Imp, Home Assistant and Livecoding onto MQTT.",
        version: switchyardVersion,
        subcommands: [Run.self, CheckConfig.self, Auth.self])

    /// Before anything starts a thread: see Allocator.
    static func main() async {
        Allocator.limitArenas(environment: ProcessInfo.processInfo.environment)
        await main(nil)
    }
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Run the bridge with a config file.")

    @Option(name: .shortAndLong, help: "The YAML config file.")
    var config: String

    @OptionGroup var log: LogOptions

    func run() async throws {
        let c = loadOrExit(config)
        let logger = try log.bootstrap(config: c)
        logger.info("starting", metadata: ["version": "\(switchyardVersion)", "config": "\(config)", "broker": "\(c.brokerURL)"])
        try await BridgeRuntime.run(config: c, configPath: config, logger: logger)
        logger.info("stopped")
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config", abstract: "Validate a config file and exit.")

    @Option(name: .shortAndLong, help: "The YAML config file.")
    var config: String

    func run() throws {
        _ = loadOrExit(config)
        print("config OK")
    }
}

struct Auth: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Authorise an upstream that needs a user's consent.",
                                                    subcommands: [AuthLivecoding.self])
}

struct AuthLivecoding: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "livecoding",
        abstract: "OAuth2 authorisation for Livecoding: prints a URL, waits for the redirect (or a pasted URL), saves the tokens.")

    @Option(name: .shortAndLong, help: "The YAML config file (its livecoding section).")
    var config: String
    @Option(help: "Seconds to wait for the redirect.") var timeout = 300.0
    @Flag(help: "Do not read a pasted redirect URL from standard input.") var noStdin = false

    func run() async throws {
        let c = loadOrExit(config)
        guard let settings = c.livecoding else {
            Console.err("\(config) has no livecoding section; nothing to authorise\n")
            Glibc.exit(2)
        }
        do {
            let tokens = try await LivecodingAuthorization.run(settings: settings, timeout: timeout, readStdin: !noStdin) { text in
                Console.out(text)
            }
            let scope = tokens.scope.isEmpty ? settings.scopes.joined(separator: " ") : tokens.scope
            Console.out("""
            Authorised (scope: \(scope)). Tokens saved to \(settings.tokenStore) (mode 0600); the access token expires \
            \(Timestamp.rfc3339(tokens.expiresAt)) and is refreshed by the running bridge, which picks the file up by itself.

            """)
        } catch {
            Console.err("switchyard auth livecoding: \(error.message)\n")
            Glibc.exit(1)
        }
    }
}

