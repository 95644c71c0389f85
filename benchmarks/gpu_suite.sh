#!/usr/bin/env bash
# Issue #23's GPU suite and GPU benchmarks, unattended, on one CUDA GPU (the full A5 recipe trains 14 variants):
#
#   benchmarks/gpu_suite.sh [--quick] [results folder]    # default: benchmarks/results/gpu
#
# --quick is meant for a 15-minute GPU lease, what earlier leases left unmeasured first: T5 t5_small batch 32 ours
# against HF, eager and compiled, with each variant's kernels and host time profiled (57 s on an H200: compiled, both
# models ran the same 23 ms of kernels in host-bound steps of 41.5 and 47.6 ms), the same compiled with CUDA graphs
# (--compile-mode reduce-overhead, both models; never run on a GPU), then where a step of the A5 recipe's
# vanilla-bf16-graphs-packed-queued variant goes (benchmarks/gpu_a5_step_profile.py; the whole recipe took 160.0 s,
# 7.35 ms a step), the tests and the layout check (145 s and 5 s), and last T5 with FlexAttention added (its
# score_mod reads a dense bias since the tenth session; not finished within 180 s on an H200): about 9 minutes
# before the FlexAttention step (the steps are logged one by one, and any left out run alone).
#
# Needs the CUDA build of torch==2.13.0 and `pip install -e ".[test,bench]"`; the data in ../shared/data (or
# $C4PREP_SHARED_DATA): cs224n_a5/ and ptb/. Steps, each logged to <results>/<step>.log:
#   tests          pytest -m gpu -n 8 (pytest-xdist: 8 processes share the GPU): tests/test_gpu.py (attention paths,
#                  dropout hypotheses, T5 logits, FlexAttention) and tests/test_gpu_training.py (bf16 vs fp32 curves,
#                  compile, resume, torchrun) -> tests.xml
#   sdpa_layouts   SDPA's memory-efficient kernel with dropout at the A5 model's layouts against fp64
#                  -> sdpa_dropout_layouts.jsonl (benchmarks/gpu_sdpa_dropout_layouts.py)
#   a5_recipe      the CS224N A5 handout recipe, vanilla and synthesizer, bf16 and fp32, each eager and compiled
#                  with CUDA graphs, and bf16 compiled (benchmarks/gpu_a5_recipe.py): pretrain, fine-tune, dev answers; accuracy and wall times -> a5/a5_recipe.json, a5/a5_pretrain_curves.png
#                  (.csv without matplotlib)
#   t5_throughput  tokens/s of our T5 vs HF T5ForConditionalGeneration, eager and compiled, bf16, then again with
#                  our FlexAttention model added: t5_small batch 32 and 128, t5_base batch 32
#                  -> t5_throughput_<size>_b<batch>.json, t5_throughput_flex_<size>_b<batch>.json
# A failed step is recorded and the next one runs; the exit status is 1 if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=false
if [ "${1:-}" = --quick ]; then QUICK=true; shift; fi
OUT=${1:-benchmarks/results/gpu}
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export C4PREP_SHARED_DATA=${C4PREP_SHARED_DATA:-$(cd .. && pwd)/shared/data}
mkdir -p "$OUT"
status=0

step() {  # step <name> <command...>: run it, log it, time it, remember a failure
    local name=$1 started=$SECONDS
    shift
    echo "== $name: $*"
    if "$@" > "$OUT/$name.log" 2>&1; then
        echo "   ok in $((SECONDS - started)) s"
    else
        echo "   FAILED after $((SECONDS - started)) s: see $OUT/$name.log"
        status=1
    fi
}

"$PYTHON" - > "$OUT/environment.json" <<'EOF'
import json, platform, torch
print(json.dumps({"gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                  "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}))
EOF
if ! "$PYTHON" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    echo "no CUDA device visible to $PYTHON: nothing measured" >&2
    exit 1
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

t5_step() {  # t5_step <name> <size> <batch> [--flex]: ours against HF, eager and compiled (with --flex: and ours
    # with FlexAttention), as step <name>_<size>_b<batch>
    local name="$1_$2_b$3" size=$2 batch=$3
    shift 3
    step "$name" "$PYTHON" benchmarks/bench_t5_throughput.py --device cuda --compile "$@" \
        --precision bf16 --size "$size" --batch "$batch" --rounds 5 --steps-per-round 4 --warmup 3 \
        --profile-steps 3 --json "$OUT/$name.json"
}

t5_steps() {  # t5_steps <size> <batch>: ours against HF; then with FlexAttention added, apart, so that a slow
    # FlexAttention compile leaves the first comparison measured
    t5_step t5_throughput "$1" "$2"
    t5_step t5_throughput_flex "$1" "$2" --flex
}

if $QUICK; then  # what earlier leases left unmeasured first: where the host time of a T5 and an A5 step goes
    t5_step t5_throughput t5_small 32
    t5_step t5_throughput_graphs t5_small 32 --compile-mode reduce-overhead
    step a5_step_profile sh -c "\"$PYTHON\" benchmarks/gpu_a5_step_profile.py --label queued trainer.compile=true \
        trainer.compile_mode=reduce-overhead trainer.loss_check=log trainer.num_workers=4 \
        > \"$OUT/a5_step_profile.jsonl\""
fi
step tests "$PYTHON" -m pytest -m gpu -n 8 -q -ra -p no:cacheprovider -o junit_logging=all \
    tests/test_gpu.py tests/test_gpu_training.py --junitxml="$OUT/tests.xml"
step sdpa_layouts sh -c "\"$PYTHON\" benchmarks/gpu_sdpa_dropout_layouts.py > \"$OUT/sdpa_dropout_layouts.jsonl\""
if $QUICK; then
    t5_step t5_throughput_flex t5_small 32 --flex
else
    step a5_recipe "$PYTHON" benchmarks/gpu_a5_recipe.py --out "$OUT/a5"
    for config in "t5_small 32" "t5_small 128" "t5_base 32"; do
        t5_steps $config
    done
fi
echo "results in $OUT"
exit $status
