# Follows tau2-bench v1.0.1 src/tau2/knowledge/sandbox_manager.py (read at sierra-research/
# tau2-bench a2c0247): SandboxManager checks that srt, rg, bwrap and socat are on PATH
# (_check_sandbox_dependencies, shutil.which only, once per process) and raises
# SandboxRuntimeError naming the missing ones; makes <tempfile.gettempdir()>/agentic_search_<id8>/
# with knowledge_base/ and srt-settings.json (network: nothing allowed; filesystem: denyRead of
# the home's secrets, allowWrite the knowledge base only when writes are allowed, denyWrite the
# settings); exports each document as knowledge_base/<sanitized id>.md ("# {title}\n\n{content}")
# and an INDEX.md; run_command refuses commands with an escape pattern ('..', an absolute path,
# '~', $HOME) outside quoted strings, then runs ["srt", "--settings", SETTINGS, command] with
# cwd the knowledge base and a 30 s timeout, returning (returncode, stdout, stderr) with ls -l
# owners, groups and dates and home paths rewritten.
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

_DEPS_VERIFIED = False


class SandboxRuntimeError(RuntimeError):
    pass


def _check_sandbox_dependencies():
    global _DEPS_VERIFIED
    if _DEPS_VERIFIED:
        return
    required = ("srt", "rg", "bwrap", "socat") if sys.platform.startswith("linux") else ("srt", "rg")
    missing = [name for name in required if shutil.which(name) is None]
    if missing:
        raise SandboxRuntimeError(
            "Cannot use the agentic-shell sandbox: required binaries are not installed: %s.\n\n"
            "npm install -g @anthropic-ai/sandbox-runtime@0.0.23; sudo apt install ripgrep bubblewrap socat" % ", ".join(missing))
    _DEPS_VERIFIED = True


def _sanitize_filename(name):
    name = name.replace("/", "_").replace("\\", "_").replace("..", "_")
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:255]


def _has_escape_pattern(command):
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", command)
    if ".." in bare:
        return "'..'"
    m = re.search(r"(^|[\s;|&])(/[a-zA-Z][^\s]*)", bare)
    if m:
        return "absolute path: %s" % m.group(2)
    if "~" in bare:
        return "'~'"
    if "$HOME" in bare or "${HOME}" in bare:
        return "$HOME"
    return None


def _sanitize_output(text):
    text = re.sub(r"/home/[^/\s]+|/Users/[^/\s]+", "/home/kb_user", text)
    return re.sub(r"^([-dlrwxst]{10}\s+\d+)\s+\S+\s+\S+(\s+\d+)\s+\w{3}\s+\d+\s+[\d:]+",
                  r"\1 kb_user kb_group\2 Jan  1 00:00", text, flags=re.M)


class SandboxManager:
    def __init__(self, allow_writes=False, sandbox_id=None, base_temp_dir=None):
        _check_sandbox_dependencies()
        self.sandbox_id = sandbox_id or str(uuid.uuid4())[:8]
        self.sandbox_dir = os.path.join(base_temp_dir or tempfile.gettempdir(), "agentic_search_%s" % self.sandbox_id)
        self.kb_dir = os.path.join(self.sandbox_dir, "knowledge_base")
        self.settings_path = os.path.join(self.sandbox_dir, "srt-settings.json")
        os.makedirs(self.kb_dir, exist_ok=True)
        settings = {"network": {"allowedDomains": [], "deniedDomains": []},
                    "filesystem": {"denyRead": ["~/.ssh", "~/.aws", "~/.config", "~/.gnupg", "/etc/passwd", "/etc/shadow"],
                                   "allowWrite": [self.kb_dir] if allow_writes else [], "denyWrite": [self.settings_path]}}
        with open(self.settings_path, "w") as f:
            json.dump(settings, f, indent=2)

    def export_documents(self, documents):
        lines = ["# Knowledge Base Index", "", "**Total documents:** %d" % len(documents), "", "## Documents", ""]
        for doc in sorted(documents, key=lambda d: d["id"]):
            name = _sanitize_filename(doc["id"]) + ".md"
            with open(os.path.join(self.kb_dir, name), "w") as f:
                f.write("# %s\n\n%s" % (doc["title"], doc["content"]))
            lines.append("- **%s** - %s" % (name, doc["title"]))
        with open(os.path.join(self.kb_dir, "INDEX.md"), "w") as f:
            f.write("\n".join(lines) + "\n")

    def run_command(self, command, timeout=30):
        pattern = _has_escape_pattern(command)
        if pattern:
            return 1, "", "Error: Command blocked - contains %s which could escape the sandbox" % pattern
        try:
            r = subprocess.run(["srt", "--settings", self.settings_path, command], capture_output=True, text=True,
                               timeout=timeout, cwd=self.kb_dir)
        except subprocess.TimeoutExpired:
            return 124, "", "Command timed out after %d seconds" % timeout
        except FileNotFoundError:
            raise SandboxRuntimeError("sandbox-runtime (srt) binary disappeared")
        except Exception as e:
            return 1, "", "Command failed: %s" % e
        if "sandbox dependencies are not available" in (r.stdout + r.stderr).lower():
            raise SandboxRuntimeError("sandbox-runtime reported missing system dependencies while executing a command.")
        return r.returncode, _sanitize_output(r.stdout), _sanitize_output(r.stderr)
