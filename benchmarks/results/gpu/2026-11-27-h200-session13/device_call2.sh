#!/usr/bin/env bash
# Device call 2 (#23, thirteenth session): the A5 handout recipe with CUDA graphs on re-packed rows, losses read at
# log steps only (the host queues steps ahead of the GPU): whole-recipe wall time and dev accuracy.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS; R=/tmp/r2; mkdir -p $R
{ nvidia-smi -L; nproc; } > $R/gpu.txt 2>&1
timeout ${A5_CAP:-240} python3 benchmarks/gpu_a5_recipe.py --out $R/a5 --variants vanilla-bf16-graphs-packed-queued > $R/a5.log 2>&1
echo "a5 rc $? at $((SECONDS-S)) s"; tail -5 $R/a5.log | cut -c1-1500
(cd $R && tar czf $OUT/results2.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude=checkpoints .)
echo "done at $((SECONDS-S)) s"
