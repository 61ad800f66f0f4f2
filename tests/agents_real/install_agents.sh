#!/usr/bin/env bash
# Install the coding agents tests/agents_real runs, at pinned versions, once, into a cache
# outside the repo keyed by the pins (like tests/vllm_real/install_vllm_cpu.sh):
#   tests/agents_real/install_agents.sh        prints the cache's bin/ folder
# bin/ holds claude, codex, opencode, cn (npm packages, one node_modules) and aider (its own
# venv: aider-chat pins many dependencies). Does nothing when that cache is complete.
# Fails (exit 1, the log's tail on stderr) when any of them cannot be installed.
set -euo pipefail
npm_pins=(
  "@anthropic-ai/claude-code@2.1.328"
  "@openai/codex@0.169.0"
  "opencode-ai@1.18.33"
  "@continuedev/cli@1.5.47"
)
pip_pins=("aider-chat==0.86.2")
programs=(claude codex opencode cn aider)
key=$(printf '%s\n' "${npm_pins[@]}" "${pip_pins[@]}" | sha256sum | cut -c1-12)
root="${HOMELAB_AGENTS_CACHE:-$HOME/.cache/homelab}/agents-$key"
if [ -f "$root/.complete" ]; then
  echo "$root/bin"; exit 0
fi
command -v npm >/dev/null || { echo "install_agents.sh: npm is not on PATH (install Node.js)" >&2; exit 1; }
mkdir -p "$root"
rm -rf "$root/npm" "$root/venv" "$root/bin"
steps() {
  npm install --prefix "$root/npm" --no-fund --no-audit --no-save --loglevel=error "${npm_pins[@]}"
  python3 -m venv "$root/venv"
  "$root/venv/bin/pip" install -q "${pip_pins[@]}"
  mkdir -p "$root/bin"
  for program in claude codex opencode cn; do
    ln -s "$root/npm/node_modules/.bin/$program" "$root/bin/$program"
  done
  ln -s "$root/venv/bin/aider" "$root/bin/aider"
  for program in "${programs[@]}"; do
    [ -x "$root/bin/$program" ] || { echo "no $program after the install" >&2; exit 1; }
  done
}
start=$(date +%s)
set +e  # a subshell of its own, so that `set -e` stops at the first failing step
( set -e; steps ) >"$root/install.log" 2>&1
status=$?
set -e
if [ "$status" -ne 0 ]; then
  echo "install_agents.sh: the install failed (exit $status); the end of $root/install.log:" >&2
  tail -20 "$root/install.log" >&2
  exit 1
fi
echo "installed ${npm_pins[*]} ${pip_pins[*]} in $(( $(date +%s) - start )) s: $(du -sh "$root" | cut -f1)" >&2
touch "$root/.complete"
echo "$root/bin"
