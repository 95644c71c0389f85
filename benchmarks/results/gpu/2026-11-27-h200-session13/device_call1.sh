#!/usr/bin/env bash
# Device call 1 (#23, thirteenth session): the GPU test tier and the SDPA layout check, then T5 ours vs HF
# (eager, compiled, FlexAttention with the dense-bias score_mod) with a kernel profile of each variant.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
S=$SECONDS; R=/tmp/r; mkdir -p $R
{ nvidia-smi -L; python3 -c "import torch, transformers; print(torch.__version__, torch.version.cuda, transformers.__version__)"; nproc; git rev-parse HEAD 2>/dev/null; } > $R/gpu.txt 2>&1
cat $R/gpu.txt
timeout ${TESTS_CAP:-230} python3 -m pytest -m gpu -n 8 -q -ra -p no:cacheprovider -o junit_logging=all \
  tests/test_gpu.py tests/test_gpu_training.py --junitxml=$R/tests.xml > $R/tests.log 2>&1
echo "tests rc $? at $((SECONDS-S)) s"; tail -25 $R/tests.log | cut -c1-300
timeout 30 python3 benchmarks/gpu_sdpa_dropout_layouts.py > $R/sdpa_dropout_layouts.jsonl 2> $R/sdpa.err
echo "sdpa rc $? at $((SECONDS-S)) s"
timeout ${T5_CAP:-180} python3 benchmarks/bench_t5_throughput.py --device cuda --compile --flex --precision bf16 \
  --size t5_small --batch 32 --rounds 5 --steps-per-round 4 --warmup 3 --profile-steps 3 \
  --json $R/t5_throughput_flex_t5_small_b32.json > $R/t5_flex.log 2>&1
echo "t5 rc $? at $((SECONDS-S)) s"; grep -v '^ \|^{\|^}' $R/t5_flex.log | tail -14 | cut -c1-300
(cd $R && tar czf $OUT/results1.tar.gz .)
echo "done at $((SECONDS-S)) s"
