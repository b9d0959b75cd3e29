# Follows tau2-bench v1.0.1 src/tau2/domains/banking_knowledge (environment.py get_environment
# and get_tasks, utils.py KNOWLEDGE_* paths, retrieval.py _create_sandbox and the default
# `alltools` variant's read-only shell, retrieval_mixins.py ShellMixin.shell): the tasks are
# tasks/task_*.json, sorted, one task per file, no split (task_split_name is ignored); the
# policy is prompts/alltools.md; each environment makes its own SandboxManager and exports
# documents/*.json into it. `shell` maps run_command's answer as tau2 does: on success stdout or
# "(no output)" (stderr dropped); on failure "No matches found." for grep's exit 1 without
# stderr, else "Error (exit code N): <stderr>", else "Command failed with exit code N" (stdout
# dropped). The stand-in's other tools answer from db.json (get_user_information_by_id) or
# acknowledge (unlock_discoverable_agent_tool), changing nothing.
# The retrieval variant (retrieval.py RETRIEVAL_VARIANTS, read at a2c0247) picks the policy's
# prompt template: `alltools` (the default) prompts/alltools.md, `terminal_use`
# prompts/agentic_search.md; tau2 refuses a name it does not know. The stand-in keeps what it
# was built with (variant, allowlist) so its evaluator can report it.
import glob
import json

from tau2.knowledge.sandbox_manager import SandboxManager
from tau2.utils.utils import DATA_DIR

KNOWLEDGE_DATA_DIR = DATA_DIR / "tau2" / "domains" / "banking_knowledge"
KNOWLEDGE_DOCUMENTS_DIR = KNOWLEDGE_DATA_DIR / "documents"
KNOWLEDGE_TASK_SET_PATH = KNOWLEDGE_DATA_DIR / "tasks"
KNOWLEDGE_DB_PATH = KNOWLEDGE_DATA_DIR / "db.json"
TOOLS = ["shell", "get_user_information_by_id", "unlock_discoverable_agent_tool"]


def get_tasks(task_split_name=None):
    from tau2.data_model.tasks import Task
    return [Task.model_validate(json.load(open(p))) for p in sorted(glob.glob(str(KNOWLEDGE_TASK_SET_PATH / "task_*.json")))]


PROMPTS = {"alltools": "alltools.md", "terminal_use": "agentic_search.md"}


class Environment:
    def __init__(self, variant="alltools", read_log_allowlist=None):
        if variant not in PROMPTS:
            raise ValueError("Unknown retrieval variant %r" % variant)
        self.variant, self.read_log_allowlist = variant, set(read_log_allowlist or [])
        self.db = json.load(open(KNOWLEDGE_DB_PATH))
        self.policy = open(KNOWLEDGE_DATA_DIR / "prompts" / PROMPTS[variant]).read()
        documents = [json.load(open(p)) for p in sorted(glob.glob(str(KNOWLEDGE_DOCUMENTS_DIR / "*.json")))]
        self.sandbox = SandboxManager(allow_writes=False)
        self.sandbox.export_documents(documents)
        self.tools = TOOLS

    def shell(self, command):
        rc, stdout, stderr = self.sandbox.run_command(command)
        if rc != 0:
            if rc == 1 and "grep" in command and not stderr.strip():
                return "No matches found."
            if stderr.strip():
                return "Error (exit code %d): %s" % (rc, stderr)
            return "Command failed with exit code %d" % rc
        return stdout or "(no output)"

    def call(self, name, arguments):
        if name == "shell":
            return self.shell(arguments.get("command", ""))
        if name == "get_user_information_by_id":
            return json.dumps(self.db.get("users", {}).get(arguments.get("user_id")))
        if name == "unlock_discoverable_agent_tool":
            return "Tool %s unlocked" % arguments.get("agent_tool_name")
        return "Error: Tool %s not found" % name


def get_environment(db=None, retrieval_variant=None, retrieval_kwargs=None, task=None, solo_mode=False, read_log_allowlist=None):
    if solo_mode:
        raise ValueError("banking_knowledge does not support solo mode")
    return Environment(retrieval_variant or "alltools", read_log_allowlist)

