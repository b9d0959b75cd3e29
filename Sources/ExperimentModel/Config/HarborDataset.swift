import Benchmark
import Foundation
import SandboxPolicy
import SupervisorIO

/// What `dataset:` names for `benchmark: terminal-bench`, in each form Harbor itself accepts.
enum HarborDataset {
    struct Task: Equatable {
        var id: String
        var declaredName: String?
    }

    enum Resolved {
        /// Task directories on this host: a plain dataset directory, or the one dataset of a
        /// `harbor download -o DIR` tree (`DIR/<dataset>/<task>/`).
        case directory(String, [Task])
        /// A registry reference (`name@version`, `org/name@ref`); its registry.json when
        /// registry_path names one, and then the dataset's tasks.
        case registry(String, HarborRegistry?, [String]?)
    }

    /// Registry references as `harbor run -d` / `harbor download` take them: `name`,
    /// `name@version`, `org/name`, `org/name@ref` (harbor 0.25.0, harbor/cli/download.py and
    /// harbor/cli/jobs.py: `/` in the name makes it a package, else a legacy registry dataset).
    /// A package's ref may also be a content digest, `sha256:<64 hex>` (harbor 0.25.0,
    /// harbor/db/client.py resolve_dataset_version, RefType.DIGEST): the pin that cannot move.
    static func isReference(_ s: String) -> Bool {
        let parts = s.split(separator: "@", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count), parts.allSatisfy({ !$0.isEmpty }) else { return false }
        let names = parts[0].split(separator: "/", omittingEmptySubsequences: false)
        guard (1...2).contains(names.count) else { return false }
        // No part starts with "-": harbor would take the reference for an option.
        func plain(_ p: Substring) -> Bool {
            !p.isEmpty && p.first != "." && p.first != "-" && p.unicodeScalars.allSatisfy { CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0) }
        }
        func digest(_ p: Substring) -> Bool {
            let hex = p.dropFirst("sha256:".count)
            return p.hasPrefix("sha256:") && hex.count == 64 && hex.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
        }
        guard names.allSatisfy(plain) else { return false }
        return parts.count == 1 || plain(parts[1]) || names.count == 2 && digest(parts[1])
    }

    /// Releases Harbor holds only as hub packages, by the `name@version` a user would write
    /// after `terminal-bench@2.0`: Terminal-Bench 2.1 is the package
    /// `terminal-bench/terminal-bench-2-1` (no legacy registry entry: `harbor download
    /// terminal-bench@2.1` answers "Dataset terminal-bench@2.1 not found"), pinned here by the
    /// content digest of its revision 6, the release of 2026-04 with 89 tasks (the digest NVIDIA
    /// NeMo Gym's Terminal-Bench 2.1 tutorial and others pin). docs/benchmarks.md: what changed
    /// from 2.0.
    static let aliases = [
        "terminal-bench@2.1": "terminal-bench/terminal-bench-2-1@sha256:7d7bdc1cbedad549fc1140404bd4dc45e5fd0ea7c4186773687d177ad3a0699a",
    ]

    /// The tasks of a directory: subdirectories with a task.toml and a usable id.
    static func tasks(in dir: String) -> [Task] {
        let fm = FileManager.default
        return ((try? fm.contentsOfDirectory(atPath: dir)) ?? []).sorted().compactMap { name in
            let task = dir + "/" + name
            guard BenchmarkTask.isValidID(name), fm.fileExists(atPath: task + "/task.toml") else { return nil }
            // A task.toml that cannot be read keeps its task (under its directory name):
            // Harbor then fails that task alone, which scores 0.
            return Task(id: name, declaredName: taskToml(task).flatMap(HarborAdapter.declaredName(taskToml:)))
        }
    }

    /// Downloads registry dataset `reference` with the operator's own harbor, as a user would:
    /// `harbor download REF -o DIR` (harbor 0.25.0, harbor/cli/download.py: a `name@version`
    /// through the legacy registry client, `--registry-url` or the default one; an `org/name@ref`
    /// package through the hub), which writes `DIR/<dataset>/<task>/`. This runs on the host, at
    /// `init`, before any agent.py exists: it is the operator's trusted tool fetching public
    /// tasks. Runs then bind only the tasks they run, so no sandbox needs the registry, its git
    /// hosts or the list of every task (a runner that could reach them could fetch held-out tasks
    /// from inside agent.py's process). Harbor's progress goes to our stderr.
    /// - Throws: ``ExperimentError`` `.usage` naming harbor's exit status and its last lines, and
    ///   the offline alternatives.
    static func download(_ reference: String, harbor: String, registryURL: String?, into dir: String) throws {
        var args = ["download", reference, "-o", dir, "--export"]
        if let registryURL { args += ["--registry-url", registryURL] }
        FileHandle.standardError.write(Data("init: downloading \(reference) with `harbor download` (the network is needed once, now) into \(dir)\n".utf8))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: harbor)
        p.arguments = args
        var env = ProcessInfo.processInfo.environment
        env["HARBOR_TELEMETRY"] = "0"
        // Plain tracebacks, unwrapped: their last line is the error a user can act on.
        env["_TYPER_STANDARD_TRACEBACK"] = "1"
        env["COLUMNS"] = "200"
        p.environment = env
        let output = Pipe()
        p.standardOutput = output
        p.standardError = output
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch {
            throw ExperimentError(.usage, "\(harbor): cannot start it", cause: error)
        }
        // A progress line while it works; its output is kept (capped) for the outcome.
        let started = Date()
        let heartbeat = Thread {
            while p.isRunning {
                sleep(1)
                let s = Int(Date().timeIntervalSince(started))
                if p.isRunning && s > 0 && s % 10 == 0 {
                    FileHandle.standardError.write(Data("init: still downloading \(reference) (\(s) s)\n".utf8))
                }
            }
        }
        heartbeat.start()
        var text = Data()
        while true {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            text.append(chunk)
            if text.count > 1 << 20 { text = text.suffix(256 << 10) }
        }
        p.waitUntilExit()
        // The last line is the error; a progress bar Harbor drew on it is cut off.
        let lines = String(decoding: text, as: UTF8.self).split(separator: "\n").map { line in
            let l = line.range(of: "Error: ").map { String(line[$0.lowerBound...]) } ?? String(line)
            return l.trimmingCharacters(in: .whitespaces)
        }.filter { !$0.isEmpty }
        guard p.terminationReason == .exit, p.terminationStatus == 0 else {
            throw ExperimentError(.usage, """
                `harbor \(args.joined(separator: " "))` failed (\(p.terminationReason == .exit ? "exit \(p.terminationStatus)" : "signal \(p.terminationStatus)")):
                  \(lines.last ?? "(no output)")
                Without the network: run `harbor download \(reference) -o DIR` on a machine that has it and give \
                --dataset DIR, or give a local registry.json with --registry-path
                """)
        }
        if let last = lines.last { FileHandle.standardError.write(Data("init: harbor: \(last)\n".utf8)) }
    }

    /// The text of a task directory's task.toml, read up to `LocalBenchmark.maxTaskTomlBytes`.
    static func taskToml(_ taskDirectory: String) -> String? {
        guard case .success(let bytes) = InputFile.read(taskDirectory + "/task.toml", cap: LocalBenchmark.maxTaskTomlBytes) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    static func resolve(_ dataset: String, root: String, registryPath: String?) throws -> Resolved {
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        let local = dataset.hasPrefix("/") || dataset.hasPrefix(".")
            || fm.fileExists(atPath: root + "/" + dataset, isDirectory: &isDirectory) && isDirectory.boolValue
        if local {
            var dir = dataset.hasPrefix("/") ? dataset : root + "/" + dataset
            while dir.count > 1 && dir.hasSuffix("/") { dir.removeLast() }
            guard let names = try? fm.contentsOfDirectory(atPath: dir) else {
                throw ExperimentError(.usage, "dataset: \(dir) is not a directory of Harbor tasks (a registry dataset is name@version, e.g. terminal-bench@2.0)")
            }
            let direct = tasks(in: dir)
            if !direct.isEmpty { return .directory(dir, direct) }
            // `harbor download REF -o DIR` exports into DIR/<dataset name>/<task>/ (harbor
            // 0.25.0, harbor/cli/download.py `_download_dataset`: output_dir / name.split("/")[-1];
            // harbor/tasks/client.py `download_tasks` with export=True: one directory per task).
            let downloaded = names.sorted().filter { !$0.hasPrefix(".") && !tasks(in: dir + "/" + $0).isEmpty }
            if downloaded.count == 1 { return .directory(dir + "/" + downloaded[0], tasks(in: dir + "/" + downloaded[0])) }
            if downloaded.count > 1 {
                throw ExperimentError(.usage, "dataset: \(dir) holds several downloaded datasets (\(downloaded.joined(separator: ", "))): name one of them, e.g. dataset: \(dir)/\(downloaded[0])")
            }
            throw ExperimentError(.usage, "dataset: \(dir) holds no Harbor tasks (directories with task.toml), directly or as `harbor download -o` writes them (DIR/<dataset>/<task>/)")
        }
        guard isReference(dataset) else {
            throw ExperimentError(.usage, "dataset: '\(dataset)' is neither a directory nor a Harbor registry dataset (name@version, e.g. terminal-bench@2.0, or org/name@ref)")
        }
        guard let r = registryPath else { return .registry(dataset, nil, nil) }
        let path = r.hasPrefix("/") ? r : root + "/" + r
        guard !dataset.contains("/") else {
            throw ExperimentError(.usage, "registry_path: a registry.json holds legacy datasets (name@version); \(dataset) is a registry package (org/name), which Harbor resolves on its hub")
        }
        let parts = dataset.split(separator: "@", maxSplits: 1).map(String.init)
        do {
            let registry = try HarborRegistry(path: path, name: parts[0], version: parts.count > 1 ? parts[1] : nil)
            return .registry(dataset, registry, registry.taskIDs)
        } catch {
            throw ExperimentError(.usage, error.message)
        }
    }
}
