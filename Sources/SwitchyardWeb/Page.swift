import Hummingbird
import NIOCore

/// The page's files, shipped inside the binary (Sources/SwitchyardWeb/Page: plain HTML, CSS and one
/// JavaScript module; no build step, nothing fetched from elsewhere), and the login form. Every link,
/// asset, form and the WebSocket are relative to the page (`console.css`, `ws`): the console works under
/// any prefix a reverse proxy puts before it, its own `web.base_path` or one it never hears of.
struct Page: Sendable {
    let index: Response
    let script: Response
    let style: Response

    init() {
        index = Self.asset(PackageResources.index_html, "text/html; charset=utf-8")
        script = Self.asset(PackageResources.console_js, "text/javascript; charset=utf-8")
        style = Self.asset(PackageResources.console_css, "text/css; charset=utf-8")
    }

    static func asset(_ bytes: [UInt8], _ type: String) -> Response {
        var r = Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: bytes)))
        r.headers[.contentType] = type
        r.headers[.cacheControl] = "no-cache"
        return r
    }

    static func text(_ status: HTTPResponse.Status, _ text: String) -> Response {
        var r = Response(status: status, body: .init(byteBuffer: ByteBuffer(string: text + "\n")))
        r.headers[.contentType] = "text/plain; charset=utf-8"
        return r
    }

    /// A 303 to `to`, a reference relative to the request's URL (`./`): behind a proxy that adds a
    /// prefix, the browser resolves it under that prefix.
    static func redirect(_ to: String) -> Response {
        var r = Response(status: .seeOther)
        r.headers[.location] = to
        return r
    }

    /// The only thing served without the token: a form that asks for it (401, no script).
    static func login(error: String?) -> Response {
        let html = """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>Switchyard console: log in</title><link rel="stylesheet" href="console.css"></head>
        <body class="login"><main>
        <h1>Switchyard console</h1>
        <form method="post" action="login">
        <label for="token">Console token (web.auth_token)</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
        <button type="submit">Log in</button>
        \(error.map { "<p class=\"error\" role=\"alert\">\($0)</p>" } ?? "")
        </form></main></body></html>
        """
        var r = Response(status: .unauthorized, body: .init(byteBuffer: ByteBuffer(string: html)))
        r.headers[.contentType] = "text/html; charset=utf-8"
        return r
    }
}
