import SwitchyardCore
import Synchronization

/// The result of one request a command waits for, handed from the transport that sends the request to
/// the command that waits: resolved once (the first result wins), awaited by that command (or by each
/// member of a group that shares the request, LIFXAdapter.acceptBatch). It is held by
/// the request it answers and by the waiting command, and by nothing else: when both are done with it,
/// it is gone, answered or not, so an outcome nobody takes cannot pile up. A wait that is cancelled
/// ends at once with an error (for every waiter: they are one command, or one group's, stopped together),
/// so a stopping adapter never leaves a command waiting.
final class LIFXOutcome: Sendable {
    private enum State {
        case pending([CheckedContinuation<Void, any Error>])
        case done(Result<Void, AdapterError>)
    }

    private let state = Locked<State>(.pending([]))
    /// Lights a request for several did not reach while others accepted it (the request succeeded): by id,
    /// the words for each (`Kitchen offline`). Set before the outcome is resolved.
    private let unreachedLights = Locked<[String: String]>([:])
    private let census: LIFXOutcome.Census

    init(_ census: LIFXOutcome.Census) {
        self.census = census
        census.alive.add(1, ordering: .relaxed)
    }

    deinit { census.alive.subtract(1, ordering: .relaxed) }

    var isResolved: Bool { state.withLock { if case .done = $0 { return true }; return false } }

    /// Gives the result; a second one changes nothing.
    func resolve(_ result: Result<Void, AdapterError>) {
        let waiters: [CheckedContinuation<Void, any Error>] = state.withLock { s in
            guard case .pending(let c) = s else { return [] }
            s = .done(result)
            return c
        }
        for w in waiters {
            switch result {
            case .success: w.resume()
            case .failure(let e): w.resume(throwing: e)
            }
        }
    }

    func succeed() { resolve(.success(())) }

    /// A success for the request, with the lights it did not reach.
    func succeed(unreached: [String: String]) {
        unreachedLights.withLock { $0 = unreached }
        resolve(.success(()))
    }

    /// The lights the request did not reach although it succeeded (`succeed(unreached:)`).
    var unreached: [String: String] { unreachedLights.withLock { $0 } }

    func fail(_ message: String) { resolve(.failure(AdapterError(message))) }

    /// The result, once it is given.
    func wait() async throws {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let done: Result<Void, AdapterError>? = state.withLock { s in
                    switch s {
                    case .done(let r): return r
                    case .pending(let waiting): s = .pending(waiting + [c]); return nil
                    }
                }
                switch done {
                case .success?: c.resume()
                case .failure(let e)?: c.resume(throwing: e)
                case nil: break
                }
            }
        } onCancel: {
            resolve(.failure(AdapterError("the LIFX adapter stopped before the command was answered")))
        }
    }

    /// How many outcomes of one adapter exist (`bridge/health` `adapters.lifx.outcomes`): once every
    /// command has its result, none should.
    final class Census: Sendable {
        let alive = Atomic<Int>(0)
        init() {}
        var count: Int { alive.load(ordering: .relaxed) }
    }
}
