#!/usr/bin/env bash
# Issue #23's GPU suite and GPU benchmarks, unattended, on one CUDA GPU (the full A5 recipe trains 19 variants):
#
#   benchmarks/gpu_suite.sh [--quick] [results folder]    # default: benchmarks/results/gpu
#
# --quick is meant for a 15-minute GPU lease, what earlier leases left unmeasured first:
#   - T5 t5_small batch 32, ours against HF, eager and compiled with CUDA graphs (--compile-mode reduce-overhead),
#     kernels profiled: since the eighteenth session T5's self-attention can take SDPA's memory-efficient kernel (its
#     position bias had stride num_heads along the keys, which sent it, and HF's, to SDPA's math path: 96 bmm a step
#     in the fourteenth session's profiles, where eager was 1.43-1.47x HF and both compiled models ran at their 23 ms
#     of kernels with graphs);
#   - the A5 handout recipe's candidates for the 90 s target ($A5_CANDIDATES: each whole step captured as one CUDA
#     graph, trainer.capture_steps, fifteenth session; eager kernels, compiled, the repeated block compiled once,
#     trainer.compile_scope=blocks, and compiled on rows re-packed into 128 positions instead of 127, where the
#     attention's products ran on cuBLAS's align1 kernels): where a step of each goes
#     (benchmarks/gpu_a5_step_profile.py), then the whole recipe of the one whose warm-up and step time project the
#     shortest pretraining (the recipe took 160 s on an H200 with compiled graphs, 7.35 ms a step, host-bound);
#   - our FlexAttention compiled with graphs against our dense attention (compiled without graphs: 41.4 against 45.3
#     ms, its compile 56 s); t5_base as t5_small;
#   - the tests and the layout check (130-145 s and 5 s), then the synthesizer's fp32 recipe whole: more than one
#     600 s call.
#
# Needs the CUDA build of torch==2.13.0 and `pip install -e ".[test,bench]"`; the data in ../shared/data (or
# $C4PREP_SHARED_DATA): cs224n_a5/, ptb/ and yelp_short_shen/. Steps, each logged to <results>/<step>.log:
#   tests          pytest -m gpu -n 8 (pytest-xdist: 8 processes share the GPU): tests/test_gpu.py (attention paths,
#                  dropout hypotheses, T5 logits, FlexAttention) and tests/test_gpu_training.py (bf16 vs fp32 curves
#                  of A5, T5, AdaVAE and GPT-1 classification, compile, CUDA graphs, captured steps, resume,
#                  torchrun) -> tests.xml
#   sdpa_layouts   SDPA's memory-efficient kernel with dropout at the A5 model's layouts against fp64
#                  -> sdpa_dropout_layouts.jsonl (benchmarks/gpu_sdpa_dropout_layouts.py)
#   a5_recipe      the CS224N A5 handout recipe, vanilla and synthesizer, bf16 and fp32, each eager and compiled
#                  with CUDA graphs, bf16 compiled, and bf16 with whole steps captured (benchmarks/gpu_a5_recipe.py):
#                  pretrain, fine-tune, dev answers, each variant with torch.compile's caches empty at the start
#                  (compiling counts, as on a user's first run); accuracy and wall times -> a5/a5_recipe.json,
#                  a5/a5_pretrain_curves.png (.csv without matplotlib)
#   t5_throughput  tokens/s of our T5 vs HF T5ForConditionalGeneration, eager and compiled, bf16, then compiled with
#                  CUDA graphs and our FlexAttention model added: t5_small batch 32 and 128, t5_base batch 32
#                  -> t5_throughput_<size>_b<batch>.json, t5_throughput_flex_graphs_<size>_b<batch>.json
# A failed step is recorded and the next one runs; the exit status is 1 if any step failed. STEP_TIMEOUT=<seconds>
# ends any step that runs longer (a lease's command has 600 s; a lease brings back 8 files: tar the results folder);
# STEPS="<name> ..." runs only the steps named (e.g. what a first call did not reach).
set -uo pipefail
cd "$(dirname "$0")/.."
QUICK=false
if [ "${1:-}" = --quick ]; then QUICK=true; shift; fi
OUT=${1:-benchmarks/results/gpu}
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export C4PREP_SHARED_DATA=${C4PREP_SHARED_DATA:-$(cd .. && pwd)/shared/data}
mkdir -p "$OUT"
status=0

step() {  # step <name> <command...>: run it (for at most $STEP_TIMEOUT seconds if set), log it, time it, remember a
    # failure
    local name=$1 started=$SECONDS limit=()
    shift
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        echo "== $name: skipped (not in STEPS)"
        return
    fi
    [ -n "${STEP_TIMEOUT:-}" ] && limit=(timeout "$STEP_TIMEOUT")
    echo "== $name: $*"
    if "${limit[@]}" "$@" > "$OUT/$name.log" 2>&1; then
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

t5_step() {  # t5_step <name> <size> <batch> [options of bench_t5_throughput.py]: ours against HF, eager and
    # compiled, each variant's step profiled, as step <name>_<size>_b<batch>
    local name="$1_$2_b$3" size=$2 batch=$3
    shift 3
    step "$name" "$PYTHON" benchmarks/bench_t5_throughput.py --device cuda --compile "$@" \
        --precision bf16 --size "$size" --batch "$batch" --rounds 5 --steps-per-round 4 --warmup 3 \
        --profile-steps 3 --json "$OUT/$name.json"
}

t5_flex_graphs() {  # t5_flex_graphs <size> <batch> [options]: ours, HF and ours with FlexAttention, compiled with
    # CUDA graphs (without them the compiled steps are host-bound), apart, so that a slow FlexAttention compile leaves
    # the other comparisons measured
    t5_step t5_throughput_flex_graphs "$@" --flex --compile-mode reduce-overhead
}

# The A5 recipe's candidates for the 90 s target, each whole step captured as one CUDA graph: eager kernels, compiled,
# the repeated block compiled once, and compiled on rows re-packed into 128 positions instead of 127
A5_CANDIDATES="vanilla-bf16-captured-packed vanilla-bf16-compiled-captured-packed vanilla-bf16-blocks-captured-packed
               vanilla-bf16-compiled-captured-packed128"

if $QUICK; then  # what earlier leases left unmeasured first
    t5_step t5_throughput_graphs t5_small 32 --compile-mode reduce-overhead
    # where a step of each candidate goes (start-up, compiling, 250 steps), then the whole recipe of the one whose
    # compiling and steps project the shortest pretraining (or of $A5_RECIPE_VARIANT, e.g. in a later lease's call,
    # whose results folder starts empty)
    for variant in $A5_CANDIDATES; do
        step "a5_step_profile_$variant" sh -c "\"$PYTHON\" benchmarks/gpu_a5_step_profile.py --variant $variant \
            > \"$OUT/a5_step_profile_$variant.jsonl\""
    done
    fastest=${A5_RECIPE_VARIANT:-$("$PYTHON" benchmarks/gpu_a5_step_profile.py \
                                   --fastest-of "$OUT"/a5_step_profile_*.jsonl)}
    if [ -n "$fastest" ]; then
        step "a5_recipe_fastest" "$PYTHON" benchmarks/gpu_a5_recipe.py --out "$OUT/a5_$fastest" --variants "$fastest"
    fi
    t5_flex_graphs t5_small 32 --only "ours compiled" "ours flex compiled"
    t5_step t5_throughput_graphs t5_base 32 --compile-mode reduce-overhead
fi
step tests "$PYTHON" -m pytest -m gpu -n 8 -q -ra -p no:cacheprovider -o junit_logging=all \
    tests/test_gpu.py tests/test_gpu_training.py --junitxml="$OUT/tests.xml"
step sdpa_layouts sh -c "\"$PYTHON\" benchmarks/gpu_sdpa_dropout_layouts.py > \"$OUT/sdpa_dropout_layouts.jsonl\""
if $QUICK; then  # after the tier, which checks what the figures above rest on (captured steps, T5's kernels)
    # the issue's synthesizer in fp32, whole (the seventh session's run was cut at step 6,256)
    step a5_synthesizer-fp32-tf32-graphs-packed "$PYTHON" benchmarks/gpu_a5_recipe.py \
        --out "$OUT/a5_synthesizer-fp32-tf32-graphs-packed" --variants synthesizer-fp32-tf32-graphs-packed
else
    step a5_recipe "$PYTHON" benchmarks/gpu_a5_recipe.py --out "$OUT/a5"
    for config in "t5_small 32" "t5_small 128" "t5_base 32"; do
        t5_step t5_throughput $config
        t5_flex_graphs $config --only "ours compiled" "HF compiled" "ours flex compiled"
    done
fi
echo "results in $OUT"
exit $status
