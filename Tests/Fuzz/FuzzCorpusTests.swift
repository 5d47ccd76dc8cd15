import Foundation
import SwitchyardCore
import SwitchyardFuzz
import Testing

/// Every fuzz target over its stored corpus (`corpus/<target>/`: seeds from the fixtures, plus every input
/// a `make fuzz` run found that crashed a target, kept under its libFuzzer name once fixed). A target that
/// crashes stops this test process, so a regression cannot pass unseen.
@Suite struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("corpus").path

    @Test(arguments: FuzzTargets.all.keys.sorted())
    func everyStoredInputRunsClean(_ target: String) throws {
        let files = FuzzCorpus.files(at: "\(Self.corpus)/\(target)")
        #expect(files.count >= 1, "target \(target) has no seeds in Tests/Fuzz/corpus/\(target)")
        for file in files {
            let bytes = try #require(FuzzCorpus.read(file), "cannot read \(file)")
            FuzzTargets.all[target]!(bytes)
        }
    }

    @Test func everyCorpusDirectoryIsATarget() {
        let dirs = FuzzCorpus.files(at: Self.corpus).map { String($0.split(separator: "/").last!) }
        #expect(Set(dirs) == Set(FuzzTargets.all.keys))
    }
}
