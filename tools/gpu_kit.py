"""Prepare the GPU check kit (``make gpu-kit``) and file what a device run returned.

    python tools/gpu_kit.py prepare      # .gpu_kit/: trimmed llama.cpp + site packages
    python tools/gpu_kit.py unpack DIR   # DIR: the run's files_at; fixtures into tests/

``prepare`` writes, into the ignored folder ``.gpu_kit/``:

- ``llama.cpp/``: the pinned source, trimmed (tools/trim_llama_source.py);
- ``site/``: the pure-Python packages homelab and the test factory need that the lent
  machine lacks (platformdirs; gguf, whose own needs numpy, PyYAML, requests and tqdm are
  there), unpacked from wheels fetched with ``pip download`` at the versions installed here;

then measures what a ``run`` call sends (the working tree git does not ignore, plus the
carried ``.gpu_kit``) against the 64 MiB limit and prints the call.

``unpack`` copies a returned ``fixtures/gpu/*.json`` into ``tests/fixtures/gpu/``, extracts
``fixtures/llama_logs-<card>.tar.gz`` into ``tests/fixtures/llama_logs/<card>/`` and keeps
``gpu_check.json`` as ``bench/results/gpu_check-<card>.json``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / ".gpu_kit"
SITE = KIT / "site"
CARRY = (".gpu_kit",)
CARRY_LIMIT = 64 << 20
SITE_PACKAGES = ("platformdirs", "gguf")
"""Pure-Python packages the lent machine lacks (its package list: KINDS.md)."""
RUN_TIMEOUT_S = 600
RUN_COMMAND = "bash bench/gpu_check.sh"

for _entry in (ROOT, ROOT / "tools"):
    if str(_entry) not in sys.path:
        sys.path.insert(0, str(_entry))


def folder_bytes(folder: Path) -> int:
    """Bytes of every regular file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def tree_bytes() -> int:
    """Bytes of the files a ``run`` call sends besides ``carry``: tracked and untracked files
    git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    paths = (ROOT / name.decode() for name in listed if name)
    return sum(p.stat().st_size for p in paths if p.is_file())


def fetch_site(site: Path = SITE) -> list[str]:
    """Unpack the wheels of :data:`SITE_PACKAGES` (the versions installed here) into ``site``."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in SITE_PACKAGES]
    with tempfile.TemporaryDirectory(prefix="gpu-kit-wheels-") as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
            + ["--disable-pip-version-check", "-q", "-d", tmp, *pins],
            check=True,
        )
        shutil.rmtree(site, ignore_errors=True)
        site.mkdir(parents=True)
        for wheel in sorted(Path(tmp).glob("*.whl")):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(site)
    return pins


def prepare(force: bool = False) -> dict[str, object]:
    """Write the kit (the trimmed source only when missing or ``force``); its sizes."""
    import trim_llama_source as trim

    source = KIT / "llama.cpp"
    manifest = source / trim.MANIFEST
    if (
        force
        or not manifest.exists()
        or json.loads(manifest.read_text())["sha256"] != (trim.SDIST_SHA256)
    ):
        trim.main(["--out", str(source)])
    pins = fetch_site()
    sizes = {
        "llama_cpp": folder_bytes(source),
        "site": folder_bytes(SITE),
        "kit": folder_bytes(KIT),
        "tree": tree_bytes(),
    }
    total = sizes["kit"] + sizes["tree"]
    return {"pins": pins, "sizes": sizes, "total": total, "fits": total < CARRY_LIMIT}


def run_call() -> dict[str, object]:
    """The device tool's ``run`` arguments for the check."""
    return {"command": RUN_COMMAND, "carry": list(CARRY), "timeout_s": RUN_TIMEOUT_S}


def unpack(files_at: Path, root: Path = ROOT) -> list[Path]:
    """File a returned run's fixtures into the repository at ``root``; the paths written."""
    written: list[Path] = []
    for snapshot in sorted((files_at / "fixtures" / "gpu").glob("*.json")):
        target = root / "tests" / "fixtures" / "gpu" / snapshot.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(snapshot, target)
        written.append(target)
    for tarball in sorted((files_at / "fixtures").glob("llama_logs-*.tar.gz")):
        card = tarball.name[len("llama_logs-") : -len(".tar.gz")]
        folder = root / "tests" / "fixtures" / "llama_logs" / card
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tar:
            for member in tar.getmembers():
                if member.isfile() and "/" not in member.name and member.name.endswith(".log"):
                    tar.extract(member, folder, filter="data")
                    written.append(folder / member.name)
        results = files_at / "gpu_check.json"
        if results.exists():
            target = root / "bench" / "results" / f"gpu_check-{card}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(results, target)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ready = commands.add_parser("prepare", help="write .gpu_kit/ and print the run call")
    ready.add_argument("--force", action="store_true", help="trim the source again")
    back = commands.add_parser("unpack", help="file a returned run's fixtures")
    back.add_argument("files_at", type=Path)
    args = parser.parse_args(argv)
    if args.command == "unpack":
        for path in unpack(args.files_at):
            print(path.relative_to(ROOT))
        return 0
    kit = prepare(force=args.force)
    mib = {name: f"{value / 2**20:.1f} MiB" for name, value in kit["sizes"].items()}
    print(f"site packages: {', '.join(kit['pins'])}")
    print(f"sizes: {json.dumps(mib)}")
    print(f"a run sends {kit['total'] / 2**20:.1f} MiB of {CARRY_LIMIT >> 20} MiB")
    print(f"carry: {json.dumps(list(CARRY))}")
    print(f"run: {json.dumps(run_call())}")
    return 0 if kit["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
