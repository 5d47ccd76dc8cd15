#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardCore
import SwitchyardHTTP

/// The cloud transport (the LIFX HTTP API, docs/upstreams/lifx-cloud.md): the HTTP client, the rate budget,
/// the merging request queue and the listings. Commands come in as the plan's orders (`enqueue`), each with
/// the outcome its command waits for; `LIFXRequestQueue` merges and paces them, `LIFXCloudAPI` shapes them.
/// What the cloud says goes to the router through `report` (`LIFXReport`, as the LAN does): it never reaches
/// into the router or the engine. Its client comes from `connector` for each run: libcurl's (`CurlConnector`),
/// or `HTTPTwin` in the unit tier.
actor LIFXCloud {
    /// What the cloud saw of the lights.
    enum Event: Sendable {
        /// A complete listing; `pending`: lights a queued or in-flight request is changing.
        case listed([LIFXLight], scenes: [LIFXScene]?, pending: Set<String>)
        /// Listings failed this many times in a row.
        case listingFailed(consecutive: Int)
        /// An action was answered or failed: the lights the cloud reached or not, and the optimistic values to
        /// restore (lights it did not reach, or every light of a failed request), re-applying what is still queued.
        case answered(reached: [String: Bool], revert: [String: LIFXLight.Values], queued: [LIFXCloudOrder])
    }

    let settings: LIFXSettings
    let clock: any BridgeClock
    let connector: any HTTPConnector
    let report: LIFXReporter<Event>
    /// The client of the current run (opened and closed by `run`).
    var http: (any HTTPTransport)?
    var queue: LIFXRequestQueue
    var budget = RateBudget()
    var nextPoll = MonotonicInstant.distantPast
    var polls = 0
    var pollFailures = 0
    var scenesDue = true
    var sentRequests = 0
    var lastError: String?
    /// Set while the dispatch loop waits for something that a new request makes moot.
    var wakeUp: Latch?
    /// Signalled once the client is open (`running`).
    let opened = Latch()

    init(settings: LIFXSettings, clock: any BridgeClock, connector: any HTTPConnector, report: @escaping LIFXReporter<Event>) {
        self.settings = settings
        self.clock = clock
        self.connector = connector
        self.report = report
        queue = LIFXRequestQueue(minInterval: settings.minInterval, retryDelay: settings.retryDelay)
    }

    /// Sends what is queued and lists the lights until cancelled; requests still queued are then answered.
    func run() async throws {
        try await connector.withClient(options: .init(userAgent: "switchyard", verifyTLS: settings.verifyTLS), isolation: #isolation) { http in
            self.http = http
            opened.signal()
            defer {
                self.http = nil
                for op in queue.unanswered { for o in op.outcomes { o.fail("the LIFX adapter stopped before the command was answered") } }
            }
            await dispatchLoop()
        }
    }

    var running: Bool { http != nil }

    /// Queues the plan's requests, in order; each outcome is answered when the cloud has answered its request.
    func enqueue(_ orders: [(LIFXCloudOrder, LIFXOutcome)]) {
        for (order, outcome) in orders {
            if running { queue.enqueue(LIFXOp(order), outcome) } else { outcome.fail("the LIFX cloud is not connected") }
        }
        wakeUp?.signal()
    }

    // MARK: dispatch

    /// Waits until `deadline` on the clock; a `wakeable` wait ends early when a request is queued.
    func pause(until deadline: MonotonicInstant, wakeable: Bool) async {
        guard deadline > clock.now() else { return }
        guard wakeable else {
            try? await clock.sleep(until: deadline)
            return
        }
        let latch = Latch()
        wakeUp = latch
        defer { wakeUp = nil }
        let clock = self.clock
        await withTaskGroup(of: Void.self) { g in
            g.addTask { try? await clock.sleep(until: deadline) }
            g.addTask { await latch.wait() }
            await g.next()
            g.cancelAll()
        }
    }

    /// Sends what is queued, paced (min_interval, retries, the budget), and lists when nothing is.
    func dispatchLoop() async {
        while !Task.isCancelled {
            let now = clock.now()
            if let at = queue.sendableAt(budgetAllows: budget.readyAt(now, reserve: 0)) {
                if at > now { await pause(until: at, wakeable: false); continue }
                await send(queue.takeBatch(now: now))
                continue
            }
            if now >= nextPoll {
                let at = budget.readyAt(now, reserve: max(2, budget.limit / 5))
                if at > now { await pause(until: at, wakeable: true); continue }
                let ok = await list()
                pollFailures = ok ? 0 : pollFailures + 1
                let backoff = min(settings.pollInterval, 2 * pow(2, Double(min(pollFailures, 6))))
                nextPoll = clock.now().adding(seconds: ok ? settings.pollInterval : backoff)
                continue
            }
            await pause(until: nextPoll, wakeable: true)
        }
    }

    // MARK: requests

    struct CallResult {
        var status: Int
        var headers: [String: String]
        var json: JSONValue?
    }

    /// One request within the budget. The token travels only in the Authorization header.
    func call(_ method: String, _ path: String, _ body: JSONValue?, reserve: Int) async throws(AdapterError) -> CallResult {
        while true {
            let at = budget.readyAt(clock.now(), reserve: reserve)
            if at <= clock.now() { break }
            await pause(until: at, wakeable: false)
            if Task.isCancelled { throw AdapterError("cancelled") }
        }
        guard let http else { throw AdapterError("the LIFX cloud is not connected") }
        budget.record(clock.now())
        sentRequests += 1
        var headers = [("Authorization", "Bearer \(settings.token ?? "")"), ("Accept", "application/json")]
        if body != nil { headers.append(("Content-Type", "application/json")) }
        let request = HTTPRequest(method: method, url: settings.apiURL + path, headers: headers,
                                  body: body.map { Array($0.serialized.utf8) }, timeout: settings.requestTimeout)
        do {
            let r = try await http.send(request)
            budget.update(headers: r.headers, now: clock.now(), wallNow: clock.wallNow())
            let ok = (200..<300).contains(r.status)
            await report(.request(error: ok ? nil : "\(method) \(path): HTTP \(r.status)"))
            return CallResult(status: r.status, headers: r.headers, json: r.body.isEmpty ? nil : try? JSONValue.parse(r.body))
        } catch {
            let message = "LIFX cloud unreachable: \(error)"
            await report(.request(error: message))
            throw AdapterError(message)
        }
    }

    func describe(_ r: CallResult, selector: String) -> String { LIFXCloudAPI.describe(status: r.status, json: r.json, selector: selector) }

    /// Sends a batch and takes the answer in: results, a 429 wait, a retry or the failure.
    func send(_ batch: [LIFXOp]) async {
        let (method, path, body) = LIFXCloudAPI.request(for: batch)
        let r: CallResult
        do {
            r = try await call(method, path, body, reserve: 0)
            queue.answered()
        } catch {
            // Answered (or failed): no longer in flight, so a revert does not re-apply the op itself.
            queue.answered()
            await failOrRetry(batch, error.description)
            return
        }
        switch r.status {
        case 200, 202, 207:
            await take(batch, LIFXCloudAPI.results(r.json, ops: batch.count, multi: batch.count > 1))
        case 429:
            budget.exhausted(headers: r.headers, now: clock.now(), wallNow: clock.wallNow())
            let wait = max(0, ((budget.resetAt ?? clock.now()) - clock.now()).seconds)
            await report(.log(.warning, "LIFX rate limit reached (HTTP 429); waiting \(Int(wait.rounded(.up))) s for the reset, then sending again"))
            queue.requeue(batch)
        case 500...599:
            await failOrRetry(batch, "LIFX cloud error (HTTP \(r.status))")
        default:
            if r.status == 401 || r.status == 403 {
                await report(.status(.error(describe(r, selector: batch[0].selector))))
            }
            for op in batch { await fail(op, describe(r, selector: op.selector)) }
        }
        await report(.metrics(metrics))
    }

    /// Only absolute sets are retried (3 attempts, backoff); anything else fails at once.
    func failOrRetry(_ batch: [LIFXOp], _ message: String) async {
        if queue.retry(batch, now: clock.now()) { return }
        for op in batch { await fail(op, "\(message); \(op.isSet ? "gave up after 3 attempts" : "not retried (not an absolute set)")") }
    }

    /// A request failed: its lights go back to their own previous values, then its commands fail.
    func fail(_ op: LIFXOp, _ message: String) async {
        await report(.saw(.answered(reached: [:], revert: op.previous, queued: queue.unanswered.map(\.order))))
        for o in op.outcomes { o.fail("\(op.label): \(message)") }
    }

    /// Per-light results: `ok` keeps the new state; `offline` / `timed_out` reverts that light and marks it
    /// unreachable; a command fails only when no light accepted it.
    func take(_ batch: [LIFXOp], _ results: [LIFXCloudAPI.OpResult]) async {
        for (op, result) in zip(batch, results) {
            if let e = result.error {
                await fail(op, e)
                continue
            }
            var failed: [String] = []
            var unreached: [String: String] = [:]
            var reached: [String: Bool] = [:]
            var revert: [String: LIFXLight.Values] = [:]
            for (lid, status) in result.lights {
                let ok = status == "ok" || status == "accepted"
                reached[lid] = ok
                if !ok {
                    failed.append("\(op.labels[lid] ?? lid) \(status)")
                    unreached[lid] = "\(op.labels[lid] ?? lid) \(status)"
                    if let v = op.previous[lid] { revert[lid] = v }
                }
            }
            await report(.saw(.answered(reached: reached, revert: revert, queued: queue.unanswered.map(\.order))))
            if failed.isEmpty {
                for o in op.outcomes { o.succeed() }
            } else if failed.count == result.lights.count {
                for o in op.outcomes { o.fail("\(op.label): \(failed.joined(separator: ", ")) (LIFX did not reach the light)") }
            } else {
                await report(.log(.warning, "\(op.label): \(failed.joined(separator: ", ")); the other lights accepted the command"))
                // Which lights, for a command that names several devices (a group's members: LIFXAdapter.acceptBatch).
                for o in op.outcomes { o.succeed(unreached: unreached) }
            }
        }
    }

    // MARK: listings

    /// Lists the lights (and the scenes when due) and hands them on.
    func list() async -> Bool {
        do {
            let r = try await call("GET", "/lights/all", nil, reserve: 0)
            guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: "all")) }
            let listed = list.compactMap(LIFXLight.parse)
            var scenes: [LIFXScene]?
            if scenesDue || polls % max(1, settings.scenesEvery) == 0 {
                scenes = try await listScenes()
                scenesDue = false
            }
            polls += 1
            await report(.saw(.listed(listed, scenes: scenes, pending: queue.lights)))
            lastError = nil
            await report(.status(.running))
            await report(.metrics(metrics))
            return true
        } catch {
            let message = (error as? AdapterError)?.message ?? "\(error)"
            lastError = message
            await report(.status(.error("LIFX listing failed: \(message)")))
            await report(.saw(.listingFailed(consecutive: pollFailures + 1)))
            return false
        }
    }

    /// Lists now (`devices/refresh`), scenes included.
    func listNow() async throws {
        scenesDue = true
        guard await list() else { throw AdapterError("LIFX listing failed: \(lastError ?? "unknown error")") }
    }

    func listScenes() async throws -> [LIFXScene] {
        let r = try await call("GET", "/scenes", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: "scenes")) }
        return list.compactMap(LIFXScene.parse)
    }

    /// The lights one selector names, as the cloud has them now (`/get`), and the lights a queued or
    /// in-flight request is changing.
    func read(_ selector: String) async throws -> (lights: [LIFXLight], pending: Set<String>) {
        let r = try await call("GET", "/lights/\(LIFXCloudAPI.encode(selector))", nil, reserve: 0)
        guard r.status == 200, let list = r.json?.arrayValue else { throw AdapterError(describe(r, selector: selector)) }
        return (list.compactMap(LIFXLight.parse), queue.lights)
    }

    var metrics: [String: JSONValue] {
        [
            "rate_limit": budget.metrics(clock.now(), wallNow: clock.wallNow()), "queue": JSONValue(queue.queue.count),
            "in_flight": JSONValue(queue.inFlight.count), "merged": JSONValue(queue.merged), "retries": JSONValue(queue.retries),
            "http_requests": JSONValue(sentRequests),
        ]
    }
}
