#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore

/// One connected flash's command channel, independent of Bluetooth (docs/upstreams/nova.md "Commands"):
/// ids 00–FF assigned when a command is queued and wrapping, a FIFO with one command awaiting its ack,
/// a 2 s ack timeout that fails that command and lets the next one go (no disconnect), and a disconnect
/// request on a malformed or unexpected ack, as the SDK does. The owner writes the bytes (ATT Write
/// Request to FFF3) and feeds FFF4 notifications in. Sending and the ack timers run as children of the
/// owner's task group (`tasks`); times are on `clock`.
public actor NovaLink {
    public enum Outcome: Sendable, Equatable {
        case acked(seconds: Double)
        case timedOut
        case disconnected
        case writeFailed(String)
    }

    public enum Status: Sendable, Equatable { case ready, busy }

    struct Pending {
        var id: UInt8
        var bytes: [UInt8]
        var continuation: CheckedContinuation<Outcome, Never>
    }

    let write: @Sendable ([UInt8]) async throws -> Void
    let ackTimeout: Double
    let tasks: ChildTasks
    let clock: any BridgeClock
    var nextID: UInt8 = 0
    var queue: [Pending] = []
    /// The command on the wire; `serial` tells its timer from a later command's (ids wrap).
    var awaiting: (pending: Pending, sentAt: MonotonicInstant, serial: Int)?
    var serial = 0
    var closed = false
    /// Called when the link must be dropped (bad or unexpected ack).
    let onProtocolError: @Sendable (String) async -> Void

    public init(ackTimeout: Double = 2, tasks: ChildTasks, clock: any BridgeClock = SystemClock(),
                write: @escaping @Sendable ([UInt8]) async throws -> Void, onProtocolError: @escaping @Sendable (String) async -> Void) {
        self.ackTimeout = ackTimeout
        self.tasks = tasks
        self.clock = clock
        self.write = write
        self.onProtocolError = onProtocolError
    }

    public var status: Status { awaiting == nil && queue.isEmpty ? .ready : .busy }

    /// Queues a command and waits for its ack, its timeout or the link's end.
    public func send(_ command: NovaCommand) async -> Outcome {
        if closed { return .disconnected }
        let id = nextID
        nextID &+= 1
        return await withCheckedContinuation { c in
            queue.append(Pending(id: id, bytes: NovaCodec.encode(command, id: id), continuation: c))
            if awaiting == nil, !tasks.spawn({ await self.pump() }) { close() }
        }
    }

    func pump() async {
        guard awaiting == nil, !closed, !queue.isEmpty else { return }
        let p = queue.removeFirst()
        serial += 1
        let mine = serial
        awaiting = (p, clock.now(), mine)
        let (clock, timeout) = (self.clock, ackTimeout)
        tasks.spawn {
            do { try await clock.sleep(seconds: timeout) } catch { return }
            await self.timeout(mine)
        }
        do {
            try await write(p.bytes)
        } catch {
            if let a = awaiting, a.serial == mine {
                awaiting = nil
                a.pending.continuation.resume(returning: .writeFailed("\(error)"))
                await pump()
            }
        }
    }

    func timeout(_ serial: Int) async {
        guard let a = awaiting, a.serial == serial else { return }
        awaiting = nil
        a.pending.continuation.resume(returning: .timedOut)
        await pump()
    }

    /// A notification from FFF4.
    public func received(_ bytes: [UInt8]) async {
        guard let id = NovaCodec.ack(bytes) else {
            await onProtocolError("malformed ack \(String(decoding: bytes, as: UTF8.self).debugDescription)")
            return
        }
        guard let a = awaiting, a.pending.id == id else {
            await onProtocolError("unexpected ack for id \(NovaCodec.hex(Int(id), 2))")
            return
        }
        awaiting = nil
        a.pending.continuation.resume(returning: .acked(seconds: (clock.now() - a.sentAt).seconds))
        await pump()
    }

    /// The connection ended: the command awaiting its ack and every queued one fail.
    public func close() {
        closed = true
        awaiting?.pending.continuation.resume(returning: .disconnected)
        awaiting = nil
        for p in queue { p.continuation.resume(returning: .disconnected) }
        queue.removeAll()
    }
}
