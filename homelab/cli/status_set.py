"""``homelab status`` / ``stop`` for a set of models served behind one gate
(``homelab serve A B C``): its gate's URL and each model's state, swaps and waits; who keeps
it (homelab's keeper of a detached set, its pid and the engines it restarted)."""

from __future__ import annotations

from homelab.cli.common import print_json


def say_set(*, as_json: bool) -> bool:
    """Print the running set's status (or that its keeper is gone); False when neither."""
    from homelab.cli.keeper_status import restart_lines, restarts_json
    from homelab.engine.supervision.set_record import SetRecord, stale_set
    from homelab.gate.client import describe_gate_state, live_gate_state
    from homelab.serve.set_serve import read_set_record

    data = read_set_record()
    record = None if data is None else SetRecord.from_json(data)
    if data is None or record is None:
        return _say_stale(stale_set(), as_json=as_json)
    url = record.gate_url
    state = live_gate_state(url)
    keeper = {"pid": record.pid, "running": True} if record.kept else None
    if as_json:
        print_json(
            {
                "running": True,
                "model_set": {**data, "state": state},
                "keeper": keeper,
                "restarts": restarts_json(record.restarts),
            }
        )
        return True
    how = (
        f"kept by homelab's keeper (pid {record.pid})"
        if record.kept
        else f"homelab pid {record.pid}"
    )
    print(f"a set of models at {url}/v1 ({how})")
    if state is None:
        print("  its gate does not answer")
    else:
        for line in describe_gate_state(state):
            print(line)
    for line in restart_lines(record.restarts):
        print(f"  {line}")
    return True


def _say_stale(record, *, as_json: bool) -> bool:
    """A set's record whose keeper (or serve) is gone: its gate and engines went with it."""
    if record is None:
        return False
    who = "keeper" if record.kept else "serve"
    why = (
        f"the {who} (pid {record.pid}) of the set of models at {record.gate_url}/v1 is gone: "
        "its gate and engines ended with it; `homelab serve` of the set starts it again"
    )
    if as_json:
        print_json(
            {
                "running": False,
                "model_set": None,
                "stale_model_set": {**record.to_json(), "why": why},
            }
        )
    else:
        print(why)
    return True


def stop_set(timeout_s: float) -> bool:
    """Stop the running set (its serve or keeper stops its gate and engines, which die with
    it if it must be killed); False when none runs. A pid is signalled only while it is the
    process that wrote the record (its start time)."""
    import psutil

    from homelab.engine.supervision.set_record import SetRecord, forget_stale, stale_set
    from homelab.serve.set_serve import read_set_record

    data = read_set_record()
    record = None if data is None else SetRecord.from_json(data)
    if record is None:
        gone = stale_set()
        if gone is not None:
            forget_stale()
            print(
                f"cleared: the record of the set of models at {gone.gate_url} (its keeper was gone)"
            )
        return gone is not None
    try:
        process = psutil.Process(record.pid)
        engines = [p for p in process.children(recursive=True)]
        process.terminate()
        process.wait(timeout_s)
    except psutil.NoSuchProcess:
        engines = []
    except psutil.TimeoutExpired:
        process.kill()  # its engines have the parent-death signal
        psutil.wait_procs([process], timeout_s)
    _, left = psutil.wait_procs(engines, timeout_s)
    for child in left:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    forget_stale()
    who = "homelab's keeper" if record.kept else "homelab"
    print(f"stopped: the set of models at {record.gate_url} ({who} pid {record.pid})")
    return True
