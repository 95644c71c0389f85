#!/usr/bin/env bash
# Device call 4 (#23, thirteenth session, same warm H200): the two GPU tests that failed in call 1, again, 2 processes.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata; for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done; timeout 170 python3 -m pytest -m gpu -n 2 -q -rA -p no:cacheprovider "tests/test_gpu.py::test_successive_dropout_calls_draw_fresh_masks" "tests/test_gpu_training.py::test_a5_bf16_tracks_fp32" -o junit_logging=all --junitxml=$OUT/rerun.xml > $OUT/rerun.log 2>&1
