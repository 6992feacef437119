# mlsched controller image. Build from the repository root:
#   docker build -f deploy/container/controller.Dockerfile -t mlsched-controller:dev .
# Runs as the unprivileged user mlsched (uid 990); its state (store, CA, certificates) lives on
# the volume /var/lib/mlsched, which must persist (deploy/k8s/controller.yaml: a PVC).
FROM python:3.11.11-slim-bookworm

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

RUN groupadd --system --gid 990 mlsched \
    && useradd --system --uid 990 --gid mlsched --home-dir /var/lib/mlsched --create-home \
        --shell /usr/sbin/nologin mlsched

# torch first, the CPU build: the controller never trains; pinning it here keeps pip from
# fetching the CUDA wheels mlsched's looser requirement would allow.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

WORKDIR /opt/mlsched/src
COPY pyproject.toml constraints.txt README.md ./
COPY mlsched ./mlsched
COPY controller ./controller
COPY nodeagent ./nodeagent
COPY trainer_shim ./trainer_shim
COPY simulator ./simulator
# The controller's extra; `shim` names the torch above, which the mlf-rl and chic policies load.
RUN pip install --constraint constraints.txt ".[controller,shim]" && rm -rf /opt/mlsched/src

USER mlsched
WORKDIR /var/lib/mlsched
VOLUME ["/var/lib/mlsched"]
# 50051: users and agents (mutual TLS); 50052: the join endpoint
EXPOSE 50051 50052
ENTRYPOINT ["mlsched", "controller", "--state-dir", "/var/lib/mlsched"]
CMD ["--listen", "0.0.0.0:50051", "--join-listen", "0.0.0.0:50052"]
