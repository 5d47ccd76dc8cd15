/// Runs `body`, then `teardown`, awaited, whether `body` returned or threw: what `defer` cannot do for
/// async clean-up (a client to close, a server to stop), without an unstructured task left behind.
public func withTeardown<R>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> R,
                            teardown: () async -> Void) async throws -> R {
    let result: Result<R, any Error>
    do { result = .success(try await body()) } catch { result = .failure(error) }
    await teardown()
    return try result.get()
}
