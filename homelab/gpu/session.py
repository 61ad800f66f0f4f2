"""One NVML session: the driver initialised, the cards opened, samples taken, reports made.

The one-shot probe (``homelab.gpu.probe``) and the long-lived telemetry poller
(``homelab.gpu.telemetry``) both sample through :class:`CardSession`, so the error ladder
and the reading of each card (``homelab.gpu.sampler``) exist once:

1. ``nvmlInit`` raises ``LibraryNotFound``, or the driver sees 0 cards → no session:
   :func:`open_session` returns a CPU report (``source="cpu"``) with a note saying why.
2. ``DriverNotLoaded``, ``LibRmVersionMismatch``, ``NoPermission`` (or anything else) at
   init, or a failed device count → :class:`~homelab.errors.GpuProbeError`.
3. A field a board or driver does not report → ``None`` and a warning on that card.
4. ``GpuIsLost``/``Unknown`` on one card → that card skipped with a report warning;
   the others kept. No card left → ``GpuProbeError``.

The caller owns the session's life: :func:`open_session` calls ``init`` once and
:meth:`CardSession.close` calls ``shutdown`` once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from homelab.errors import GpuProbeError
from homelab.gpu import faults
from homelab.gpu.cpu import cpu_report
from homelab.gpu.names import os_name_lookup, resolve_name
from homelab.gpu.nvml import NvmlBackend, NVMLError
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import GpuReport
from homelab.gpu.sampler import DeviceLost, DeviceSampler


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version ``12040`` as ``"12.4"``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def open_session(backend: NvmlBackend, own_pids: frozenset[int]) -> CardSession | GpuReport:
    """``init`` the backend and open every card; a CPU report when there is no card to open.

    Raises:
        GpuProbeError: the driver is present but unusable, or the cards cannot be counted.
    """
    try:
        backend.init()
    except NVMLError as error:
        failure = faults.init_failure(error)
        if failure is None:
            return cpu_report(faults.NO_DRIVER_NOTE)
        raise failure from None
    try:
        session = CardSession(backend, own_pids)
    except GpuProbeError:
        quiet_shutdown(backend)
        raise
    if not session.counted:
        quiet_shutdown(backend)
        return cpu_report(faults.NO_DEVICE_NOTE, tuple(session.warnings))
    return session


class CardSession:
    """The open cards of one initialised backend (build it with :func:`open_session`)."""

    def __init__(self, backend: NvmlBackend, own_pids: frozenset[int]) -> None:
        self.backend = backend
        self.replay = backend if isinstance(backend, ReplayNvml) else None
        self.warnings: list[str] = []
        try:
            count = backend.device_count()
        except NVMLError as error:
            raise faults.count_failure(error) from None
        self.counted = count
        self.driver = self._system(backend.driver_version, "Driver version")
        cuda = self._system(backend.cuda_driver_version, "CUDA driver version")
        self.cuda_driver = None if cuda is None else cuda_version_text(cuda)
        self._os_lookup = os_name_lookup(backend)
        self._names: dict[int, str | None] = {}
        self.samplers: list[DeviceSampler] = []
        for index in range(count):
            try:
                self.samplers.append(DeviceSampler.open(backend, index, self.name_of, own_pids))
            except DeviceLost as lost:
                self.warnings.append(str(lost))

    def name_of(self, pid: int) -> str | None:
        """``pid``'s name, resolved once while the pid stays on a card."""
        if pid not in self._names:
            self._names[pid] = resolve_name(self.backend, pid, self._os_lookup)
        return self._names[pid]

    def sample(self, at: float = 0.0) -> None:
        """One sample of every card still readable; a card that fails is dropped with a warning.

        Raises:
            GpuProbeError: no card is left.
        """
        for sampler in list(self.samplers):
            try:
                sampler.sample(at)
            except DeviceLost as lost:
                self.samplers.remove(sampler)
                self.warnings.append(str(lost))
        if not self.samplers:
            raise faults.all_lost_failure(tuple(self.warnings))
        on_cards = {p.pid for s in self.samplers for p in s.samples[-1].processes or ()}
        for pid in [pid for pid in self._names if pid not in on_cards]:
            del self._names[pid]  # a later process may get the same pid

    def set_own_pids(self, pids: frozenset[int]) -> None:
        """Class ``pids`` as homelab's own engines from the next sample on."""
        for sampler in self.samplers:
            sampler.own_pids = pids

    def trim(self, oldest: float) -> None:
        """Forget samples taken before ``oldest`` (each card keeps its latest)."""
        for sampler in self.samplers:
            sampler.trim(oldest)

    def report(self, window_s: float) -> GpuReport:
        """The cards over the samples kept (at least one :meth:`sample` first)."""
        replay = self.replay
        return GpuReport(
            source="replay" if replay else "nvml",
            devices=tuple(s.report() for s in self.samplers),
            driver=self.driver,
            cuda_driver=self.cuda_driver,
            note=f"Replayed from {replay.label}." if replay else None,
            window_s=window_s,
            warnings=tuple(self.warnings),
        )

    def close(self) -> None:
        """``shutdown`` the backend (once)."""
        quiet_shutdown(self.backend)

    def _system(self, call: Callable[[], Any], label: str) -> Any:
        try:
            return call()
        except NVMLError as error:
            self.warnings.append(faults.field_warning(label, error))
            return None


def quiet_shutdown(backend: NvmlBackend) -> None:
    """``shutdown`` the backend, ignoring an NVML error."""
    try:
        backend.shutdown()
    except NVMLError:
        pass  # Nothing useful to tell: the report is already built.
