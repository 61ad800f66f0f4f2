"""Sample one card over a window and keep the worst moment.

The window is every sample taken (the one-shot probe), or only the last seconds of them
(the telemetry poller drops older ones with :meth:`DeviceSampler.trim`).

Free memory and the desktop share move while a desktop is in use (window resizes,
browser tabs, video: research nvml.md §3.1), so one reading is not enough: the
sampler keeps the lowest free (``free_min``) and the highest desktop share
(``desktop_peak``) of every sample, and the last sample for everything else.

Memory is read with info v2 (``used`` excludes the driver's ``reserved``); any v2
failure but ``GpuIsLost`` switches the card to v1 for the rest of the window:
``FunctionNotFound`` on drivers before 510.39, ``Unknown`` under WSL2. With v1,
``reserved`` is ``None`` and ``used`` includes the reservation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from homelab.gpu import faults
from homelab.gpu.classify import desktop_bytes, merge_processes
from homelab.gpu.nvml import NVMLError, error_name
from homelab.gpu.report import GpuDevice, GpuProcess


def _quiet(call: Callable[[Any], int], handle: Any) -> int | None:
    """A figure only an estimate uses: unknown (None) when NVML cannot say, no warning."""
    try:
        return call(handle)
    except NVMLError:
        return None


class DeviceLost(Exception):
    """The card cannot be read any more; ``str()`` is the sentence for the report."""


@dataclass(slots=True)
class _Sample:
    at: float
    total: int
    reserved: int | None
    used: int | None
    free: int
    processes: tuple[GpuProcess, ...] | None
    desktop: int | None


@dataclass
class DeviceSampler:
    """Reads one card sample by sample; build it with :meth:`open`."""

    backend: Any
    index: int
    handle: Any
    name: str
    uuid: str | None
    display_active: bool | None
    name_of: Callable[[int], str | None]
    own_pids: frozenset[int]
    warnings: list[str] = field(default_factory=list)
    samples: list[_Sample] = field(default_factory=list)
    use_v1: bool = False
    compute_capability: tuple[int, int] | None = None
    memory_bus_bits: int | None = None
    memory_clock_mhz: int | None = None
    lowest_free: int | None = None
    """Lowest free memory of every sample taken, trimmed ones included."""

    @classmethod
    def open(
        cls,
        backend: Any,
        index: int,
        name_of: Callable[[int], str | None],
        own_pids: frozenset[int],
    ) -> DeviceSampler:
        """Get the handle, name, UUID and display state of card ``index``.

        Raises:
            DeviceLost: no handle, or the card is lost (``GpuIsLost``/``Unknown``).
        """
        try:
            handle = backend.device_handle(index)
        except NVMLError as error:
            raise DeviceLost(faults.skipped_warning(index, "handle", error)) from None
        sampler = cls(backend, index, handle, "", None, None, name_of, own_pids)
        sampler.name = (
            sampler._optional("name", "Card name", backend.device_name, fatal=faults.LOSES_DEVICE)
            or f"NVIDIA GPU {index}"
        )
        sampler.uuid = sampler._optional("UUID", "UUID", backend.device_uuid)
        active = sampler._optional("display state", "Display state", backend.display_active)
        sampler.display_active = None if active is None else bool(active)
        try:  # only a CUDA build asks; unknown is no warning on the card
            sampler.compute_capability = backend.compute_capability(handle)
        except NVMLError:
            sampler.compute_capability = None
        sampler.memory_bus_bits = _quiet(backend.memory_bus_width, handle)  # decode's bound only
        sampler.memory_clock_mhz = _quiet(backend.max_memory_clock, handle)
        return sampler

    def sample(self, at: float = 0.0) -> None:
        """Read memory and both process lists once (``at``: when, in the caller's seconds).

        Raises:
            DeviceLost: memory cannot be read (lost card, UMA part, ...).
        """
        total, reserved, used, free = self._memory()
        compute = self._procs("compute", self.backend.compute_processes)
        graphics = self._procs("graphics", self.backend.graphics_processes)
        processes = merge_processes(compute, graphics, self.name_of, self.own_pids)
        desktop = desktop_bytes(processes, graphics_known=graphics is not None)
        self.samples.append(_Sample(at, total, reserved, used, free, processes, desktop))
        self.lowest_free = free if self.lowest_free is None else min(self.lowest_free, free)

    def trim(self, oldest: float) -> None:
        """Drop samples taken before ``oldest``; the latest one is always kept."""
        keep = next((i for i, s in enumerate(self.samples) if s.at >= oldest), None)
        if keep is None:
            keep = len(self.samples) - 1
        del self.samples[:keep]

    def report(self) -> GpuDevice:
        """The card as seen over the window (at least one :meth:`sample` first)."""
        last = self.samples[-1]
        desktops = [s.desktop for s in self.samples if s.desktop is not None]
        return GpuDevice(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            total=last.total,
            reserved=last.reserved,
            used=last.used,
            free=last.free,
            free_min=min(s.free for s in self.samples),
            desktop_now=last.desktop,
            desktop_peak=max(desktops) if desktops else None,
            display_active=self.display_active,
            processes=last.processes,
            samples=len(self.samples),
            warnings=tuple(self.warnings),
            compute_capability=self.compute_capability,
            memory_bus_bits=self.memory_bus_bits,
            memory_clock_mhz=self.memory_clock_mhz,
        )

    # -- reading ------------------------------------------------------------------------

    def _memory(self) -> tuple[int, int | None, int | None, int]:
        if not self.use_v1:
            try:
                info = self.backend.memory_v2(self.handle)
            except NVMLError as error:
                if error_name(error) == "GpuIsLost":
                    raise DeviceLost(faults.skipped_warning(self.index, "memory", error)) from None
                self.use_v1 = True
                self._warn(
                    faults.field_warning("Reserved memory (memory info v2)", error)
                    + " Used memory includes the driver's reservation."
                )
            else:
                return self._checked(info.total, info.reserved, info.used, info.free)
        try:
            info = self.backend.memory_v1(self.handle)
        except NVMLError as error:
            raise DeviceLost(faults.skipped_warning(self.index, "memory", error)) from None
        return self._checked(info.total, None, info.used, info.free)

    def _checked(
        self, total: int, reserved: int | None, used: int | None, free: int
    ) -> tuple[int, int | None, int | None, int]:
        if not total:
            raise DeviceLost(
                f"GPU {self.index} skipped: it reports no memory of its own "
                "(an integrated GPU sharing system RAM)."
            )
        return (
            int(total),
            None if reserved is None else int(reserved),
            None if used is None else int(used),
            int(free),
        )

    def _procs(self, kind: str, call: Callable[[Any], list[Any]]) -> list[Any] | None:
        try:
            return list(call(self.handle))
        except NVMLError as error:
            if error_name(error) == "GpuIsLost":
                raise DeviceLost(
                    faults.skipped_warning(self.index, f"{kind} processes", error)
                ) from None
            self._warn(faults.field_warning(f"The {kind} process list", error))
        except (OverflowError, ValueError):
            # Drivers 535.43-535.86 changed the process struct; pynvml then fails to
            # decode it (gpustat#161).
            self._warn(
                f"The {kind} process list is unreadable: this driver returns a malformed "
                "list (known on 535.43-535.86; upgrade the driver)."
            )
        return None

    def _optional(
        self,
        what: str,
        label: str,
        call: Callable[[Any], Any],
        fatal: tuple[str, ...] = ("GpuIsLost",),
    ) -> Any:
        try:
            return call(self.handle)
        except NVMLError as error:
            if error_name(error) in fatal:
                raise DeviceLost(faults.skipped_warning(self.index, what, error)) from None
            self._warn(faults.field_warning(label, error))
            return None

    def _warn(self, sentence: str) -> None:
        if sentence not in self.warnings:
            self.warnings.append(sentence)
