"""`env_provider: local`: Harbor's task environment without Docker, inside autoharness's sandbox.

autoharness runs `harbor run --disable-verification -e autoharness_harbor_env:SandboxEnvironment`
once per task, in a benchmark-runner sandbox that holds the task's working copy at /app and a
private /logs. This environment runs the agent's commands as plain processes in that sandbox,
at those real paths: nothing is rewritten. Harbor runs no verifier: once this sandbox is gone
(every process in it), autoharness runs the task's tests over /app in a sandbox of its own, so
nothing Harbor's process, agent.py or the agent's commands do reaches the reward. /tests and
/solution do not exist here.

What a Docker image would provide is not built: the task's programs must be in the sandbox
(the host's /usr, and `runner.binds`). The files of the task's environment/ directory other
than its Dockerfile are copied into the working directory at the start, as autoharness's local
runner does. `user` is not switched (everything runs as the sandbox's one unprivileged user).

Written against harbor 0.25.0, and runs unchanged under 0.24.0: harbor/environments/base.py
(BaseEnvironment, ExecResult, the abstract methods and `_merge_env`, the constructor's
capability checks), harbor/trial/single_step.py (no verifier when `verifier.disable`), and
harbor/environments/docker/docker.py (a timed-out exec raises RuntimeError).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities

# The container paths autoharness mounts in the runner sandbox (HarborAgentPhase).
CONTAINER_PATHS = ("/app", "/logs")


def _empty(directory: str) -> None:
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


class SandboxEnvironment(BaseEnvironment):
    def __init__(self, *args, **kwargs):
        self._groups: set[int] = set()  # before super().__init__, which reads capabilities
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return "autoharness-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Not `mounted`: Harbor downloads /logs/{agent,verifier} into the trial itself (0.25
        # also refuses `--ek auto_mounting=true` for it, rather than bind nothing). No
        # internet: the sandbox reaches only the proxy's allowlist. Not
        # `dynamic_network_policy`: 0.25 folds a task's per-phase policies into the one the
        # environment starts with and refuses a task whose agent phase is narrower than its
        # setup; the verifier phase is not among them, Harbor's verifier being disabled.
        return EnvironmentCapabilities(mounted=False, disable_internet=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        # The task's `cpus` and `memory_mb` are not applied (the sandbox's limits are
        # autoharness's, whatever the task asks), so a fractional CPU count is no less
        # honoured than a whole one. Without this, 0.25 (which accepts `cpus = 0.5` in
        # task.toml) refuses such a task in the constructor, which ends the whole `harbor run`
        # with no trial result. Declaring no limits or requests also refuses an explicit
        # `--cpus`/`--memory` enforcement policy instead of ignoring it. (0.24 has no
        # fractional_cpus and ignores the field.)
        return EnvironmentResourceCapabilities(fractional_cpus=True)

    def _validate_definition(self):
        for path in CONTAINER_PATHS:
            if not (os.path.isdir(path) and os.access(path, os.W_OK)):
                raise RuntimeError(f"{path} is not a writable directory: run this environment through autoharness "
                                   "(env_provider: local), which provides the task's paths in its sandbox")

    @property
    def _workdir(self) -> str:
        return self.task_env_config.workdir or "/app"

    async def start(self, force_build: bool) -> None:
        for path in CONTAINER_PATHS:
            _empty(path)
        for sub in ("agent", "artifacts"):
            os.makedirs(f"/logs/{sub}", exist_ok=True)
        os.makedirs(self._workdir, exist_ok=True)
        source = Path(self.environment_dir)
        if source.is_dir():
            for entry in source.iterdir():
                if entry.name == "Dockerfile":
                    continue
                target = Path(self._workdir) / entry.name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.copytree(entry, target, symlinks=True, dirs_exist_ok=True)
                else:
                    shutil.copy2(entry, target, follow_symlinks=False)

    async def stop(self, delete: bool):
        for group in list(self._groups):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._groups.clear()
        # `delete` empties nothing: /app is what autoharness's verifier grades once this
        # sandbox is gone, and /logs goes with the sandbox.

    async def upload_file(self, source_path, target_path: str):
        os.makedirs(os.path.dirname(target_path) or "/", exist_ok=True)
        shutil.copy2(source_path, target_path)

    async def upload_dir(self, source_dir, target_dir: str):
        # The contents, like `docker cp SRC/. CONTAINER:TARGET`.
        shutil.copytree(source_dir, target_dir, symlinks=True, dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path):
        os.makedirs(os.path.dirname(str(target_path)) or "/", exist_ok=True)
        shutil.copy2(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir):
        if os.path.isdir(source_dir):
            shutil.copytree(source_dir, target_dir, symlinks=True, dirs_exist_ok=True)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        environment = dict(os.environ)
        environment.update(self._merge_env(env) or {})
        process = await asyncio.create_subprocess_exec(
            "/bin/bash", "-c", command, cwd=cwd or self._workdir, env=environment,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        self._groups.add(process.pid)
        try:
            if timeout_sec:
                out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_sec)
            else:
                out, err = await process.communicate()
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await process.wait()
            if isinstance(e, asyncio.CancelledError):
                raise
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        # The group stays listed: what the command left running in the background is killed
        # at stop().
        return ExecResult(stdout=out.decode(errors="replace") if out else None,
                          stderr=err.decode(errors="replace") if err else None,
                          return_code=process.returncode or 0)
