"""Hostile paths and values on the command line: a clear error and its exit code, never a
traceback and never a hang.

What an adversarial probe found: a FIFO as the model or the GPU snapshot hung forever;
``/dev/zero``, a binary file or non-UTF-8 bytes as a snapshot or a preset, and a
300-character file name, gave tracebacks; ``serve`` read ``/dev/zero`` as the Hub repo
``dev/zero`` and said "does not exist" for a folder where ``plan`` named the real reason;
unicode digits and a 320-digit size gave tracebacks. Each command here runs the real CLI.
Commands that could hang run in a subprocess with a timeout, so a regression fails
instead of blocking the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.errors import ExitCode, ModelFileError
from homelab.gguf.local_path import local_or_ref
from homelab.gpu.snapshot import MAX_SNAPSHOT_BYTES
from tests.engine.supervisor_child import run_homelab
from tests.factory import write_gguf

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "fixtures" / "gpu" / "rtx3090_headless.json"
HANG_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf("llama", tmp_path_factory.mktemp("model") / "m.gguf")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _homelab(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process (bounded: a hang is a failure, not a stuck suite)."""
    return run_homelab(*args, timeout_s=HANG_TIMEOUT_S)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


# -- the model path ---------------------------------------------------------------------


@pytest.mark.parametrize("command", ["plan", "serve"])
def test_a_fifo_as_the_model_is_refused_without_blocking(command: str, fifo: Path) -> None:
    done = _homelab(command, str(fifo), "--vram", "16GiB")
    assert done.returncode == ExitCode.BAD_MODEL, done.stderr
    assert f"{fifo} is a FIFO (named pipe), not a GGUF file" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["plan", "serve"])
def test_dev_zero_as_the_model_is_a_device_never_a_hub_repo(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, command, "/dev/zero", "--vram", "16GiB")
    assert code == ExitCode.BAD_MODEL, err
    assert "/dev/zero is a character device, not a GGUF file" in err
    assert "dev/zero" not in err.replace("/dev/zero", "")  # never the repo "dev/zero"


@pytest.mark.parametrize("command", ["plan", "serve"])
def test_a_folder_as_the_model_gets_the_same_reason_from_plan_and_serve(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, command, str(tmp_path), "--vram", "16GiB")
    assert code == ExitCode.BAD_MODEL
    assert f"{tmp_path} is a directory, not a GGUF file" in err


@pytest.mark.parametrize("command", ["plan", "serve"])
@pytest.mark.parametrize("where", ["absolute", "bare"])
def test_a_300_character_file_name_is_a_bad_model_file(
    command: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "m" * 295 + ".gguf"
    given = str(tmp_path / name) if where == "absolute" else name
    code, _, err = _cli(capsys, command, given, "--vram", "16GiB")
    assert code == ExitCode.BAD_MODEL, err
    assert "File name too long" in err


def test_local_or_ref_tells_local_paths_from_hub_references(
    tmp_path: Path, model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert local_or_ref(str(model)) == model
    assert local_or_ref("bartowski/Qwen3-8B-GGUF:Q4_K_M") is None
    assert local_or_ref("owner/name/sub/File.gguf") is None  # a file in a Hub repo
    assert local_or_ref("qwen3.5-9b") is None  # a preset name
    for written_as_a_path in ("./x.gguf", "../x.gguf", "/nope/x", "~/nope", "x.gguf", "d/x.gguf"):
        with pytest.raises(ModelFileError, match="no such file"):
            local_or_ref(written_as_a_path)
    (tmp_path / "owner" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # "owner/name" now exists on disk: local, never the Hub
    with pytest.raises(ModelFileError, match="owner/name is a directory"):
        local_or_ref("owner/name")


# -- the GPU snapshot -------------------------------------------------------------------


def test_a_fifo_as_the_gpu_snapshot_is_refused_without_blocking(model: Path, fifo: Path) -> None:
    done = _homelab("plan", str(model), "--gpu-snapshot", str(fifo))
    assert done.returncode == ExitCode.GPU_PROBE_FAILED, done.stderr
    assert f"Cannot read GPU snapshot {fifo}: is a FIFO (named pipe), not a regular file" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_dev_zero_as_the_gpu_snapshot_is_refused_without_reading_it(model: Path) -> None:
    done = _homelab("plan", str(model), "--gpu-snapshot", "/dev/zero")
    assert done.returncode == ExitCode.GPU_PROBE_FAILED, done.stderr
    assert "/dev/zero: is a character device, not a regular file" in done.stderr


def test_a_binary_file_as_the_gpu_snapshot_is_not_utf8(
    model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "plan", str(model), "--gpu-snapshot", str(model))
    assert code == ExitCode.GPU_PROBE_FAILED
    assert f"GPU snapshot {model} is not a snapshot: byte " in err and "is not UTF-8 text" in err


def test_a_huge_file_as_the_gpu_snapshot_is_not_read_whole(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_SNAPSHOT_BYTES + 1)
    code, _, err = _cli(capsys, "plan", str(model), "--gpu-snapshot", str(huge))
    assert code == ExitCode.GPU_PROBE_FAILED
    assert f"is larger than {MAX_SNAPSHOT_BYTES:,} bytes" in err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 100_000, "is not"),  # nested past the parser's recursion limit
        ('{"schema": 1, "x": ' + "9" * 5000 + "}", "is not a snapshot JSON can hold"),
    ],
)
def test_json_python_cannot_hold_is_a_snapshot_error(
    text: str, expected: str, model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text)
    code, _, err = _cli(capsys, "plan", str(model), "--gpu-snapshot", str(path))
    assert code == ExitCode.GPU_PROBE_FAILED and expected in err, err


def test_the_recorded_snapshot_still_plans(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "plan", str(model), "--gpu-snapshot", str(SNAPSHOT), "--json")
    assert code == 0, err
    assert json.loads(out)["budget"]["total"] > 0


# -- user presets -----------------------------------------------------------------------


def _user_presets() -> Path:
    folder = Path(os.environ["HOMELAB_CONFIG_DIR"]) / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'name = "caf\xe9"\n', "byte 11 is not UTF-8 text"),
        (b"\xff\xfe\x00\x01GGUF\x00\x00", "byte 0 is not UTF-8 text"),
        (b"x = " + b"[" * 100_000, "not valid TOML"),
    ],
)
def test_a_preset_that_is_not_utf8_toml_is_a_preset_error(
    content: bytes, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _user_presets() / "mine.toml"
    path.write_bytes(content)
    code, _, err = _cli(capsys, "presets", "--vram", "16GiB")
    assert code == ExitCode.USAGE, err
    assert f"Invalid preset: {path}: " in err and expected in err


def test_a_huge_preset_is_not_read_whole(capsys: pytest.CaptureFixture[str]) -> None:
    path = _user_presets() / "huge.toml"
    with path.open("wb") as handle:
        handle.truncate(2 * 1024 * 1024)
    code, _, err = _cli(capsys, "presets", "--vram", "16GiB")
    assert code == ExitCode.USAGE
    assert f"{path}: cannot be read: is larger than 1,048,576 bytes" in err


# -- sizes and counts -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["²", "١٢", "9" * 320, "16 GiBB", "1e9", "4 GiB 2", "nan"])
def test_vram_that_is_not_a_size_is_a_usage_error(
    value: str, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "plan", str(model), "--vram", value)
    assert (code, out) == (ExitCode.USAGE, "")
    assert "Invalid usage: not a size" in err


@pytest.mark.parametrize("value", ["²", "١٢", "9" * 320, "9" * 5000])
def test_a_workload_of_unicode_or_endless_digits_is_a_usage_error(
    value: str, model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "plan", str(model), "--vram", "16GiB", "--workload", value)
    assert (code, out) == (ExitCode.USAGE, "")
    assert "Invalid usage: unknown workload" in err


# -- homelab's own folders ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "command"),
    [
        ("HOMELAB_STATE_DIR", ("status",)),
        ("HOMELAB_STATE_DIR", ("presets", "--vram", "16GiB")),
        ("HOMELAB_CONFIG_DIR", ("presets", "--vram", "16GiB")),
    ],
)
def test_a_folder_of_homelabs_that_is_a_file_is_said_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, command: tuple[str, ...]
) -> None:
    """A state or config folder that is a regular file (or under one) was a FileExistsError
    traceback; now one titled paragraph naming the path, what to do, exit 1."""
    taken = tmp_path / "a-file"
    taken.write_text("not a folder")
    for path, said in ((taken, "File exists"), (taken / "below", "Not a directory")):
        monkeypatch.setenv(variable, str(path))
        result = run_homelab(*command, timeout_s=HANG_TIMEOUT_S)
        assert result.returncode == ExitCode.FAILURE, result.stderr
        assert "Traceback" not in result.stderr
        assert f"homelab: Cannot use a file or folder: {path}: {said}" in result.stderr
        assert "HOMELAB_" in result.stderr  # the hint: where to point it instead
