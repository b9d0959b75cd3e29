"""`env_provider: local`: Harbor's task environment without Docker, inside autoharness's sandbox.

autoharness runs `harbor run --disable-verification -e autoharness_harbor_env:SandboxEnvironment`
once per task, in a benchmark-runner sandbox that holds the task's working copy at /app and a
private /logs. This environment runs the agent's commands as plain processes in that sandbox,
at those real paths: nothing is rewritten. Harbor runs no verifier: once this sandbox is gone
(every process in it), autoharness runs the task's tests over /app in a sandbox of its own, so
nothing Harbor's process, agent.py or the agent's commands do reaches the reward. /tests and
/solution do not exist here.

On a task's image (the task has one in autoharness's image store: `autoharness images`),
the commands run in a second sandbox, the task container: the image as its root (the image's
WORKDIR, ENV and files, root inside a user namespace), started by autoharness with
autoharness-exec as its payload. This class then talks to that server over the Unix socket
named by $AUTOHARNESS_TASK_EXEC (one request per connection: see Sources/autoharness-exec),
and copies files in and out through it; /app is the image's, nothing is seeded. When Harbor is
done, autoharness stops the server; what the commands left running (a server the tests query)
keeps running beside the verifier.

Without an image, what a Docker image would provide is not built: the task's programs must be
in the sandbox (the host's /usr, and `runner.binds`). The files of the task's environment/
directory that its Dockerfile copies are in the working directory, as autoharness's local
runner seeds it. `user` is not switched (everything runs as the sandbox's one user).

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
import struct
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities

# The container paths autoharness mounts in the runner sandbox (HarborAgentPhase).
CONTAINER_PATHS = ("/app", "/logs")
# The task container's command server, on a task's image (HarborAgentPhase).
TASK_EXEC = os.environ.get("AUTOHARNESS_TASK_EXEC")


class TaskContainer:
    """The client of autoharness-exec: one request per connection, frames of a kind byte, a
    little-endian u32 length and the body."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path

    @staticmethod
    def _frame(kind: str, body: bytes) -> bytes:
        return struct.pack("<BI", ord(kind), len(body)) + body

    async def _open(self, kind: str, body: bytes):
        reader, writer = await asyncio.open_unix_connection(self.socket_path)
        writer.write(self._frame(kind, body))
        await writer.drain()
        return reader, writer

    @staticmethod
    async def _next(reader) -> tuple[str, bytes]:
        try:
            header = await reader.readexactly(5)
            kind, length = struct.unpack("<BI", header)
            return chr(kind), await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise RuntimeError("the task container's command server closed the connection (it is gone)")

    # A file copy or listing that takes longer has met a server that is stopped or gone.
    CALL_TIMEOUT = 600

    async def call(self, kind: str, body: bytes) -> tuple[str, bytes, bytes]:
        """A request other than exec: the answer's kind, its bytes (chunks joined)."""
        try:
            return await asyncio.wait_for(self._call(kind, body), timeout=self.CALL_TIMEOUT)
        except asyncio.TimeoutError:
            raise RuntimeError(f"the task container's command server did not answer in {self.CALL_TIMEOUT} s")

    async def _call(self, kind: str, body: bytes) -> tuple[str, bytes, bytes]:
        reader, writer = await self._open(kind, body)
        try:
            data = bytearray()
            while True:
                k, payload = await self._next(reader)
                if k == "f":
                    data += payload
                    continue
                if k == "E":
                    raise FileNotFoundError(payload.decode(errors="replace"))
                return k, bytes(data) if k == "x" else payload, bytes(data)
        finally:
            writer.close()

    async def exec(self, cwd: str, command: str, env: dict[str, str], timeout_sec) -> ExecResult:
        body = b"\0".join([cwd.encode(), command.encode()] + [f"{k}={v}".encode() for k, v in env.items()])
        reader, writer = await self._open("X", body)
        out, err = bytearray(), bytearray()

        async def pump():
            while True:
                k, payload = await self._next(reader)
                if k == "o":
                    out.extend(payload)
                elif k == "e":
                    err.extend(payload)
                elif k == "x":
                    return int(payload)
                else:
                    raise RuntimeError("task container: " + payload.decode(errors="replace"))

        try:
            if timeout_sec:
                code = await asyncio.wait_for(pump(), timeout=timeout_sec)
            else:
                code = await pump()
        except asyncio.TimeoutError:
            # Closing the connection kills the command's process group.
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        finally:
            writer.close()
        return ExecResult(stdout=out.decode(errors="replace") if out else None,
                          stderr=err.decode(errors="replace") if err else None, return_code=code)

    async def put_file(self, source, target: str):
        mode = os.stat(source).st_mode & 0o7777
        with open(source, "rb") as f:
            data = f.read()
        await self.call("P", target.encode() + b"\0" + oct(mode)[2:].encode() + b"\0" + data)

    async def put_dir(self, source, target: str):
        await self.call("D", target.encode() + b"\x00755")
        for entry in sorted(Path(source).iterdir()):
            path = f"{target.rstrip('/')}/{entry.name}"
            if entry.is_symlink():
                await self.call("L", os.readlink(entry).encode() + b"\0" + path.encode())
            elif entry.is_dir():
                await self.put_dir(entry, path)
            elif entry.is_file():
                await self.put_file(entry, path)

    async def get(self, source: str, target, missing_ok: bool = False):
        try:
            kind, data, _ = await self.call("G", source.encode())
        except FileNotFoundError:
            if missing_ok:
                return
            raise
        target = Path(target)
        if kind == "x":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        elif kind == "l":
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            os.symlink(data.decode(errors="surrogateescape"), target)
        elif kind == "d":
            target.mkdir(parents=True, exist_ok=True)
            for entry in data.split(b"\0"):
                if len(entry) < 3:
                    continue
                name = entry[2:].decode(errors="surrogateescape")
                await self.get(f"{source.rstrip('/')}/{name}", target / name)


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
        self._container = TaskContainer(TASK_EXEC) if TASK_EXEC else None
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
        if TASK_EXEC:
            if not os.path.exists(TASK_EXEC):
                raise RuntimeError(f"{TASK_EXEC}: the task container's command server is not there")
            return
        for path in CONTAINER_PATHS:
            if not (os.path.isdir(path) and os.access(path, os.W_OK)):
                raise RuntimeError(f"{path} is not a writable directory: run this environment through autoharness "
                                   "(env_provider: local), which provides the task's paths in its sandbox")

    @property
    def _workdir(self) -> str:
        return self.task_env_config.workdir or "/app"

    async def start(self, force_build: bool) -> None:
        if self._container:
            # The image is the environment: nothing is seeded, nothing emptied.
            for sub in ("agent", "artifacts", "verifier"):
                await self._container.call("D", f"/logs/{sub}".encode() + b"\x00755")
            return
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
        if self._container:
            # What the commands left running stays for the verifier; autoharness ends the
            # container once it is done.
            return
        for group in list(self._groups):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._groups.clear()
        # `delete` empties nothing: /app is what autoharness's verifier grades once this
        # sandbox is gone, and /logs goes with the sandbox.

    async def upload_file(self, source_path, target_path: str):
        if self._container:
            return await self._container.put_file(source_path, target_path)
        os.makedirs(os.path.dirname(target_path) or "/", exist_ok=True)
        shutil.copy2(source_path, target_path)

    async def upload_dir(self, source_dir, target_dir: str):
        # The contents, like `docker cp SRC/. CONTAINER:TARGET`.
        if self._container:
            return await self._container.put_dir(source_dir, target_dir)
        shutil.copytree(source_dir, target_dir, symlinks=True, dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path):
        if self._container:
            return await self._container.get(source_path, target_path)
        os.makedirs(os.path.dirname(str(target_path)) or "/", exist_ok=True)
        shutil.copy2(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir):
        if self._container:
            return await self._container.get(source_dir, target_dir, missing_ok=True)
        if os.path.isdir(source_dir):
            shutil.copytree(source_dir, target_dir, symlinks=True, dirs_exist_ok=True)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        if self._container:
            # The container's own ENV is the server's; only what Harbor adds is sent.
            return await self._container.exec(cwd or "", command, self._merge_env(env) or {}, timeout_sec)
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
