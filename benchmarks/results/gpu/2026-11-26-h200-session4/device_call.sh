#!/usr/bin/env bash
# Device call (#23, fourth session): the A5 recipe whole (vanilla, bf16, compiled with CUDA graphs); T5 with FlexAttention.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS
nvidia-smi -L > $OUT/gpu.txt 2>&1; python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> $OUT/gpu.txt 2>&1
timeout 330 python3 benchmarks/gpu_a5_recipe.py --out /tmp/a5 --variants vanilla-bf16-graphs > $OUT/a5.log 2>&1
echo "a5 rc $? at $((SECONDS-S)) s"; tail -c 1500 $OUT/a5.log; cp /tmp/a5/a5_recipe.json /tmp/a5/*.png /tmp/a5/*.csv $OUT/ 2>/dev/null
tail -n 1 /tmp/a5/*_pretrain/metrics.jsonl 2>/dev/null | cut -c1-300
timeout 150 python3 benchmarks/bench_t5_throughput.py --device cuda --compile --flex --precision bf16 --size t5_small \
  --batch 32 --rounds 5 --steps-per-round 4 --warmup 3 --json $OUT/t5_small_b32_flex.json > $OUT/t5.log 2>&1
echo "t5 rc $? at $((SECONDS-S)) s"; grep -v "Loading weights" $OUT/t5.log | tail -16
