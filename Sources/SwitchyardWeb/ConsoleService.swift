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
    let engine: any ConsoleEngine
    public let feed: ConsoleFeed
    let transportStats: @Sendable () -> TransportStats
    let logger: Logger
    let updates: AsyncStream<SwitchyardConfig.Web>
    let continuation: AsyncStream<SwitchyardConfig.Web>.Continuation
    let bound = Locked<String?>(nil)
    let clients = Locked<(open: Int, next: UInt64)>((0, 0))
    let connections: Connections
    let listening: (@Sendable (String) -> Void)?

    public init(settings: SwitchyardConfig.Web, engine: any ConsoleEngine, feed: ConsoleFeed,
                transportStats: @escaping @Sendable () -> TransportStats, logger: Logger, listening: (@Sendable (String) -> Void)? = nil) {
        initial = settings
        self.listening = listening
        self.engine = engine
        self.feed = feed
        self.transportStats = transportStats
        self.logger = logger
        connections = Connections(bounds: engine.bounds)
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
                if !reported { await engine.consoleLog(.warning, message) }
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
        let slot = WebSocketSlot()
        var webSocket: WebSocketHandlerReference<Context> { slot.reference }
        let channel: any Channel
        init(source: ApplicationRequestContextSource) {
            coreContext = .init(source: source)
            channel = source.channel
        }

        /// Holds the request's `WebSocketHandlerReference` until the upgraded connection closes.
        /// hummingbird-websocket (2.8.1) keeps the upgraded request's context inside that reference, and the
        /// context holds the reference: a cycle that outlives every page (and through the handler the
        /// console that served it; LeakSanitizer in `make sanitize-address` reports it). `release` breaks
        /// it; the `/ws` route asks for it when the connection closes.
        final class WebSocketSlot: Sendable {
            let held = Locked<WebSocketHandlerReference<Context>?>(WebSocketHandlerReference())
            var reference: WebSocketHandlerReference<Context> { held.withLock { $0 } ?? WebSocketHandlerReference() }
            func release() { held.withLock { $0 = nil } }
        }
        var maxUploadSize: Int { Self.maxBody }
        static let maxBody = 4096
    }

    /// Bounds of the server (docs/console.md "Bounds").
    enum Bound {
        /// Connections at once: the next ones wait to be accepted.
        static let connections = 64
        /// Connections still waiting for their first request head, at most: a new one beyond closes the
        /// oldest of them. With the pages (`web.max_clients`, at most 32), this leaves room for a probe.
        static let waitingForHead = 16
        /// A connection's first request head is whole within this long of its accept; the next ones within
        /// this long of the answer before (`keepAlive`). Else the connection is closed.
        static let headTimeout: TimeAmount = .seconds(10)
        static let keepAlive: TimeAmount = .seconds(10)
        /// A request head, at most (and its fields): a longer one is answered 431.
        static let headerBytes = 16 * 1024
        static let headerCount = 64
        /// Nothing read for this long closes any connection (an open page answers the pings every 30 s).
        static let idleTimeout: TimeAmount = .seconds(60)
        /// A page's socket buffers, each way.
        static let socketBuffer = 64 * 1024
    }

    func makeApplication(_ settings: SwitchyardConfig.Web) throws -> some ApplicationProtocol {
        let auth = ConsoleAuth(token: settings.authToken, secure: settings.tlsCert != nil)
        let router = Router(context: Context.self)
        router.add(middleware: Headers())
        router.add(middleware: SameOrigin(auth: auth))
        let page = Page()
        let feed = self.feed
        let engine = self.engine
        let stats = self.transportStats

        @Sendable func authorised(_ r: Request) -> Bool { auth.allows(authorization: r.headers[.authorization], cookie: r.headers[.cookie]) }
        // Every route is under web.base_path ("" by default): `at("/livez")` is `/switchyard/livez` with
        // base_path /switchyard. The page's own references are relative (Page), so they follow.
        let base = settings.basePath
        @Sendable func at(_ path: String) -> RouterPath { RouterPath(base + path) }
        router.get(at("/")) { request, _ -> Response in
            // The page's relative references need its URL to end in a slash: `/switchyard` → `switchyard/`.
            if !base.isEmpty, !request.uri.path.hasSuffix("/") { return Page.redirect(String(base.split(separator: "/").last ?? "") + "/") }
            return authorised(request) ? page.index : Page.login(error: nil)
        }
        if !base.isEmpty {
            // Someone who opens the console's own address finds it.
            router.get("/") { _, _ in Page.redirect(base + "/") }
        }
        router.get(at("/console.js")) { request, _ -> Response in authorised(request) ? page.script : Page.text(.unauthorized, "log in first") }
        router.get(at("/console.css")) { _, _ in page.style }
        router.post(at("/login")) { request, _ -> Response in
            let body = try await request.body.collect(upTo: Context.maxBody)
            guard auth.required else { return Page.redirect("./") }
            if let token = ConsoleAuth.formField(String(buffer: body), "token"), auth.tokenMatches(token) {
                var r = Page.redirect("./")
                r.headers[.setCookie] = auth.newSession(path: Self.cookiePath(base: base, ingress: request.headers[Self.ingressPath]))
                return r
            }
            feed.metrics.loginFailed()
            try? await Task.sleep(for: .seconds(1))   // a guess a second at most per connection
            return Page.login(error: "That is not the console's token.")
        }
        router.post(at("/logout")) { request, _ -> Response in
            var r = Page.redirect("./")
            r.headers[.setCookie] = auth.endSession(cookie: request.headers[.cookie], path: Self.cookiePath(base: base, ingress: request.headers[Self.ingressPath]))
            return r
        }
        router.get(at("/ws")) { request, _ -> Response in
            if !authorised(request) { return Page.text(.unauthorized, "log in first") }
            return Page.text(.badRequest, "the console's WebSocket: connect with a WebSocket upgrade")
        }
        router.get(at("/metrics")) { request, _ -> Response in
            guard authorised(request) else { return Page.text(.unauthorized, "Authorization: Bearer <web.auth_token> required") }
            let snapshot = await engine.snapshot()
            feed.metrics.update(engine: snapshot, transport: stats(), bounds: engine.bounds.snapshot, rss: ProcessStats.residentBytes(),
                                clients: self.openPages, retained: feed.retainedCount)
            var r = Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: feed.metrics.exposition())))
            r.headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return r
        }
        router.get(at("/livez")) { _, _ -> Response in
            await Self.answers(engine, within: 5) ? Page.text(.ok, "alive") : Page.text(.serviceUnavailable, "the bridge's core does not answer")
        }
        router.get(at("/readyz")) { _, _ -> Response in
            let reasons = Self.notReady(await engine.snapshot(), stats())
            let body: JSONValue = reasons.isEmpty ? ["ready": true] : ["ready": false, "reasons": .array(reasons.map(JSONValue.string))]
            var r = Response(status: reasons.isEmpty ? .ok : .serviceUnavailable, body: .init(byteBuffer: ByteBuffer(string: body.serialized + "\n")))
            r.headers[.contentType] = "application/json"
            return r
        }

        let ws = Router(context: Context.self)
        ws.ws(at("/ws")) { request, context in
            guard auth.sameOrigin(host: request.head.authority, origin: request.headers[.origin]) && authorised(request) else { return .dontUpgrade }
            let slot = context.slot
            context.channel.closeFuture.whenComplete { _ in slot.release() }
            return .upgrade([:])
        } onUpgrade: { inbound, outbound, context in
            guard let id = self.admit(max: settings.maxClients) else {
                try await outbound.close(.unknown(1013), reason: "the console has \(settings.maxClients) pages open already (web.max_clients)")
                engine.bounds.hit("web_clients")
                return
            }
            defer { self.clients.withLock { $0.open -= 1 } }
            // What a page has not taken, and what it sent that is not read yet, are bounded in the kernel too
            // (which would grow the buffers to megabytes for a reader that stopped, or a page not read).
            let channel = context.requestContext.channel
            _ = channel.setOption(ChannelOptions.socketOption(.so_sndbuf), value: SocketOptionValue(Bound.socketBuffer))
            _ = channel.setOption(ChannelOptions.socketOption(.so_rcvbuf), value: SocketOptionValue(Bound.socketBuffer))
            var limits = ConsoleClient.Limits()
            limits.stallTimeout = settings.clientTimeout
            let client = ConsoleClient(id: id, feed: feed, engine: engine, stats: stats, auth: auth.required,
                                       channel: context.requestContext.channel, limits: limits)
            try await client.run(inbound: inbound, outbound: outbound)
        }
        let http = HTTP1Channel.Configuration(
            idleTimeout: Bound.keepAlive,
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
        let consoleLogger = logger
        let quiet = Logger(label: logger.label) { _ in LibraryLogHandler(base: consoleLogger) }
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

    /// The header Home Assistant's ingress proxy sends with the prefix it took off the path
    /// (`/api/hassio_ingress/<token>`).
    static let ingressPath = HTTPField.Name("X-Ingress-Path")!

    /// The session cookie's `Path`: the prefix a proxy took off (`X-Ingress-Path`, when it is a plain
    /// path: anything else is ignored, so that nothing a client sends can reach the header), then
    /// `web.base_path`, then `/`. A proxy that strips a prefix without saying so gets `/`.
    static func cookiePath(base: String, ingress: String?) -> String {
        let outer = ingress.flatMap { SwitchyardConfig.Web.normalizedBasePath($0) } ?? ""
        return outer + base + "/"
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
        // Under hot standby only the active instance serves; the others are alive (`/livez`), not ready.
        if let sb = e.standby, sb.role != "active" {
            reasons.append("standby: not the active instance (active: \(sb.group.filter { $0.value == "active" }.keys.sorted().first ?? "none"))")
            return reasons
        }
        if !s.connected { reasons.append("broker: not connected") }
        for a in e.adapters {
            switch a.status {
            case .running, .disabled: break
            case .starting, .error: reasons.append("\(a.id): \(a.status.kind)")
            }
        }
        return reasons
    }

    /// Whether the engine's actor answers within `seconds` (a wedged core fails `/livez`). The question
    /// goes to the actor from a task of its own: a call into a wedged actor cannot be cancelled, so as a
    /// child of the race it would hold the probe up exactly when it must answer. Only the wait is raced.
    static func answers(_ engine: any ConsoleEngine, within seconds: Double) async -> Bool {
        let answered = Latch(), alive = Locked(false)
        Task {
            let yes = await engine.isAlive()
            alive.withLock { $0 = yes }
            answered.signal()
        }
        return await firstResult(of: {
            await answered.wait()
            return alive.withLock { $0 }
        }, within: seconds, otherwise: false)
    }
}

/// Every connection of the console: closed together when it stops. Those still waiting for their first
/// request head are at most `Bound.waitingForHead`: a new connection beyond that closes the oldest of them,
/// so that peers that never finish a head cannot hold every connection (and `/livez` up).
final class Connections: Sendable {
    struct Entry {
        let channel: any Channel
        let number: UInt64
        var waiting = true
    }
    struct State {
        var open: [ObjectIdentifier: Entry] = [:]
        var next: UInt64 = 0
    }
    let state = Locked(State())
    let bounds: BoundsCounter

    init(bounds: BoundsCounter) { self.bounds = bounds }

    func add(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        let oldest = state.withLock { s -> (any Channel)? in
            s.next += 1
            s.open[id] = Entry(channel: channel, number: s.next)
            let waiting = s.open.values.filter(\.waiting)
            guard waiting.count > ConsoleService.Bound.waitingForHead, let oldest = waiting.min(by: { $0.number < $1.number }) else { return nil }
            s.open[ObjectIdentifier(oldest.channel)]?.waiting = false
            return oldest.channel
        }
        channel.closeFuture.whenComplete { [state] _ in state.withLock { _ = $0.open.removeValue(forKey: id) } }
        if let oldest {
            bounds.hit("web_head_waiting")
            oldest.close(promise: nil)
        }
    }

    /// The connection's first request head has come whole.
    func headDone(_ channel: any Channel) {
        state.withLock { $0.open[ObjectIdentifier(channel)]?.waiting = false }
    }

    func closeAll() { for c in state.withLock({ $0.open.values.map(\.channel) }) { c.close(promise: nil) } }
}

/// A connection as the console takes it: registered (so that stopping closes it, and so that it gives way
/// while it waits for its first head), its first request head whole within `Bound.headTimeout` of the
/// accept and within `Bound.headerBytes`, closed when nothing has been read from it for
/// `Bound.idleTimeout` (`HeadGuard`), and answered 431 or 400 when a head cannot be parsed (`CloseHandler`).
struct GuardedChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let connections: Connections

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandlers([IdleStateHandler(readTimeout: ConsoleService.Bound.idleTimeout),
                                                             HeadGuard(connections: connections)])
            connections.add(channel)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }.flatMapThrowing { value in
            let guardian = try channel.pipeline.syncOperations.handler(type: HeadGuard.self)
            try channel.pipeline.syncOperations.addHandler(CloseHandler(guardian: guardian))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}

/// Watches the bytes of a connection's first request head (up to its empty line) and passes everything
/// on: a head not whole within `Bound.headTimeout` of the accept closes the connection, one over
/// `Bound.headerBytes` is answered 431. It also writes the answer to a head the parser refused, from
/// before the HTTP handlers (`refuse`). Lives on the connection's event loop.
final class HeadGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    let connections: Connections
    var context: ChannelHandlerContext?
    var deadline: Scheduled<Void>?
    var done = false
    /// Bytes of the head so far, and whether the last line ended (a line feed, then perhaps a return).
    var seen = 0
    var lineEnded = false
    /// Answered and closing: what the peer still sends is dropped.
    var refused = false

    init(connections: Connections) { self.connections = connections }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        deadline = context.eventLoop.assumeIsolated().scheduleTask(in: ConsoleService.Bound.headTimeout) { [self] in
            guard !done || refused, let context = self.context else { return }
            if !refused { connections.bounds.hit("web_head_timeout") }
            context.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if refused { return }
        if !done {
            for b in unwrapInboundIn(data).readableBytesView {
                seen += 1
                if b == UInt8(ascii: "\n") {
                    if lineEnded {
                        done = true
                        deadline?.cancel()
                        connections.headDone(context.channel)
                        break
                    }
                    lineEnded = true
                } else if b != UInt8(ascii: "\r") {
                    lineEnded = false
                }
            }
            if !done && seen > ConsoleService.Bound.headerBytes {
                refuse(.requestHeaderFieldsTooLarge)
                return
            }
        }
        context.fireChannelRead(data)
    }

    /// Answers the request with `status` and closes the connection: its output at once, the rest once the
    /// peer has gone or by the head's deadline (a peer still sending would otherwise get a reset instead
    /// of the answer).
    func refuse(_ status: HTTPResponseStatus) {
        guard !refused, let context else { return }
        refused = true
        if status == .requestHeaderFieldsTooLarge { connections.bounds.hit("web_head_size") }
        let body = status == .requestHeaderFieldsTooLarge
            ? "request head over \(ConsoleService.Bound.headerBytes / 1024) KiB or \(ConsoleService.Bound.headerCount) fields\n"
            : "malformed request\n"
        let text = "HTTP/1.1 \(status.code) \(status.reasonPhrase)\r\nContent-Type: text/plain; charset=utf-8\r\n"
            + "Content-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(string: text)), promise: written)
        written.futureResult.assumeIsolated().whenComplete { [self] _ in
            guard let context = self.context else { return }
            let closed = context.eventLoop.makePromise(of: Void.self)
            context.close(mode: .output, promise: closed)
            closed.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
        }
        if done {
            // The deadline was for the first head: the refused connection gets one again.
            done = false
            deadline = context.eventLoop.assumeIsolated().scheduleTask(in: ConsoleService.Bound.headTimeout) { [self] in
                self.context?.close(promise: nil)
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        context.fireChannelInactive()
    }

    /// Nothing read for `Bound.idleTimeout`: closed.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent { context.close(promise: nil) } else { context.fireUserInboundEventTriggered(event) }
    }
}

/// At the end of the pipeline: has a request that cannot be parsed answered (431 for a head over the
/// bounds, 400 otherwise) by the connection's `HeadGuard`, which then closes it.
final class CloseHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let guardian: HeadGuard
    init(guardian: HeadGuard) { self.guardian = guardian }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let e = error as? HTTPParserError {
            guardian.refuse(e == .headerOverflow ? .requestHeaderFieldsTooLarge : .badRequest)
            return
        }
        context.fireErrorCaught(error)
    }
}

/// The server library's logger: its warnings and errors go to the console's, except what it says at error
/// level when one peer's connection ends (cut off, gone, refused before the upgrade) or when the server is
/// stopped: routine, said at debug.
struct LibraryLogHandler: LogHandler {
    let base: Logger
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .warning

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static func isRoutine(_ message: String) -> Bool {
        message.hasPrefix("Error handling upgrade result") || message.hasPrefix("Waiting on child channel: CancellationError")
    }

    func log(event: LogEvent) {
        let level = Self.isRoutine(event.message.description) ? Logger.Level.debug : event.level
        base.log(level: level, event.message, metadata: metadata.merging(event.metadata ?? [:]) { $1 }, source: event.source,
                 file: event.file, function: event.function, line: event.line)
    }
}

/// Every request, probes included, comes from the console's own page or a program on this machine
/// (`ConsoleAuth.sameOrigin`: without a token, a loopback Host; an Origin, when sent, the console's own):
/// others get 403. A name of an attacker's that resolves to 127.0.0.1 (DNS rebinding) reads nothing,
/// not even `/metrics` or `/readyz`. Local probes send a loopback Host (`curl http://127.0.0.1:9180/livez`);
/// a console reachable from elsewhere has a token, and then any Host is taken.
struct SameOrigin: RouterMiddleware {
    typealias Context = ConsoleService.Context
    let auth: ConsoleAuth
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard auth.sameOrigin(host: request.head.authority, origin: request.headers[.origin]) else {
            return Page.text(.forbidden, "cross-origin request refused")
        }
        return try await next(request, context)
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
