"""``install_agents.sh`` fails, saying why, when it cannot install (the suite then fails, never
skips): no npm, or a registry that does not answer; nothing is marked complete then."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "install_agents.sh"
BASH = shutil.which("bash") or "/bin/bash"


def install(cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(SCRIPT)],
        env={**os.environ, "HOMELAB_AGENTS_CACHE": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_npm_it_fails_and_says_so(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sha256sum", "cut"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    done = install(tmp_path / "cache", PATH=str(bin_dir))
    assert done.returncode == 1
    assert "npm is not on PATH" in done.stderr and done.stdout == ""
    assert not list((tmp_path / "cache").glob("agents-*/.complete"))


def test_a_registry_that_does_not_answer_fails_with_the_logs_tail(tmp_path: Path) -> None:
    done = install(
        tmp_path / "cache",
        npm_config_registry="http://127.0.0.1:9/",
        npm_config_fetch_retries="0",
        npm_config_cache=str(tmp_path / "npm-cache"),
        npm_config_offline="false",
    )
    assert done.returncode == 1, done.stdout
    assert "127.0.0.1:9" in done.stderr or "ECONNREFUSED" in done.stderr, done.stderr
    (root,) = (tmp_path / "cache").glob("agents-*")
    assert (root / "install.log").is_file() and not (root / ".complete").exists()
    assert not (root / "bin").exists()
