"""What each NVML error means for a person: one sentence, and a next step.

Three outcomes (research nvml.md §1.5):

* **fall back to RAM** — ``LibraryNotFound`` at init (no proprietary driver, or a
  container started without the NVIDIA toolkit): there is nothing to probe, so homelab
  plans for the CPU and says so;
* **stop** — the driver is there but unusable (``DriverNotLoaded``,
  ``LibRmVersionMismatch``, ``NoPermission`` at init): a :class:`GpuProbeError` with a hint;
* **degrade** — a field a board or driver does not report (``NotSupported``,
  ``NoPermission``, ``FunctionNotFound``) becomes ``None`` plus a warning sentence;
  ``GpuIsLost``/``Unknown`` on one card drops that card, keeping the others.
"""

from __future__ import annotations

from homelab.errors import GpuProbeError
from homelab.gpu.nvml import error_name

NO_DRIVER_NOTE = (
    "No NVIDIA driver found (libnvidia-ml.so.1 / nvml.dll is missing, it ships with the "
    "NVIDIA display driver): planning against system RAM."
)
NO_DEVICE_NOTE = (
    "The NVIDIA driver is loaded but shows no GPU (passed through elsewhere, or hidden "
    "from this container): planning against system RAM."
)

LOSES_DEVICE = ("GpuIsLost", "Unknown")
"""Errors after which nothing more is asked of that card."""

_REASONS = {
    "NotSupported": "this board or driver does not report it",
    "NoPermission": "this user may not read it (other users' processes, MIG, /dev/nvidia* access)",
    "FunctionNotFound": "the driver is older than this call",
    "NotFound": "NVML no longer knows it",
    "GpuIsLost": "the card fell off the bus (Xid 79); reboot and check power and seating",
    "Unknown": "NVML failed without saying why",
    "Timeout": "the driver did not answer in time",
    "InsufficientSize": "the list changed while it was read",
}


def reason(error: BaseException) -> str:
    """``"NotSupported: this board or driver does not report it"``."""
    name = error_name(error)
    return f"{name}: {_REASONS.get(name, str(error))}"


def field_warning(what: str, error: BaseException) -> str:
    """A per-field warning: ``"Display state unavailable (NotSupported: ...)."``."""
    return f"{what} unavailable ({reason(error)})."


def skipped_warning(index: int, what: str, error: BaseException) -> str:
    """The report-level sentence for a card that was dropped."""
    return f"GPU {index} skipped: reading its {what} failed ({reason(error)})."


def init_failure(error: BaseException) -> GpuProbeError | None:
    """The error to raise for a failed ``nvmlInit``; ``None`` for "plan for RAM"."""
    name = error_name(error)
    if name == "LibraryNotFound":
        return None
    if name == "DriverNotLoaded":
        return GpuProbeError(
            "The NVIDIA driver is installed but its kernel module is not loaded.",
            hint="nouveau may own the card, Secure Boot may have refused the module, or a "
            "reboot is pending; check `lsmod | grep nvidia` and `dmesg | grep -i nvidia`.",
        )
    if name == "LibRmVersionMismatch":
        return GpuProbeError(
            "The NVIDIA driver was upgraded but the old kernel module is still running.",
            hint="Reboot (or reload the nvidia kernel modules) so both halves match.",
        )
    if name == "NoPermission":
        return GpuProbeError(
            "This user is not allowed to open the NVIDIA driver (/dev/nvidia*).",
            hint="Check the permissions of /dev/nvidia* (often the 'video' group) or run "
            "the container with the NVIDIA runtime.",
        )
    return GpuProbeError(
        f"NVML could not start ({reason(error)}).",
        hint="Run `nvidia-smi`; if it fails too, reinstall the NVIDIA driver.",
    )


def count_failure(error: BaseException) -> GpuProbeError:
    """NVML started but cannot say how many cards there are."""
    return GpuProbeError(
        f"NVML started but could not count the GPUs ({reason(error)}).",
        hint="Run `nvidia-smi`; if it fails too, reinstall the NVIDIA driver or reboot.",
    )


def all_lost_failure(warnings: tuple[str, ...]) -> GpuProbeError:
    """Every card was dropped: there is nothing to plan on."""
    return GpuProbeError(
        "No NVIDIA GPU could be read: " + " ".join(warnings),
        hint="Run `nvidia-smi`; a lost GPU (Xid 79) needs a reboot.",
    )
