"""The remote devices a plan may use: the RPC workers the options name, asked before planning.

``PlanOptions.rpc`` lists ``host:port`` endpoints (``homelab worker`` on other machines);
each is asked what it offers (:func:`homelab.engine.llamacpp.rpc_query.query_workers`) and
the answer goes to the planner as ``remote=`` (it budgets each device like a card and
splits the layers over them; the argv gains ``--rpc`` and the device split).
"""

from __future__ import annotations

from homelab.plan.options import PlanOptions
from homelab.plan.remote_device import RemoteDevice


def remote_devices(options: PlanOptions) -> tuple[RemoteDevice, ...]:
    """The RPC devices of ``options.rpc``'s workers, in llama-server's order; () when none.

    Raises:
        WorkerError: a worker did not answer (named, with how).
    """
    if not options.rpc:
        return ()
    from homelab.engine.llamacpp.rpc_query import query_workers

    return query_workers(options.rpc)
