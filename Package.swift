// swift-tools-version:6.0
// autoharness: a supervisor for self-improving agents whose sandbox, gate and ledger
// do not depend on the coding agent's good behaviour.
//
// The targets, what each holds and what each may import: docs/architecture.md, "Targets"
// (ArchitectureTests.targetTable holds that table to this file). The trust boundary is in
// the list: only SupervisorIO reads what a sandbox wrote; only the launch C code runs
// between fork and exec.
import PackageDescription

let package = Package(
    name: "autoharness",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "autoharness", targets: ["autoharness"]),
        .executable(name: "sandbox-probe", targets: ["sandbox-probe"]),
        .executable(name: "autoharness-client", targets: ["autoharness-client"]),
        .executable(name: "autoharness-launch", targets: ["autoharness-launch"]),
        .executable(name: "autoharness-front", targets: ["autoharness-front"]),
        .library(name: "SandboxPolicy", targets: ["SandboxPolicy"]),
        .library(name: "Sandbox", targets: ["Sandbox"]),
        .library(name: "Experiment", targets: ["Experiment"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
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
            name: "CSandboxSpawn",
            dependencies: ["CSandboxLaunch"],
            cSettings: [.define("_GNU_SOURCE")]
        ),
        // TLS for the egress proxy's inference gate: the distribution's OpenSSL (libssl-dev).
        .target(
            name: "CTLS",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),
        .target(
            name: "CSystemCalls",
            cSettings: [.define("_GNU_SOURCE")]
        ),
        // No Foundation: it sits on the per-task path and under everything else.
        .target(
            name: "SupervisorIO",
            dependencies: ["CSystemCalls"]
        ),
        // No Foundation and no YAML: what the sandbox needs of a policy, nothing of loading one.
        .target(
            name: "PolicyModel",
            dependencies: ["SupervisorIO"]
        ),
        // Finding policy files and the cache of loaded policies: no YAML and no Foundation, so
        // that the `sandbox exec` front can use a cached policy.
        .target(
            name: "PolicyStore",
            dependencies: ["PolicyModel", "SupervisorIO"]
        ),
        .target(
            name: "SandboxPolicy",
            dependencies: ["PolicyModel", "PolicyStore", "SupervisorIO", .product(name: "Yams", package: "Yams")]
        ),
        .target(
            name: "Sandbox",
            dependencies: [
                "PolicyModel", "SupervisorIO", "CSandboxLaunch", "CSandboxSpawn", "CSystemCalls", "CSeccomp", "CCap", "CTLS",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `sandbox exec` once its policy is loaded: the full CLI and its front both run it. No
        // Foundation and no YAML, which the front must not link.
        .target(
            name: "SandboxCLI",
            dependencies: ["Sandbox", "PolicyModel", "PolicyStore", "SupervisorIO", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "Benchmark",
            dependencies: ["Sandbox", "SandboxPolicy", "SupervisorIO"]
        ),
        .target(
            name: "Ledger",
            dependencies: [
                "SupervisorIO",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "Experiment",
            dependencies: [
                "Benchmark", "Ledger", "Sandbox", "SandboxPolicy", "SupervisorIO", "BrokerWire",
                // The broker's grammar and the exit-code table (shared with the CLI).
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .executableTarget(
            name: "autoharness",
            dependencies: [
                "Sandbox", "SandboxCLI", "SandboxPolicy", "SupervisorIO", "Experiment", "Benchmark", "Ledger", "BrokerWire",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // `autoharness sandbox exec` where the policy is cached: a static executable without
        // Foundation, YAML or ArgumentParser, which starts in a fraction of the full CLI's time.
        // Anything else, and a miss, it hands to the full CLI (`autoharness` beside it, or
        // `../libexec/autoharness/autoharness` where `scripts/install` puts it).
        .executableTarget(
            name: "autoharness-front",
            dependencies: ["SandboxCLI", "Sandbox", "PolicyModel", "PolicyStore", "SupervisorIO", "CSystemCalls"],
            linkerSettings: [.unsafeFlags(["-static-executable"])]
        ),
        // The broker's wire format: no Foundation, shared by the supervisor and the client.
        .target(name: "BrokerWire"),
        // The `autoharness` inside the coding agent's sandbox: a static client of the broker,
        // a static executable (no loader, no shared libraries: it needs nothing of the /usr it
        // is bound into, and it starts in a fraction of a millisecond per broker request).
        .executableTarget(
            name: "autoharness-client",
            dependencies: ["BrokerWire"],
            linkerSettings: [.unsafeFlags(["-static-executable"])]
        ),
        // The sandbox's monitor, exec'd by the supervisor: C with no C library (main.c), static,
        // so that it starts in microseconds. -nostartfiles keeps the Swift runtime's start-up
        // object out, -nostdlib glibc's: anything of either that the code would need fails the
        // link instead of being pulled in.
        .executableTarget(
            name: "autoharness-launch",
            dependencies: ["CSandboxLaunch"],
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.unsafeFlags(["-static-executable", "-nostartfiles", "-Xclang-linker", "-nostdlib"])]
        ),
        .executableTarget(
            name: "sandbox-probe",
            cSettings: [.define("_GNU_SOURCE")],
            // The probe runs inside sandboxes that see only the host's /usr: it must not
            // need the Swift runtime's shared libraries from the toolchain directory.
            linkerSettings: [.unsafeFlags(["-static-stdlib"])]
        ),
        // Shared helpers of the test targets: locating the built binaries, running them, temp dirs.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "SupervisorIOTests", dependencies: ["SupervisorIO", "TestSupport"]),
        // Reads Sources/ and holds every target to docs/architecture.md's rules.
        .testTarget(name: "ArchitectureTests"),
        .testTarget(name: "SandboxPolicyTests", dependencies: ["SandboxPolicy", "PolicyStore", "SupervisorIO"]),
        .testTarget(name: "SandboxTests", dependencies: ["Sandbox", "SandboxPolicy", "CSandboxLaunch", "CSandboxSpawn", "CSystemCalls", "TestSupport"]),
        .testTarget(name: "BenchmarkTests", dependencies: ["Benchmark", "Sandbox", "SandboxPolicy", "TestSupport"],
                    exclude: ["Fixtures"]),
        .testTarget(name: "LedgerTests", dependencies: ["Ledger", "SupervisorIO", "TestSupport"]),
        .testTarget(name: "ExperimentTests", dependencies: ["Experiment", "Benchmark", "Ledger", "Sandbox", "SandboxPolicy", "SupervisorIO", "BrokerWire", "TestSupport"],
                    exclude: ["Fixtures"]),
    ]
)
