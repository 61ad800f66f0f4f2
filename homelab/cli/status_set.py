"""``homelab status`` / ``stop`` for a set of models served behind one gate
(``homelab serve A B C``): its gate's URL and each model's state, swaps and waits."""

from __future__ import annotations

from homelab.cli.common import print_json


def say_set(*, as_json: bool) -> bool:
    """Print the running set's status; False when no set runs."""
    from homelab.gate.client import describe_gate_state, live_gate_state
    from homelab.serve.set_serve import read_set_record

    record = read_set_record()
    if record is None:
        return False
    url = str(record.get("gate_url"))
    state = live_gate_state(url)
    if as_json:
        print_json({"running": True, "model_set": {**record, "state": state}})
        return True
    print(f"a set of models at {url}/v1 (homelab pid {record.get('pid')})")
    if state is None:
        print("  its gate does not answer")
    else:
        for line in describe_gate_state(state):
            print(line)
    return True


def stop_set(timeout_s: float) -> bool:
    """Stop the running set (its serve stops its gate and engines); False when none runs."""
    import psutil

    from homelab.serve.set_serve import read_set_record

    record = read_set_record()
    pid = None if record is None else record.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        process = psutil.Process(pid)
        process.terminate()
        process.wait(timeout_s)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        process.kill()
    print(f"stopped: the set of models at {record.get('gate_url') if record else '?'}")
    return True
