// A Harbor legacy registry file (`registry.json`, harbor 0.25.0 harbor/models/registry.py:
// a list of DatasetSpec {name, version, description, tasks: [RegistryTaskId {name,
// git_url, git_commit_id, path}]}), read for one dataset. Harbor reads it with
// `--registry-path` and no network (harbor/registry/client/factory.py →
// harbor/registry/client/json.py JsonRegistryClient); a task without git_url is a
// LocalTaskId whose path is used in place (harbor/tasks/client.py `_download_local_tasks`),
// one with git_url is cloned from it.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

public struct HarborRegistry: Sendable, Equatable {
    /// The registry file as given.
    public let path: String
    public let name: String
    public let version: String
    public let description: String
    /// Each task's entry, by Harbor's `-i` name (the last component of its path:
    /// harbor/models/task/id.py `GitTaskId.get_name`, `LocalTaskId.get_name`).
    let entries: [String: JSONValue]
    /// Tasks on this host (no git_url), by id: their directories, bound one by one.
    public let localTasks: [String: String]
    /// True when a task is cloned from git (the runner then needs that host).
    public let gitHosts: [String]

    public var taskIDs: [String] { entries.keys.sorted() }

    /// Reads `path` (a registry.json, or the directory holding one, as Harbor accepts) and
    /// finds dataset `name` at `version` (nil: the only version, or "head").
    public init(path given: String, name: String, version: String?) throws(BenchmarkError) {
        var st = stat()
        let file = stat(given, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR ? given + "/registry.json" : given
        let data: [UInt8]
        switch InputFile.read(file, cap: Self.maxBytes) {
        case .success(let b): data = b
        case .failure(let problem): throw BenchmarkError(.configuration, "registry_path \(file): \(problem.explanation("a registry.json"))")
        }
        guard let json = JSONValue.parse(data), let list = json.array else {
            throw BenchmarkError(.configuration, "registry_path \(file): not a readable Harbor registry.json (a JSON list of datasets)")
        }
        let specs = list.filter { $0["name"]?.string == name }
        guard !specs.isEmpty else {
            let known = Set(list.compactMap { $0["name"]?.string }).sorted()
            throw BenchmarkError(.configuration, "registry_path \(file): no dataset '\(name)' (it has: \(known.prefix(20).joined(separator: ", ")))")
        }
        let versions = specs.compactMap { $0["version"]?.string }
        let chosen: JSONValue
        if let version {
            guard let s = specs.first(where: { $0["version"]?.string == version }) else {
                throw BenchmarkError(.configuration, "registry_path \(file): dataset '\(name)' has no version \(version) (it has: \(versions.joined(separator: ", ")))")
            }
            chosen = s
        } else if specs.count == 1 {
            chosen = specs[0]
        } else if let head = specs.first(where: { $0["version"]?.string == "head" }) {
            chosen = head
        } else {
            throw BenchmarkError(.configuration, "dataset '\(name)' has several versions in \(file) (\(versions.joined(separator: ", "))): name one, \(name)@VERSION")
        }
        var entries: [String: JSONValue] = [:], local: [String: String] = [:], hosts: Set<String> = []
        for task in chosen["tasks"]?.array ?? [] {
            guard let p = task["path"]?.string, let id = p.split(separator: "/").last.map(String.init), TraceName.isAcceptableID(id) else {
                throw BenchmarkError(.configuration, "registry_path \(file): a task of \(name) has no usable path")
            }
            if entries[id] != nil {
                throw BenchmarkError(.configuration, "registry_path \(file): task name '\(id)' is ambiguous: two tasks of \(name) have a path ending in it (Harbor's -i could not tell them apart)")
            }
            entries[id] = task
            if let url = task["git_url"]?.string {
                if let host = url.split(separator: "/").dropFirst(2).first { hosts.insert(String(host) + ":443") }
            } else {
                guard p.hasPrefix("/") else {
                    throw BenchmarkError(.configuration, "registry_path \(file): local task path '\(p)' must be absolute (Harbor resolves it from its own working directory)")
                }
                local[id] = p
            }
        }
        guard !entries.isEmpty else { throw BenchmarkError(.configuration, "registry_path \(file): dataset '\(name)' has no tasks") }
        path = given
        self.name = name
        self.version = chosen["version"]?.string ?? version ?? ""
        self.description = chosen["description"]?.string ?? ""
        self.entries = entries
        localTasks = local
        gitHosts = hosts.sorted()
    }

    /// The operator's file (links followed), at most 64 MiB.
    /// Largest registry.json read (Harbor's public one is about 1 MiB).
    static let maxBytes = 64 << 20

    /// A registry.json with this dataset cut down to `ids`: what a run's harbor reads, so it
    /// never learns the other tasks' names or paths.
    /// `path`, if given, replaces each task's path (a copy of the task made for the run).
    func filtered(_ ids: [String], path: ((String) -> String)? = nil) -> [UInt8] {
        let tasks = ids.compactMap { id -> JSONValue? in
            guard let entry = entries[id] else { return nil }
            guard let path, case .object(var fields) = entry else { return entry }
            fields["path"] = .string(path(id))
            return .object(fields)
        }
        let spec: JSONValue = .object(["name": .string(name), "version": .string(version), "description": .string(description),
                                       "tasks": .array(tasks)])
        return (try? JSONEncoder().encode(JSONValue.array([spec]))).map(Array.init) ?? []
    }
}
