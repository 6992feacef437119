# mlsched node agent image, also the environment its training tasks run in (they are the
# agent's child processes, with this image's Python and torch). Build from the repository root:
#   docker build -f deploy/container/agent.Dockerfile -t mlsched-agent:dev .
# Runs as root with every capability dropped except the four the agent needs to start each task
# as its job's user (deploy/k8s/agent.yaml); the tasks themselves keep none. The GPUs and the
# driver's libraries come from the NVIDIA container runtime (NVIDIA_VISIBLE_DEVICES=all).
FROM python:3.11.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility

# setpriv (util-linux) starts tasks without capabilities when the agent is not root.
RUN apt-get update \
    && apt-get install -y --no-install-recommends util-linux \
    && rm -rf /var/lib/apt/lists/*

# torch first, the default (CUDA) build of the pinned version: the same on every GPU server.
RUN pip install torch==2.13.0

WORKDIR /opt/mlsched/src
COPY pyproject.toml constraints.txt README.md ./
COPY mlsched ./mlsched
COPY controller ./controller
COPY nodeagent ./nodeagent
COPY trainer_shim ./trainer_shim
COPY simulator ./simulator
COPY examples /opt/mlsched/examples
# The agent and, for the jobs that run in its Python, the training shim (docs/architecture.md,
# "Installs and extras").
RUN pip install --constraint constraints.txt ".[agent,shim]" && rm -rf /opt/mlsched/src

WORKDIR /var/lib/mlsched/agent
ENTRYPOINT ["mlsched", "agent", "--state-dir", "/var/lib/mlsched/agent"]
