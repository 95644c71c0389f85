#!/usr/bin/env bash
# Device call 1 (#23, fourteenth session): T5 ours vs HF (t5_small, batch 32, bf16) eager and compiled with host and
# device ops profiled, then compiled with CUDA graphs (reduce-overhead, both models); where a step of the A5 recipe's
# queued variant goes; the GPU tier; last FlexAttention compiled against our dense attention compiled, each compile
# logged as it ends. Every step has its own time limit, so the call ends inside the device's 600 s.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata
for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done
started=$SECONDS
python3 -c "import json, torch, transformers; print(json.dumps({'gpu': torch.cuda.get_device_name(),
  'torch': torch.__version__, 'cuda': torch.version.cuda, 'transformers': transformers.__version__}))" \
  > $OUT/environment.json
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
run() {  # run <name> <seconds> <command...>: stdout to <name>.out, stderr to <name>.log
    local name=$1 limit=$2; shift 2
    timeout "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.log"
    echo "$name: rc $? at $((SECONDS - started)) s"
}
t5() {  # t5 <name> <seconds> <options...>
    local name=$1 limit=$2; shift 2
    run "$name" "$limit" python3 benchmarks/bench_t5_throughput.py --device cuda --compile --precision bf16 \
        --rounds 5 --steps-per-round 4 --warmup 3 --json "$OUT/$name.json" "$@"
}
t5 t5_small_b32 150 --size t5_small --batch 32 --profile-steps 3
t5 t5_small_b32_graphs 130 --size t5_small --batch 32 --compile-mode reduce-overhead --profile-steps 3
run a5_step_profile 110 python3 benchmarks/gpu_a5_step_profile.py --label queued trainer.compile=true \
    trainer.compile_mode=reduce-overhead trainer.loss_check=log trainer.num_workers=4
run tests 180 python3 -m pytest -m gpu -n 8 -q -ra -p no:cacheprovider tests/test_gpu.py tests/test_gpu_training.py \
    --junitxml="$OUT/tests.xml"
t5 t5_small_b32_flex $((575 - (SECONDS - started))) --size t5_small --batch 32 --flex \
    --only "ours compiled" "ours flex compiled"
