"""The devices a plan may use, each with its own fixed budget, named as llama-server names them.

Local cards come from the probe's report, one :class:`~homelab.plan.budget.DeviceBudget`
each (reserved memory, the desktop's share only on the card that drives a display, other
processes, its own headroom). Remote devices (llama.cpp RPC workers) are budgeted from
what their worker reports: no desktop (a worker's own display is inside its free figure),
no CUDA context here (the worker's rpc-server created its own before it reported free
memory), the headless headroom.

llama-server numbers CUDA devices in the CUDA runtime's order, fastest first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` is set; NVML numbers them by PCI bus. homelab runs the
engine with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so that ``CUDAn`` is NVML's GPU n.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.errors import UsageError
from homelab.gpu.report import GpuReport
from homelab.plan.budget import HEADROOM_HEADLESS, DeviceBudget, device_budget
from homelab.plan.remote_device import RemoteDevice

CUDA_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
"""The environment that makes llama-server's CUDAn the card NVML calls GPU n."""
CUDA_ORDER_NOTE = (
    "llama-server's CUDAn is GPU n only with CUDA_DEVICE_ORDER=PCI_BUS_ID (CUDA numbers the "
    "fastest card first otherwise): homelab serve sets it; set it too when running the command yourself."
)


@dataclass(frozen=True, slots=True)
class PlanDevice:
    """One device a plan may place layers on."""

    budget: DeviceBudget
    llama_name: str
    """llama-server's name for it: ``CUDA1``, ``RPC0``, or ``CPU`` for a system-RAM plan."""
    index: int | None = None
    """NVML index of a local card."""
    endpoint: str | None = None
    """``host:port`` of a remote device's worker."""
    pin: bool = True
    """llama-server is told this device by name (``--device``); False for a synthetic card
    (``--vram``), which stands for no device in particular."""

    @property
    def remote(self) -> bool:
        return self.endpoint is not None

    @property
    def cuda(self) -> bool:
        """A local card: llama-server creates a CUDA context on it."""
        return self.index is not None

    @property
    def label(self) -> str:
        """How the working names it: the card, or the device and the host it is on."""
        if self.endpoint is not None:
            return f"{self.llama_name} on {self.endpoint}"
        return self.budget.name


def remote_budget(device: RemoteDevice) -> DeviceBudget:
    """A worker's device budgeted like a card: no desktop, its own headroom.

    Raises:
        UsageError: the worker reported sizes no device has.
    """
    if device.total <= 0 or not 0 <= device.free <= device.total:
        raise UsageError(
            f"the RPC device {device.name} at {device.endpoint} reported "
            f"{device.free:,} bytes free of {device.total:,}, which no device has",
            hint="Check the worker (rpc-server) on that host.",
        )
    return DeviceBudget(
        kind="rpc",
        name=f"{device.name} at {device.endpoint}",
        total=device.total,
        reserved=0,
        desktop=0,
        other=device.total - device.free,
        headroom=HEADROOM_HEADLESS,
        display_active=False,
    )


def local_devices(report: GpuReport, indices: tuple[int, ...] | None) -> tuple[PlanDevice, ...]:
    """The cards asked for (all of them when ``indices`` is None), by NVML index."""
    if not report.devices:
        if indices:
            device_budget(report, indices[0])  # raises: no card to pick
        return ()
    chosen = sorted({d.index for d in report.devices} if indices is None else set(indices))
    pin = report.source != "synthetic"
    return tuple(PlanDevice(device_budget(report, i), f"CUDA{i}", index=i, pin=pin) for i in chosen)


def remote_devices(remote: tuple[RemoteDevice, ...]) -> tuple[PlanDevice, ...]:
    """The RPC devices, in the order given (llama-server's order for them)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for device in remote:
        key = (device.endpoint, device.name)
        if key in seen:
            raise UsageError(f"the RPC device {device.name} at {device.endpoint} is listed twice")
        seen.add(key)
        out.append(PlanDevice(remote_budget(device), device.name, endpoint=device.endpoint))
    return tuple(out)


def cpu_device(report: GpuReport) -> PlanDevice:
    """System RAM as the one device of a plan without any offload device."""
    return PlanDevice(device_budget(report, None), "CPU")


def total_budget(devices: tuple[PlanDevice, ...]) -> DeviceBudget:
    """The devices' budgets summed: what the plan has in all (``Plan.budget``)."""
    if len(devices) == 1:
        return devices[0].budget
    budgets = [d.budget for d in devices]
    notes: list[str] = []
    for b in budgets:
        notes.extend(n for n in b.notes if n not in notes)
    return DeviceBudget(
        kind="gpu",
        name=" + ".join(d.label for d in devices),
        total=sum(b.total for b in budgets),
        reserved=sum(b.reserved for b in budgets),
        desktop=sum(b.desktop for b in budgets),
        other=sum(b.other for b in budgets),
        headroom=sum(b.headroom for b in budgets),
        display_active=any(b.display_active for b in budgets),
        notes=tuple(notes),
    )
