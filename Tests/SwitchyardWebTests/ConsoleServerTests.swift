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
            let (fd, answer) = try HTTPProbe.webSocket(port: c.port, receiveBuffer: 2048)
            defer { close(fd) }
            #expect(answer.status == 101)
            var small: Int32 = 4096
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            let disc = HTTPProbe.webSocketFrame(text: #"{"t":"disc","id":1,"adapter":"test","device_id":"lamp-1"}"#)
            let (taken, ended) = HTTPProbe.sendUntilStalled(fd, disc, limit: 4 << 20, stall: 2)
            #expect(!ended, "the page was cut off (\(taken) bytes in)")
            #expect(taken < 512 << 10, "the console read \(taken) bytes of requests from a page that reads none of its answers")
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
