import SwitchyardConfig
import SwitchyardCore
import SwitchyardWeb

/// The console's parsers of what a browser or any peer sends it (docs/console.md).
extension FuzzTargets {
    static let openConsole = ConsoleAuth(token: nil, secure: false)

    /// The login form, the Cookie header, Host and Origin, percent-decoding: the first byte picks which.
    /// Nothing read is longer than what it was read from, and without a token a request is taken only
    /// when its Host is a loopback name.
    static let consoleAuth: Target = { bytes in
        let text = String(decoding: bytes.dropFirst(), as: UTF8.self)
        switch (bytes.first ?? 0) % 4 {
        case 0:
            if let token = ConsoleAuth.formField(text, "token") {
                check(token.unicodeScalars.count <= text.utf8.count, "a form field longer than its form")
            }
        case 1:
            if let v = ConsoleAuth.cookieValue(text, name: "switchyard_console") {
                check(v.utf8.count <= text.utf8.count, "a cookie value longer than its header")
            }
        case 2:
            // Host, a line feed, Origin.
            let parts = text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
            let host = String(parts[0]), origin = parts.count > 1 ? String(parts[1]) : nil
            let name = ConsoleAuth.hostName(host)
            if let name { check(name.utf8.count <= host.utf8.count, "a host name longer than its header") }
            if openConsole.sameOrigin(host: host, origin: origin) {
                check(name.map(SwitchyardConfig.Web.isLoopback) == true, "the Host '\(host.prefix(100))' let in without a token")
            }
        default:
            check(ConsoleAuth.percentDecoded(text).unicodeScalars.count <= text.utf8.count, "percent-decoding made more than it read")
        }
    }

    /// A page's WebSocket message: what it asks for, and what a command becomes for the engine (only
    /// what the engine takes from MQTT; a transaction only where a result will carry it, inside a JSON
    /// object). The same bytes as a publication's topic and payload make a frame that reads back as them.
    static let consolePage: Target = { bytes in
        let text = String(decoding: bytes, as: UTF8.self)
        let scheme = TopicScheme(base: "b")
        if case .cmd(_, let m)? = PageProtocol.request(text) {
            switch PageProtocol.submission(m, scheme: scheme, mirrors: ["ha"], transaction: "console-f-1") {
            case .refused(let why):
                check(why.utf8.count <= maxMessage, "a refusal of \(why.utf8.count) bytes")
            case .send(let topic, _):
                switch scheme.classify(topic) {
                case .set, .get, .request: break
                default: check(false, "the console sent '\(topic.prefix(100))'")
                }
            case .ask(let topic, let payload, let transaction):
                switch scheme.classify(topic) {
                case .set(let adapter, _, nil): check(adapter != "ha", "a mirror's command waits for a result")
                case .request: break
                default: check(false, "the console waits for a result of '\(topic.prefix(100))'")
                }
                let sent = try? JSONValue.parse(payload)
                check(sent?.objectValue != nil && sent?["transaction"] == .string(transaction), "a command's transaction is not in its object")
            }
        }
        let frame = PageProtocol.frame([ConsoleFeed.Item(topic: text, payload: bytes), ConsoleFeed.Item(topic: "b/x", payload: nil)])
        let items = (try? JSONValue.parse(frame))?["m"]?.arrayValue ?? []
        check(items.count == 2 && items[0].arrayValue == [.string(text), .string(text)] && items[1].arrayValue == ["b/x", .null],
              "a frame does not read back as what it was made of")
    }
}
