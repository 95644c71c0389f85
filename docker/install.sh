#!/bin/sh
# Installs the c4prep checkout this script sits in, torch first from the given PyTorch wheel index so that the
# project's own `pip install` finds the pin already met and never pulls torch from PyPI (whose Linux wheel is CUDA).
# Usage: sh docker/install.sh TORCH_INDEX_URL TORCH_VERSION
set -eu
if [ "$#" -ne 2 ]; then
    echo "usage: sh docker/install.sh TORCH_INDEX_URL TORCH_VERSION (e.g. https://download.pytorch.org/whl/cpu 2.13.0)" >&2
    exit 2
fi
python -m pip install --no-cache-dir --index-url "$1" "torch==$2"
python -m pip install --no-cache-dir "$(dirname "$0")/.."
