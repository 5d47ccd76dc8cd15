import Foundation
import SwitchyardTestSupport
import SwitchyardWebTesting

/// Debian's nginx on loopback, as a reverse proxy in front of a console: one process with a config of the
/// test's (written whole: `daemon off`, its pid and temporary files in a folder of its own), stopped by
/// `stop`. `ingress` is Home Assistant's ingress as the tests play it: the Supervisor's proxy (a prefix
/// taken off, `X-Ingress-Path` added, Host and Origin passed on as the browser sent them) in front of the
/// add-on's own gate, deploy/home-assistant-addon/rootfs/etc/switchyard/ingress.nginx.conf, rendered as
/// the add-on's switchyard-addon renders it.
final class ReverseProxy: Sendable {
    static let nginx = "/usr/sbin/nginx"
    static let repo = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static var unavailable: String? {
        FileManager.default.isExecutableFile(atPath: nginx) ? nil : "nginx is not installed (make test installs it)"
    }

    let port: Int
    let child: ChildProcess
    let errors: String

    /// nginx with `http` as the body of its `http { }` block; `@PORT@` in it is the port it listens on.
    convenience init(http: String, port: Int = TestEnvironment.freePort()) async throws {
        let dir = Self.folder()
        let conf = """
        daemon off;
        worker_processes 1;
        pid \(dir)/nginx.pid;
        error_log \(dir)/error.log warn;
        events { worker_connections 256; }
        http {
            access_log off;
            client_body_temp_path \(dir)/body;
            proxy_temp_path \(dir)/proxy;
            fastcgi_temp_path \(dir)/fastcgi;
            uwsgi_temp_path \(dir)/uwsgi;
            scgi_temp_path \(dir)/scgi;
            map $http_upgrade $connection_upgrade { default upgrade; "" close; }
        \(http.replacingOccurrences(of: "@PORT@", with: "\(port)"))
        }
        """
        try await self.init(config: conf, port: port, dir: dir)
    }

    init(config: String, port: Int, dir: String) async throws {
        self.port = port
        let path = dir + "/nginx.conf"
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        errors = dir + "/error.log"
        child = try ChildProcess(path: Self.nginx, arguments: ["-c", path, "-e", errors], outputFile: dir + "/output.log")
        let child = self.child
        try await waitUntil("nginx listens on \(port)", timeout: 20) { !child.isRunning || TestEnvironment.canConnect(port: port) }
        if !child.isRunning {
            throw TestError("nginx did not start: \((try? String(contentsOfFile: dir + "/output.log", encoding: .utf8)) ?? "")"
                            + ((try? String(contentsOfFile: errors, encoding: .utf8)) ?? ""))
        }
    }

    /// A folder nginx's workers (nobody, when it runs as root) can use.
    static func folder() -> String {
        let dir = TestEnvironment.makeTempDir("nginx").path
        chmod(dir, 0o755)
        return dir
    }

    /// The add-on's ingress gate, listening on `port`, allowing `allow`, in front of the console at `console`.
    static func addonGate(port: Int = TestEnvironment.freePort(), allow: String = "127.0.0.1", console: String) async throws -> ReverseProxy {
        let template = try String(contentsOf: repo.appendingPathComponent("deploy/home-assistant-addon/rootfs/etc/switchyard/ingress.nginx.conf"),
                                  encoding: .utf8)
        let dir = folder()
        let conf = template.replacingOccurrences(of: "@RUN@", with: dir).replacingOccurrences(of: "@LISTEN@", with: "127.0.0.1:\(port)")
            .replacingOccurrences(of: "@ALLOW@", with: allow).replacingOccurrences(of: "@CONSOLE@", with: console)
        return try await ReverseProxy(config: conf, port: port, dir: dir)
    }

    /// Home Assistant's Supervisor as its ingress proxy behaves: `/api/hassio_ingress/<token>/…` to the
    /// add-on's port without the prefix, with `X-Ingress-Path`, the browser's Host and Origin passed on.
    static func supervisor(token: String, addon: Int) async throws -> ReverseProxy {
        try await ReverseProxy(http: """
            server {
                listen 127.0.0.1:@PORT@;
                location /api/hassio_ingress/\(token)/ {
                    proxy_pass http://127.0.0.1:\(addon)/;
                    proxy_http_version 1.1;
                    proxy_set_header Host $http_host;
                    proxy_set_header X-Ingress-Path /api/hassio_ingress/\(token);
                    proxy_set_header Upgrade $http_upgrade;
                    proxy_set_header Connection $connection_upgrade;
                    proxy_read_timeout 1h;
                }
            }
            """)
    }

    /// A proxy that passes the whole path on: `/<prefix>/…` to the console as it is (for `web.base_path`).
    static func passing(prefix: String, to console: Int) async throws -> ReverseProxy {
        try await ReverseProxy(http: """
            server {
                listen 127.0.0.1:@PORT@;
                location \(prefix)/ {
                    proxy_pass http://127.0.0.1:\(console);
                    proxy_http_version 1.1;
                    proxy_set_header Host $http_host;
                    proxy_set_header Upgrade $http_upgrade;
                    proxy_set_header Connection $connection_upgrade;
                    proxy_read_timeout 1h;
                }
            }
            """)
    }

    var errorLog: String { (try? String(contentsOfFile: errors, encoding: .utf8)) ?? "" }

    func stop() { child.terminateAndReap() }
}
