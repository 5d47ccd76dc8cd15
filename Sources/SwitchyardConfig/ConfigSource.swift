#if canImport(Glibc)
import Glibc
#endif

/// The files a config is read from, as they were when it was read: the main file (`-c FILE`) and its
/// changes file, `<state_dir>/config-changes.yaml`, where changes made at run time go when the main file
/// cannot be written (the hardened systemd unit mounts /etc read-only) or when that file already exists.
/// The changes file is merged over the main file key by key: a key there replaces the same key of the
/// main file (mappings merge, lists and single values are replaced whole), and `key: null` removes it.
/// `switchyard check-config` reports the problems of both, each with its own file:line:column.
public struct ConfigSource: Sendable, Equatable {
    public var path: String
    public var bytes: [UInt8]
    /// Where the changes file is (or would be); empty when there is none for this source (a text read
    /// with `SwitchyardConfig.parse`).
    public var changesPath: String
    /// The changes file's bytes; nil when there is no such file.
    public var changes: [UInt8]?
    /// Why the changes file could not be read, when it is there but unreadable.
    public var changesProblem: String?

    /// The changes file's name in `state_dir`.
    public static let changesFile = "config-changes.yaml"

    public init(path: String, bytes: [UInt8], changesPath: String, changes: [UInt8]?) {
        self.path = path
        self.bytes = bytes
        self.changesPath = changesPath
        self.changes = changes
    }

    /// The source of the main file at `path` (already read as `bytes`): its `state_dir` (as written, with
    /// `${ENV}` expanded; else `$STATE_DIRECTORY`, else /var/lib/switchyard) says where the changes file is.
    public static func locate(path: String, bytes: [UInt8], environment: [String: String]) -> ConfigSource {
        var dir = environment["STATE_DIRECTORY"] ?? "/var/lib/switchyard"
        if let root = try? YAMLDocument.compose(String(decoding: bytes, as: UTF8.self)), case .mapping(let pairs, _) = root,
           let sd = pairs.first(where: { if case .scalar(let k) = $0.key { k.string == "state_dir" } else { false } }),
           case .scalar(let v) = sd.value, !ConfigSection.isNull(sd.value) {
            let r = ConfigReader(files: [path], environment: environment)
            if let expanded = r.expand(v.string, mark: nil, path: "state_dir"), !expanded.isEmpty { dir = expanded }
        }
        let changesPath = (dir.hasSuffix("/") ? dir : dir + "/") + changesFile
        var s = ConfigSource(path: path, bytes: bytes, changesPath: changesPath, changes: nil)
        switch ConfigFiles.readIfPresent(changesPath) {
        case .absent: break
        case .bytes(let b): s.changes = b
        case .unreadable(let why): s.changesProblem = "cannot read the changes file: \(why)"
        }
        return s
    }
}

extension YAMLNode {
    /// `over` merged over `base`: mappings key by key (a null in `over` removes the key), anything else
    /// replaced. Positions stay those of the node that wins, so a problem points into its own file.
    static func merge(_ base: YAMLNode?, _ over: YAMLNode?) -> YAMLNode? {
        guard let over, !ConfigSection.isNull(over) else { return base }
        guard case .mapping(let bp, let mark)? = base, case .mapping(let op, _) = over else { return over }
        func key(_ n: YAMLNode) -> String? { if case .scalar(let s) = n { s.string } else { nil } }
        var out: [(key: YAMLNode, value: YAMLNode)] = []
        var seen: Set<String> = []
        for (k, v) in bp {
            guard let name = key(k), let o = op.first(where: { key($0.key) == name }) else {
                out.append((k, v))
                continue
            }
            seen.insert(name)
            if ConfigSection.isNull(o.value) { continue }
            if case .mapping = v, case .mapping = o.value {
                out.append((k, merge(v, o.value)!))
            } else {
                out.append((o.key, o.value))
            }
        }
        for (k, v) in op where !seen.contains(key(k) ?? "\u{0}") && !ConfigSection.isNull(v) {
            out.append((k, v))
        }
        return .mapping(out, mark)
    }
}

/// Reading and atomically replacing the config's files, without Foundation.
enum ConfigFiles {
    enum Read {
        case absent
        case bytes([UInt8])
        case unreadable(String)
    }

    static func read(_ path: String) -> [UInt8]? {
        if case .bytes(let b) = readIfPresent(path) { return b }
        return nil
    }

    static func readIfPresent(_ path: String) -> Read {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            return errno == ENOENT ? .absent : .unreadable(String(cString: strerror(errno)))
        }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .unreadable(String(cString: strerror(errno)))
            }
            if n == 0 { break }
            out += buf[0..<n]
        }
        return .bytes(out)
    }

    /// The file a path names, through symbolic links (a config kept elsewhere and linked stays a link).
    static func resolved(_ path: String) -> String {
        guard let p = realpath(path, nil) else { return path }
        defer { free(p) }
        return String(cString: p)
    }

    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    /// Whether the bridge can replace the file at `path` keeping its mode and owner: it can create a file
    /// in its directory (not a read-only mount) and write the file, and can give the new file the old
    /// one's owner and group.
    static func canReplace(_ path: String) -> Bool {
        let file = resolved(path)
        guard access(file, W_OK) == 0, access(directory(of: file), W_OK) == 0 else { return false }
        var st = stat()
        guard stat(file, &st) == 0 else { return false }
        let uid = geteuid()
        if uid == 0 { return true }
        guard st.st_uid == uid else { return false }
        return st.st_gid == getegid() || supplementaryGroups().contains(st.st_gid)
    }

    static func supplementaryGroups() -> [gid_t] {
        let n = getgroups(0, nil)
        guard n > 0 else { return [] }
        var groups = [gid_t](repeating: 0, count: Int(n))
        let m = getgroups(n, &groups)
        return m > 0 ? Array(groups.prefix(Int(m))) : []
    }

    enum WriteError: Error {
        /// The file is not what it was expected to be (it changed on disk).
        case changed
        case failed(String)
    }

    /// Replaces the file at `path` with `bytes`: a temporary file in the same directory, written, given the
    /// old file's mode, owner and group (0600 for a new file), fsync'd, checked once more against
    /// `expected` (nil: there must be no file) and renamed over it; then the directory is fsync'd. On any
    /// failure nothing is left behind and the old file is as it was.
    static func replace(_ path: String, with bytes: [UInt8], expected: [UInt8]?) throws(WriteError) {
        let file = resolved(path)
        let dir = directory(of: file)
        var st = stat()
        let exists = stat(file, &st) == 0
        if exists == false, errno != ENOENT { throw .failed("cannot read \(file): \(String(cString: strerror(errno)))") }
        if !exists {
            try makeDirectory(dir)
        }
        let name = file[file.index(after: file.lastIndex(of: "/") ?? file.startIndex)...]
        let tmp = "\(dir)/.\(name).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .failed("cannot create a file in \(dir): \(String(cString: strerror(errno)))") }
        var ok = false
        defer {
            if !ok { unlink(tmp) }
        }
        func fail(_ what: String) -> WriteError {
            let why = String(cString: strerror(errno))
            close(fd)
            return .failed("\(what) \(tmp): \(why)")
        }
        var off = 0
        while off < bytes.count {
            let n = bytes[off...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw fail("cannot write")
            }
            off += n
        }
        if exists {
            if fchmod(fd, st.st_mode & 0o7777) != 0 { throw fail("cannot set the mode of") }
            if st.st_uid != geteuid() || st.st_gid != getegid() {
                if fchown(fd, st.st_uid, st.st_gid) != 0 { throw fail("cannot give the old owner to") }
            }
        }
        if fsync(fd) != 0 { throw fail("cannot fsync") }
        close(fd)
        // The last look before the rename: what is there must still be what the change was made from.
        switch readIfPresent(file) {
        case .absent: if expected != nil { throw .changed }
        case .bytes(let now): if now != expected { throw .changed }
        case .unreadable(let why): throw .failed("cannot read \(file): \(why)")
        }
        guard rename(tmp, file) == 0 else { throw .failed("cannot rename \(tmp) to \(file): \(String(cString: strerror(errno)))") }
        ok = true
        let dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dfd >= 0 {
            _ = fsync(dfd)
            close(dfd)
        }
    }

    /// mkdir -p, new directories private to the bridge's user.
    static func makeDirectory(_ dir: String) throws(WriteError) {
        var prefix = dir.hasPrefix("/") ? "/" : ""
        for part in dir.split(separator: "/") {
            prefix += (prefix.isEmpty || prefix.hasSuffix("/") ? "" : "/") + part
            if mkdir(prefix, 0o700) != 0 && errno != EEXIST {
                throw .failed("cannot create \(prefix): \(String(cString: strerror(errno)))")
            }
        }
    }
}
