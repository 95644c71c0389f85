#!/usr/bin/env bash
# Device call 4 (same warm H200, carry .devsite .devdata): tests/test_gpu_training.py (files in call4/).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devsite:$PWD C4PREP_SHARED_DATA=$PWD/.devdata; for d in pipelines tokenization training configs; do ln -sfn ../$d c4prep/$d; done; mkdir -p /tmp/r4; timeout 150 python3 -m pytest -m gpu -n 8 -q -ra -p no:cacheprovider tests/test_gpu_training.py --junitxml=/tmp/r4/tests_training.xml > /tmp/r4/tests_training.out 2>&1; echo "rc $?"; tail -8 /tmp/r4/tests_training.out; tar czf $OUT/call4.tgz -C /tmp/r4 .
