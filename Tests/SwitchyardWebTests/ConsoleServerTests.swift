import Foundation
import Glibc
import SwitchyardConfig
import SwitchyardCore
import SwitchyardTestSupport
@testable import SwitchyardWeb
import SwitchyardWebTesting
import Testing

/// The console's server in this process (`InProcessConsole`: the engine over `InMemoryTransport`, no
/// broker): what a page, a probe and a hostile peer on loopback can make it hold.
@Suite struct ConsoleServerTests {
    /// A page that sends requests and never reads their answers: the console stops reading it (TCP pushes
    /// back) instead of queueing answers for it without end.
    @Test func aPageThatAsksAndNeverReadsIsPushedBack() async throws {
        // Enough devices that the page's first frames fill its socket: the console has answers to send
        // that the page does not take from the start.
        let lamps = (0..<300).map { ScriptedAdapter.lamp("lamp-\($0)", name: "l\($0)") }
        try await InProcessConsole.with(web: { $0.clientTimeout = 3600 }, adapters: [ScriptedAdapter(devices: lamps)]) { c in
            try await waitUntil("the lamps are listed", timeout: 10) { c.console.feed.retainedCount > 600 }
            let port = c.port
            let (fd, answer) = try await c.blocking { try HTTPProbe.webSocket(port: port, receiveBuffer: 2048) }
            defer { close(fd) }
            #expect(answer.status == 101)
            var small: Int32 = 4096
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            let disc = HTTPProbe.webSocketFrame(text: #"{"t":"disc","id":1,"adapter":"test","device_id":"lamp-1"}"#)
            let (taken, ended) = try await c.blocking { HTTPProbe.sendUntilStalled(fd, disc, limit: 4 << 20, stall: 2) }
            #expect(!ended, "the page was cut off (\(taken) bytes in)")
            #expect(taken < 512 << 10, "the console read \(taken) bytes of requests from a page that reads none of its answers")
        }
    }
}

/// A page's commands take the MQTT path, and wait for a result only where one will come.
@Suite struct ConsoleCommandTests {
    /// `/set/<field>` with a JSON object (a colour): its payload is the field's value and carries no
    /// transaction, so no result will come: it is sent as it is, and the page is told so at once.
    @Test func aFieldCommandWithAnObjectIsSentAsItIs() async throws {
        try await InProcessConsole.with { c in
            let page = PageClient(port: c.port)
            defer { page.close() }
            _ = try await page.waitFor("synced") { $0["t"] == "synced" }
            let sent = try await page.command(1, topic: "b/test/lamp/set/color", payload: ["h": 240, "s": 100], timeout: 20)
            #expect(sent["status"] == "sent", "\(sent.serialized)")
            try await waitUntil("the lamp is blue", timeout: 10) {
                c.transport.published.last { $0.topic == "b/test/lamp" }?.payload.contains(#""h":240"#) == true
            }
            // A whole /set with an object is answered with its result.
            let ok = try await page.command(2, topic: "b/test/lamp/set", payload: ["brightness": 10], timeout: 20)
            #expect(ok["status"] == "ok", "\(ok.serialized)")
        }
    }

    /// A page's status frame is `bridge/health` live, with readiness: the same fields, adapters' included.
    @Test func theStatusFrameIsTheHealthPayloadWithReadiness() async throws {
        try await InProcessConsole.with { c in
            let page = PageClient(port: c.port)
            defer { page.close() }
            let status = try await page.waitFor("status", timeout: 20) { $0["t"] == "status" }
            let health = BridgeAPI.health(uptime: 0, rss: nil, transport: TransportStats(), adapters: [:])
            #expect(Set(status.objectValue?.keys ?? [:].keys) == Set(health.objectValue!.keys).union(["t", "ready", "reasons"]))
            #expect(Set(status["mqtt"]?.objectValue?.keys ?? [:].keys) == Set(health["mqtt"]!.objectValue!.keys))
            let lamp = BridgeAPI.adapterHealth(status: .running, devices: 1, requests: 0, errors: 0, lastError: nil, lastOK: nil)
            #expect(status["adapters"]?["test"] == lamp)
            #expect(status["ready"] == true && status["reasons"] == [], "\(status)")
            // The link lost: the next status says why the bridge is not ready.
            c.transport.inject(.disconnected(reason: "test"))
            let lost = try await page.waitFor("status without the broker", timeout: 20) { $0["t"] == "status" && $0["ready"] == false }
            #expect(lost["reasons"] == ["broker: not connected"], "\(lost)")
        }
    }

    @Test func aPagesMessagesAreReadOrIgnored() {
        #expect(PageProtocol.request(#"{"t":"sub","mirror":true}"#) == .sub(mirror: true))
        #expect(PageProtocol.request(#"{"t":"sub"}"#) == .sub(mirror: false))
        #expect(PageProtocol.request(#"{"t":"disc","id":9,"adapter":"a","device_id":"d"}"#) == .disc(id: 9, adapter: "a", deviceID: "d"))
        #expect(PageProtocol.request(#"{"t":"cmd","id":1,"topic":"b/x/set"}"#) == .cmd(id: 1, ["t": "cmd", "id": 1, "topic": "b/x/set"]))
        for ignored in [#"{"t":"disc","adapter":1,"device_id":"d"}"#, #"{"t":"other"}"#, #"{"id":1}"#, "not json", "[]"] {
            #expect(PageProtocol.request(ignored) == nil, "\(ignored)")
        }
    }

    @Test func whatIsSubmittedForEachKindOfTopic() {
        let scheme = TopicScheme(base: "b")
        func submit(_ topic: String, _ payload: JSONValue, mirrors: [String] = []) -> PageProtocol.Submission {
            PageProtocol.submission(["t": "cmd", "topic": .string(topic), "payload": payload], scheme: scheme, mirrors: mirrors, transaction: "c-1")
        }
        #expect(submit("b/test/lamp/set", ["state": "ON"])
                == .ask(topic: "b/test/lamp/set", payload: Array(#"{"state":"ON","transaction":"c-1"}"#.utf8), transaction: "c-1"))
        #expect(submit("b/test/lamp/set", "ON") == .send(topic: "b/test/lamp/set", payload: Array("ON".utf8)))
        #expect(submit("b/test/lamp/set/color", ["h": 1, "s": 2]) == .send(topic: "b/test/lamp/set/color", payload: Array(#"{"h":1,"s":2}"#.utf8)))
        #expect(submit("b/ha/light/porch/set", ["state": "ON"], mirrors: ["ha"]) == .send(topic: "b/ha/light/porch/set", payload: Array(#"{"state":"ON"}"#.utf8)))
        #expect(submit("b/test/lamp/get", "") == .send(topic: "b/test/lamp/get", payload: []))
        #expect(submit("b/bridge/request/republish", [:])
                == .ask(topic: "b/bridge/request/republish", payload: Array(#"{"transaction":"c-1"}"#.utf8), transaction: "c-1"))
        guard case .refused = submit("b/test/lamp", ["state": "ON"]) else { Issue.record("state topic taken"); return }
        guard case .refused = PageProtocol.submission(["t": "cmd"], scheme: scheme, mirrors: [], transaction: "c-1") else { Issue.record("no topic taken"); return }
    }
}

/// What the console logs: the routine ends of a connection or of the server are no errors.
@Suite struct ConsoleLogTests {
    @Test func aPageCutOffAPeerGoneAndAStopAreNoErrors() async throws {
        // Enough devices to fill a page's socket.
        let lamps = (0..<300).map { ScriptedAdapter.lamp("lamp-\($0)", name: "l\($0)") }
        let (logs, page) = try await InProcessConsole.with(web: { $0.clientTimeout = 1 }, adapters: [ScriptedAdapter(devices: lamps)]) { c in
            try await waitUntil("the lamps are listed", timeout: 10) { c.console.feed.retainedCount > 600 }
            // A page that never reads: cut off.
            let port = c.port
            let (fd, answer) = try await c.blocking { try HTTPProbe.webSocket(port: port, receiveBuffer: 2048) }
            defer { close(fd) }
            #expect(answer.status == 101)
            try await waitUntil("the page is cut off", timeout: 30) { c.engine.bounds.snapshot["web_slow_client"] == 1 }
            // A peer that goes away before its head is whole, and one whose head is refused.
            let gone = try HTTPProbe.connect(port: port)
            try HTTPProbe.write(gone, Array("GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n".utf8))
            close(gone)
            #expect(try await c.get("/ws", headers: [("Upgrade", "websocket"), ("X-Big", String(repeating: "b", count: 20_000))]).status == 431)
            // A page open when the console stops.
            let page = PageClient(port: port)
            _ = try await page.waitFor("synced", timeout: 30) { $0["t"] == "synced" }
            return (c.logs, page)
        }
        page.close()
        let loud = logs.at(.warning)
        #expect(loud.isEmpty, "\(loud.map(\.message))")
        // Said, at debug.
        #expect(logs.entries.withLock { $0.contains { $0.level == .debug && $0.message.hasPrefix("Waiting on child channel") } })
    }
}

/// Who gets an answer.
@Suite struct ConsoleAccessTests {
    /// Without a token, a Host that is not a loopback name (a name of an attacker's that resolves to
    /// 127.0.0.1) gets nothing from any path, probes and /metrics included; loopback names get answers.
    @Test func everyPathRefusesAHostThatIsNotLoopback() async throws {
        try await InProcessConsole.with { c in
            for path in ["/", "/console.js", "/console.css", "/metrics", "/livez", "/readyz", "/ws"] {
                let rebound = try await c.get(path, headers: [("Host", "evil.example:\(c.port)")])
                #expect(rebound.status == 403, "\(path): \(rebound.status)")
                let local = try await c.get(path, headers: [("Host", "localhost:\(c.port)")])
                #expect(local.status != 403, "\(path): \(local.status)")
                let crossSite = try await c.get(path, headers: [("Origin", "http://evil.example")])
                #expect(crossSite.status == 403, "\(path) from another site: \(crossSite.status)")
            }
            let port = c.port
            let login = try await c.blocking {
                try HTTPProbe.request(port: port, "/login", method: "POST", headers: [("Host", "evil.example")], body: Array("token=x".utf8))
            }
            #expect(login.status == 403)
        }
    }
}

/// What a peer that never finishes its request head can hold.
@Suite struct ConsoleHeadTests {
    /// A head sent a byte at a time (each byte would restart an idle timer) is cut off: the whole first
    /// head must come within `Bound.headTimeout` of the accept.
    @Test func aHeadSentAByteAtATimeIsCutOff() async throws {
        try await InProcessConsole.with { c in
            let fd = try HTTPProbe.connect(port: c.port)
            defer { close(fd) }
            try HTTPProbe.write(fd, Array("GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".utf8))
            // Far longer than the deadline, and never an idle second: only a deadline on the head closes it.
            let closed = try await c.blocking {
                for _ in 0..<80 {
                    if HTTPProbe.isClosed(fd, waiting: 0.5) { return true }
                    _ = Glibc.send(fd, "a", 1, Int32(MSG_NOSIGNAL))
                }
                return false
            }
            #expect(closed, "a head that never ends kept its connection")
            #expect(c.engine.bounds.snapshot["web_head_timeout"] == 1)
        }
    }

    /// Peers that open connections and never finish a head cannot take every connection: past
    /// `Bound.waitingForHead` of them, a new connection closes the oldest, and `/livez` answers.
    @Test func slowHeadsGiveWayAndTheProbeAnswers() async throws {
        try await InProcessConsole.with { c in
            var slow: [Int32] = []
            defer { for fd in slow { close(fd) } }
            for _ in 0..<ConsoleService.Bound.connections {
                let fd = try HTTPProbe.connect(port: c.port)
                slow.append(fd)
                try HTTPProbe.write(fd, Array("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n".utf8))
            }
            // The probe may take a while on a starved machine (a full AddressSanitizer run saw no answer within
            // 10 s): what shows that it was let through by the slow heads giving way, not by their head timeout
            // (10 s), is the count of connections that gave way, checked below.
            let probe = try await c.alive()
            #expect(probe.status == 200 && probe.body == "alive\n", "/livez answered \(probe.status): \(probe.body.prefix(200))")
            // The oldest gave way.
            let (all, first) = (slow, slow[0])
            #expect(try await c.blocking { HTTPProbe.isClosed(first, waiting: 10) })
            let open = try await c.blocking { () -> Int in
                var open = all
                for _ in 0..<100 where open.count > ConsoleService.Bound.waitingForHead {
                    open = open.filter { !HTTPProbe.isClosed($0, waiting: 0.01) }
                }
                return open.count
            }
            // Those still waiting are at most the bound (their head timeout may have closed the rest by now).
            #expect(open <= ConsoleService.Bound.waitingForHead, "\(open) connections wait for their heads")
            #expect((c.engine.bounds.snapshot["web_head_waiting"] ?? 0) >= ConsoleService.Bound.connections - ConsoleService.Bound.waitingForHead)
        }
    }

    /// A head over the bounds (bytes, or fields) is answered 431, and its connection closed.
    @Test func anOversizeHeadIsAnswered431() async throws {
        try await InProcessConsole.with { c in
            let big = try await c.get("/livez", headers: [("X-Big", String(repeating: "b", count: 20_000))])
            #expect(big.status == 431, "\(big.status) \(big.body)")
            let many = try await c.get("/livez", headers: (0..<70).map { ("X-F\($0)", "v") })
            #expect(many.status == 431, "\(many.status) \(many.body)")
            let bad = try await c.get("/livez", headers: [("Bad Header", "v")])
            #expect(bad.status == 400, "\(bad.status) \(bad.body)")
            #expect(c.engine.bounds.snapshot["web_head_size"] == 2)
            let alive = try await c.alive()
            #expect(alive.status == 200, "/livez answered \(alive.status): \(alive.body.prefix(200))")
        }
    }
}

@Suite struct ConsoleRepliesTests {
    /// The answers waiting for a page: bounded in bytes; the reader's own counted until sent.
    @Test func answersAreBoundedAndTheReadersAreCountedUntilSent() {
        var r = ConsoleClient.Replies()
        let a = r.add(String(repeating: "a", count: 600), .reader, maxBytes: 1000)
        let b = r.add(String(repeating: "b", count: 300), .command, maxBytes: 1000)
        let over = r.add(String(repeating: "c", count: 101), .command, maxBytes: 1000)
        #expect(a && b && !over)
        #expect(r.fromReader == 1 && r.bytes == 900)
        let taken = r.take()
        #expect(taken.count == 2 && r.queue.isEmpty)
        // Taken is not sent: the bytes stay counted until each is.
        let stillOver = r.add(String(repeating: "c", count: 101), .command, maxBytes: 1000)
        #expect(!stillOver)
        r.sent(taken[0])
        #expect(r.fromReader == 0 && r.bytes == 300)
        r.sent(taken[1])
        let fits = r.add(String(repeating: "c", count: 1000), .command, maxBytes: 1000)
        #expect(r.bytes == 1000 && fits)
    }
}
