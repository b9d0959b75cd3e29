# Sourced by scripts that need a Python newer than Debian 12's 3.11 (Harbor, tau2-bench).
# find_python MIN_MINOR [MAX_MINOR]: prints the first python3.N (MIN <= N <= MAX, default 13)
# found on PATH, newest first, then among pyenv's versions; returns 1 when there is none.
find_python() {
    local min=$1 max=${2:-13} n candidate p
    local roots=("${PYENV_ROOT:-${HOME:-/root}/.pyenv}" /root/.pyenv)
    for ((n = max; n >= min; n--)); do
        for candidate in "python3.$n" "${roots[0]}"/versions/3."$n".*/bin/python3 "${roots[1]}"/versions/3."$n".*/bin/python3; do
            p="$(command -v "$candidate" 2>/dev/null || true)"
            if [[ -n "$p" ]] && "$p" -c "import sys; sys.exit(not ((3, $min) <= sys.version_info[:2] <= (3, $max)))" 2>/dev/null; then
                echo "$p"
                return 0
            fi
        done
    done
    return 1
}
