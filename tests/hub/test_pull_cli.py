"""``homelab pull`` on the command line: output, exit codes, the progress bar."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.cli.pull_cmd import ProgressBar, format_eta, rate_and_eta
from homelab.hub.download import PullProgress
from tests.hubstub import DEFAULT_REVISION_SHA, HubStub

REPO = "org/Tiny-GGUF"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                "Tiny-Q4_K_M.gguf": tiny_gguf("q4.gguf", seed=1),
                "mmproj-F16.gguf": tiny_gguf("mm.gguf", seed=2),
            }
        },
    )


def test_paths_on_stdout_progress_on_stderr(
    stub: HubStub, hf_cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pull", REPO]) == 0
    captured = capsys.readouterr()
    snapshot = hf_cache / "models--org--Tiny-GGUF" / "snapshots" / DEFAULT_REVISION_SHA
    assert captured.out.splitlines() == [
        str(snapshot / "Tiny-Q4_K_M.gguf"),
        str(snapshot / "mmproj-F16.gguf"),
    ]
    assert "Tiny-Q4_K_M.gguf: " in captured.err and "downloaded" in captured.err
    assert main(["pull", REPO, "--no-mmproj"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [str(snapshot / "Tiny-Q4_K_M.gguf")]
    assert "already cached" in captured.err


def test_json_output(stub: HubStub, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pull", f"{REPO}:Q4_K_M", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert (
        data["repo"] == REPO
        and data["revision"] == DEFAULT_REVISION_SHA
        and data["quant"] == "Q4_K_M"
    )
    assert Path(data["paths"][0]).is_file() and Path(data["mmproj"]).is_file()
    assert data["fetched_bytes"] == stub.bytes_sent("Tiny-Q4_K_M.gguf") + stub.bytes_sent(
        "mmproj-F16.gguf"
    )
    assert captured.err == ""


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (["pull", "not-a-repo"], 2, "Bad model reference"),
        (["pull", f"{REPO}:Q5_K_M"], 1, "Quant not found"),
        (["pull", "org/Nothing-Here"], 1, "Not found on the Hub"),
    ],
)
def test_exit_codes(
    stub: HubStub, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, words: str
) -> None:
    assert main(argv) == code
    captured = capsys.readouterr()
    assert words in captured.err and "Traceback" not in captured.err and captured.out == ""


def test_gated_repo_exit_code_and_hint(
    hub_stub, tiny_gguf, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    hub_stub({"org/Gated": {"G-Q4_K_M.gguf": tiny_gguf("g.gguf", seed=3)}}, gated={"org/Gated"})
    assert main(["pull", "org/Gated"]) == 1
    err = capsys.readouterr().err
    assert "Authentication needed" in err and "hf auth login" in err and "HF_TOKEN" in err


def test_the_real_command_in_its_own_process(stub: HubStub, hf_home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT=stub.endpoint, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "homelab", "pull", REPO, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert Path(json.loads(run.stdout)["paths"][0]).is_relative_to(hf_home / "hub")
    offline = subprocess.run(
        [sys.executable, "-m", "homelab", "pull", "org/Other-GGUF"],
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert (
        offline.returncode == 1
        and "Offline" in offline.stderr
        and "Traceback" not in offline.stderr
    )


def test_eta_and_rate() -> None:
    assert (
        format_eta(None) == "--:--" and format_eta(42) == "0:42" and format_eta(3723) == "1:02:03"
    )
    assert rate_and_eta(deque([(0.0, 0)]), 100) == (None, None)
    assert rate_and_eta(deque([(0.0, 0), (2.0, 2000)]), 5000) == (1000.0, 5.0)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_on_a_terminal_shows_share_speed_and_eta() -> None:
    stream = _Tty()
    now = [0.0]
    bar = ProgressBar(stream, clock=lambda: now[0])
    mib = 1024 * 1024
    for second in range(5):
        now[0] = float(second)
        bar(
            PullProgress(
                "Model-Q4_K_M.gguf",
                "downloading",
                second * mib,
                10 * mib,
                second * mib,
                10 * mib,
                second * mib,
                1,
                2,
            )
        )
    line = stream.getvalue().split("\r")[-1]
    assert line.startswith("[1/2] Model-Q4_K_M.gguf ")
    assert " 40% 4.00 MiB / 10.00 MiB  1.00 MiB/s  ETA 0:06" in line
    bar.finish()
    assert stream.getvalue().endswith("\n")
