"""System RAM's read bandwidth: measured once on this machine, kept in the state folder.

No OS interface reports it (DMI's speed is the DIMMs' rating, not what the CPU can draw
through its channels), and it is what bounds decode for the weights kept in RAM (experts
with ``--n-cpu-moe``, whole layers with ``-ngl K``). So homelab measures it: a few
processes at once (llama.cpp reads its CPU weights with several threads; one thread
alone draws a fraction of the channels) each scan their own buffer (a few hundred MB in
all, far beyond any cache) for a byte that is not there, which glibc's ``memchr`` does at
the speed memory delivers, and the bytes scanned over the time taken are the figure.

It is stored in ``state_dir()/ram_bandwidth.json`` with the machine it was measured on
(CPUs and RAM size); a file of another machine, a broken one, or a figure that is not
positive is no measurement (None: the decode bound says the bandwidth is unknown).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from homelab.errors import HomelabError
from homelab.files import replace_json
from homelab.paths import state_dir
from homelab.units import MiB

SCHEMA = 1
FILE = "ram_bandwidth.json"
TOTAL_BUFFER = 512 * MiB
"""What the scans cover in all: beyond the largest L3 cache (a 9800X3D's 96 MiB) many times."""
MIN_BUFFER = 64 * MiB
MAX_PROCESSES = 8
"""Past this many readers a desktop's two to four memory channels are saturated."""
SECONDS = 1.0


class RamBandwidthError(HomelabError):
    """The measurement could not run or could not be kept."""

    title = "RAM bandwidth not measured"


@dataclass(frozen=True, slots=True)
class RamBandwidth:
    """One measurement of system RAM's read bandwidth."""

    bytes_per_s: int
    measured_at: str
    """ISO date and time of the measurement."""
    method: str
    """How, in words (what the working prints next to the figure)."""
    machine: str
    """The machine it belongs to (:func:`machine`)."""


def machine() -> str:
    """This machine as far as its memory bandwidth goes: its CPUs and its RAM."""
    import psutil  # only when a measurement is read or taken (start-up time)

    return f"{os.cpu_count() or '?'} CPUs, {psutil.virtual_memory().total:,} B RAM"


def _scan(job: tuple[int, float, float]) -> tuple[int, float]:
    """One reader: fill its buffer (so its pages are real, not the shared zero page), wait
    for the common start, then scan it again and again until the stop; (bytes, seconds)."""
    size, start_at, stop_at = job
    buffer = b"\0" * size
    while time.time() < start_at:
        time.sleep(0.001)
    began, scanned = time.perf_counter(), 0
    while time.time() < stop_at or not scanned:
        buffer.find(b"\1")  # memchr over every byte: nothing is found
        scanned += size
    return scanned, time.perf_counter() - began


def measure(processes: int | None = None, seconds: float = SECONDS) -> RamBandwidth:
    """Measure now (about ``seconds`` plus the readers' start-up).

    Raises:
        RamBandwidthError: the readers could not be started (no memory, no processes).
    """
    n = processes or max(1, min(os.cpu_count() or 1, MAX_PROCESSES))
    size = max(MIN_BUFFER, TOTAL_BUFFER // n)
    import multiprocessing  # only to measure (start-up time of every plan)

    context = multiprocessing.get_context("spawn")  # no fork of a threaded program
    try:
        with context.Pool(n) as pool:
            start_at = time.time() + 1.0 + 0.2 * n  # the readers are up and filled by then
            jobs = [(size, start_at, start_at + seconds)] * n
            results = pool.map(_scan, jobs)
    except (OSError, MemoryError) as error:
        raise RamBandwidthError(
            f"the readers could not run: {error}", hint="Free some memory and try again."
        ) from None
    rate = sum(scanned / elapsed for scanned, elapsed in results if elapsed > 0)
    when = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    method = f"{n} reader(s) scanning {n * size // MiB:,} MiB for {seconds:g} s"
    return RamBandwidth(int(rate), when, method, machine())


def _path(where: Path | None) -> Path:
    return (where or state_dir()) / FILE


def save(bandwidth: RamBandwidth, *, where: Path | None = None) -> Path:
    """Keep ``bandwidth`` (atomically: a temporary file, then a rename); returns the file.

    Raises:
        RamBandwidthError: the state folder cannot be written.
    """
    record = {"schema": SCHEMA, **asdict(bandwidth)}
    try:
        path = _path(where)
        replace_json(path, record)
    except OSError as error:
        where_to = error.filename or where or "the state folder"
        raise RamBandwidthError(
            f"cannot write {where_to}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None
    return path


def load(*, where: Path | None = None) -> RamBandwidth | None:
    """The stored measurement of this machine; None when there is none that can be trusted."""
    try:
        data: Any = json.loads(_path(where).read_text("utf-8"))  # a state folder that cannot
        # be made is no measurement either (OSError)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    rate, texts = data.get("bytes_per_s"), [data.get(k) for k in ("measured_at", "method")]
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        return None
    if not all(isinstance(t, str) for t in texts) or data.get("machine") != machine():
        return None
    return RamBandwidth(rate, str(texts[0]), str(texts[1]), machine())
