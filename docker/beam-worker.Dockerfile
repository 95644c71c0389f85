# Beam SDK worker for `--sdk_container_image`: the official SDK image of setup.py's pinned Beam version, plus c4prep
# (with its bundled bad-words list and RealNews domains) and the CPU build of torch. Build from the checkout root:
#   docker build -f docker/beam-worker.Dockerfile -t c4prep-beam-worker .
FROM apache/beam_python3.11_sdk:2.77.0

ARG TORCH_VERSION=2.13.0

COPY . /tmp/c4prep
RUN sh /tmp/c4prep/docker/install.sh https://download.pytorch.org/whl/cpu "${TORCH_VERSION}" && rm -rf /tmp/c4prep
# The base image's entrypoint (the Beam SDK harness boot) stays as it is.
