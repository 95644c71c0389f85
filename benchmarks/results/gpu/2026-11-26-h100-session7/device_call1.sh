#!/usr/bin/env bash
# Device call 1 (#23, seventh session): A5 step profile, the timed A5 recipe alone, three variants at once for accuracy.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS
R=/tmp/r; mkdir -p $R
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; nproc; } > $R/gpu.txt 2>&1
cat $R/gpu.txt
timeout 75 python3 benchmarks/gpu_a5_step_profile.py --label new-graphs --warmup 25 --steps 100 --profile-steps 10 \
  trainer.compile=true trainer.compile_mode=reduce-overhead data.pack=false > $R/profile.jsonl 2> $R/profile.err
echo "profile rc $? at $((SECONDS-S)) s"; cut -c1-900 $R/profile.jsonl; tail -3 $R/profile.err
timeout 235 python3 benchmarks/gpu_a5_recipe.py --out $R/alone --variants vanilla-bf16-graphs > $R/alone.log 2>&1
echo "alone rc $? at $((SECONDS-S)) s"; cut -c1-700 $R/alone.log | tail -4
timeout 250 python3 benchmarks/gpu_a5_recipe.py --out $R/concurrent --concurrent \
  --variants vanilla-fp32-graphs synthesizer-bf16-graphs synthesizer-fp32-graphs > $R/concurrent.log 2>&1
echo "concurrent rc $? at $((SECONDS-S)) s"; cut -c1-700 $R/concurrent.log | tail -6
for f in $R/*/*_pretrain/metrics.jsonl; do echo "$f: $(tail -n 1 $f | cut -c1-260)"; done
(cd $R && tar czf $OUT/results.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude=checkpoints .)
ls -la $OUT; echo "done at $((SECONDS-S)) s"
