// swift-tools-version:6.0
// autoharness: a supervisor for self-improving agents whose sandbox, gate and ledger
// do not depend on the coding agent's good behaviour.
//
// The trust boundary is visible in the target list:
//   CSandboxLaunch  — the only code that runs between fork and exec (C, async-signal-safe).
//   SandboxPolicy   — policy schema, YAML loading, validation (pure; no syscalls).
//   Sandbox         — compiles a policy into a launch plan (mounts, seccomp BPF, limits),
//                     runs it, supervises it (cgroups, seccomp notifications, audit).
//   autoharness     — the command-line tool.
//   sandbox-probe   — test-only attack probe run *inside* sandboxes by the escape suite.
import PackageDescription

let package = Package(
    name: "autoharness",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "autoharness", targets: ["autoharness"]),
        .executable(name: "sandbox-probe", targets: ["sandbox-probe"]),
        .library(name: "SandboxPolicy", targets: ["SandboxPolicy"]),
        .library(name: "Sandbox", targets: ["Sandbox"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .systemLibrary(
            name: "CSeccomp",
            pkgConfig: "libseccomp",
            providers: [.apt(["libseccomp-dev"])]
        ),
        .systemLibrary(
            name: "CCap",
            pkgConfig: "libcap",
            providers: [.apt(["libcap-dev"])]
        ),
        .target(
            name: "CSandboxLaunch",
            cSettings: [.define("_GNU_SOURCE")]
        ),
        .target(
            name: "SandboxPolicy",
            dependencies: [.product(name: "Yams", package: "Yams")]
        ),
        .target(
            name: "Sandbox",
            dependencies: [
                "SandboxPolicy", "CSandboxLaunch", "CSeccomp", "CCap",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "autoharness",
            dependencies: [
                "Sandbox", "SandboxPolicy",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "sandbox-probe",
            cSettings: [.define("_GNU_SOURCE")],
            // The probe runs inside sandboxes that see only the host's /usr: it must not
            // need the Swift runtime's shared libraries from the toolchain directory.
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]
        ),
        .testTarget(name: "SandboxPolicyTests", dependencies: ["SandboxPolicy"]),
        .testTarget(name: "SandboxTests", dependencies: ["Sandbox", "SandboxPolicy"]),
    ]
)
