import CSandboxLaunch
import Glibc

/// The C view of a plan. Every pointer the forked children read is allocated here, before
/// the fork, and freed only after the sandbox is gone.
final class CPlan {
    var plan = ahl_plan()
    private var strings: [UnsafeMutablePointer<CChar>] = []
    private var argv: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private var envp: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private var mounts: UnsafeMutablePointer<ahl_mount>
    private var rlimits: UnsafeMutablePointer<ahl_rlimit>
    private var bpf: UnsafeMutableRawPointer
    private var scratch: UnsafeMutablePointer<Int32>
    private var join: UnsafeMutablePointer<UnsafePointer<CChar>?>

    init(_ p: LaunchPlan, stdio: (Int32, Int32, Int32), cgroupJoin: [String]) {
        argv = .allocate(capacity: p.command.count + 1)
        envp = .allocate(capacity: p.environment.count + 1)
        mounts = .allocate(capacity: max(1, p.mounts.count))
        rlimits = .allocate(capacity: max(1, p.rlimits.count))
        bpf = .allocate(byteCount: max(8, p.filter.bpf.count), alignment: 8)
        scratch = .allocate(capacity: p.mounts.count + Int(AHL_DEVICE_COUNT))
        join = .allocate(capacity: cgroupJoin.count + 1)
        func c(_ s: String) -> UnsafePointer<CChar> {
            let d = strdup(s)!
            strings.append(d)
            return UnsafePointer(d)
        }
        for (i, a) in p.command.enumerated() { argv[i] = c(a) }
        argv[p.command.count] = nil
        for (i, e) in p.environment.enumerated() { envp[i] = c(e) }
        envp[p.environment.count] = nil
        for (i, m) in p.mounts.enumerated() {
            var cm = ahl_mount()
            cm.dest = c(m.destination)
            switch m.kind {
            case .bind(let source, let readOnly, let device, let inode, let isDirectory, let noSymlinks):
                cm.kind = AHL_MOUNT_BIND.rawValue
                cm.source = c(source)
                cm.flags = (readOnly ? UInt32(AHL_MOUNT_READONLY) : 0) | (isDirectory ? UInt32(AHL_MOUNT_SOURCE_DIR) : 0)
                    | (noSymlinks ? UInt32(AHL_MOUNT_NO_SYMLINKS) : 0)
                cm.dev = device
                cm.ino = inode
            case .tmpfs(let size, let mode):
                cm.kind = AHL_MOUNT_TMPFS.rawValue
                cm.size = size
                cm.mode = mode
            case .hide:
                cm.kind = AHL_MOUNT_HIDE.rawValue
            case .symlink(let target):
                cm.kind = AHL_MOUNT_SYMLINK.rawValue
                cm.source = c(target)
            }
            mounts[i] = cm
        }
        for (i, r) in p.rlimits.enumerated() { rlimits[i] = ahl_rlimit(resource: r.resource, soft: r.value, hard: r.value) }
        p.filter.bpf.withUnsafeBytes { bpf.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }

        plan.argv = UnsafePointer(argv)
        plan.envp = UnsafePointer(envp)
        plan.search_path = c(p.searchPath)
        plan.cwd = c(p.workingDirectory)
        plan.hostname = c(p.identity.hostname)
        plan.uid = p.identity.uid
        plan.gid = p.identity.gid
        plan.id_span = p.identity.span
        plan.keep_caps = p.keptCapabilities
        plan.mounts = UnsafePointer(mounts)
        plan.n_mounts = UInt32(p.mounts.count)
        plan.rlimits = UnsafePointer(rlimits)
        plan.n_rlimits = UInt32(p.rlimits.count)
        plan.bpf = UnsafeRawPointer(bpf)
        plan.bpf_len = UInt32(p.filter.instructionCount)
        plan.seccomp_flags = 0
        plan.loopback_up = p.network.mode == .none ? 0 : 1
        plan.keep_survivors = 0
        plan.proxy_port = p.network.mode == .proxy ? EgressProxy.port : 0
        plan.stdio = (stdio.0, stdio.1, stdio.2)
        plan.cap_last = UInt32(Capabilities.lastCap)
        plan.root_size = 4 << 20
        plan.scratch_fds = scratch
        for (i, f) in cgroupJoin.enumerated() { join[i] = c(f) }
        join[cgroupJoin.count] = nil
        plan.cgroup_join = UnsafePointer(join)
        plan.cgroup_into_fd = -1
        plan.cgroup_into_join = -1
        plan.netns_fd = -1
        plan.masks_fd = -1
        plan.template_fd = -1
        plan.dev_fd = -1
        plan.userns_fd = -1
        plan.seed_fd = -1
        plan.host_uid = p.identity.hostUID
        plan.host_gid = p.identity.hostGID
        plan.landlock = p.landlock == .off ? 0 : p.landlock == .required ? 2 : 1
        let block = Self.argumentBlocks
        plan.wipe_start = (block.argStart, block.envStart)
        plan.wipe_end = (block.argEnd, block.envEnd)
    }

    /// Marks each mount's place in a template root (`TemplateLayout`), index for index.
    func flagMounts(_ roles: [TemplateLayout.Role]) {
        let clear = ~(UInt32(AHL_MOUNT_IN_TEMPLATE) | UInt32(AHL_MOUNT_POINT_IN_TEMPLATE))
        for (i, role) in roles.enumerated() where i < Int(plan.n_mounts) {
            var f = mounts[i].flags & clear
            switch role {
            case .inTemplate: f |= UInt32(AHL_MOUNT_IN_TEMPLATE)
            case .mountPointInTemplate: f |= UInt32(AHL_MOUNT_POINT_IN_TEMPLATE)
            case .perSandbox: break
            }
            mounts[i].flags = f
        }
    }

    /// arg_start, arg_end, env_start, env_end: fields 48-51 of /proc/self/stat.
    static let argumentBlocks: (argStart: UInt64, argEnd: UInt64, envStart: UInt64, envEnd: UInt64) = {
        let stat = readText("/proc/self/stat")
        // Fields after the command name (which may contain spaces) start after the last ')'.
        guard let close = stat.lastIndex(of: ")") else { return (0, 0, 0, 0) }
        let fields = stat[stat.index(after: close)...].split(separator: " ").map { UInt64($0) ?? 0 }
        // fields[0] is field 3 (state) of proc(5)
        guard fields.count >= 49 else { return (0, 0, 0, 0) }
        return (fields[45], fields[46], fields[47], fields[48])
    }()

    deinit {
        for s in strings { free(s) }
        argv.deallocate()
        envp.deallocate()
        mounts.deallocate()
        rlimits.deallocate()
        bpf.deallocate()
        scratch.deallocate()
        join.deallocate()
    }
}
