"""A homelab process for the orphan tests, and the helpers that run homelab as a child
process from the repository: ``script_env`` (its environment) and ``run_homelab``.

It supervises llama-server, says the engine's pid, then waits to be killed.

``python tests/engine/supervisor_child.py MODEL PORT [--detach]`` prints one JSON line
``{"pid": ENGINE_PID, "url": URL}`` once the engine is ready, then sleeps until killed.
State and logs go where ``HOMELAB_STATE_DIR`` says (the test's folder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from homelab.engine.llamacpp.diagnose import llama_server_profile
from homelab.engine.llamacpp.locate import find_llama_server
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import EngineSpec, Supervisor

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parents[2]


def script_env() -> dict[str, str]:
    """Environment for a child Python that imports homelab and tests from the repository."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def run_homelab(*args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``python -m homelab ARGS`` from the repository and return what it printed (text)
    and its exit code; never raises for a non-zero exit (tests assert on the code)."""
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        env=script_env(),
        check=False,
    )


def serve_on_a_free_port(
    *args: str, tries: int = 3
) -> tuple[subprocess.CompletedProcess[str], int]:
    """``homelab serve ARGS --port P`` on a port that was free; when another program took it
    between the look and the engine's bind ("Port in use"), again on another port.

    Returns:
        What the last run printed, and its port.
    """
    from tests.factory.server_log import free_port

    for _ in range(tries):
        port = free_port()
        result = run_homelab("serve", *args, "--port", str(port))
        if not (result.returncode == 6 and "Port in use" in result.stderr):
            break
    return result, port


def main() -> int:
    model, port = sys.argv[1], int(sys.argv[2])
    detach = "--detach" in sys.argv[3:]
    argv = (str(find_llama_server()), "-m", model, "-c", "512", "-np", "1", "-lv", "4")
    spec = EngineSpec(argv=argv, model=model, port=port, detached=detach, start_timeout_s=120)
    supervisor = Supervisor(spec, llama_server_profile(), state_file=StateFile())
    supervisor.start()
    ready = supervisor.wait_ready(120)
    print(json.dumps({"pid": ready.pid, "url": ready.url}), flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main())
