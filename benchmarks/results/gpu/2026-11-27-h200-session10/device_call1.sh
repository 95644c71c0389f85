#!/usr/bin/env bash
# Device call (#23, tenth session): the A5 recipe on re-packed rows with CUDA graphs; its answers again in fp32 and
# an fp32 fine-tune from the same pretraining; T5 ours vs HF eager and compiled; then FlexAttention.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS
R=/tmp/r; mkdir -p $R
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; nproc; } > $R/gpu.txt 2>&1
cat $R/gpu.txt
V=vanilla-bf16-graphs-packed
timeout ${A5_CAP:-235} python3 benchmarks/gpu_a5_recipe.py --out $R/a5 --variants $V > $R/a5.log 2>&1
echo "a5 rc $? at $((SECONDS-S)) s"; cut -c1-900 $R/a5.log | tail -3
T="trainer.device=cuda trainer.progress=false trainer.tensorboard=false resume=never"
if [ -d $R/a5/${V}_finetune ]; then
  timeout 40 python3 -m c4prep.training.cli experiment=cs224n_a5_finetune stage=evaluate \
    init_from=$R/a5/${V}_finetune output_dir=$R/eval_fp32 trainer.precision=fp32 $T > $R/eval_fp32.json 2> $R/eval_fp32.err
  echo "eval fp32 rc $? at $((SECONDS-S)) s"; tail -c 600 $R/eval_fp32.json
fi
if [ -d $R/a5/${V}_pretrain ]; then
  timeout 60 python3 -m c4prep.training.cli experiment=cs224n_a5_finetune init_from=$R/a5/${V}_pretrain \
    output_dir=$R/ft_fp32 trainer.precision=fp32 trainer.num_workers=4 $T > $R/ft_fp32.json 2> $R/ft_fp32.err
  echo "finetune fp32 rc $? at $((SECONDS-S)) s"; tail -c 600 $R/ft_fp32.json
fi
B="benchmarks/bench_t5_throughput.py --device cuda --compile --precision bf16 --size t5_small --batch 32 --rounds 5 --steps-per-round 4 --warmup 3"
timeout ${T5_CAP:-150} python3 $B --json $R/t5_small_b32.json > $R/t5.log 2>&1
echo "t5 rc $? at $((SECONDS-S)) s"; tail -12 $R/t5.log
left=$((540 - (SECONDS-S)))
timeout $left python3 $B --flex --json $R/t5_flex_small_b32.json > $R/t5_flex.log 2>&1
echo "t5 flex rc $? at $((SECONDS-S)) s"; tail -12 $R/t5_flex.log
(cd $R && tar czf $OUT/results.tar.gz --exclude='*.pt' --exclude='*.safetensors' --exclude=checkpoints .)
ls -la $OUT; echo "done at $((SECONDS-S)) s"
