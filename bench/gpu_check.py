"""The GPU check's driver: record the card, then plan and serve generated geometries with
``homelab serve`` and write predicted vs actual memory (bench/GPU_CHECK.md).

    python bench/gpu_check.py --out DIR --server LLAMA_SERVER [--cpu] [--set gpu|cpu|smoke]
        [--deadline-s S] [--workdir DIR] [--build-json FILE]
    python bench/gpu_check.py --table DIR/gpu_check.json     # print the table again

Per case: the model is written by the test factory (``tests.factory``) into ``--workdir``
(several GB on a GPU machine's disk; reused by the cases that share it), planned in
process exactly as ``homelab plan`` does (fresh state folder per case, so no calibration
is consulted), then served by ``python -m homelab serve MODEL --no-gate`` (with
``--prove`` when ``homelab serve --help`` lists it) until it is ready and has printed its
predicted-vs-actual table; NVML is read while it runs (the engine process's memory, and
the card's used memory against the moment before it started); then it is stopped
(SIGTERM, as Ctrl-C). The engine's load log (the supervisor's session log without homelab's
marker lines) is parsed by ``homelab.engine.llamacpp.log`` and compared by
``homelab.engine.llamacpp.actuals``.

Parts, each predicted/actual in bytes: weights, KV (full + SWA), recurrent, compute
(llama.cpp's compute buffer on the plan's device), fa_copy (the flash-attention F16 copy
of a quantized cache: planned per token; actual = this case's compute buffer minus that
of the same model/context/slots with an f16 cache, when both ran), cuda_context (456 MiB
planned; actual = the engine's NVML memory minus every device buffer its log reports),
total (weights + KV + engine; actual = the engine's NVML memory, else the card's used
growth; on CPU the log's buffers summed). Results are rewritten after every case
(``gpu_check.json``, ``fixtures/llama_logs-<card>.tar.gz``) so a run cut short still
returns what it did; the table is printed last.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import signal
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _entry in (ROOT, ROOT / "bench"):
    if str(_entry) not in sys.path:
        sys.path.insert(0, str(_entry))

from _gpu_cases import CASE_SETS, Case, format_table
from _gpu_serve import (
    Serve,
    engine_log,
    free_port,
    homelab,
    homelab_env,
    kill_if_engine,
    one_request,
    plan_case,
    write_model,
    write_models,
)

from homelab.engine.llamacpp.locate import is_executable_file

RESULTS = "gpu_check.json"
PID_FILE = "running.pids"
"""The serve and engine pids of the case running now (a cut run's are killed by the next)."""
SERVE_TIMEOUT_S = {"gpu": 120.0, "cpu": 150.0}
CASE_RESERVE_S = {"gpu": 40.0, "cpu": 25.0}
"""A case starts only while at least this much of the deadline is left."""


def card_slug(name: str) -> str:
    """``NVIDIA GeForce RTX 3090`` -> ``rtx3090``; ``NVIDIA H200`` -> ``h200`` (file names)."""
    words = [w for w in name.lower().split() if w not in ("nvidia", "geforce")]
    return re.sub(r"[^a-z0-9]", "", "".join(words)) or "gpu"


# -- the card --------------------------------------------------------------------------


def read_card(window_s: float = 0.0) -> Any:
    """The NVML report now (``homelab.gpu.probe``); a CPU report when there is no driver."""
    from homelab.gpu.probe import probe

    return probe(window_s=window_s, interval_s=0.25)


def record_card(out: Path, env: dict[str, str]) -> dict[str, Any]:
    """``homelab gpu --record`` into ``out/fixtures/gpu/<card>.json``, then replayed once."""
    report = read_card()
    if not report.devices:
        return {"skipped": report.note or "no NVIDIA card"}
    device = report.devices[0]
    display = "" if device.display_active else "_headless"
    path = out / "fixtures" / "gpu" / f"{card_slug(device.name)}{display}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    done = homelab("gpu", "--record", str(path), "--sample-seconds", "2", env=env, timeout=60)
    replay = homelab("gpu", "--gpu-snapshot", str(path), "--json", env=env, timeout=60)
    return {
        "file": str(path.relative_to(out)),
        "rc": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "output": (done.stdout + done.stderr)[-2000:],
        "replay_rc": replay.returncode,
        "replay": json.loads(replay.stdout) if replay.returncode == 0 else replay.stderr[-2000:],
    }


def engine_memory(report: Any, pid: int | None) -> dict[str, int | None]:
    """The card's used bytes and the engine process's own (None where NVML does not say)."""
    if not report.devices:
        return {"device_used": None, "process_used": None}
    device = report.devices[0]
    used = next(
        (p.used_bytes for p in device.processes or () if pid is not None and p.pid == pid), None
    )
    return {"device_used": device.used, "process_used": used}


# -- one case --------------------------------------------------------------------------


def _engine_bytes(ready: dict[str, Any], later: dict[str, Any]) -> int | None:
    """The engine's memory on the card: NVML's figure for its process (the larger of at
    ready and after one request), else how much the card's used memory grew; None on CPU."""
    own = [m["process_used"] for m in (ready, later) if m.get("process_used") is not None]
    if own:
        return max(own)
    used = [m["device_used"] for m in (ready, later) if m.get("device_used") is not None]
    before = ready.get("device_used_before")
    return max(used) - before if used and before is not None else None


def parts_of(plan: Any, argv: list[str], text: str, memory: dict[str, Any], cpu: bool) -> dict:
    """Predicted and actual bytes of each part (module docstring), and homelab's own rows."""
    from homelab.engine.llamacpp.actuals import actuals_to_dict, compare, is_host_buffer, row
    from homelab.engine.llamacpp.log import MIB, parse_load_log
    from homelab.plan.serialize import plan_to_dict

    planned = plan_to_dict(plan, argv)
    load = parse_load_log(text)
    rows = compare(plan, load)
    budget, engine = planned["budget"], planned["engine"]

    def actual(name: str) -> int | None:
        found = row(rows, name)
        return found.actual if found is not None else None

    device_buffers = sum(b.mib for b in load.buffers if not is_host_buffer(b.device))
    host_buffers = sum(b.mib for b in load.buffers if is_host_buffer(b.device))
    measured = _engine_bytes(memory, memory.get("after_request") or {})
    total_actual = round(host_buffers * MIB) if cpu else measured
    context = None if cpu or measured is None else measured - round(device_buffers * MIB)
    kv = row(rows, "KV")
    return {
        "rows": actuals_to_dict(rows),
        "parts": {
            "weights": {"predicted": budget["weights"], "actual": actual("weights")},
            "kv": {"predicted": kv.predicted if kv else 0, "actual": actual("KV")},
            "recurrent": {
                "predicted": planned["kv_breakdown"]["recurrent"],
                "actual": actual("recurrent"),
            },
            "compute": {"predicted": engine["compute_buffer"], "actual": actual("compute")},
            "fa_copy": {"predicted": engine["fa_scratch"], "actual": None},
            "cuda_context": {"predicted": engine["cuda_context"], "actual": context},
            "total": {
                "predicted": budget["weights"] + budget["kv"] + budget["engine"],
                "actual": total_actual,
            },
        },
        "plan": {k: planned[k] for k in ("ctx_size", "parallel", "kv_unified", "argv")}
        | {"verdict": planned["verdict"], "device": budget["device"]},
        "load_ready": load.ready,
        "failures": [f.kind.name for f in load.failures],
    }


def run_case(case: Case, workdir: Path, server: Path, cpu: bool, serve_help: str) -> dict[str, Any]:
    """Write, plan, serve, measure and stop one case; its result (``error`` set on failure)."""
    name = case.name()
    result: dict[str, Any] = {"name": name, "arch": case.model.arch, "error": None}
    result["geometry"] = case.model.geometry
    started = time.monotonic()
    state = workdir / "state" / name
    shutil.rmtree(state, ignore_errors=True)  # no calibration from an earlier run
    env = homelab_env(state) | {"HOMELAB_LLAMA_SERVER": str(server)}
    model_path, wrote_s = write_model(case.model, workdir)
    result["model_bytes"] = model_path.stat().st_size
    result["write_s"] = round(wrote_s, 1)
    plan, argv = plan_case(model_path, case, env)
    before = engine_memory(read_card(), None)["device_used"]
    serve_argv = [sys.executable, "-m", "homelab", "serve", str(model_path), "--no-gate"]
    serve_argv += [*case.serve_flags(), "--sample-seconds", "0.5", "--port", str(free_port())]
    if case.prove and "--prove" in serve_help:
        serve_argv.append("--prove")
    elif not case.prove and "--no-prove" in serve_help:
        serve_argv.append("--no-prove")
    serve_argv += ["--start-timeout", str(int(SERVE_TIMEOUT_S["cpu" if cpu else "gpu"]))]
    result["serve_argv"] = serve_argv[2:]
    serve = Serve(serve_argv, env, pid_file=workdir / PID_FILE)
    try:
        ready = serve.wait(SERVE_TIMEOUT_S["cpu" if cpu else "gpu"] + 30)
        result["ready_s"] = round(time.monotonic() - started - wrote_s, 1)
        memory: dict[str, Any] = engine_memory(read_card(), serve.pid) if ready else {}
        memory["device_used_before"] = before
        if ready:
            result["request_s"] = one_request(serve.url)
            memory["after_request"] = engine_memory(read_card(), serve.pid)
        result["nvml"] = memory
        if not ready:
            result["error"] = "homelab serve did not get ready"
    finally:
        result["serve_rc"] = serve.stop()
        (workdir / PID_FILE).unlink(missing_ok=True)
    result["serve_output"] = serve.lines[-60:]
    text = engine_log(serve.log_path)
    result["log_text"] = text
    if text:
        result |= parts_of(plan, argv, text, result["nvml"], cpu)
    elif result["error"] is None:
        result["error"] = "no engine log"
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def fill_fa_copy(results: list[dict[str, Any]], cases: dict[str, Case]) -> None:
    """fa_copy actual = compute(quantized cache) − compute(f16 cache) of sibling cases."""
    f16 = {
        cases[r["name"]].sibling_key(): r
        for r in results
        if r.get("parts") and cases[r["name"]].cache == "f16"
    }
    for r in results:
        if not r.get("parts"):
            continue
        case = cases[r["name"]]
        base = f16.get(case.sibling_key())
        if case.cache == "f16":
            r["parts"]["fa_copy"]["actual"] = 0 if r["parts"]["compute"]["actual"] else None
        elif base is not None:
            mine, theirs = r["parts"]["compute"]["actual"], base["parts"]["compute"]["actual"]
            if mine is not None and theirs is not None:
                r["parts"]["fa_copy"]["actual"] = mine - theirs


# -- results ---------------------------------------------------------------------------


def save(out: Path, report: dict[str, Any], card: str) -> None:
    """``gpu_check.json`` (logs left out) and the load logs as one tarball (8 files come back
    from a device run, so the logs travel together), both replaced atomically."""
    logs = {r["name"]: r.get("log_text", "") for r in report["cases"]}
    slim = {
        **report,
        "cases": [{k: v for k, v in r.items() if k != "log_text"} for r in report["cases"]],
    }
    tmp = out / (RESULTS + ".partial")
    tmp.write_text(json.dumps(slim, indent=2) + "\n", "utf-8")
    tmp.replace(out / RESULTS)
    tarball = out / "fixtures" / f"llama_logs-{card}.tar.gz"
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_name(tarball.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        for name, text in logs.items():
            if text:
                data = text.encode("utf-8")
                info = tarfile.TarInfo(f"{name}.log")
                info.size, info.mtime = len(data), int(time.time())
                tar.addfile(info, io.BytesIO(data))
    partial.replace(tarball)


def server_version(server: Path) -> str:
    from homelab.engine.llamacpp.locate import run_version

    return (run_version(server) or "").strip() if is_executable_file(server) else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for gpu_check.json and the fixtures")
    parser.add_argument("--server", type=Path, help="the llama-server to run")
    parser.add_argument("--cpu", action="store_true", help="rehearse on CPU (no NVML record)")
    parser.add_argument("--set", choices=sorted(CASE_SETS), help="cases (default: gpu or cpu)")
    parser.add_argument("--deadline-s", type=float, default=420.0, help="stop starting cases")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/homelab-gpu-check"))
    parser.add_argument("--build-json", type=Path, help="the build step's JSON, kept in results")
    parser.add_argument(
        "--write-models", action="store_true", help="only write the set's models (beside a build)"
    )
    parser.add_argument("--no-table", action="store_true", help="leave the table out")
    parser.add_argument("--table", type=Path, help="print the table of a gpu_check.json; exit")
    args = parser.parse_args(argv)
    if args.table:
        print(format_table(json.loads(args.table.read_text("utf-8"))["cases"]))
        return 0
    if args.write_models:
        return write_models(CASE_SETS[args.set or ("cpu" if args.cpu else "gpu")], args.workdir)
    if args.out is None or args.server is None:
        parser.error("--out and --server are needed")
    return check(args)


def _guarded(step: Any, *args: Any) -> Any:
    """``step(*args)``, or ``{"error": ...}`` when it raised (a later step still runs)."""
    try:
        return step(*args)
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def check(args: argparse.Namespace) -> int:
    """Every step, results saved after each; 0 when every case served and was compared."""
    deadline = time.monotonic() + args.deadline_s
    mode = "cpu" if args.cpu else "gpu"
    cases = CASE_SETS[args.set or mode]
    args.out.mkdir(parents=True, exist_ok=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    left_over = args.workdir / PID_FILE
    if left_over.exists():  # a cut run's serve and engine still hold the card
        killed = [pid for pid in left_over.read_text().split() if kill_if_engine(int(pid))]
        print(f"killed what a cut run left running: pids {killed}" if killed else "", end="")
        left_over.unlink()
    # the outer time box's SIGTERM stops the running case's serve (run_case's finally)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    env = homelab_env(args.workdir / "state" / "_record")
    help_text = homelab("serve", "--help", env=env, timeout=60).stdout
    report: dict[str, Any] = {
        "mode": mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "server": str(args.server),
        "server_version": server_version(args.server),
        "python": sys.version.split()[0],
        "prove": "--prove" in help_text,
        "build": json.loads(args.build_json.read_text()) if args.build_json else None,
        "record": None if args.cpu else _guarded(record_card, args.out, env),
        "cases": [],
        "skipped": [],
    }
    devices = () if args.cpu else getattr(_guarded(read_card), "devices", ())
    card = card_slug(devices[0].name) if devices else "cpu" if args.cpu else "gpu"
    save(args.out, report, card)
    by_name: dict[str, Case] = {}
    if not is_executable_file(args.server):
        report["skipped"] = [case.name() for case in cases]
        report["no_server"] = f"{args.server} is not an executable file (the build failed?)"
        cases = ()
    for case in cases:
        if deadline - time.monotonic() < CASE_RESERVE_S[mode]:
            report["skipped"].append(case.name())
            continue
        print(f"case {case.model.label} {' '.join(case.llama_args())}", flush=True)
        try:
            result = run_case(case, args.workdir, args.server, args.cpu, help_text)
        except Exception as error:  # one broken case must not lose the others
            result = {"name": case.name(), "error": f"{type(error).__name__}: {error}"}
        by_name[result["name"]] = case
        report["cases"].append(result)
        fill_fa_copy([r for r in report["cases"] if r["name"] in by_name], by_name)
        save(args.out, report, card)
        print(f"  {result.get('seconds', '?')} s, error: {result['error']}", flush=True)
    save(args.out, report, card)
    if not args.no_table:
        print(format_table(report["cases"]))
    ok = report["cases"] and all(not r["error"] and r.get("parts") for r in report["cases"])
    return 0 if ok and not report["skipped"] else 1


if __name__ == "__main__":
    sys.exit(main())
