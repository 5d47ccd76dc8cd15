import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SwitchyardConfig

/// One GET to the console of a bridge on this machine, made from its `web:` section: what
/// `switchyard healthcheck` asks `/livez` with, so that a container's health check follows `web.listen`,
/// `web.base_path` and TLS without curl in the image. It sends no token: the probes need none
/// (docs/console.md "Access"), and nothing secret leaves the process for a check. Over TLS the
/// certificate is not verified, for the same reason: the probe reads a status, and the console's own
/// certificate may name a host that is not this loopback address.
public enum ConsoleProbe {
    public struct Answer: Sendable, Equatable {
        public let status: Int
        /// The body's first 4 KiB, as text.
        public let body: String
    }

    public enum Failure: Error, CustomStringConvertible {
        case timeout(Double)
        case closed
        case disabled

        public var description: String {
            switch self {
            case .timeout(let s): "no answer within \(s) s"
            case .closed: "the connection closed before an answer"
            case .disabled: "the console is off (web.enabled: false): there is nothing to ask"
            }
        }
    }

    /// Where a probe on this machine reaches a console listening per `settings`: a console on every
    /// address (`0.0.0.0`, `::`) is asked on loopback.
    public static func target(_ settings: SwitchyardConfig.Web) -> (host: String, port: Int) {
        switch settings.host {
        case "0.0.0.0", "": ("127.0.0.1", settings.port)
        case "::", "0:0:0:0:0:0:0:0": ("::1", settings.port)
        default: (settings.host, settings.port)
        }
    }

    /// `http(s)://<target><base_path><path>`, as the probe asks it.
    public static func url(_ settings: SwitchyardConfig.Web, path: String) -> String {
        let (host, port) = target(settings)
        let name = host.contains(":") ? "[\(host)]" : host
        return "\(settings.tlsCert == nil ? "http" : "https")://\(name):\(port)\(settings.basePath)\(path)"
    }

    /// GET `<base_path><path>` from the console, within `timeout` seconds in all (connect included).
    public static func get(_ settings: SwitchyardConfig.Web, path: String, timeout: Double) async throws -> Answer {
        guard settings.enabled else { throw Failure.disabled }
        let (host, port) = target(settings)
        let tls: NIOSSLContext? = try settings.tlsCert.map { _ in
            var c = TLSConfiguration.makeClientConfiguration()
            c.certificateVerification = .none
            return try NIOSSLContext(configuration: c)
        }
        let group = MultiThreadedEventLoopGroup.singleton
        let promise = group.next().makePromise(of: Answer.self)
        let limit = TimeAmount.nanoseconds(Int64(timeout * 1e9))
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .connectTimeout(limit)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let tls { try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: tls, serverHostname: nil)) }
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(Collector(promise: promise))
                    }
                }
                .connect(host: host, port: port).get()
        } catch {
            // A promise is completed on every path: NIO stops a debug build over one left pending.
            promise.fail(error)
            throw error
        }
        let deadline = channel.eventLoop.scheduleTask(in: limit) {
            promise.fail(Failure.timeout(timeout))
            channel.close(promise: nil)
        }
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: settings.basePath + path)
        head.headers.add(name: "Host", value: "\(host.contains(":") ? "[\(host)]" : host):\(port)")
        head.headers.add(name: "User-Agent", value: "switchyard-healthcheck")
        head.headers.add(name: "Connection", value: "close")
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        defer {
            deadline.cancel()
            channel.close(promise: nil)
        }
        return try await promise.futureResult.get()
    }

    /// Reads one answer: its status and the start of its body.
    final class Collector: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPClientResponsePart
        let promise: EventLoopPromise<Answer>
        var status = 0
        var body: [UInt8] = []

        init(promise: EventLoopPromise<Answer>) { self.promise = promise }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let h): status = Int(h.status.code)
            case .body(let b): body += b.readableBytesView.prefix(max(0, 4096 - body.count))
            case .end:
                promise.succeed(Answer(status: status, body: String(decoding: body, as: UTF8.self)))
                context.close(promise: nil)
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            promise.fail(error)
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            promise.fail(Failure.closed)   // ignored when the answer came first
            context.fireChannelInactive()
        }
    }
}
