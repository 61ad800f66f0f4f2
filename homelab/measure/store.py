"""Bench results kept per key (model, engine version, flags, card) and workload.

One JSON file per key and workload, ``state_dir()/bench/<key digest>-<workload>.json``
(where calibration records live too), written atomically (a temporary file in the same
folder, then a rename): the newest bench of that key and workload wins, and no lock is
needed since nothing is read-modified-written. A file that is not a stored result is
skipped (a broken file never stops a plan) and replaced by the next bench.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from homelab.errors import HomelabError
from homelab.files import replace_json
from homelab.measure.key import BenchKey
from homelab.paths import state_dir

SCHEMA = 1
FOLDER = "bench"
WORKLOADS = ("agent", "chat")


class BenchStoreError(HomelabError):
    """The result could not be written (the state folder is not writable)."""

    title = "Bench result not stored"


def folder() -> Path:
    return state_dir() / FOLDER


def _path(key: BenchKey, workload: str, where: Path | None) -> Path:
    return (where or folder()) / f"{key.digest()}-{workload}.json"


def save(key: BenchKey, report: dict[str, Any], *, where: Path | None = None) -> Path:
    """Store ``report`` (a bench's ``--json`` object) under ``key``; returns the file.

    Raises:
        BenchStoreError: the folder cannot be written.
    """
    workload = str(report.get("workload"))
    path = _path(key, workload, where)
    record = {
        "schema": SCHEMA,
        "key": key.as_dict(),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "report": report,
    }
    try:
        replace_json(path, record)
    except OSError as error:
        raise BenchStoreError(
            f"cannot write {path}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None
    return path


def load(key: BenchKey, workload: str, *, where: Path | None = None) -> dict[str, Any] | None:
    """The stored record (``schema``, ``key``, ``recorded_at``, ``report``) of ``key`` and
    ``workload``; None when there is none or it is not one."""
    path = _path(key, workload, where)
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("schema") != SCHEMA
        or data.get("key") != key.as_dict()
        or not isinstance(data.get("report"), dict)
        or not isinstance(data["report"].get("results"), list)
    ):
        return None
    return data


def load_all(key: BenchKey, *, where: Path | None = None) -> list[dict[str, Any]]:
    """Every stored record of ``key``, one per workload (agent first)."""
    found = (load(key, workload, where=where) for workload in WORKLOADS)
    return [record for record in found if record is not None]
