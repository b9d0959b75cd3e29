import ExperimentModel
import Foundation
import SandboxPolicy
import SupervisorIO

/// What the held-out guest sees, and the initramfs that boots it.
///
/// The guest's root is a tmpfs made from the initramfs; host paths appear in it at the same
/// places, so the same config, policies and adapter work unchanged inside:
///   - read-only 9p shares (qemu's `-virtfs ... readonly=on`) of the directories the held-out
///     policies bind (`/usr`, tool directories), the benchmark, the policy directories, and
///     the autoharness binaries with the libraries they are linked against;
///   - copies, in the initramfs, of the single files the policies bind (`/etc/ld.so.cache`,
///     ...), the experiment config, the request and the agent.py snapshot;
///   - the host's top-level symlinks (`/bin -> usr/bin`) recreated.
/// Nothing else of the host exists in the guest, and nothing the guest writes reaches the
/// host: every writable place in it is guest memory.
package struct GuestImage {
    /// `(tag, host directory, guest directory)`: each one a read-only 9p device, mounted in
    /// the guest at the same path as on the host, except a service's inputs (`GuestServices`),
    /// which are made on the host's scratch tmpfs and mounted under `/.ahvm/in`.
    var shares: [(tag: String, path: String, at: String)] = []
    var files: [(path: String, bytes: [UInt8], mode: UInt32)] = []
    var symlinks: [(path: String, target: String)] = []
    /// The host's `/proc/self/exe`, run in the guest as `vm-guest`.
    var binary: String
    /// The tmpfs the adapter makes per-task scratch directories in.
    var scratch: String
    /// The host gate's CA bundle (`GuestRequest.trustBundlePath`), when the guest's tools
    /// reach model APIs through it.
    var trustBundle: [UInt8]?

    /// The largest single file copied into the initramfs, and all of them together.
    static let maxFileBytes = 16 << 20
    static let maxCopiedBytes = 64 << 20

    /// Collects what the guest needs for `request` (see the type's comment). Throws
    /// `ExperimentError(.state)` naming what is missing or too big.
    static func plan(request: GuestRequest, config: ExperimentConfig, policyLoader: PolicyLoader, adapterPaths: [String],
                     scratch: String) throws -> GuestImage {
        guard let binary = canonical("/proc/self/exe") else { throw ExperimentError(.io, "cannot resolve /proc/self/exe") }
        var image = GuestImage(binary: binary, scratch: scratch)
        var directories: [String] = []
        var singleFiles: [String] = []
        // The held-out policies' bind sources (placeholders are filled per task, in the guest,
        // with its own scratch and the snapshot copied below): a local benchmark's task and
        // verifier, or a tool's runner and scorer with the tool's own binds; a tool whose
        // verifier with the tool's own binds; a tool whose verifiers autoharness runs itself
        // (Harbor's local environments) needs both.
        let local = config.runsOwnTasks
        let ownVerifiers = local || BenchmarkKinds.named(config.benchmark)?.runsVerifiers(config) == true
        let policies = (local ? [] : [config.runner.policy, config.runner.scorerPolicy]) + (ownVerifiers ? [config.taskPolicy, config.verifierPolicy] : [])
        for name in policies {
            let policy: Policy
            do {
                policy = try policyLoader.load(name, requireAllPlaceholders: false)
            } catch {
                throw ExperimentError(.state, "held-out VM: policy \(name)", cause: error)
            }
            for m in policy.mounts {
                guard let source = m.source, !source.contains("{") else { continue }
                var st = stat()
                guard lstat(source, &st) == 0 else {
                    if m.optional { continue }
                    throw ExperimentError(.state, "held-out VM: policy \(name) binds \(source), which does not exist")
                }
                if st.st_mode & S_IFMT == S_IFLNK {
                    guard let target = linkTarget(source), let real = canonical(source) else { continue }
                    if m.keepSymlink { image.symlinks.append((source, target)) } else { image.symlinks.append((source, real)) }
                    var rst = stat()
                    if stat(real, &rst) == 0 { (rst.st_mode & S_IFMT == S_IFDIR ? { directories.append(real) } : { singleFiles.append(real) })() }
                } else if st.st_mode & S_IFMT == S_IFDIR {
                    directories.append(source)
                } else if st.st_mode & S_IFMT == S_IFREG {
                    singleFiles.append(source)
                }
            }
        }
        if !local {
            for b in config.runner.binds {
                guard let real = canonical(b) else {
                    throw ExperimentError(.state, "held-out VM: runner.binds names \(b), which does not exist")
                }
                var st = stat()
                guard stat(real, &st) == 0 else { continue }
                if st.st_mode & S_IFMT == S_IFDIR { directories.append(real) } else if st.st_mode & S_IFMT == S_IFREG { singleFiles.append(real) }
                if real != b { image.symlinks.append((b, real)) }
            }
        }
        for path in adapterPaths {
            guard let real = canonical(path) else {
                throw ExperimentError(.state, "held-out VM: the benchmark reads \(path), which does not exist")
            }
            if isDirectory(real) { directories.append(real) } else { singleFiles.append(real) }
            if real != path { image.symlinks.append((path, real)) }
        }
        directories += request.policySearchPaths.filter { isDirectory($0) }
        // The binaries (autoharness, autoharness-launch beside it) and every shared library
        // this process has mapped (a debug build links the Swift runtime from the toolchain).
        directories.append(String(binary[..<binary.lastIndex(of: "/")!]))
        directories += mappedLibraryDirectories()
        image.shares = outermost(directories).enumerated().map { ("ah\($0.offset)", $0.element, $0.element) }
        guard image.shares.count <= 28 else {
            throw ExperimentError(.state, "held-out VM: \(image.shares.count) directories to share (at most 28): \(image.shares.map(\.path).joined(separator: ", "))")
        }

        // Copies: a file under a share is already there (and would be hidden by its mount).
        var total = 0
        func copy(_ path: String, mode: UInt32 = 0o644) throws {
            guard !image.isShared(path), !image.files.contains(where: { $0.path == path }) else { return }
            switch InputFile.read(path, cap: maxFileBytes) {
            case .success(let bytes):
                total += bytes.count
                guard total <= maxCopiedBytes else { throw ExperimentError(.state, "held-out VM: the files to copy exceed \(maxCopiedBytes >> 20) MiB") }
                image.files.append((path, bytes, mode))
            case .failure(let p):
                throw ExperimentError(.state, "held-out VM: \(path): \(p.explanation("a file the held-out sandboxes bind"))")
            }
        }
        for f in singleFiles { try copy(f) }
        if request.node == nil { try copy(request.configPath) }
        try copy(request.agentDirectory + "/agent.py")
        // A tool's task list, when the config keeps it in a file (read again in the guest).
        if !local, let f = config.tasksFile { try copy(f.hasPrefix("/") ? f : request.experimentRoot + "/" + f) }
        return image
    }

    func isShared(_ path: String) -> Bool {
        shares.contains { path == $0.at || path.hasPrefix($0.at == "/" ? "/" : $0.at + "/") }
    }

    /// Shares `directory` (made by the host for this phase) read-only at `/.ahvm/in/<name>`,
    /// and returns that guest path.
    mutating func addInput(_ directory: String, name: String) throws -> String {
        guard shares.count < 28 else { throw ExperimentError(.state, "held-out VM: no room for another share (at most 28)") }
        let at = Self.inputRoot + "/" + name
        shares.append(("ah\(shares.count)", directory, at))
        return at
    }

    static let inputRoot = "/.ahvm/in"

    /// For a phase whose tasks run on their own image: the store's unpacked images shared
    /// read-only at their host path (each task's overlay in the guest has its image there as
    /// the lower layer, owners as on the host), and the store's index and refusals copied,
    /// so the guest's adapter loads the same images the host's does (`TaskImageStore.load`).
    mutating func addImageStore(_ directory: String) throws {
        guard shares.count < 28 else { throw ExperimentError(.state, "held-out VM: no room for the image store's share (at most 28)") }
        let rootfs = directory + "/rootfs"
        guard Self.isDirectory(rootfs) else { throw ExperimentError(.state, "held-out VM: the image store has no \(rootfs)") }
        if !isShared(rootfs) { shares.append(("ah\(shares.count)", rootfs, rootfs)) }
        for name in ["index.json", "failed.json"] {
            let path = directory + "/" + name
            switch InputFile.read(path, cap: Self.maxFileBytes) {
            case .success(let bytes): files.append((path, bytes, 0o600))
            case .failure(let p):
                if name == "failed.json", access(path, F_OK) != 0 { continue }
                throw ExperimentError(.state, "held-out VM: \(path): \(p.explanation("the image store's index"))")
            }
        }
    }

    /// The initramfs, the same for every gate (so a guest booted from it can be saved once and
    /// restored for each: `VMSnapshot`): busybox, the two init stages under `/.ahvm`, the kernel
    /// modules. Nothing of a gate is in it; the gate's files reach the guest through the export
    /// (`writeGate`) after it is up.
    package static func initramfs(kernel: GuestKernel) -> [UInt8] {
        var r = Initramfs()
        r.characterDevice("/dev/console", major: 5, minor: 1)
        for d in ["/proc", "/sys", "/dev", "/tmp", "/run", "/newroot"] { r.directory(d) }
        r.directory("/.ahvm", mode: 0o700)
        r.file("/.ahvm/busybox", kernel.busybox, mode: 0o755)
        // At /init: busybox switch_root checks that it runs from an initramfs by that file.
        r.file("/init", Array(stage1.utf8), mode: 0o755)
        r.file("/.ahvm/stage2", Array(stage2.utf8), mode: 0o755)
        var order = ""
        for (name, bytes) in kernel.modules {
            r.file("/.ahvm/modules/\(name)", bytes, mode: 0o600)
            order += name + "\n"
        }
        r.file("/.ahvm/modules/order", Array(order.utf8), mode: 0o600)
        return r.archive()
    }

    /// The gate's part of the export, in `directory` (on the host's scratch tmpfs, read-only
    /// to qemu): `request`; `shares`, a line `<subdirectory> <guest path>` per share; `scratch`
    /// and `binary`, a line each; `root/`, the copies and symlinks at their guest paths (and
    /// the CA bundle), copied onto the guest's root before the shares are mounted.
    func writeGate(_ directory: String, request: [UInt8]) throws {
        func write(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) throws {
            let parent = String(path[..<path.lastIndex(of: "/")!])
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            try AtomicFile.write(bytes, to: path, mode: mode)
        }
        // One line each, read by stage 2's `read -r`: a path with a line break would be two.
        for path in shares.map(\.at) + [scratch, binary] where path.contains("\n") || path.contains("\r") || !path.hasPrefix("/") {
            throw ExperimentError(.state, "held-out VM: \(path.debugDescription) cannot be given to the guest (an absolute path without line breaks is needed)")
        }
        do {
            try write(directory + "/request", request)
            try write(directory + "/shares", Array(shares.enumerated().map { "s\($0.offset) \($0.element.at)\n" }.joined().utf8))
            try write(directory + "/scratch", Array((scratch + "\n").utf8))
            try write(directory + "/binary", Array((binary + "\n").utf8))
            let root = directory + "/root"
            try FileManager.default.createDirectory(atPath: root + "/.ahvm", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            chmod(root, 0o755)
            if let trustBundle { try write(root + GuestRequest.trustBundlePath, trustBundle, mode: 0o644) }
            for f in files { try write(root + f.path, f.bytes, mode: mode_t(f.mode)) }
            for l in symlinks where !isShared(l.path) {
                let parent = String((root + l.path)[..<(root + l.path).lastIndex(of: "/")!])
                try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
                guard symlink(l.target, root + l.path) == 0 || errno == EEXIST else {
                    throw ExperimentError(.io, "symlink \(root + l.path): \(ErrnoName.describe(errno))")
                }
            }
        } catch let e as ExperimentError {
            throw e
        } catch {
            throw ExperimentError(.io, "held-out VM: \(directory)", cause: error)
        }
    }

    /// Stage 1, PID 1 in the initramfs. The kernel unpacks the initramfs into rootfs, which
    /// pivot_root cannot leave, and every sandbox in the guest ends in pivot_root; so the tree
    /// is copied onto a real tmpfs and switch_root moves in.
    /// A failure powers off without an answer, which the host reads as an interrupted gate.
    static let stage1 = """
        #!/.ahvm/busybox sh
        B=/.ahvm/busybox
        fail() { echo "ahvm: $*"; $B poweroff -f; }
        $B mount -t proc proc /proc && $B mount -t sysfs sysfs /sys && $B mount -t devtmpfs devtmpfs /dev || fail "kernel filesystems"
        while read -r m; do $B insmod "/.ahvm/modules/$m" || fail "insmod $m"; done < /.ahvm/modules/order
        $B mount -t tmpfs -o mode=0755 tmpfs /newroot || fail "tmpfs root"
        for e in /* /.ahvm; do
            case "$e" in /newroot|/proc|/sys|/dev) continue ;; esac
            $B cp -a "$e" /newroot/ || fail "copy $e"
        done
        $B mkdir -p /newroot/proc /newroot/sys /newroot/dev
        $B umount /proc /sys /dev
        exec $B switch_root /newroot /.ahvm/stage2
        fail "switch_root"

        """

    /// Stage 2, PID 1 on the tmpfs root: the kernel filesystems a supervisor needs (cgroup v2
    /// alone: the kernel runs with cgroup_no_v1=all), then `ready` on the control port and a
    /// wait for the host's `go <seconds since 1970> <seed>`: up to here every guest is the same,
    /// and a snapshot is taken here (`VMSnapshot`). Then the clock is set and the seed mixed
    /// into the kernel's pool; the export is mounted, the gate's copies laid on the root and
    /// each share bound at its path (cache=loose: the guest keeps what it read in its own page
    /// cache, the shares do not change during a gate; without it every stat is a round trip to
    /// the host); the scratch tmpfs, then `autoharness vm-guest` (which reseeds the kernel's
    /// generator from the pool first), and power off whatever it did.
    static let stage2 = """
        #!/.ahvm/busybox sh
        B=/.ahvm/busybox
        fail() { echo "ahvm: $*"; $B poweroff -f; }
        $B mount -t proc proc /proc && $B mount -t sysfs sysfs /sys && $B mount -t devtmpfs devtmpfs /dev || fail "kernel filesystems"
        $B mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
        $B mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
        $B mount -t tmpfs -o mode=1777 tmpfs /dev/shm
        # /tmp and /run stay on the tmpfs root (already guest memory): a mount there would
        # hide the copies and shares of host paths under them (an experiment in /tmp).
        $B mkdir -p /tmp /run && $B chmod 1777 /tmp
        $B mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup || fail "cgroup2"
        $B ip link set lo up
        port= ctl= egress=
        for p in /sys/class/virtio-ports/*; do
            case "$($B cat "$p/name" 2>/dev/null)" in
                ah.results) port="/dev/${p##*/}" ;;
                ah.control) ctl="/dev/${p##*/}" ;;
                ah.egress) egress="/dev/${p##*/}" ;;
            esac
        done
        [ -n "$port" ] && [ -n "$ctl" ] || fail "no results or control port"
        # The port stays open from `ready` to `go`: the guest's kernel drops what arrives on a
        # port no process has open, so reopening it to read could lose a quick `go`.
        exec 3<>"$ctl"
        echo ready >&3
        read -r word now seed <&3
        exec 3<&-
        [ "$word" = go ] || fail "no go from the host"
        $B date -s "@$now" > /dev/null || fail "clock"
        # vm-guest credits it to the kernel's pool and reseeds from it (RNDADDENTROPY, then
        # RNDRESEEDCRNG) before anything of the gate runs.
        echo "$seed" > /.ahvm/seed
        X=/.ahvm/x
        $B mkdir -p $X && $B mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 ahx $X || fail "export"
        $B cp -a $X/gate/root/. / || fail "the gate's files"
        # Whole lines (IFS= keeps a path's own spaces): the subdirectory, a space, the path.
        while IFS= read -r line; do
            sub="${line%% *}" path="${line#* }"
            $B mkdir -p "$path" && $B mount --bind "$X/$sub" "$path" || fail "share $path"
        done < $X/gate/shares
        IFS= read -r scratch < $X/gate/scratch
        IFS= read -r binary < $X/gate/binary
        $B mkdir -p "$scratch" && $B mount -t tmpfs -o mode=0700 tmpfs "$scratch" || fail "scratch"
        set -- --request $X/gate/request --answer "$port"
        [ -n "$egress" ] && set -- "$@" --egress "$egress"
        $B env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 "$binary" vm-guest "$@"
        echo "ahvm: vm-guest exited $?"
        $B sync
        $B poweroff -f

        """

    /// Directories, without any that lies inside another.
    static func outermost(_ paths: [String]) -> [String] {
        var out: [String] = []
        for p in Set(paths).sorted() where !out.contains(where: { p == $0 || p.hasPrefix($0 == "/" ? "/" : $0 + "/") }) {
            out.append(p)
        }
        return out
    }

    /// The directories of the shared objects this process has mapped (from /proc/self/maps).
    static func mappedLibraryDirectories() -> [String] {
        let fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        guard case .success(let bytes) = InputFile.read(descriptor: fd, cap: 4 << 20) else { return [] }
        let text = String(decoding: bytes, as: UTF8.self)
        var dirs: Set<String> = []
        for line in text.split(separator: "\n") {
            guard let slash = line.firstIndex(of: "/") else { continue }
            let path = String(line[slash...])
            guard path.contains(".so"), let real = canonical(path), let last = real.lastIndex(of: "/") else { continue }
            dirs.insert(String(real[..<last]))
        }
        return dirs.sorted()
    }

    static func canonical(_ path: String) -> String? {
        guard let r = realpath(path, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }

    static func linkTarget(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buf, 4095)
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func isDirectory(_ path: String) -> Bool {
        var st = stat()
        return stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
    }
}
