#!/usr/bin/env bash
# Device call 3 (#23, thirteenth session, same warm H200): T5 ours vs HF, eager and compiled, without FlexAttention
# (call 1's run with it timed out compiling), each variant's kernels profiled over 3 steps.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD; for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done; timeout 210 python3 benchmarks/bench_t5_throughput.py --device cuda --compile --precision bf16 --size t5_small --batch 32 --rounds 5 --steps-per-round 4 --warmup 3 --profile-steps 3 --json $OUT/t5_throughput_t5_small_b32.json > $OUT/t5.log 2>&1
