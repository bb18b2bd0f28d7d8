"""Routing over several vLLM replicas: one module per policy behind protocol.Policy
(least_loaded, prefix, session, kv_events); build.py makes the configured one."""
