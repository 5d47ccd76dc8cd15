import Foundation
import SwitchyardTestSupport
import Testing

/// What docs/architecture.md and the test tiers say about the repository, checked against it: every file
/// and name the page cites exists, the adapters' modules are imported only where the page says, and the
/// list of integration suites names real suites.
@Suite struct ArchitecturePageTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    static func exists(_ path: String, directory: Bool? = nil) -> Bool {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path, isDirectory: &isDir) else { return false }
        return directory.map { $0 == isDir.boolValue } ?? true
    }

    /// Every Swift file under `dir`, as paths relative to the root.
    static func swiftFiles(under dir: String) -> [String] {
        let base = root.appendingPathComponent(dir)
        guard let e = FileManager.default.enumerator(atPath: base.path) else { return [] }
        return e.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }.map { "\(dir)/\($0)" }.sorted()
    }

    /// Whether `source` declares `name` (a type, an extension of it, a function, a property or a case).
    static func declares(_ source: String, _ name: String) -> Bool {
        let n = NSRegularExpression.escapedPattern(for: name)
        let pattern = #"\b(func|var|let|case|class|struct|enum|actor|protocol|typealias|extension)\s+"# + n + #"\b"#
        return source.range(of: pattern, options: .regularExpression) != nil
    }

    /// The names in `code` spans (one per span) and the `Type.member` names in the text diagrams.
    static func citations(_ page: String) -> (spans: [String], diagram: [String]) {
        var spans: [String] = []
        var diagram: [String] = []
        var inDiagram = false
        for line in page.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inDiagram = line == "```text"
                continue
            }
            if inDiagram {
                let r = try! NSRegularExpression(pattern: #"\b([A-Z][A-Za-z]+)\.([a-z][A-Za-z]+)\b"#)
                let s = String(line)
                for m in r.matches(in: s, range: NSRange(s.startIndex..., in: s)) { diagram.append((s as NSString).substring(with: m.range)) }
                continue
            }
            let parts = line.split(separator: "`", omittingEmptySubsequences: false)
            for (i, p) in parts.enumerated() where i % 2 == 1 { spans.append(String(p)) }
        }
        return (spans, diagram)
    }

    /// Scans every source file for every name the page cites: seconds of regular expressions, done on a
    /// thread of its own (`offThePool`) so that the cooperative pool's threads stay free for the async tests
    /// beside it. The checks are made here, on what the scan found.
    @Test func everyFileAndNameTheArchitecturePageCitesExists() async throws {
        let (problems, checked) = try await offThePool { try Self.citationProblems() }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect(checked > 60, "the page cites fewer names than it should (\(checked)): is the parser still reading it?")
    }

    static func citationProblems() throws -> (problems: [String], checked: Int) {
        var problems: [String] = []
        let page = try Self.text("docs/architecture.md")
        let sources = Self.swiftFiles(under: "Sources") + Self.swiftFiles(under: "Tests")
        let all = try sources.map { ($0, try Self.text($0)) }
        var checked = 0
        let (spans, diagram) = Self.citations(page)
        for span in spans {
            // A placeholder (`<Name>`, `C*`) or the example upstream of "Adding an upstream" names nothing real.
            if span.contains("<") || span.contains("*") || span.contains("Acme") || span.contains(" ") { continue }
            let pieces = span.split(separator: ":", maxSplits: 1).map(String.init)
            let path = pieces[0]
            if path.hasPrefix("Sources/") || path.hasPrefix("Tests/") || path.hasPrefix("docs/") || path.hasPrefix("scripts/") {
                if !(Self.exists(path, directory: path.hasSuffix("/") ? true : nil)) { problems.append("docs/architecture.md cites \(path), which is not there") }
                checked += 1
                if pieces.count == 2 {
                    let source = try Self.text(path)
                    for name in pieces[1].split(separator: ".") {
                        if !(Self.declares(source, String(name))) { problems.append("docs/architecture.md cites \(span): \(path) declares no \(name)") }
                    }
                }
            } else if path.hasSuffix(".swift") {
                if !(sources.contains { $0.hasSuffix("/" + path) }) { problems.append("docs/architecture.md cites \(path), which is no file in Sources or Tests") }
                checked += 1
            }
        }
        // `Type.member` in a diagram: the type is declared somewhere, and so is the member, in a file that
        // declares or extends the type.
        for name in diagram {
            let p = name.split(separator: ".").map(String.init)
            if !(all.contains { $0.1.contains(p[0]) && $0.1.contains(p[1]) && Self.declares($0.1, p[0]) && Self.declares($0.1, p[1]) }) { problems.append("docs/architecture.md's diagram names \(name), which is not there") }
            checked += 1
        }
        // Relative links from docs/ go somewhere.
        let link = try NSRegularExpression(pattern: #"\]\(([^)#]+)(#[^)]*)?\)"#)
        for m in link.matches(in: page, range: NSRange(page.startIndex..., in: page)) {
            let target = (page as NSString).substring(with: m.range(at: 1))
            guard !target.hasPrefix("http") else { continue }
            let resolved = Self.root.appendingPathComponent("docs").appendingPathComponent(target).standardized.path
            if !(FileManager.default.fileExists(atPath: resolved)) { problems.append("docs/architecture.md links to \(target), which is not there") }
        }
        return (problems, checked)
    }

    /// Every source file of a target the page's table lists is named on the page: by its name in the
    /// target's row, by its path anywhere, or by its name anywhere when no other source file has that name.
    /// A file added to a target and left off the page fails here.
    @Test func everySourceFileOfATargetIsOnThePage() throws {
        let page = try Self.text("docs/architecture.md")
        let start = try #require(page.range(of: "## The targets")), end = try #require(page.range(of: "## The threads"))
        let rows = page[start.upperBound..<end.lowerBound].split(separator: "\n").filter { $0.hasPrefix("| ") && $0.contains("`Sources/") }
        #expect(rows.count >= 15, "the targets table has \(rows.count) rows: is the parser still reading it?")
        let sources = Self.swiftFiles(under: "Sources")
        let names = Dictionary(grouping: sources) { ($0 as NSString).lastPathComponent }
        let folder = try NSRegularExpression(pattern: #"`(Sources/[^`]*/)`"#)
        var checked = 0
        for row in rows {
            let cols = row.components(separatedBy: " | ")
            guard cols.count >= 3 else { continue }
            let cell = cols[1]
            for m in folder.matches(in: cell, range: NSRange(cell.startIndex..., in: cell)) {
                let pattern = (cell as NSString).substring(with: m.range(at: 1))
                let dirs: [String]
                if pattern.contains("<Name>") {
                    let upstreams = (try? FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("Sources/Upstreams").path)) ?? []
                    dirs = upstreams.sorted().map { pattern.replacingOccurrences(of: "<Name>", with: $0) }.filter { Self.exists($0, directory: true) }
                } else if pattern.contains("*") {
                    continue   // the C module maps: no Swift
                } else {
                    dirs = [pattern]
                }
                for dir in dirs {
                    for file in sources where file.hasPrefix(dir) {
                        let name = (file as NSString).lastPathComponent
                        let named = row.contains(name) || page.contains(file) || (names[name]?.count == 1 && page.contains(name))
                        #expect(named, "\(file) is in target folder \(dir) but docs/architecture.md does not name it")
                        checked += 1
                    }
                }
            }
        }
        #expect(checked > 120, "only \(checked) files checked: is the parser still reading the table?")
    }

    /// The adapter modules, from Package.swift's `upstream(…, adapter: "…")` lines.
    static func adapterModules() throws -> [String] {
        let package = try text("Package.swift")
        let r = try NSRegularExpression(pattern: #"upstream\("[A-Za-z]+", adapter: "([A-Za-z]+)""#)
        return r.matches(in: package, range: NSRange(package.startIndex..., in: package)).map { (package as NSString).substring(with: $0.range(at: 1)) }
    }

    /// docs/architecture.md "Adding an upstream": beyond its own folder, an adapter's module is imported by the
    /// registration list, the fuzz targets, the demo and the simulators' executable only (and by tests).
    @Test func theAdapterModulesAreNamedOnlyWhereTheyShouldBe() throws {
        let modules = try Self.adapterModules()
        #expect(modules.count == 6, "\(modules)")
        let allowed = ["Sources/SwitchyardCLI/Upstreams.swift", "Sources/SwitchyardFuzz/", "Sources/SwitchyardDemo/", "Sources/switchyard-sim/"]
        for file in Self.swiftFiles(under: "Sources") {
            let source = try Self.text(file)
            for module in modules where source.range(of: #"(?m)^(@testable )?import \#(module)$"#, options: .regularExpression) != nil {
                #expect(Self.folderHolds(file, module) || allowed.contains { file.hasPrefix($0) }, "\(file) imports \(module)")
            }
        }
    }

    /// Whether `file` lies in the upstream folder whose adapter target is `module`.
    static func folderHolds(_ file: String, _ module: String) -> Bool {
        guard let package = try? text("Package.swift"),
              let r = try? NSRegularExpression(pattern: #"upstream\("([A-Za-z]+)", adapter: "\#(module)""#),
              let m = r.firstMatch(in: package, range: NSRange(package.startIndex..., in: package)) else { return false }
        return file.hasPrefix("Sources/Upstreams/\((package as NSString).substring(with: m.range(at: 1)))/")
    }

    @Test func theIntegrationListNamesOnlySuitesThatExist() throws {
        let names = try Self.text("Tests/integration-suites.txt").split(separator: "\n")
            .map { $0.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? "" }
            .map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        #expect(names.count >= 10)
        let tests = try Self.swiftFiles(under: "Tests").map { try Self.text($0) }.joined(separator: "\n")
        for name in names {
            #expect(tests.range(of: #"@Suite[^\n]*\n?\s*struct \#(name)\b"#, options: .regularExpression) != nil,
                    "Tests/integration-suites.txt names \(name), which is no test suite")
        }
    }
}
