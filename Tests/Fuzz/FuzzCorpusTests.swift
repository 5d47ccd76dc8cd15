import Foundation
import SwitchyardCore
import SwitchyardFuzz
import SwitchyardTestSupport
import Testing

/// Every fuzz target over its stored corpus (`corpus/<target>/`: seeds from the fixtures, plus every input
/// a `make fuzz` run found that crashed a target, kept under its libFuzzer name once fixed). A target that
/// crashes stops this test process, so a regression cannot pass unseen.
@Suite struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("corpus").path

    /// On a thread of its own (`offThePool`): a target's corpus is seconds of work under AddressSanitizer,
    /// which on the cooperative pool would starve the tests that wait on time in the same process.
    @Test(arguments: FuzzTargets.all.keys.sorted())
    func everyStoredInputRunsClean(_ target: String) async throws {
        let files = FuzzCorpus.files(at: "\(Self.corpus)/\(target)")
        #expect(files.count >= 1, "target \(target) has no seeds in Tests/Fuzz/corpus/\(target)")
        let unread = try await offThePool { () -> [String] in
            var unread: [String] = []
            for file in files {
                guard let bytes = FuzzCorpus.read(file) else { unread.append(file); continue }
                FuzzTargets.all[target]!(bytes)
            }
            return unread
        }
        #expect(unread.isEmpty, "cannot read \(unread)")
    }

    @Test func everyCorpusDirectoryIsATarget() {
        let dirs = FuzzCorpus.files(at: Self.corpus).map { String($0.split(separator: "/").last!) }
        #expect(Set(dirs) == Set(FuzzTargets.all.keys))
    }
}
