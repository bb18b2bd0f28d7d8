"""Load tester for OpenAI-compatible servers (vLLM, the smart proxy): speaks only HTTP."""
