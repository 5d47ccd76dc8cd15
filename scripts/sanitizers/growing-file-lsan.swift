// LeakSanitizer and FoundationEssentials (Swift 6.3.1) on Linux: String(contentsOfFile:) leaks its read
// buffer when the file grows while it is read (docs/testing.md "Sanitizers"; lsan.supp cites this file).
//
//   swiftc -sanitize=address scripts/sanitizers/growing-file-lsan.swift -o /tmp/grow && /tmp/grow
//       → "Direct leak of … in readBytesFromFile … String(contentsOfFile:encoding:)"
//
// The tests read their child processes' logs this way while the children write them. The bridge reads
// only files that do not grow under it (its config, /proc/self/status) and shows no such leak.
import Foundation
// Reads a file while another thread appends to it (a child process's log, as tests read them).
let path = "/tmp/lsanrepro/growing.log"
FileManager.default.createFile(atPath: path, contents: nil)
let writer = Thread {
    let h = FileHandle(forWritingAtPath: path)!
    for i in 0..<20000 { h.seekToEndOfFile(); h.write("line \(i) ...................................\n".data(using: .utf8)!) }
}
writer.start()
var n = 0
while !writer.isFinished { n += (try? String(contentsOfFile: path, encoding: .utf8))?.utf8.count ?? 0 }
print(n > 0)
