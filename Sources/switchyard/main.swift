import ArgumentParser
import CBuildInfo
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import Logging
import SwitchyardCLI
import SwitchyardConfig
import SwitchyardCore
import SwitchyardRuntime
import SwitchyardWeb

// The daemon. Nothing here imports Foundation or the simulators: `switchyard-sim` has the demo and the
// simulators.

@main
struct Switchyard: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "switchyard",
        abstract: "Bridges LIFX, Nova, Electric Imp, Home Assistant and Livecoding onto MQTT.",
        version: versionLine,
        subcommands: [Run.self, CheckConfig.self, Auth.self, Healthcheck.self])

    /// `switchyard --version`: `0.1.0 (commit 58346b7c0a1e)`; the commit is "unknown" unless the build
    /// was given it (`make release`, Sources/CBuildInfo), "-dirty" when the tree had changes.
    static let versionLine = "\(switchyardVersion) (commit \(buildCommit))"
    static let buildCommit = String(cString: switchyard_build_commit())

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

    @Option(help: "This instance's name in a standby group (standby.enabled); outranks standby.instance. Default: the host name.")
    var instance: String?

    @OptionGroup var log: LogOptions

    func run() async throws {
        let c = loadOrExit(config)
        let logger = try log.bootstrap(config: c)
        logger.info("starting", metadata: ["version": "\(switchyardVersion)", "commit": "\(Switchyard.buildCommit)", "config": "\(config)",
                                           "broker": "\(c.brokerURL)"])
        try await BridgeRuntime.run(config: c, configPath: config, upstreams: upstreams, logger: logger, instance: instance)
        logger.info("stopped")
    }
}

struct CheckConfig: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "check-config", abstract: "Validate a config file and exit.")

    @Option(name: .shortAndLong, help: "The YAML config file.")
    var config: String

    func run() throws {
        let c = loadOrExit(config)
        let sections = c.upstreams.map(\.key)
        // Changes made at run time live beside the file when it cannot be written (docs/operations.md).
        let changes = c.source.flatMap { $0.changes != nil ? $0.changesPath : nil }.map { ", with the changes in \($0)" } ?? ""
        Console.out("config OK (upstreams: \(sections.isEmpty ? "none" : sections.joined(separator: ", "))\(changes))\n")
    }
}

struct Auth: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Authorise an upstream that needs a user's consent (livecoding: OAuth2).",
        discussion: "Prints what to open, waits for the answer (a redirect, or a pasted URL), saves what the bridge needs.")

    @Argument(help: "The upstream (its config key), e.g. livecoding.")
    var upstream: String
    @Option(name: .shortAndLong, help: "The YAML config file (the upstream's section).")
    var config: String
    @Option(help: "Seconds to wait for the answer.") var timeout = 300.0
    @Flag(help: "Do not read a pasted answer from standard input.") var noStdin = false

    func run() async throws {
        let c = loadOrExit(config)
        guard upstreams.contains(where: { $0.key == upstream }) else {
            Console.err("unknown upstream '\(upstream)' (known: \(upstreams.map(\.key).joined(separator: ", ")))\n")
            Glibc.exit(2)
        }
        guard let section = c.upstream(upstream) else {
            Console.err("\(config) has no \(upstream) section; nothing to authorise\n")
            Glibc.exit(2)
        }
        do {
            let options = AuthorizationOptions(timeout: timeout, readStdin: !noStdin) { text in Console.out(text) }
            guard let done = try await section.authorize(options: options) else {
                Console.err("\(upstream) needs no authorisation\n")
                Glibc.exit(2)
            }
            Console.out(done + "\n")
        } catch {
            Console.err("switchyard auth \(upstream): \((error as? AdapterError)?.message ?? "\(error)")\n")
            Glibc.exit(1)
        }
    }
}

/// A container's health check (deploy/Containerfile): asks the console of the bridge that runs with this
/// config whether its core answers (`/livez`; `--ready`: `/readyz`), at the address, `base_path` and
/// scheme the config's `web:` section gives, so that it follows `web.listen`. The config is read as
/// `run` reads it (the same environment, `${…}` and `*_file` secrets); no token is sent, the probes need
/// none. Exit 0 with the answer on standard output, else 1 with why (2: the config has problems).
struct Healthcheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask the running bridge's console whether it is alive (/livez) or ready (/readyz).",
        discussion: "Reads web.listen, web.base_path and web.tls_cert from the config; exit 0 when the answer is 200, else 1.")

    @Option(name: .shortAndLong, help: "The YAML config file the bridge runs with.")
    var config = "/etc/switchyard/config.yaml"
    @Flag(help: "Ask /readyz (connected to the broker, every adapter running) instead of /livez.") var ready = false
    @Option(help: "Seconds to wait for the answer.") var timeout = 8.0

    func run() async throws {
        let web = loadOrExit(config).web
        let path = ready ? "/readyz" : "/livez"
        let url = ConsoleProbe.url(web, path: path)
        do {
            let answer = try await ConsoleProbe.get(web, path: path, timeout: timeout)
            let text = answer.body.trimmingWhitespace()
            if answer.status == 200 {
                Console.out("\(url): \(answer.status) \(text)\n")
                return
            }
            Console.err("\(url): \(answer.status) \(text)\n")
        } catch {
            Console.err("\(url): \(error)\n")
        }
        Glibc.exit(1)
    }
}
