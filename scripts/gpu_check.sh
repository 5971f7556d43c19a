#!/usr/bin/env bash
# The GPU check (docs/training.md "The GPU check"): one unattended script for a machine with one GPU (~10 min on
# one H200). It installs the `gpu` extra, writes SmolLM2-135M-Instruct as a Hugging Face folder (vLLM reads those;
# the model ships as GGUF), starts two `trl vllm-serve` servers on the GPU (planner and sub-agent, a third of its
# memory each, their own weight-sync ports), runs 2 steps of each trainer with vLLM rollouts
# (`python -m harness profile --preset smollm2`), and writes $OUT/gpu_check.json: per trainer and role the step
# time split (rollout / wait / train), rollout tokens/s and peak memory (host RSS, GPU), with the runs' logs.
# Every stage has a deadline inside BUDGET_S (default 570 s); the servers are stopped on any exit.
#
#   bash scripts/gpu_check.sh                       # on the GPU machine, from the repository root
#   GPU_CHECK_CPU=1 bash scripts/gpu_check.sh       # the same stages on CPU: tiny preset, in-process generation,
#                                                   # no install, no servers (what CI runs: the script's plumbing)
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" HF_DATASETS_OFFLINE="${HF_DATASETS_OFFLINE:-1}" TOKENIZERS_PARALLELISM=false

OUT="${OUT:-runs/gpu-check}"
BUDGET_S="${BUDGET_S:-570}"
CPU="${GPU_CHECK_CPU:-0}"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
TRL="$(dirname "$PY")/trl"
[ -x "$TRL" ] || TRL=trl
START=$(date +%s)
mkdir -p "$OUT"
PIDS=()

# seconds left, at least 1 (`timeout 0` would mean no limit); a stage that starts with none left fails at once
left() { local n=$(( BUDGET_S - ($(date +%s) - START) )); [ "$n" -gt 0 ] && echo "$n" || echo 1; }
say() { echo "[gpu-check $(( $(date +%s) - START ))s] $*"; }
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
fail() { say "FAILED: $*"; "$PY" -c "import json,sys; json.dump({'ok': False, 'error': sys.argv[1]}, open(sys.argv[2], 'w'))" \
           "$*" "$OUT/gpu_check.json" 2>/dev/null; exit 1; }

if [ "$CPU" = 1 ]; then
    PRESET=tiny
    EXTRA=()
    say "CPU mode: tiny preset, in-process generation"
else
    PRESET=smollm2
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
    say "installing the gpu extra"
    timeout "$(left)" "$PY" -m pip install -q -e ".[gpu]" > "$OUT/install.log" 2>&1 || fail "pip install -e .[gpu] (see $OUT/install.log)"
    say "writing SmolLM2-135M-Instruct as a Hugging Face folder"
    timeout "$(left)" "$PY" - "$OUT/model" > "$OUT/model.log" 2>&1 <<'EOF' || fail "model export (see $OUT/model.log)"
import sys
from harness.models import ModelSpec, load_model
model, tok = load_model(ModelSpec(name="smollm2-135m"))
model.save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
EOF
    for spec in planner:8001:51216 sub:8002:51217; do
        IFS=: read -r role port _ <<< "$spec"
        CUDA_VISIBLE_DEVICES=0 "$TRL" vllm-serve --model "$OUT/model" --port "$port" --host 127.0.0.1 \
            --gpu_memory_utilization 0.3 --max_model_len 4096 > "$OUT/vllm-$role.log" 2>&1 &
        PIDS+=($!)
    done
    for port in 8001 8002; do
        until curl -sf "http://127.0.0.1:$port/health/" >/dev/null; do
            [ $(( BUDGET_S - ($(date +%s) - START) )) -gt 0 ] || fail "vLLM server on port $port not healthy in time (see $OUT/vllm-*.log)"
            sleep 2
        done
    done
    say "vLLM servers up"
    EXTRA=(planner.vllm_url=http://127.0.0.1:8001 sub.vllm_url=http://127.0.0.1:8002
           planner.trl.vllm_group_port=51216 sub.trl.vllm_group_port=51217)
fi

say "profiling 2 steps of each trainer ($(left) s left)"
timeout "$(left)" "$PY" -m harness profile --preset "$PRESET" --trainer single_agent,frozen_sub,mgrpo --steps 2 \
    --out "$OUT/profile" "${EXTRA[@]}" > "$OUT/profile.log" 2>&1 || fail "profile (see $OUT/profile.log)"
"$PY" scripts/gpu_check_summary.py "$OUT/profile" > "$OUT/summary.json" || fail "no step records under $OUT/profile"
"$PY" - "$OUT" "$PRESET" "$CPU" "$(( $(date +%s) - START ))" <<'EOF'
import json, sys
out, preset, cpu, wall = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
doc = json.load(open(f"{out}/summary.json"))
doc.update(ok=True, preset=preset, backend="hf (CPU)" if cpu else "vllm", wall_s=wall)
json.dump(doc, open(f"{out}/gpu_check.json", "w"), indent=2)
for r in doc["roles"]:
    print(f"{r['trainer']:>12} {r['role']:<8} steps {r['steps']}  rollout {r['rollout_s']} s  wait {r['wait_s']} s  "
          f"train {r['train_s']} s  {r['rollout_tokens_per_s']} tok/s  peak RSS {r['peak_rss_mib']} MiB  "
          f"GPU {r['peak_gpu_mib']} MiB")
EOF
say "done: $OUT/gpu_check.json"
