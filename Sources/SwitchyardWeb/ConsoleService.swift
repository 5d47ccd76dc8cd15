#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import ServiceLifecycle
import SwitchyardConfig
import SwitchyardCore

/// The operator console (docs/console.md) as one Service of the bridge's ServiceGroup: an HTTP server
/// (Hummingbird) with the page, its WebSocket, `/metrics`, `/livez` and `/readyz`. Nothing opens before
/// `run`. A reload hands it a new `web:` section (`apply`): the server is stopped and started again with
/// it (and only then), the feed and the rest of the bridge untouched. A port that cannot be listened on is
/// a warning on bridge/log, tried again every 30 s: the bridge keeps bridging without its console.
public final class ConsoleService: Service, Sendable {
    let initial: SwitchyardConfig.Web
    let engine: BridgeEngine
    public let feed: ConsoleFeed
    let transportStats: @Sendable () -> TransportStats
    let logger: Logger
    let updates: AsyncStream<SwitchyardConfig.Web>
    let continuation: AsyncStream<SwitchyardConfig.Web>.Continuation
    let bound = Locked<String?>(nil)
    let clients = Locked<(open: Int, next: UInt64)>((0, 0))
    let connections = Connections()
    let listening: (@Sendable (String) -> Void)?

    public init(settings: SwitchyardConfig.Web, engine: BridgeEngine, feed: ConsoleFeed,
                transportStats: @escaping @Sendable () -> TransportStats, logger: Logger, listening: (@Sendable (String) -> Void)? = nil) {
        initial = settings
        self.listening = listening
        self.engine = engine
        self.feed = feed
        self.transportStats = transportStats
        self.logger = logger
        (updates, continuation) = AsyncStream.makeStream(of: SwitchyardConfig.Web.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// A reload's `web:` section: the server restarts with it when it differs.
    public func apply(_ settings: SwitchyardConfig.Web) { continuation.yield(settings) }

    /// `http://127.0.0.1:9180` once listening (the port the system chose for port 0), else nil.
    public var address: String? { bound.withLock { $0 } }

    public var openPages: Int { clients.withLock { $0.open } }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var settings = self.initial
            var server = self.start(settings)
            for await next in self.updates where next != settings {
                server?.cancel()
                await server?.value
                settings = next
                self.logger.info("console: applying the new web section", metadata: ["enabled": "\(settings.enabled)", "url": "\(settings.url)"])
                server = self.start(settings)
            }
            server?.cancel()
            await server?.value
        }
        continuation.finish()
    }

    /// The server's life with one `web:` section, as a task `run` waits for.
    func start(_ settings: SwitchyardConfig.Web) -> Task<Void, Never>? {
        guard settings.enabled else { return nil }
        return Task { await self.serve(settings) }
    }

    func serve(_ settings: SwitchyardConfig.Web) async {
        var reported = false
        while !Task.isCancelled {
            do {
                // Stopping closes every connection, one stuck half-way through its request head included:
                // nothing a peer does can hold the bridge's shutdown (or a reload of web:) up.
                let connections = self.connections
                try await withTaskCancellationHandler { try await makeApplication(settings).run() } onCancel: { connections.closeAll() }
                return
            } catch {
                if Task.isCancelled { return }
                let message = "console: cannot serve on \(settings.url): \(error); trying again every 30 s"
                logger.warning("\(message)")
                if !reported { await engine.log(.warning, message) }
                reported = true
                bound.withLock { $0 = nil }
                try? await Task.sleep(for: .seconds(30))
            }
        }
        bound.withLock { $0 = nil }
    }

    // MARK: the server

    /// What every request carries: the channel (to cut a stalled page off) and the upload bound.
    struct Context: RequestContext, WebSocketRequestContext {
        var coreContext: CoreRequestContextStorage
        let webSocket: WebSocketHandlerReference<Context>
        let channel: any Channel
        init(source: ApplicationRequestContextSource) {
            coreContext = .init(source: source)
            webSocket = .init()
            channel = source.channel
        }
        var maxUploadSize: Int { Self.maxBody }
        static let maxBody = 4096
    }

    /// Bounds of the server (docs/console.md "Bounds").
    enum Bound {
        static let connections = 64
        static let headerBytes = 16 * 1024
        static let headerCount = 64
        static let idleTimeout: TimeAmount = .seconds(60)
        static let sendBuffer = 64 * 1024
    }

    func makeApplication(_ settings: SwitchyardConfig.Web) throws -> some ApplicationProtocol {
        let auth = ConsoleAuth(token: settings.authToken, secure: settings.tlsCert != nil)
        let router = Router(context: Context.self)
        router.add(middleware: Headers())
        let page = Page()
        let feed = self.feed
        let engine = self.engine
        let stats = self.transportStats

        @Sendable func authorised(_ r: Request) -> Bool { auth.allows(authorization: r.headers[.authorization], cookie: r.headers[.cookie]) }
        @Sendable func sameOrigin(_ r: Request) -> Bool { auth.sameOrigin(host: r.head.authority, origin: r.headers[.origin]) }

        router.get("/") { request, _ -> Response in
            guard sameOrigin(request) else { return Page.text(.forbidden, "cross-origin request refused") }
            return authorised(request) ? page.index : Page.login(error: nil)
        }
        router.get("/console.js") { request, _ -> Response in authorised(request) ? page.script : Page.text(.unauthorized, "log in first") }
        router.get("/console.css") { _, _ in page.style }
        router.post("/login") { request, _ -> Response in
            guard sameOrigin(request) else { return Page.text(.forbidden, "cross-origin request refused") }
            let body = try await request.body.collect(upTo: Context.maxBody)
            guard auth.required else { return Page.redirect("/") }
            if let token = ConsoleAuth.formField(String(buffer: body), "token"), auth.tokenMatches(token) {
                var r = Page.redirect("/")
                r.headers[.setCookie] = auth.newSession()
                return r
            }
            feed.metrics.loginFailed()
            try? await Task.sleep(for: .seconds(1))   // a guess a second at most per connection
            return Page.login(error: "That is not the console's token.")
        }
        router.post("/logout") { request, _ -> Response in
            guard sameOrigin(request) else { return Page.text(.forbidden, "cross-origin request refused") }
            var r = Page.redirect("/")
            r.headers[.setCookie] = auth.endSession(cookie: request.headers[.cookie])
            return r
        }
        router.get("/ws") { request, _ -> Response in
            if !sameOrigin(request) { return Page.text(.forbidden, "cross-origin request refused") }
            if !authorised(request) { return Page.text(.unauthorized, "log in first") }
            return Page.text(.badRequest, "the console's WebSocket: connect with a WebSocket upgrade")
        }
        router.get("/metrics") { request, _ -> Response in
            guard authorised(request) else { return Page.text(.unauthorized, "Authorization: Bearer <web.auth_token> required") }
            let snapshot = await engine.snapshot()
            feed.metrics.update(engine: snapshot, transport: stats(), bounds: engine.bounds.snapshot, rss: ProcessStats.residentBytes(),
                                clients: self.openPages, retained: feed.retainedCount)
            var r = Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: feed.metrics.exposition())))
            r.headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return r
        }
        router.get("/livez") { _, _ -> Response in
            await Self.answers(engine, within: 5) ? Page.text(.ok, "alive") : Page.text(.serviceUnavailable, "the bridge's core does not answer")
        }
        router.get("/readyz") { _, _ -> Response in
            let reasons = Self.notReady(await engine.snapshot(), stats())
            let body: JSONValue = reasons.isEmpty ? ["ready": true] : ["ready": false, "reasons": .array(reasons.map(JSONValue.string))]
            var r = Response(status: reasons.isEmpty ? .ok : .serviceUnavailable, body: .init(byteBuffer: ByteBuffer(string: body.serialized + "\n")))
            r.headers[.contentType] = "application/json"
            return r
        }

        let ws = Router(context: Context.self)
        ws.ws("/ws") { request, _ in
            sameOrigin(request) && authorised(request) ? .upgrade([:]) : .dontUpgrade
        } onUpgrade: { inbound, outbound, context in
            guard let id = self.admit(max: settings.maxClients) else {
                try await outbound.close(.unknown(1013), reason: "the console has \(settings.maxClients) pages open already (web.max_clients)")
                engine.bounds.hit("web_clients")
                return
            }
            defer { self.clients.withLock { $0.open -= 1 } }
            // What a page has not taken is bounded in the kernel too (which would grow the buffer to megabytes
            // for a reader that stopped).
            _ = context.requestContext.channel.setOption(ChannelOptions.socketOption(.so_sndbuf), value: SocketOptionValue(Bound.sendBuffer))
            var limits = ConsoleClient.Limits()
            limits.stallTimeout = settings.clientTimeout
            let client = ConsoleClient(id: id, feed: feed, engine: engine, stats: stats, auth: auth.required,
                                       channel: context.requestContext.channel, limits: limits)
            try await client.run(inbound: inbound, outbound: outbound)
        }
        let http = HTTP1Channel.Configuration(
            idleTimeout: Bound.idleTimeout,
            httpDecoderConfiguration: .init(maxHeaderFieldSize: Bound.headerBytes, maxHeaderListSize: Bound.headerBytes,
                                            maxHeaderFieldCount: Bound.headerCount))
        let upgrade = HTTP1WebSocketUpgradeChannel.Configuration(
            http1: http, ws: .init(maxFrameSize: ConsoleClient.Limits().maxInbound, autoPing: .enabled(timePeriod: .seconds(30)),
                                   closeTimeout: .seconds(5), validateUTF8: true))
        let tls: TLSConfiguration? = try settings.tlsCert.flatMap { cert in
            try settings.tlsKey.map { key in
                let chain = try NIOSSLCertificate.fromPEMFile(cert).map { NIOSSLCertificateSource.certificate($0) }
                return TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
            }
        }
        let wsResponder = ws.buildResponder()
        let connections = self.connections
        let server = HTTPServerBuilder { responder in
            let guarded = GuardedChannel(base: HTTP1WebSocketUpgradeChannel(responder: responder, webSocketResponder: wsResponder, configuration: upgrade),
                                         connections: connections)
            if let tls { return try TLSChannel(guarded, tlsConfiguration: tls) }
            return guarded
        }
        var quiet = logger
        quiet.logLevel = .warning
        return Application(
            router: router, server: server,
            configuration: .init(address: .hostname(settings.host, port: settings.port), serverName: nil,
                                 availableConnectionsDelegate: MaximumAvailableConnections(Bound.connections)),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? settings.port
                var s = settings
                s.port = port
                let url = s.url
                self.bound.withLock { $0 = url }
                self.logger.info("console listening", metadata: ["url": "\(url)", "auth": "\(auth.required ? "token" : "none (loopback)")"])
                self.listening?(url)
            },
            logger: quiet)
    }

    func admit(max: Int) -> UInt64? {
        clients.withLock { c in
            guard c.open < max else { return nil }
            c.open += 1
            c.next += 1
            return c.next
        }
    }

    /// Why the bridge is not ready (none: ready): the broker not connected, an adapter neither running nor
    /// disabled (with its reason), the bridge stopping.
    static func notReady(_ e: EngineSnapshot, _ s: TransportStats) -> [String] {
        var reasons: [String] = []
        if e.stopped { reasons.append("stopping") }
        if !s.connected { reasons.append("broker: not connected") }
        for a in e.adapters {
            switch a.status {
            case .running, .disabled: break
            case .starting: reasons.append("\(a.id): starting")
            case .error: reasons.append("\(a.id): error")
            }
        }
        return reasons
    }

    /// Whether the engine's actor answers within `seconds` (a wedged core fails `/livez`).
    static func answers(_ engine: BridgeEngine, within seconds: Double) async -> Bool {
        let once = Locked<CheckedContinuation<Bool, Never>?>(nil)
        return await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
            once.withLock { $0 = c }
            Task {
                let alive = await engine.isAlive()
                once.withLock { $0.take() }?.resume(returning: alive)
            }
            Task {
                try? await Task.sleep(for: .seconds(seconds))
                once.withLock { $0.take() }?.resume(returning: false)
            }
        }
    }
}

/// Every connection of the console: closed together when it stops.
final class Connections: Sendable {
    let open = Locked<[ObjectIdentifier: any Channel]>([:])
    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        open.withLock { $0[id] = channel }
        channel.closeFuture.whenComplete { [open] _ in open.withLock { _ = $0.removeValue(forKey: id) } }
    }
    func closeAll() { for c in open.withLock({ Array($0.values) }) { c.close(promise: nil) } }
}

/// A connection as the console takes it: registered (so that stopping closes it), closed when nothing has
/// been read from it for 60 s (a request head that never ends; an open page answers the pings every 30 s)
/// and when its request cannot be parsed (a head over the bounds).
struct GuardedChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let connections: Connections

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandlers([IdleStateHandler(readTimeout: .seconds(60)), CloseHandler()])
            connections.add(channel)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }.flatMapThrowing { value in
            try channel.pipeline.syncOperations.addHandler(CloseHandler())
            return value
        }
    }

    func handle(value: Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}

/// Closes its connection on a read timeout or a request that cannot be parsed.
final class CloseHandler: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent { context.close(promise: nil) } else { context.fireUserInboundEventTriggered(event) }
    }
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is HTTPParserError { context.close(promise: nil) }
        context.fireErrorCaught(error)
    }
}

/// Headers on every answer: the page runs only its own script and style, is never framed, sends no
/// referrer; dynamic answers are not cached.
struct Headers: RouterMiddleware {
    typealias Context = ConsoleService.Context
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var r = try await next(request, context)
        r.headers[.contentSecurityPolicy] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        r.headers[.xContentTypeOptions] = "nosniff"
        r.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        if r.headers[.cacheControl] == nil { r.headers[.cacheControl] = "no-store" }
        return r
    }
}
