// The names one Harbor task goes by, and the one id autoharness keys it on.
//
// Harbor itself uses three: the task's directory name (what `-i` matches for a local or
// git task: harbor 0.25.0, harbor/models/task/id.py `LocalTaskId.get_name` /
// `GitTaskId.get_name`), the `[task] name` of its task.toml (what result.json calls
// `task_name`: harbor/models/task/task.py `Task.__init__`), and for registry packages
// `org/name`, written `org/name@ref` with a version (harbor/models/task/id.py
// `PackageTaskId.get_name`; harbor/cli/download.py). Any of them is accepted wherever a
// task is named (`--task-ids`, `tasks:`), and all map to one canonical id: the directory
// name for a dataset on disk, Harbor's `-i` name for a registry dataset. A name that would
// map to two tasks is refused when the dataset is read: results keyed on it could not be
// told apart.

public struct HarborTaskNames: Sendable, Equatable {
    /// Every accepted name (canonical ids included) → canonical id.
    public private(set) var byName: [String: String] = [:]

    /// `declared`: the `[task] name` of each id whose task.toml has one that differs.
    public init(ids: [String], declared: [String: String]) throws(BenchmarkError) {
        var seen: [String: String] = [:]
        func add(_ name: String, _ id: String) throws(BenchmarkError) {
            if let other = seen[name], other != id {
                let (a, b) = other < id ? (other, id) : (id, other)
                throw BenchmarkError(.configuration, """
                    task name '\(name)' is ambiguous: tasks \(a) and \(b) both answer to it (a directory name or a task.toml \
                    [task] name); Harbor would report both under one name. Give each task its own [task] name, or leave \
                    one of them out of the dataset
                    """)
            }
            seen[name] = id
        }
        for id in ids { try add(id, id) }
        for id in ids.sorted() { if let n = declared[id], n != id { try add(n, id) } }
        byName = seen
    }

    /// The canonical id `given` names, or nil. `org/name@ref` is `org/name` (the version is
    /// Harbor's to resolve: one dataset holds one version of each task).
    public func canonical(_ given: String) -> String? {
        if let id = byName[given] { return id }
        if let at = given.lastIndex(of: "@") {
            let base = String(given[..<at])
            if base.contains("/"), !given[given.index(after: at)...].isEmpty, let id = byName[base] { return id }
        }
        return nil
    }

    /// Harbor's `-i` name of the task a trial ran, from result.json's `task_id` (a local or
    /// git task: the last component of its path; a package: `org/name`).
    static func harborName(taskID json: JSONValue?) -> String? {
        guard let json else { return nil }
        if let org = json["org"]?.string, let name = json["name"]?.string { return org + "/" + name }
        guard let path = json["path"]?.string else { return nil }
        return path.split(separator: "/").last.map(String.init)
    }
}
