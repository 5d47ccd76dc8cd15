import CBluetooth
import Foundation
import Glibc
@testable import NovaAdapter
import NovaSimulators
import SwitchyardCore
import SwitchyardTestSupport
import Testing

/// Byte-exact vectors from docs/upstreams/nova.md §2.3 (the protocol doc and the SDK's NVCodecV1Tests).
@Suite struct NovaCodecTests {
    func text(_ b: [UInt8]) -> String { String(decoding: b, as: UTF8.self) }
    func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02X", $0) }.joined(separator: " ") }

    @Test func requestsEncodeAsTheSpecsVectors() {
        #expect(hex(NovaCodec.encode(.light(warm: 255, cool: 255, timeoutMs: 10_000), id: 1)) == "28 30 31 3A 4C 2C 46 46 2C 46 46 2C 32 37 31 30 29")
        #expect(hex(NovaCodec.encode(.off, id: 2)) == "28 30 32 3A 4F 29")
        #expect(hex(NovaCodec.encode(.ping, id: 0)) == "28 30 30 3A 50 29")
        #expect(text(NovaCodec.encode(.light(warm: 0, cool: 0, timeoutMs: 0), id: 0)) == "(00:L,00,00,0000)")
        #expect(text(NovaCodec.encode(.light(warm: 32, cool: 255, timeoutMs: 5000), id: 10)) == "(0A:L,20,FF,1388)")
        #expect(text(NovaCodec.encode(.light(warm: 255, cool: 255, timeoutMs: 65_535), id: 255)) == "(FF:L,FF,FF,FFFF)")
        #expect(text(NovaCodec.encode(.ping, id: 10)) == "(0A:P)" && text(NovaCodec.encode(.ping, id: 255)) == "(FF:P)")
        #expect(text(NovaCodec.encode(.off, id: 10)) == "(0A:O)" && text(NovaCodec.encode(.off, id: 255)) == "(FF:O)")
        // The doc's erratum: 0x01F4 is 500 ms.
        #expect(text(NovaCodec.encode(.light(warm: 0, cool: 255, timeoutMs: 500), id: 6)) == "(06:L,00,FF,01F4)")
    }

    @Test func acksAreParsedStrictly() {
        #expect(NovaCodec.ack([0x28, 0x30, 0x31, 0x3A, 0x41, 0x29]) == 1)
        #expect(NovaCodec.ack(Array("(00:A)".utf8)) == 0)
        #expect(NovaCodec.ack(Array("(ff:A)".utf8)) == 255)
        for bad in ["(00:X)", "(00:A", "00:A)", "(0G:A)", "(000:A)", " (00:A)", ""] { #expect(NovaCodec.ack(Array(bad.utf8)) == nil, "\(bad)") }
    }

    @Test func theSDKShortcutPresetsAndLowPWMProtection() {
        #expect(NovaCommand.flash(warm: 0, cool: 0, timeoutMs: 1000) == .off)
        #expect(NovaCommand.flash(warm: 255, cool: 0, timeoutMs: 0) == .off)
        #expect(NovaCommand.flash(warm: 255, cool: 0, timeoutMs: 1) == .light(warm: 255, cool: 0, timeoutMs: 1))
        #expect(NovaSettings.presets["gentle"]! == (31, 31) && NovaSettings.presets["warm"]! == (255, 127))
        let (raised, changed) = NovaSettings(warm: 31, cool: 31, timeoutMs: 10_000).protected(allowLowPWM: false)
        #expect(raised == NovaSettings(warm: 64, cool: 64, timeoutMs: 10_000) && changed)
        #expect(NovaSettings(warm: 0, cool: 65, timeoutMs: 1).protected(allowLowPWM: false).1 == false)
        #expect(NovaSettings(warm: 1, cool: 0, timeoutMs: 1).protected(allowLowPWM: true).0.warm == 1)
    }

    @Test func signalFollowsTheSDKFormulaTable() {
        let table: [(Int, Int?)] = [(-40, 100), (-30, 100), (-45, 90), (-50, 80), (-60, 60), (-70, 40), (-80, 20), (-85, 10), (-89, 2),
                                    (-90, 0), (-100, 0), (127, nil)]
        for (rssi, signal) in table { #expect(novaSignal(rssi: rssi) == signal, "\(rssi)") }
    }
}

@Suite struct NovaAutoConnectTests {
    typealias C = AutoConnectCandidate

    @Test func strongestFirstWithinTheLimit() {
        let plan = planAutoConnect([C(address: "a", status: .available, signal: 40), C(address: "b", status: .available, signal: 80),
                                    C(address: "c", status: .unavailable, signal: 90)], rules: .init(maxFlashes: 1))
        #expect(plan == AutoConnectPlan(connect: ["b"], disconnect: []))
    }

    @Test func existingConnectionsKeepTheirSlot() {
        let plan = planAutoConnect([C(address: "near", status: .available, signal: 100), C(address: "cur", status: .ready, signal: 50)],
                                   rules: .init(maxFlashes: 1))
        #expect(plan == AutoConnectPlan(connect: [], disconnect: []))
    }

    @Test func listsMinimumSignalAndUnknownSignal() {
        let flashes = [C(address: "weak", status: .available, signal: 5), C(address: "black", status: .ready, signal: 90),
                       C(address: "unknown", status: .available, signal: nil), C(address: "ok", status: .available, signal: 60)]
        let plan = planAutoConnect(flashes, rules: .init(maxFlashes: 3, minSignal: 10, blacklist: ["black"]))
        // The blacklisted connection is dropped; an unknown signal ranks last but is not held back.
        #expect(plan == AutoConnectPlan(connect: ["ok", "unknown"], disconnect: ["black"]))
        let white = planAutoConnect(flashes, rules: .init(maxFlashes: 3, whitelist: ["weak", "unknown"]))
        #expect(white == AutoConnectPlan(connect: ["unknown"], disconnect: ["black"]))
    }
}

/// The command link against a scripted peripheral: what it writes, and which acks it gets back.
@Suite struct NovaLinkTests {
    final class Wire: Sendable {
        let written = Locked<[String]>([])
        let errors = Locked<[String]>([])
    }

    @Test func oneInFlightFIFOAndWrappingIDs() async throws {
        let wire = Wire()
        try await withChildTasks { tasks in
            let link = NovaLink(ackTimeout: 5, tasks: tasks, clock: ManualClock(),
                                write: { b in wire.written.withLock { $0.append(String(decoding: b, as: UTF8.self)) } },
                                onProtocolError: { e in wire.errors.withLock { $0.append(e) } })
            async let first = link.send(.light(warm: 255, cool: 255, timeoutMs: 10_000))
            try await waitFor(link) { wire.written.withLock { $0.count } == 1 }
            async let second = link.send(.off)
            // The second is queued behind the first, not written, until the first is acked (the clock,
            // a manual one, never moves: no timeout can let it go).
            try await waitFor(link) { await link.queue.count == 1 }
            #expect(wire.written.withLock { $0 } == ["(00:L,FF,FF,2710)"])
            await link.received(Array("(00:A)".utf8))
            try await waitFor(link) { wire.written.withLock { $0.count } == 2 }
            await link.received(Array("(01:A)".utf8))
            if case .acked = await first {} else { Issue.record("first not acked") }
            if case .acked = await second {} else { Issue.record("second not acked") }
            #expect(wire.written.withLock { $0 } == ["(00:L,FF,FF,2710)", "(01:O)"])
            #expect(wire.errors.withLock { $0 }.isEmpty)
            // Ids wrap FF -> 00.
            for i in 2...255 {
                async let r = link.send(.ping)
                try await waitFor(link) { wire.written.withLock { $0.count } == i + 1 }
                await link.received(Array("(\(NovaCodec.hex(i, 2)):A)".utf8))
                _ = await r
            }
            async let wrapped = link.send(.ping)
            try await waitFor(link) { wire.written.withLock { $0.last } == "(00:P)" }
            await link.received(Array("(00:A)".utf8))
            _ = await wrapped
        }
    }

    @Test func anAckTimeoutFailsThatCommandOnlyAndABadAckAsksForADisconnect() async throws {
        let wire = Wire()
        let clock = ManualClock()
        try await withChildTasks { tasks in
            let link = NovaLink(ackTimeout: 2, tasks: tasks, clock: clock,
                                write: { b in wire.written.withLock { $0.append(String(decoding: b, as: UTF8.self)) } },
                                onProtocolError: { e in wire.errors.withLock { $0.append(e) } })
            async let timedOut = link.send(.ping)
            // Its ack timer sleeps until 2 s; just before, nothing has happened.
            try await waitFor(link) { clock.sleeping == 1 }
            clock.advance(by: .milliseconds(1999))
            #expect(await link.awaiting != nil)
            clock.advance(by: .milliseconds(1))
            #expect(await timedOut == .timedOut)
            async let next = link.send(.off)
            try await waitFor(link) { wire.written.withLock { $0.count } == 2 }
            await link.received(Array("(01:A)".utf8))
            if case .acked = await next {} else { Issue.record("the next command was not carried out after a timeout") }
            await link.received(Array("(00:A)".utf8))          // a late ack: nothing awaits it
            await link.received(Array("(0X:A)".utf8))          // malformed
            #expect(wire.errors.withLock { $0 } == ["unexpected ack for id 00", "malformed ack \"(0X:A)\""])
            // The first command's timer, still sleeping, must not end the one sent after it.
            async let pending = link.send(.ping)
            try await waitFor(link) { wire.written.withLock { $0.count } == 3 }
            clock.advance(by: .seconds(1))
            #expect(await link.awaiting != nil)
            await link.close()
            #expect(await pending == .disconnected)
            #expect(await link.send(.ping) == .disconnected)
        }
    }

    /// Waits (10 s of the time it is given to run: `PollBudget`) until `condition` holds. On a timeout the
    /// link is closed first: its sends then end (`.disconnected`), so the test's pending `async let`s, awaited
    /// as its scope ends, let it fail instead of waiting for ever on acks a manual clock never times out.
    func waitFor(_ link: NovaLink, _ condition: @Sendable () async -> Bool) async throws {
        var budget = PollBudget(10)
        while true {
            let asked = budget.now
            if await condition() { return }
            if await !budget.sleep(0.005, checkedSince: asked) { break }
        }
        await link.close()
        throw TestError("timed out waiting on the link")
    }
}

/// The ATT client and the Nova link over a socketpair against the ATT-level simulated Nova: the
/// PDUs are the ones of the spec's recorded exchange (docs/upstreams/nova.md §3.5).
@Suite struct NovaATTTests {
    func pair() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &fds) == 0 else { throw CancellationError() }
        return (fds[0], fds[1])
    }

    func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02X", $0) }.joined(separator: " ") }

    /// The next PDU the other side wrote to `fd`, waiting (without blocking a thread) up to 10 s.
    func readPDU(_ fd: Int32) async throws -> [UInt8]? {
        for _ in 0..<1000 {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 0) > 0 {
                var buf = [UInt8](repeating: 0, count: 512)
                let n = read(fd, &buf, buf.count)
                return n > 0 ? Array(buf[0..<n]) : nil
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    @Test func discoveryAndTheNovaExchangeMatchTheRecording() async throws {
        let (central, peripheralFD) = try pair()
        let nova = NovaATTPeripheral(fd: peripheralFD)
        defer { nova.close() }   // each side closes its own descriptor when its link ends
        let notes = Locked<[[UInt8]]>([])
        let client = ATTClient(fd: central, onNotification: { _, v in notes.withLock { $0.append(v) } }, onClose: { _ in })
        client.start()
        defer { client.close() }
        let handles = try await client.discoverNova()
        #expect(handles == .init(request: 0x000E, response: 0x0010, cccd: 0x0011, mtu: 23))
        #expect(nova.received.map(hex) == ["02 B9 00", "10 01 00 FF FF 00 28", "08 0C 00 11 00 03 28", "08 10 00 11 00 03 28",
                                           "04 11 00 11 00", "12 11 00 01 00"])
        #expect(nova.notificationsOn)

        let errors = Locked<[String]>([])
        try await withChildTasks { tasks in
            let link = NovaLink(ackTimeout: 0.5, tasks: tasks, write: { try await client.write(handles.request, $0) },
                                onProtocolError: { e in errors.withLock { $0.append(e) } })
            // The client's notifications feed the link (what the flash service wires up).
            tasks.spawn {
                var seen = 0
                while !Task.isCancelled {
                    let batch = notes.withLock { Array($0.dropFirst(seen)) }
                    for v in batch { await link.received(v) }
                    seen += batch.count
                    try? await Task.sleep(for: .milliseconds(2))
                }
            }
            if case .acked = await link.send(.ping) {} else { Issue.record("ping not acked") }
            if case .acked = await link.send(.light(warm: 255, cool: 255, timeoutMs: 10_000)) {} else { Issue.record("light not acked") }
            #expect(nova.light == NovaATTPeripheral.Light(warm: 255, cool: 255, timeoutMs: 10_000))
            if case .acked = await link.send(.off) {} else { Issue.record("off not acked") }
            #expect(nova.light == nil)
            #expect(nova.received.suffix(3).map(hex) == ["12 0E 00 28 30 30 3A 50 29",
                                                         "12 0E 00 28 30 31 3A 4C 2C 46 46 2C 46 46 2C 32 37 31 30 29",
                                                         "12 0E 00 28 30 32 3A 4F 29"])
            #expect(notes.withLock { $0 }.map { String(decoding: $0, as: UTF8.self) } == ["(00:A)", "(01:A)", "(02:A)"])
            // A malformed ack asks for a disconnect.
            nova.setBadAck(true)
            _ = await link.send(.ping)   // times out: the bad ack is refused
            #expect(errors.withLock { $0 } == ["malformed ack \"(03:X)\""])
        }
    }

    /// Once the reader has closed the link's descriptor, its number may be the next socket's: closing
    /// the client (or sending) then must not touch that socket. (It did: a simulator's HTTP connection
    /// that got the number was shut down mid-request, "Server returned nothing".)
    @Test func aClosedLinkNeverTouchesTheSocketThatReusesItsNumber() async throws {
        // Both ends of a link: the bridge's ATT client and the simulated flash. Each closes its descriptor
        // when the other side goes; `close()` afterwards must leave alone whatever has that number now.
        for side in ["client", "peripheral"] {
            var reused = false
            for _ in 0..<300 where !reused {
                let (mine, other) = try pair()
                let ended = Locked(false)
                var closeIt: () -> Void = {}
                var readerEnded: () -> Bool = { false }
                if side == "client" {
                    let client = ATTClient(fd: mine, onNotification: { _, _ in }, onClose: { _ in ended.withLock { $0 = true } })
                    client.start()
                    closeIt = { client.close() }
                    readerEnded = { ended.withLock { $0 } }   // called after the descriptor is closed
                } else {
                    let nova = NovaATTPeripheral(fd: mine)
                    closeIt = { nova.close() }
                    readerEnded = { !nova.isOpen }           // set with the close, under one lock
                }
                close(other)   // the other side goes: the reader closes `mine`
                for _ in 0..<500 where !readerEnded() { try await Task.sleep(for: .milliseconds(2)) }
                #expect(readerEnded(), "\(side): the reader did not end")
                let (a, b) = try pair()   // the lowest free numbers: very likely `mine` again
                defer { close(a); close(b) }
                guard a == mine || b == mine else { continue }
                reused = true
                closeIt()
                // The new pair still works both ways: nobody shut it down.
                #expect([UInt8](arrayLiteral: 1).withUnsafeBytes { send(a, $0.baseAddress, 1, Int32(MSG_NOSIGNAL)) } == 1, "\(side)")
                #expect([UInt8](arrayLiteral: 2).withUnsafeBytes { send(b, $0.baseAddress, 1, Int32(MSG_NOSIGNAL)) } == 1, "\(side)")
            }
            #expect(reused, "\(side): no descriptor number was reused in 300 tries, nothing was shown")
        }
    }

    @Test func peerRequestsAreAnsweredAndTheLinkCloseFailsPendingRequests() async throws {
        let (central, peer) = try pair()
        defer { close(peer) }
        let closed = Locked<Bool>(false)
        let client = ATTClient(fd: central, transactionTimeout: 30, onNotification: { _, _ in }, onClose: { _ in closed.withLock { $0 = true } })
        client.start()
        // The peer asks us for its MTU and for a Read By Type: MTU 23, then Request Not Supported.
        _ = [UInt8]([0x02, 0x17, 0x00]).withUnsafeBytes { send(peer, $0.baseAddress, $0.count, 0) }
        _ = [UInt8]([0x08, 0x01, 0x00, 0xFF, 0xFF, 0x03, 0x28]).withUnsafeBytes { send(peer, $0.baseAddress, $0.count, 0) }
        var buf = [UInt8](repeating: 0, count: 64)
        var answers: [String] = []
        for _ in 0..<2 {
            let n = read(peer, &buf, buf.count)
            answers.append(hex(Array(buf[0..<max(0, n)])))
        }
        #expect(answers == ["03 17 00", "01 08 00 00 06"])
        // A request that never gets its answer fails when the peer goes away.
        async let r = client.request([0x0A, 0x01, 0x00])
        #expect(try await readPDU(peer).map(hex) == "0A 01 00")   // it is on the wire, unanswered
        shutdown(peer, Int32(SHUT_RDWR))
        let failed: Bool
        do { _ = try await r; failed = false } catch { failed = true }
        #expect(failed)
        for _ in 0..<500 where !closed.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(closed.withLock { $0 })
        client.close()
    }
}

/// The spec's recorded HCI vectors (docs/upstreams/nova.md §3.3, BlueZ emulator).
@Suite struct NovaHCITests {
    func bytes(_ hex: String) -> [UInt8] { hex.split(separator: " ").map { UInt8($0, radix: 16)! } }
    func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02X", $0) }.joined(separator: " ") }

    @Test func recordedAdvertisingReportsParse() {
        let adv = bytes("04 3E 19 02 01 00 00 01 00 01 01 AA 00 0D 02 01 06 03 03 F0 FF 05 09 4E 6F 76 61 7F")
        let r = HCIAdvertising.reports(adv)
        #expect(r.count == 1)
        #expect(r[0].address == "00:AA:01:01:00:01" && r[0].addressType == 0 && r[0].eventType == 0 && r[0].rssi == nil)
        let ad = AdvertisingData.parse(r[0].data)
        #expect(ad.flags == 0x06 && ad.uuids16 == [0xFFF0] && ad.name == "Nova" && ad.isNova)
        var withRSSI = adv
        withRSSI[withRSSI.count - 1] = 0xC4
        #expect(HCIAdvertising.reports(withRSSI)[0].rssi == -60)
        let rsp = HCIAdvertising.reports(bytes("04 3E 0C 02 01 04 00 01 00 01 01 AA 00 00 7F"))
        #expect(rsp.count == 1 && rsp[0].isScanResponse && rsp[0].data.isEmpty)
        // Truncated or foreign events give nothing, never a crash.
        #expect(HCIAdvertising.reports(Array(adv.dropLast(3))).isEmpty)
        #expect(HCIAdvertising.reports(bytes("04 0E 04 01 0B 20 00")).isEmpty)
        // A 128-bit FFF0 and a short name count too; a zero-length AD ends parsing.
        let long = AdvertisingData.parse(bytes("11 07 FB 34 9B 5F 80 00 00 80 00 10 00 00 F0 FF 00 00 05 08 4E 6F 76 61 00 FF"))
        #expect(long.uuids16 == [0xFFF0] && long.name == "Nova")
    }

    @Test func anExtendedReportParses() {
        // event_type 0x0013 (legacy ADV_IND), public, addr, phys, sid, tx, rssi -60, no periodic, no direct, data.
        let e = bytes("04 3E 23 0D 01 13 00 00 01 00 01 01 AA 00 01 00 FF 7F C4 00 00 00 00 00 00 00 00 00 09 02 01 06 05 09 4E 6F 76 61")
        let r = HCIAdvertising.reports(e)
        #expect(r.count == 1 && r[0].address == "00:AA:01:01:00:01" && r[0].eventType == 0x0013 && r[0].rssi == -60)
        #expect(AdvertisingData.parse(r[0].data).isNova)
    }

    @Test func scanCommandsAreTheRecordedBytes() {
        #expect(hex(HCIAdvertising.setScanParameters(active: true, interval: 0x10, window: 0x10)) == "01 0B 20 07 01 10 00 10 00 00 00")
        #expect(hex(HCIAdvertising.setScanEnable(true)) == "01 0C 20 02 01 00")
        #expect(hex(HCIAdvertising.setScanEnable(false)) == "01 0C 20 02 00 00")
        #expect(hex(HCIAdvertising.setExtendedScanParameters(active: true, interval: 0x10, window: 0x10)) == "01 41 20 08 00 00 01 01 10 00 10 00")
        #expect(hex(HCIAdvertising.setExtendedScanEnable(true)) == "01 42 20 06 01 00 00 00 00 00")
        let cc = HCIAdvertising.commandComplete(bytes("04 0E 04 01 0B 20 00"))
        #expect(cc?.opcode == 0x200B && cc?.status == 0)
        #expect(HCIAdvertising.commandComplete(bytes("04 0E 04 01 0C 20 0C"))?.status == 0x0C)   // Command Disallowed
    }

    @Test func aScanWindowMergesScanResponsesAndAveragesRSSI() {
        var w = ScanWindow()
        let adv = bytes("04 3E 19 02 01 00 00 01 00 01 01 AA 00 0D 02 01 06 03 03 F0 FF 05 09 4E 6F 76 61 C4")
        var adv2 = adv
        adv2[adv2.count - 1] = 0xBA   // -70
        var na = adv
        na[na.count - 1] = 0x7F
        for e in [adv, adv2, na, bytes("04 3E 0C 02 01 04 00 01 00 01 01 AA 00 00 7F")] { for r in HCIAdvertising.reports(e) { w.add(r) } }
        let s = w.seen["00:AA:01:01:00:01"]!
        #expect(s.reports == 4 && s.meanRSSI == -65 && s.isNova && s.name == "Nova")
    }
}
