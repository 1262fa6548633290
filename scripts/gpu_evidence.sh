#!/usr/bin/env bash
# Real GPU evidence: Part 1 and Part 2 presets on a CUDA machine, collected in one folder.
#
#   bash scripts/gpu_evidence.sh OUT_DIR          (or: make gpu-evidence OUT=OUT_DIR)
#
# Uses the machine's own Python and torch. Hydra, OmegaConf and antlr4 come from
# scripts/wheels/ when they are missing (the GPU machine may have no network). Designed to
# finish within ~8 minutes on one H200: Part 1 at sizes 64, 512, 4096 (bf16 and fp32, eager and
# compile, cold and warm: 24 jobs) and Part 2 (linear and mlp at 1024 and 8192 tokens, eager
# and compile, warm: 8 jobs). Traces are gzipped afterwards; the analysis reads them as they are.
# PART1_SIZES / PART2_SIZES / PYTHON override the defaults (e.g. a first try on a CPU).
# PART3_SIZES (empty by default: not in the 8 minutes) adds attention at those sequence lengths
# with every SDPA backend, eager, warm: 4 jobs per size, e.g. PART3_SIZES=1024,8192.
# USER_SIZES (default 1024; empty: skipped) sweeps the user workload examples/transformer.py
# (a transformer block by import path) eager and compiled, inference and training: 4 jobs per size.
# REPEATS (default 3, the sweep's default) is run.repeats for every sweep: each job count above
# times REPEATS processes; not yet timed on an H200 with repeats (check the 8 minutes).
set -euo pipefail
out=${1:?usage: scripts/gpu_evidence.sh OUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
PYTHON=${PYTHON:-python3}
PART1_SIZES=${PART1_SIZES:-64,512,4096}
PART2_SIZES=${PART2_SIZES:-1024,8192}
PART3_SIZES=${PART3_SIZES:-}
USER_SIZES=${USER_SIZES-1024}
REPEATS=${REPEATS:-3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"

if ! "$PYTHON" -c "import hydra, omegaconf" 2>/dev/null; then
  echo "installing hydra-core and omegaconf from scripts/wheels/"
  "$PYTHON" -m pip install --quiet --no-index --find-links scripts/wheels hydra-core omegaconf
fi
"$PYTHON" - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"device: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none (CPU run)'}")
PY

start=$(date +%s)
status=0
"$PYTHON" experiments/run.py -m +experiment=part1 "size=$PART1_SIZES" "run.repeats=$REPEATS" "hydra.sweep.dir=$out/part1" || status=$?
"$PYTHON" experiments/run.py -m +experiment=part2 "size=$PART2_SIZES" "run.repeats=$REPEATS" "hydra.sweep.dir=$out/part2" || status=$?
parts="part1 part2"
if [ -n "$PART3_SIZES" ]; then
  parts="$parts part3"
  "$PYTHON" experiments/run.py -m +experiment=part3 "size=$PART3_SIZES" compile=false warmup=true \
    workload.backend=math,flash,efficient,cudnn "run.repeats=$REPEATS" "hydra.sweep.dir=$out/part3" || status=$?
fi

if [ -n "$USER_SIZES" ]; then
  parts="$parts user"
  "$PYTHON" experiments/run.py -m workload=custom workload._target_=examples.transformer:make_block \
    workload.dim=1024 workload.heads=16 "size=$USER_SIZES" compile=false,true train=false,true warmup=true \
    "run.repeats=$REPEATS" "hydra.sweep.dir=$out/user" || status=$?
fi

# Keep the folders small: gzip every trace, point metrics.json at the .gz, redo the analysis.
find "$out" -mindepth 3 -maxdepth 3 -name '*.json' ! -name metrics.json ! -name job_config.json \
  -print0 | xargs -0 -r gzip -9
"$PYTHON" - "$out" <<'PY'
import json, sys
from pathlib import Path
for metrics in Path(sys.argv[1]).glob("*/*/metrics.json"):
    record = json.loads(metrics.read_text())
    names = [n for n in str(record.get("trace_file") or "").split(";") if n]
    if names and all((metrics.parent / f"{n}.gz").exists() for n in names):
        record["trace_file"] = ";".join(f"{n}.gz" for n in names)
        metrics.write_text(json.dumps(record, indent=2) + "\n")
PY
for part in $parts; do [ ! -d "$out/$part" ] || "$PYTHON" -m analysis "$out/$part" || status=$?; done
echo "gpu evidence in $out after $(( $(date +%s) - start )) s (exit $status)"
exit $status
