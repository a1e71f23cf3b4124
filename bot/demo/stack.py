"""The local stack: everything `chatops demo` and `chatops console` need, on one machine.

- Redis: `REDIS_URL`, or an embedded one (`bot.demo.embedded_redis`) when it is unset;
- the demo service to investigate (`bot.demo.service`), on a loopback port, the only host the
  `http_get` tool may reach;
- a model: the one `OPENAI_API_KEY` / `OPENAI_BASE_URL` name, or else the clearly labelled
  rehearsal model (`bot.demo.rehearsal`), a local OpenAI-compatible server;
- `chatops serve` and `chatops worker`, as processes, exactly as in production, with the
  console channel turned on (a random `CHATOPS_CONSOLE_TOKEN`).

Everything started is stopped when the stack's context ends; the processes' output goes to
log files in the stack's directory, named when something fails.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp

from bot.demo.embedded_redis import free_port, spawn_redis, stop_process
from bot.demo.rehearsal import rehearsal_app
from bot.demo.service import demo_service_app
from bot.errors import StackError
from bot.process.task_errors import cause_of

__all__ = ["LocalStack", "StackError", "local_stack"]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@dataclass
class LocalStack:
    """The running stack: where its parts are, and how they were chosen."""

    redis_url: str
    ingress_url: str
    console_token: str
    service_url: str
    model: str
    """`rehearsal` or the configured model's base URL."""
    workdir: Path
    redis_start_s: float | None = None
    """How long the embedded Redis took to answer PING (None: `REDIS_URL` was given)."""
    processes: dict[str, asyncio.subprocess.Process] = field(default_factory=dict)
    rehearsal: Starlette | None = None
    """The rehearsal model's app (its `state.rejected` counts 400s), None with a real model."""


@asynccontextmanager
async def local_stack(
    environ: Mapping[str, str] | None = None, *, service_scale: float = 1.0, workers: int = 1
) -> AsyncIterator[LocalStack]:
    """Start the stack; stop all of it when the context ends.

    Raises:
        StackError: A part would not start (its log is named).
    """
    environ = dict(os.environ if environ is None else environ)
    async with AsyncExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chatops-demo-")))
        redis_url, redis_start_s = environ.get("REDIS_URL"), None
        if not redis_url:
            started = time.monotonic()
            try:
                proc, port = await asyncio.to_thread(spawn_redis, workdir)
            except RuntimeError as exc:
                raise StackError(str(exc)) from exc
            redis_start_s = time.monotonic() - started
            stack.callback(stop_process, proc)
            redis_url = f"redis://127.0.0.1:{port}/0"
        service_url = await stack.enter_async_context(_serve_app(demo_service_app(service_scale)))
        env = {**environ, "REDIS_URL": redis_url}
        model = environ.get("OPENAI_BASE_URL") or ""
        rehearsal: Starlette | None = None
        if not (environ.get("OPENAI_API_KEY") or model):
            rehearsal = rehearsal_app(service_url)
            rehearsal_url = await stack.enter_async_context(_serve_app(rehearsal))
            env |= {
                "OPENAI_BASE_URL": f"{rehearsal_url}/v1",
                "OPENAI_API_KEY": "rehearsal",
                "CHATOPS_MODEL": "chatops-rehearsal",
            }
            model = "rehearsal"
        token = secrets.token_urlsafe(24)
        host = service_url.removeprefix("http://")
        env |= {"CHATOPS_CONSOLE_TOKEN": token, "CHATOPS_HTTP_ALLOWLIST": host}
        # A redirect waits for the probes in flight, so the card shows the cut at the batch.
        env.setdefault("CHATOPS_STEER_CANCELS_TOOLS", "false")
        port = free_port()
        running = LocalStack(
            redis_url=redis_url,
            ingress_url=f"http://127.0.0.1:{port}",
            console_token=token,
            service_url=service_url,
            model=model,
            workdir=workdir,
            redis_start_s=redis_start_s,
            rehearsal=rehearsal,
        )
        args = ("serve", "--host", "127.0.0.1", "--port", str(port))
        await _start(stack, running, "serve", env, *args)
        await _ready(running)
        for n in range(workers):
            await _start(stack, running, f"worker-{n + 1}", env, "worker")
        await _until_logged(running, [f"worker-{n + 1}" for n in range(workers)], "reading turns")
        yield running


@asynccontextmanager
async def _serve_app(app: ASGIApp) -> AsyncIterator[str]:
    """Serve `app` on a free loopback port in this event loop; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    try:
        async with asyncio.TaskGroup() as group:
            task = group.create_task(server.serve())
            for _ in range(int(START_TIMEOUT_S / 0.02)):
                if server.started or task.done():
                    break
                await asyncio.sleep(0.02)
            if not server.started:
                raise StackError(f"a local server would not start on port {port}")
            try:
                yield f"http://127.0.0.1:{port}"
            finally:
                server.should_exit = True
    except* Exception as failed:  # the body's own error, not "unhandled errors in a group"
        raise cause_of(failed)  # noqa: B904 (`from` would drop its cause)


async def _start(
    stack: AsyncExitStack, running: LocalStack, name: str, env: Mapping[str, str], *args: str
) -> None:
    log = (running.workdir / f"{name}.log").open("wb")
    stack.callback(log.close)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from bot.cli.main import main; main()",
        *args,
        env=dict(env),
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    running.processes[name] = proc
    stack.push_async_callback(_stop, proc)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _ready(running: LocalStack) -> None:
    """Wait until the ingress answers /readyz."""
    async with httpx.AsyncClient(timeout=1.0) as client:
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while True:
                    _alive(running, "serve")
                    try:
                        response = await client.get(f"{running.ingress_url}/readyz")
                        if response.status_code == 200:
                            return
                    except httpx.TransportError:
                        pass
                    await asyncio.sleep(0.05)
        except TimeoutError as exc:
            raise StackError(f"chatops serve is not ready; see {_log(running, 'serve')}") from exc


async def _until_logged(running: LocalStack, names: list[str], text: str) -> None:
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            for name in names:
                while text not in _log(running, name).read_text(errors="replace"):
                    _alive(running, name)
                    await asyncio.sleep(0.05)
    except TimeoutError as exc:
        raise StackError(f"{names} did not start; see their logs in {running.workdir}") from exc


def _alive(running: LocalStack, name: str) -> None:
    if running.processes[name].returncode is not None:
        log = _log(running, name)
        raise StackError(f"chatops {name} exited early:\n{log.read_text(errors='replace')}")


def _log(running: LocalStack, name: str) -> Path:
    return running.workdir / f"{name}.log"
