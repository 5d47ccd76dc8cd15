import Foundation
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import SwitchyardCore

/// A server on 127.0.0.1 that every simulator listens with, over Hummingbird's core (SwiftNIO, the console's
/// server library): `channel` says what a connection speaks (HTTP/1.1 for `LoopbackHTTPServer`, HTTP/1.1 with
/// a WebSocket upgrade for Home Assistant's). It keeps the connections it accepted, each with TCP_NODELAY (an
/// answer is never held back for the client's delayed ACK, which no real upstream makes it wait for), so that
/// `stop` ends every one of them: a stopped simulator is an upstream that went away, and its port is free
/// again when `stop` returns, for the simulator that comes back on it.
public final class LoopbackListener: Sendable {
    public let port: Int
    let connections: Connections
    let shutdownGracefully: @Sendable () async throws -> Void
    let task: Task<Void, any Error>
    let ended: Latch

    private init(port: Int, connections: Connections, shutdownGracefully: @escaping @Sendable () async throws -> Void,
                 task: Task<Void, any Error>, ended: Latch) {
        self.port = port
        self.connections = connections
        self.shutdownGracefully = shutdownGracefully
        self.task = task
        self.ended = ended
    }

    /// Listens on 127.0.0.1:`port` (0: any free port) and returns once it does; throws when it cannot
    /// (the port taken, or not listening within 10 s). `name` is what its log lines on stderr say.
    public static func start<C: ServerChildChannel>(port: UInt16 = 0, name: String, channel: C) async throws -> LoopbackListener {
        let connections = Connections()
        let (bound, reported) = AsyncStream.makeStream(of: Result<Int, any Error>.self)
        let server = Server(childChannelSetup: Tracked(base: channel, connections: connections),
                            configuration: ServerConfiguration(address: .hostname("127.0.0.1", port: Int(port))),
                            onServerRunning: { channel in reported.yield(.success(channel.localAddress?.port ?? 0)) },
                            eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: SimulatorLog.logger(name))
        let ended = Latch()
        let task = Task {
            defer {
                ended.signal()
                reported.finish()
            }
            do {
                try await server.run()
            } catch {
                reported.yield(.failure(error))
                throw error
            }
        }
        let first = await firstResult(of: {
            for await r in bound { return r }
            return .failure(SimulatorError("\(name): the server ended before it listened"))
        }, within: 10, otherwise: .failure(SimulatorError("\(name): not listening on 127.0.0.1:\(port) after 10 s")))
        switch first {
        case .success(let port):
            return LoopbackListener(port: port, connections: connections, shutdownGracefully: { try await server.shutdownGracefully() },
                                    task: task, ended: ended)
        case .failure(let error):
            task.cancel()
            await ended.wait()
            throw error
        }
    }

    /// Closes the listening socket at once, gives answers under way `grace` seconds to finish (idle
    /// connections close straight away), then closes every connection left; returns once the server has
    /// ended (within 10 s).
    public func stop(grace: Double = 1) async {
        let quiet = Latch()
        let shutdownGracefully = self.shutdownGracefully
        Task {
            try? await shutdownGracefully()
            quiet.signal()
        }
        _ = await firstResult(of: { await quiet.wait(); return true }, within: grace, otherwise: false)
        connections.closeAll()
        task.cancel()
        let ended = self.ended
        if await !firstResult(of: { await ended.wait(); return true }, within: 10, otherwise: false) {
            SimulatorLog.say("error", "a simulator on port \(port) had not ended 10 s after it was stopped")
        }
    }

    /// Connections open now (accepted and not yet closed).
    public var openConnections: Int { connections.count }
}

/// The connections a listener accepted and has not seen closed.
final class Connections: Sendable {
    let open = Locked<[ObjectIdentifier: any Channel]>([:])

    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        open.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [open] _ in open.withLock { _ = $0.removeValue(forKey: id) } }
    }

    var count: Int { open.withLock { $0.count } }

    func closeAll() {
        for c in open.withLock({ Array($0.values) }) { c.close(promise: nil) }
    }
}

/// A connection as the simulators take it: TCP_NODELAY set, registered with its listener, then `base`.
struct Tracked<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let connections: Connections

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.syncOptions?.setOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
            connections.add(channel)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}

/// The server library's warnings and errors (a connection closed without an answer says why only here), on
/// stderr: a test's output then shows what the simulator saw. What it says when a peer hangs up or a
/// simulator is stopped is routine and left out; SWITCHYARD_SIM_LOG=all shows everything, debug included.
struct SimulatorLog: LogHandler {
    let name: String
    let all: Bool
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static func logger(_ name: String) -> Logger {
        let all = ProcessInfo.processInfo.environment["SWITCHYARD_SIM_LOG"] == "all"
        return Logger(label: name) { label in SimulatorLog(name: label, all: all, logLevel: all ? .debug : .warning) }
    }

    static let routine = ["CancellationError", "Connection reset", "Broken pipe", "ioOnClosedChannel", "alreadyClosed",
                          "outputClosed", "Waiting on child channel", "Error handling upgrade result"]

    func log(event: LogEvent) {
        let text = "\(event.message)" + (event.error.map { " error=\($0)" } ?? "") + ((event.metadata ?? [:]).merging(metadata) { a, _ in a }.map { " \($0.key)=\($0.value)" }.sorted().joined())
        if !all, Self.routine.contains(where: { text.contains($0) }) { return }
        Self.say("\(event.level)", "\(name): \(text)")
    }

    static func say(_ level: String, _ text: String) {
        FileHandle.standardError.write(Data("simulator \(level): \(text)\n".utf8))
    }
}
