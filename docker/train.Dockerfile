# Training image: torch (CPU by default, or a CUDA build) and c4prep; the container runs `train ARGS...`.
# Build from the checkout root:
#   docker build -f docker/train.Dockerfile -t c4prep-train .                                   # CPU
#   docker build -f docker/train.Dockerfile --build-arg TORCH_VARIANT=cu128 -t c4prep-train:cu128 .   # CUDA
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
# A wheel index variant at download.pytorch.org/whl/: `cpu`, or a CUDA one PyTorch publishes for TORCH_VERSION.
ARG TORCH_VARIANT=cpu

COPY . /tmp/c4prep
RUN sh /tmp/c4prep/docker/install.sh "https://download.pytorch.org/whl/${TORCH_VARIANT}" "${TORCH_VERSION}" \
    && rm -rf /tmp/c4prep

WORKDIR /workspace
ENTRYPOINT ["train"]
