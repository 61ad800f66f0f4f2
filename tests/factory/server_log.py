"""Run the real llama-server on a model just long enough to capture its load log.

``capture_load_log`` starts ``llama-server -m MODEL --host 127.0.0.1 --port P
-lv 4 ARGS`` (verbosity 4 so the KV/compute buffer lines are printed), reads
its output until the "listening on" line or until the process exits, then
stops it (SIGTERM, wait, SIGKILL) and returns the whole log, including what the
server printed while shutting down (the memory breakdown table).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from pathlib import Path


# The two reference settings of the factory tests, plus --no-repack (weights stay in
# plain CPU buffers, independent of the build's AMX/repack extra buffer types: a
# GGML_NATIVE build on an AMX-reporting CPU aborts on deepseek2 otherwise; no effect
# on KV/RS sizes).
def _words(text: str) -> list[str]:
    """``"-c 4096 -np 1"`` -> ``["-c", "4096", "-np", "1"]`` (readable argument lists)."""
    return text.split()


SETTING_A = _words("-c 4096 -np 1 -ctk q8_0 -ctv q8_0 -fa on --no-repack")
SETTING_B = _words("-c 8192 -np 3 -ctk f16 -ctv q4_0 -fa on --no-repack")
# MLA models (deepseek2) refuse different K and V types; their loading second setting:
SETTING_B_SAME_TYPES = _words("-c 8192 -np 3 -ctk q4_0 -ctv q4_0 -fa on --no-repack")

_LISTENING = re.compile(r"(?:server is )?listening on https?://\S+")
# The main loop is running once it reports idle slots; a SIGTERM that arrives
# before that is swallowed (the terminate request finds no loop to stop).
_LOOP_RUNNING = re.compile(r"all slots are idle|starting the main loop")
_LOOP_WAIT_S = 3.0
_TERM_GRACE_S = 5.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_argv(binary: Path, model: Path, port: int, args: list[str]) -> list[str]:
    """The argv ``capture_load_log`` runs."""
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-lv",
        "4",
        *args,
    ]


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, wait, SIGTERM again (llama-server exits at once on a second
    signal), wait, then SIGKILL; always reaps the child."""
    for _ in range(2):
        if proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=_TERM_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def capture_load_log(
    binary: Path, model: Path, args: list[str], timeout_s: float = 120, *, port: int | None = None
) -> str:
    """Start llama-server on ``model`` and return its log once it listens or exits.

    ``port`` defaults to a free one (pass a busy one to provoke a bind failure).

    Raises ``TimeoutError`` (with the log so far) if it neither listens nor exits
    within ``timeout_s``. On an early exit (load failure) the log is returned;
    callers assert on its failure lines.
    """
    argv = server_argv(binary, model, free_port() if port is None else port, args)
    lines: list[str] = []
    ready = threading.Event()
    looping = threading.Event()
    env = {**os.environ, "LLAMA_ARG_LOG_COLORS": "off"}
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env,
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if _LISTENING.search(line):
                ready.set()
            elif ready.is_set() and _LOOP_RUNNING.search(line):
                looping.set()
        ready.set()  # EOF: the process exited (or closed its output)
        looping.set()

    reader = threading.Thread(target=pump, name="llama-server-log", daemon=True)
    reader.start()
    try:
        finished = ready.wait(timeout_s)
        if finished:
            looping.wait(_LOOP_WAIT_S)
    finally:
        _stop(proc)
        reader.join(timeout=_TERM_GRACE_S)
    text = "".join(lines)
    if not finished:
        raise TimeoutError(
            f"llama-server neither listened nor exited within {timeout_s} s; "
            f"argv={argv}\n--- log tail ---\n{text[-4000:]}"
        )
    return text
