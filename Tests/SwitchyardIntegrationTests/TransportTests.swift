import Foundation
import Logging
import Testing
import SwitchyardCore
import SwitchyardMQTT
import SwitchyardTestSupport

@Suite struct TransportTests {
    static func logger() -> Logger {
        var l = Logger(label: "t")
        l.logLevel = .critical
        return l
    }

    @Test func aBrokerThatNeverAnswersMakesTheClientRecreateItselfAndKeepTrying() async throws {
        let silent = try SilentListener()
        let t = MosquittoTransport(settings: MQTTSettings(port: silent.port, clientID: "stuck-test", stateTopic: "x/bridge/state",
                                                         reconnectMinDelay: 0.05, reconnectMaxDelay: 0.2, connectTimeout: 0.3,
                                                         stuckAfter: 1), logger: Self.logger())
        t.start()
        try await waitUntil("client recreated") { t.stats().clientRecreations >= 1 }
        #expect(silent.connections >= 2)
        #expect(!t.stats().connected)
        silent.close()
        await t.stop(timeout: 1)
    }

    /// A subscription set before a publish reaches the broker before it, even when both happen the moment
    /// the connection comes up (the discovery sweep's sentinel relies on it). Each round is a fresh
    /// connection: the race was between the network thread's subscription sync and its outbox pump.
    @Test func aSubscriptionMadeBeforeAPublishAlwaysSeesIt() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        for round in 0..<40 {
            let t = MosquittoTransport(settings: MQTTSettings(port: broker.port, clientID: "order-\(base)-\(round)",
                                                             stateTopic: "\(base)/bridge/state"), logger: Self.logger())
            t.start()
            let topic = "\(base)/order/\(round)"
            let seen = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    for await event in t.events {
                        switch event {
                        case .connected:
                            t.setSubscriptions([topic])
                            t.publish(topic, "x", qos: 1)
                        case .message(let m) where m.topic == topic: return true
                        default: break
                        }
                    }
                    return false
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(5))
                    return false
                }
                let first = try await group.next() ?? false
                group.cancelAll()
                return first
            }
            await t.stop(timeout: 1)
            #expect(seen, "round \(round): the publish overtook the subscription")
            if !seen { break }
        }
    }

    /// A clean session lost while a retained message was in flight: libmosquitto would send it again after the
    /// reconnect, ahead of anything of the outbox's, though the broker dropped that session and the birth said
    /// on the new one supersedes it. A standby instance's watching connection is such a session, and what was in
    /// flight its `active` claim from before a pause (design.md §18): said again, two instances claimed active.
    @Test func aLostCleanSessionSendsNothingOfItAgain() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let relay = try CountingRelay(to: broker.port)
        defer { relay.close() }
        let base = uniqueBase()
        let topic = "\(base)/bridge/instances/a"
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe(topic)
        var s = MQTTSettings(port: relay.port, clientID: "clean-\(base)", stateTopic: topic, reconnectMinDelay: 0.05, reconnectMaxDelay: 0.2)
        s.persistentSession = false
        s.birthPayload = Array("standby".utf8)
        s.willPayload = Array("offline".utf8)
        let t = MosquittoTransport(settings: s, logger: Self.logger())
        t.start()
        _ = try await probe.waitFor(topic: topic, payload: "standby")
        // The broker takes the claim and passes it on; its acknowledgement never comes back: still in flight.
        relay.hold(true)
        t.publish(topic, Array("active".utf8), qos: 1, retain: true)
        _ = try await probe.waitFor(topic: topic, payload: "active")
        probe.clear()
        relay.cutAll()
        relay.hold(false)
        try await waitUntil("reconnected") { t.stats().connects >= 2 && t.stats().connected }
        _ = try await probe.waitFor(topic: topic, payload: "standby")
        try await Task.sleep(for: .seconds(1))
        let after = probe.messages(on: topic).map(\.payload)
        #expect(!after.contains("active"), "said again after the session was lost: \(after)")
        #expect(after.last == "standby", "\(after)")
        await t.stop(timeout: 2)
    }

    /// The broker closing the connection (another client took the client id: design.md §18 rule 3) is noticed
    /// at once, even while the core has its fill of inbound messages and the socket is not read for them.
    @Test func aTakeoverIsNoticedWhileInboundIsFull() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        var s = MQTTSettings(port: broker.port, clientID: "full-\(base)", stateTopic: "\(base)/bridge/state")
        s.reconnects = false
        s.maxInbound = 2
        let t = MosquittoTransport(settings: s, logger: Self.logger())
        t.setSubscriptions(["\(base)/in/#"])
        t.start()
        // Its events are never taken: after two messages the socket is not read.
        try await waitUntil("connected") { t.stats().connected }
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        for i in 0..<20 { probe.publish("\(base)/in/\(i)", "x") }
        try await waitUntil("reading paused") { t.stats().inboundPauses >= 1 }
        let thief = try await MQTTProbe.connect(port: broker.port, clientID: "full-\(base)")
        defer { thief.close() }
        // The keepalive (60 s) would find it in a minute; the close itself must.
        try await waitUntil("the close noticed", timeout: 10) { !t.stats().connected }
        #expect(t.endReason == .lost)
        await t.stop(timeout: 1)
    }

    /// A transport abandoned ends as if its connection were lost: nothing more goes out, the broker sends its
    /// Last Will (no DISCONNECT), `events` ends and `endReason` says `lost`. A standby instance whose watching
    /// connection ended steps down so (design.md §18).
    @Test func anAbandonedTransportEndsWithoutAWord() async throws {
        let broker = try await Broker.start()
        defer { broker.stop() }
        let base = uniqueBase()
        let probe = try await MQTTProbe.connect(port: broker.port)
        defer { probe.close() }
        try await probe.subscribe("\(base)/#")
        var s = MQTTSettings(port: broker.port, clientID: "abandon-\(base)", stateTopic: "\(base)/bridge/state")
        s.reconnects = false
        s.willPayload = Array("gone".utf8)
        let t = MosquittoTransport(settings: s, logger: Self.logger())
        t.start()
        let ended = Task {
            for await _ in t.events {}
            return true
        }
        _ = try await probe.waitFor(topic: "\(base)/bridge/state", payload: "online")
        t.abandon()
        t.publish("\(base)/after", Array("x".utf8), qos: 1, retain: false)
        _ = try await probe.waitFor(topic: "\(base)/bridge/state", payload: "gone")
        #expect(await ended.value)
        #expect(t.endReason == .lost)
        await t.stop(timeout: 1)
        try await Task.sleep(for: .milliseconds(300))
        #expect(probe.messages(on: "\(base)/after").isEmpty)
        #expect(probe.last("\(base)/bridge/state") == "gone", "stop said nothing more: \(probe.messages(on: "\(base)/bridge/state"))")
    }

    @Test func mqtt5CommandsOlderThanTheMaxAgeAreDropped() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        let adapter = ScriptedAdapter(devices: [ScriptedAdapter.lamp()])
        var options = InProcessBridge.Options()
        options.protocolVersion = 5
        try await InProcessBridge.with(port: broker.port, base: base, adapter: adapter, options: options) { _ in
            let probe = try await MQTTProbe.connect(port: broker.port, protocolVersion: 5)
            try await probe.subscribe("\(base)/#")
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            let old = Timestamp.rfc3339(Date().addingTimeInterval(-120))
            probe.publish("\(base)/test/lamp/set", #"{"brightness": 1}"#, userProperties: ["timestamp": old])
            probe.publish("\(base)/test/lamp/set", #"{"brightness": 2}"#, userProperties: ["timestamp": Timestamp.rfc3339(Date())])
            try await probe.waitFor(topic: "\(base)/test/lamp", payload: #"{"brightness":2,"state":"OFF"}"#)
            let errors = probe.logErrors(base)
            #expect(errors.count == 1)
            #expect(errors.first?["message"]?.stringValue?.contains("over mqtt.command_max_age") == true)
            #expect(await adapter.commands.map(\.fields) == [["brightness": 2]])
        }
    }

    @Test func healthReportsTheConnectionAndTheAdapters() async throws {
        let broker = try await Broker.start()
        let base = uniqueBase()
        try await InProcessBridge.with(port: broker.port, base: base, adapter: ScriptedAdapter(devices: [ScriptedAdapter.lamp()])) { bridge in
            let probe = try await MQTTProbe.connect(port: broker.port)
            try await probe.subscribe("\(base)/#")
            // The adapter has listed its device and said it runs (each publish is in the outbox when the call returns).
            try await probe.waitFor(topic: "\(base)/test/lamp/availability", payload: "online")
            try await probe.waitFor("the adapter running") { ms in
                ms.contains { $0.topic == "\(base)/bridge/info" && $0.payload.contains(#""test":"running""#) }
            }
            await bridge.engine.publishHealth()
            let h = try JSONValue.parse(try await probe.waitFor(topic: "\(base)/bridge/health").payload)
            #expect(h["mqtt"]?["connected"] == true)
            #expect(h["mqtt"]?["dropped"] == 0)
            #expect((h["mqtt"]?["published"]?.intValue ?? 0) > 5)
            #expect((h["rss_bytes"]?.intValue ?? 0) > 1_000_000)
            #expect(h["adapters"]?["test"]?["status"] == "running")
            #expect(h["adapters"]?["test"]?["devices"] == 1)
        }
    }
}

@Suite struct TLSTests {
    /// A throwaway CA and a server certificate for 127.0.0.1, made with the openssl CLI.
    static func makeCertificates() async throws -> URL {
        let dir = TestEnvironment.makeTempDir("tls")
        let script = """
        set -e
        cd '\(dir.path)'
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj '/CN=switchyard test CA' 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj '/CN=127.0.0.1' 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1\\n' > ext.cnf
        openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 2 -extfile ext.cnf 2>/dev/null
        chmod 644 server.key
        """
        let child = try ChildProcess(path: "/bin/sh", arguments: ["-c", script], outputFile: dir.appendingPathComponent("openssl.log").path)
        // RSA keys take seconds on a loaded machine: waited for without holding a thread of the pool.
        guard await child.wait(timeout: 120) == 0 else { throw TestError("openssl failed") }
        return dir
    }

    @Test func theBrokerCertificateIsVerifiedByDefault() async throws {
        guard TestEnvironment.which("openssl") != nil else { throw TestError("openssl is not installed") }
        let certs = try await Self.makeCertificates()
        let tlsPort = TestEnvironment.freePort()
        let tlsBroker = try await Broker.start(extraConfig: """
        listener \(tlsPort) 127.0.0.1
        cafile \(certs.path)/ca.crt
        certfile \(certs.path)/server.crt
        keyfile \(certs.path)/server.key
        log_type information
        """)
        var logger = Logger(label: "t")
        logger.logLevel = .critical
        func transport(ca: String?) -> MosquittoTransport {
            MosquittoTransport(settings: MQTTSettings(port: tlsPort, tls: .init(caFile: ca), clientID: "tls-\(UUID().uuidString.prefix(6))",
                                                      stateTopic: "tls/bridge/state", reconnectMinDelay: 0.1, reconnectMaxDelay: 0.3),
                               logger: logger)
        }
        // Trusted CA: connects and publishes.
        let good = transport(ca: "\(certs.path)/ca.crt")
        good.start()
        try await waitUntil("TLS connection") { good.stats().connected }
        // The system store does not know our CA: verification fails, it never connects.
        let untrusted = transport(ca: nil)
        untrusted.start()
        // The broker sees our client abandon the handshake (it refuses the certificate), attempt after attempt.
        try await waitUntil("two abandoned handshakes") { tlsBroker.log.components(separatedBy: "Client connection from 127.0.0.1 failed").count > 2 }
        #expect(!untrusted.stats().connected)
        #expect(untrusted.stats().connects == 0)
        await untrusted.stop(timeout: 0.5)
        await good.stop(timeout: 2)
        await tlsBroker.stop()
    }
}
