"""``homelab serve ... --keeper-fd N``: the keeper of a detached serve (:mod:`homelab.serve.keeper`).

``homelab serve --detach`` starts this in a process group of its own and relays what it
prints until the engine is ready and its gate listens; then the keeper writes its notice,
says the rest into its log and keeps the engine and the gate until ``homelab stop``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from homelab.cli.serve_output import ignore_interrupts

if TYPE_CHECKING:
    from homelab.serve.session import ServeSession


def run_keeper(session: ServeSession, notice_fd: int) -> int:
    """Start (or adopt), wait until ready, announce, keep; the exit code.

    Raises:
        HomelabError: the start failed (the launching serve relays it and its code).
    """
    from homelab.engine.supervision.attempt_log import new_log_path
    from homelab.paths import state_dir
    from homelab.serve.keeper import Keeper

    keeper = Keeper(session)
    session.start()
    keeper.attach()
    session.wait_ready()
    session.bus.flush()
    log_path = new_log_path(state_dir() / "logs", "keeper")
    import os

    print(
        f"left running (detached), kept by homelab's keeper (pid {os.getpid()}): it restarts "
        f"the engine and the gate when they die; `homelab stop` stops them; log: {log_path}",
        flush=True,
    )
    keeper.announce(notice_fd, log_path)
    try:
        return keeper.keep()
    finally:
        with ignore_interrupts():
            session.end()
