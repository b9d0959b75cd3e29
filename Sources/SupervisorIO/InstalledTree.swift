// Listings of installed trees the supervisor and a worker node both hold (a tool's package, a
// benchmark's data), to digest and compare: paths the operator chose, not trees a sandbox wrote.

import Glibc

public enum InstalledTree {
    /// `path` with every link resolved (itself when it cannot be).
    public static func realPath(_ path: String) -> String {
        guard let p = realpath(path, nil) else { return path }
        defer { free(p) }
        return String(cString: p)
    }

    /// The `.py` files below `directory` (not in `__pycache__` nor `data/`), sorted by path.
    /// A link below it is followed only where it names a `.py` file.
    public static func pythonFiles(under directory: String) -> [String] {
        FileSystem.names(in: directory).flatMap { name -> [String] in
            let path = directory + "/" + name
            if name.hasSuffix(".py") { return [path] }
            guard name != "__pycache__" && name != "data" else { return [] }
            let fd = FileSystem.openDirectory(path)
            guard fd >= 0 else { return [] }
            close(fd)
            return pythonFiles(under: path)
        }
    }

    /// Every regular file below `directory`, sorted by path (links not followed; a
    /// `directory` that is itself a link lists nothing: resolve it first with `realPath`).
    public static func regularFiles(under directory: String) -> [String] {
        FileSystem.names(in: directory).flatMap { name -> [String] in
            let path = directory + "/" + name
            var st = stat()
            guard lstat(path, &st) == 0 else { return [] }
            switch st.st_mode & S_IFMT {
            case S_IFREG: return [path]
            case S_IFDIR: return regularFiles(under: path)
            default: return []
            }
        }
    }
}
