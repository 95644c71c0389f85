#!/usr/bin/env bash
# Device call 2 (#23, tenth session): the A5 recipe in fp32 (TF32 matmuls in pretraining), CUDA graphs, re-packed rows.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS
R=/tmp/r; mkdir -p $R
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; nproc; } > $R/gpu.txt 2>&1
cat $R/gpu.txt
timeout ${A5_CAP:-235} python3 benchmarks/gpu_a5_recipe.py --out $R/a5 --variants vanilla-fp32-tf32-graphs-packed > $R/a5.log 2>&1
echo "a5 rc $? at $((SECONDS-S)) s"; cut -c1-900 $R/a5.log | tail -3
for f in $R/*/*_pretrain/metrics.jsonl; do echo "$f: $(wc -l < $f) lines, last $(tail -n 1 $f | cut -c1-260)"; done
(cd $R && tar czf $OUT/results.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude=checkpoints .)
echo "done at $((SECONDS-S)) s"
