#!/usr/bin/env bash
# Device call 2 (#23, seventh session): the bf16 A5 step profiled (2 loader workers); the synthesizer recipe alone.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS
R=/tmp/r; mkdir -p $R
nvidia-smi -L > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 42 python3 benchmarks/gpu_a5_step_profile.py --label bf16-graphs-2-workers --warmup 25 --steps 100 \
  --profile-steps 10 trainer.precision=bf16 trainer.num_workers=2 trainer.compile=true \
  trainer.compile_mode=reduce-overhead data.pack=false > $R/profile.jsonl 2> $R/profile.err
echo "profile rc $? at $((SECONDS-S)) s"; cut -c1-1500 $R/profile.jsonl; tail -2 $R/profile.err
timeout 238 python3 benchmarks/gpu_a5_recipe.py --out $R/alone --variants synthesizer-bf16-graphs > $R/alone.log 2>&1
echo "alone rc $? at $((SECONDS-S)) s"; cut -c1-700 $R/alone.log | tail -3
for f in $R/*/*_pretrain/metrics.jsonl; do echo "$f: $(tail -n 1 $f | cut -c1-260)"; done
(cd $R && tar czf $OUT/results.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude=checkpoints .)
echo "done at $((SECONDS-S)) s"
