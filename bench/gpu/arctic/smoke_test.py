"""Smoke test for arctic_inference.suffix_decoding as vLLM (0.26 on the GPU host, 0.32 here)
uses it: vllm/v1/spec_decode/suffix_decoding.py imports SuffixDecodingCache, nothing else.
Needs only numpy. Run it from outside the sdist/repo (install.sh does `cd /`). Exit 0 = OK."""
import arctic_inference.suffix_decoding._C as C
import numpy as np
from arctic_inference.suffix_decoding import SuffixDecodingCache

print("native ext:", C.__file__, C.SuffixTree.__name__)

cache = SuffixDecodingCache(max_tree_depth=24, max_cached_requests=10000)
# prompt contains a repeated pattern; vLLM passes int32 numpy slices of token_ids_cpu
prompt = np.array([5, 6, 7, 8, 9, 10, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12], dtype=np.int32)
cache.start_request("r1", prompt)
cache.add_active_response("r1", [1, 2, 3])
ctx = np.array([1, 2, 3, 5, 6], dtype=np.int32)
d = cache.speculate("r1", ctx, max_spec_tokens=8, max_spec_factor=1.0, min_token_prob=0.1)
print("draft r1:", d.token_ids, "match_len", d.match_len, "score", round(d.score, 3))
assert d.token_ids[:3] == [7, 8, 9], d.token_ids
assert "r1" in cache.active_requests and "r1" in cache.cached_requests
cache.add_active_response("r1", [5, 6, 7, 8, 9, 10, 42])
cache.stop_request("r1")
assert "r1" not in cache.active_requests and "r1" in cache.cached_requests

# a new request with an unrelated prompt should be drafted from the global
# (cross-request) tree built from r1's response
cache.start_request("r2", np.array([100, 101, 102], dtype=np.int32))
cache.add_active_response("r2", [9, 10])
d2 = cache.speculate("r2", np.array([100, 101, 102, 9, 10], dtype=np.int32),
                     max_spec_tokens=4, max_spec_factor=2.0, min_token_prob=0.1)
print("draft r2 (from global cache):", d2.token_ids)
assert d2.token_ids and d2.token_ids[0] == 42, d2.token_ids
cache.stop_request("r2")
cache.evict_cached_response("r1")
assert "r1" not in cache.cached_requests
print("SMOKE OK")
