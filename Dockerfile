# gpuscope dashboard: the same path as `make run` (gpuscope ui --port 8501 --load-samples), in a
# container. Build: docker build -t gpuscope .
# Run:   docker run -p 8501:8501 -v gpuscope-data:/data gpuscope   ->  http://localhost:8501
# The store: the local one on the /data volume (GPUSCOPE_DB), unless GPUSCOPE_STORE names a team
# store (postgres://user:pw@host:5432/db, with GPUSCOPE_DATA_PATH=s3://bucket/prefix/ and the AWS_*
# variables): compose.yaml and docs/deploy.md. The DuckDB extensions come from PyPI packages
# installed with gpuscope, so the container needs no network access beyond the store.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    GPUSCOPE_DB=/data/store \
    GPUSCOPE_SAMPLES=/opt/gpuscope/sample_traces \
    GPUSCOPE_MAX_UPLOAD_MB=1024

# An unprivileged user owns the store's volume.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin gpuscope \
 && mkdir -p /data \
 && chown gpuscope:gpuscope /data

WORKDIR /opt/gpuscope
COPY pyproject.toml README.md ./
COPY app ./app
COPY ingest ./ingest
COPY analysis ./analysis
COPY store ./store
COPY vocabulary ./vocabulary
# gcc builds the compiled parser (ingest/_compiled_parser.c; without it gpuscope installs, but every
# batch is parsed by DuckDB, about 3x slower); removed again in the same layer.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && pip install . \
 && apt-get purge -y --auto-remove gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
# Loaded into an empty store on first start (--load-samples), so the first visit shows a comparison.
COPY sample_traces ./sample_traces

USER gpuscope
VOLUME ["/data"]
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4).read().strip() == b'ok' else 1)"]
# --host 0.0.0.0: inside a container the loopback default would be unreachable from the host.
# --no-auth only lifts the refusal to serve beyond loopback without sign-in: publish the port on the
# host's loopback (`docker run -p 127.0.0.1:8501:8501`), or set GPUSCOPE_AUTH_CONFIG (compose.yaml
# does), which turns sign-in on whatever this line says (docs/security.md, docs/deploy.md).
CMD ["gpuscope", "ui", "--host", "0.0.0.0", "--no-auth", "--port", "8501", "--load-samples", "--headless"]
