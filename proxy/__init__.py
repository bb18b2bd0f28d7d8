"""vllm-smart-proxy: an OpenAI-compatible smart reverse proxy in front of vLLM."""
