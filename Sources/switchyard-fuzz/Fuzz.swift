// The fuzz targets as one program, two ways (docs/testing.md "Fuzzing", `make fuzz`):
// - built with `-sanitize=fuzzer` and `-D FUZZING` it is a libFuzzer binary for the target named by
//   FUZZ_TARGET (libFuzzer's flags and corpus directories as its arguments);
// - built normally it replays files: `switchyard-fuzz <target> <file or directory>…` runs each input once
//   (to check a crash libFuzzer reported, or a whole corpus) and `switchyard-fuzz --list` names the targets.
#if canImport(Glibc)
import Glibc
#endif
import SwitchyardFuzz

func say(_ text: String) {
    var bytes = Array(text.utf8)
    _ = bytes.withUnsafeMutableBytes { write(2, $0.baseAddress, $0.count) }
}

#if FUZZING
// libFuzzer's driver, called from our own main (SwiftPM names the executable's entry point itself, so
// libFuzzer's `main` is not used): it parses libFuzzer's flags and calls `fuzzOne` for every input.
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

nonisolated(unsafe) var selected: FuzzTargets.Target = { _ in }

@main struct Fuzz {
    static func main() {
        let name = getenv("FUZZ_TARGET").map { String(cString: $0) } ?? ""
        guard let t = FuzzTargets.all[name] else {
            say("FUZZ_TARGET must be one of: \(FuzzTargets.all.keys.sorted().joined(separator: ", "))\n")
            exit(2)
        }
        selected = t
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            selected(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
            return 0
        })
    }
}
#else
@main struct Replay {
    static func main() {
        let args = Array(CommandLine.arguments.dropFirst())
        if args.first == "--list" || args.isEmpty {
            print(FuzzTargets.all.keys.sorted().joined(separator: "\n"))
            return
        }
        guard let target = FuzzTargets.all[args[0]] else {
            say("unknown target '\(args[0])'; targets: \(FuzzTargets.all.keys.sorted().joined(separator: ", "))\n")
            exit(2)
        }
        var count = 0
        for path in args.dropFirst() {
            for file in FuzzCorpus.files(at: path) {
                guard let bytes = FuzzCorpus.read(file) else { continue }
                target(bytes)
                count += 1
            }
        }
        print("\(args[0]): \(count) inputs, no crash")
    }
}
#endif
