#!/usr/bin/env bash
# The GPU check in one call (bench/GPU_CHECK.md): build llama-server with CUDA for this card's
# architecture only (from the trimmed source in .gpu_kit/, `make gpu-kit`), record the card,
# serve generated geometries and write predicted vs actual memory under $OUT; a table last.
#   bash bench/gpu_check.sh                       # on the lent GPU machine ($OUT is set there)
#   GPU_CHECK_CPU=1 bash bench/gpu_check.sh       # or --cpu: rehearsal with the cached CPU engine
# Time boxes (seconds): GPU_CHECK_BUDGET_S (whole script, 540), GPU_CHECK_BUILD_S (build, 400).
# A build cut by its box resumes when the script runs again on the same (warm) machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
CPU=${GPU_CHECK_CPU:-0}
[[ "${1:-}" == --cpu ]] && CPU=1
OUT=${OUT:-$ROOT/.gpu_out}
WORK=${GPU_CHECK_WORKDIR:-/tmp/homelab-gpu-check}
BUDGET=${GPU_CHECK_BUDGET_S:-540}
BUILD_BOX=${GPU_CHECK_BUILD_S:-400}
mkdir -p "$OUT" "$WORK"
export PYTHONPATH="$ROOT:$ROOT/.gpu_kit/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec > >(tee "$OUT/gpu_check.log") 2>&1
TEE_PID=$!
left() { echo $((BUDGET - SECONDS)); }
box() { local n=$(($(left) - $1)); echo $((n > 5 ? n : 5)); }  # what is left minus $1, >= 5

echo "== gpu_check $(date -u +%FT%TZ): cpu=$CPU, $(nproc) cores, python $(python3 -V 2>&1)"
python3 -c "
import importlib.util as u
need = ('homelab', 'gguf', 'numpy', 'platformdirs', 'psutil', 'httpx', 'pynvml', 'aiohttp')
gone = [n for n in need if u.find_spec(n) is None]
print('python packages:', 'all there' if not gone else 'MISSING ' + ' '.join(gone))"

MODELS=(python3 bench/gpu_check.py --write-models --workdir "$WORK")
[[ $CPU == 1 ]] && MODELS+=(--cpu)
"${MODELS[@]}" >"$WORK/models.log" 2>&1 &  # the models are written while llama-server builds
MODELS_PID=$!

if [[ $CPU == 1 ]]; then
  SERVER=$(python3 -m homelab engine path) || exit 2
  echo '{"variant": "cpu", "skipped": "CPU rehearsal: the cached engine"}' >"$WORK/build.json"
else
  nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
  CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
  BUILD=$ROOT/.gpu_build/cuda-sm$CC
  SERVER=$BUILD/bin/llama-server
  # homelab's own CUDA configuration: the system toolkit when whole, else the wheels (not
  # reachable offline: then this fails and says so), the architectures from NVML
  ARGS=$(HOMELAB_CUDA_ARCHITECTURES=${CC}-real python3 -c "
from homelab.engine.llamacpp.build import cmake_args
from homelab.engine.llamacpp.cuda_build import cuda_configuration
from homelab.gpu.probe import probe
config = cuda_configuration(probe(window_s=0.0), lambda fraction, line: None)
print(' '.join(cmake_args('cuda') + config.args))") || exit 2
  command -v ninja >/dev/null && ARGS="-G Ninja $ARGS"  # the image has it: less make overhead
  echo "== build: sm_$CC, -j$(nproc), at most ${BUILD_BOX} s: cmake $ARGS"
  T0=$SECONDS
  # shellcheck disable=SC2086  # ARGS is a list of -D options
  { cmake -S .gpu_kit/llama.cpp -B "$BUILD" $ARGS &&
    timeout "$BUILD_BOX" cmake --build "$BUILD" --target llama-server -j "$(nproc)"; } \
    >"$WORK/build.log" 2>&1
  RC=$?
  SECS=$((SECONDS - T0))
  echo "{\"variant\": \"cuda\", \"arch\": \"$CC\", \"rc\": $RC, \"seconds\": $SECS," \
    "\"jobs\": $(nproc), \"cmake_args\": \"$ARGS\"}" >"$WORK/build.json"
  if [[ $RC == 0 ]]; then tail -n 30 "$WORK/build.log" >"$OUT/build_tail.log"
  else tail -n 200 "$WORK/build.log" >"$OUT/build_tail.log"; fi
  echo "== build rc=$RC in ${SECS} s ($("$SERVER" --version 2>&1 | head -n1))"
  if [[ $RC != 0 ]]; then
    echo "== the build did not finish: run this script again at once (the warm machine keeps"
    echo "   .gpu_build/, and the build resumes); CUDA libraries beside nvcc:"
    ls "$(dirname "$(command -v nvcc)")/../lib64" 2>&1 | grep -E 'cublas|cudart' | head -n 8
    grep -E 'error|Error' "$WORK/build.log" | head -n 20
  fi
  CUDA_LIB=$(dirname "$(command -v nvcc)")/../lib64
  export LD_LIBRARY_PATH="$CUDA_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

timeout "$(box 200)" tail --pid="$MODELS_PID" -f /dev/null
kill "$MODELS_PID" 2>/dev/null  # past its box: the driver writes what is missing
wait "$MODELS_PID"; echo "models rc=$?: $(tr '\n' ';' <"$WORK/models.log")"
echo "== driver ($(left) s left)"
DRIVER=(python3 bench/gpu_check.py --out "$OUT" --server "$SERVER" --workdir "$WORK"
  --build-json "$WORK/build.json" --no-table --deadline-s "$(box 90)")
[[ $CPU == 1 ]] && DRIVER+=(--cpu)
timeout -k 40 "$(box 45)" "${DRIVER[@]}"  # without a built server: the card's record alone
echo "driver rc=$?"

echo "== tests ($(left) s left)"
PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout "$(($(left) > 70 ? 60 : 5))" python3 -m pytest -q -p no:cacheprovider tests/gpu \
  >"$OUT/pytest.log" 2>&1
echo "pytest rc=$? ($(tail -n1 "$OUT/pytest.log"))"

echo "== predicted vs actual (MiB, predicted/actual; goal: total within 3 %)"
[[ -f $OUT/gpu_check.json ]] && python3 bench/gpu_check.py --table "$OUT/gpu_check.json"
echo "== done in ${SECONDS} s"
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null  # every line reaches the log and the caller
