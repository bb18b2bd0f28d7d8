"""The completion flow, top to bottom: receive → validate/clip → policy → cache → upstream →
relay → store. Each step lives in its own module; this file only composes them: a cache hit
is answered by hit.py, a miss goes to vLLM through forwarding.py, and trace.py answers and
records every request, whatever it raised."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from proxy import clip, openai, params, policy
from proxy.admission import request_key
from proxy.bounds import Bounds, prompt_count
from proxy.deps import Deps
from proxy.forwarding import PATHS, Forwarding
from proxy.hedge import Hedge
from proxy.hit import answer_hit
from proxy.limits import KeyLimits, parse
from proxy.receive import is_json, read_body, request_id, until_disconnect
from proxy.routing.protocol import route_request
from proxy.trace import Finisher, Trace, answered
from proxy.types import CacheRequest, Kind

if TYPE_CHECKING:
    from proxy.shared_limits import SharedKeyLimits


class CompletionHandler:
    def __init__(self, deps: Deps) -> None:
        self.d = deps
        s = deps.settings
        self.bounds = Bounds(s.max_json_depth, s.max_messages, s.max_prompts)
        table = parse(s.key_limits)
        local = KeyLimits(table, s.workers,
                          lambda which: deps.metrics.key_limited.labels(which).inc())
        self.limits: KeyLimits | SharedKeyLimits = local
        if s.key_limits_shared and s.redis_url and table:
            from proxy.shared_limits import SharedKeyLimits

            self.limits = SharedKeyLimits(local, table, s.redis_url, "vsp",
                                          deps.metrics.key_limits_fallbacks.inc)
        self.finish = Finisher(deps, self.limits)  # the passthrough's too: one per app
        self.forwarding = Forwarding(deps, self.finish)

    async def __call__(self, request: Request, kind: Kind) -> Response:
        trace = Trace(PATHS[kind], request_id(request), time.perf_counter())
        headers = {"X-Request-ID": trace.rid}
        return await answered(self._handle(request, kind, trace, headers), trace, headers,
                              self.d, self.finish.done)

    async def _handle(self, request: Request, kind: Kind, trace: Trace,
                      headers: dict[str, str]) -> Response:
        d, s = self.d, self.d.settings
        tenant = trace.tenant = d.keys.tenant(request)
        request_key.set(tenant)  # its counts at vLLM take this key's turns (CountGate)
        if not is_json(request):  # as vLLM answers it, before any limit is spent
            raise params.VllmTypeError(
                "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")
        trace.lease = await self.limits.admit(tenant)
        raw = await read_body(request, s.max_body_bytes, s.body_timeout)
        # the fields checked as vLLM checks them, before greedy overwrites them: off the event
        # loop with the parse for a large body
        body = await self.bounds.parse(raw, kind, lambda b: params.check(kind, b, s.greedy))
        if kind == "completions":
            trace.weight = prompt_count(body["prompt"])
        if s.log_prompts:
            trace.prompt = body.get("messages") if kind == "chat" else body.get("prompt")
        model = await d.catalog.resolve(body.get("model") or None)  # "": vLLM's default too
        body["model"] = model.name
        policy.check_lengths(kind, body, model.max_model_len)
        truncate = s.input_overflow == "truncate"
        own_limit = s.max_input_tokens or 1 << 31
        # vLLM takes a prompt as long as the context (then refuses the output length 0 left:
        # output_limit); the proxy's truncation leaves a token for output. Where the context
        # is the limit, a prompt past it is refused as vLLM refuses it (the proxy's own
        # context_length_exceeded, which vLLM never answers, is for PROXY_MAX_INPUT_TOKENS)
        model_limit = (model.max_model_len or 1 << 31) - (1 if truncate else 0)
        in_limit = min(own_limit, model_limit)
        context = model.max_model_len if own_limit >= model_limit else None
        clipper = clip.clip_chat if kind == "chat" else clip.clip_prompt
        # a prompt vLLM truncates itself (truncate_prompt_tokens) is as long as it keeps: a
        # longer one is no 400 there, nor its output capped by the whole (found by a review);
        # one it keeps whole-context long leaves no room for output: its 400, below
        keep = clip.kept_by_vllm(kind, body, model.max_model_len)
        if keep is not None and keep > own_limit:
            keep = None
        clipped = await clipper(body, d.counter, model.name,
                                in_limit if keep is None else 1 << 31, truncate,
                                ids=d.upstream.balancer.policy.wants_tokens, context=context)
        input_tokens = clipped.input_tokens if keep is None else min(clipped.input_tokens, keep)
        trace.tokens_in = input_tokens
        # before the key is charged: a prompt that leaves no room is refused as vLLM refuses it
        out_limit = policy.output_limit(s.max_output_tokens, model.max_model_len, input_tokens,
                                        batch=trace.weight > 1)
        body = policy.force_greedy(clipped.body) if s.greedy else clipped.body
        # a min_tokens above PROXY_MAX_OUTPUT_TOKENS is refused here too, before the charge
        body, asked = policy.cap_output(kind, body, out_limit, s.max_output_tokens)
        if trace.lease is not None:
            await self.limits.spend(tenant, trace.lease, input_tokens * trace.weight)
        if clipped.truncated:
            headers["X-Proxy-Input-Truncated"] = clipped.header()
            d.metrics.clipped.labels("input_truncated").inc()
        if asked is not None:
            headers["X-Proxy-Max-Tokens-Clipped"] = f"{asked}->{out_limit}"
            d.metrics.clipped.labels("output").inc()
        stream = body.get("stream") is True
        route = route_request(request.headers, body, s.routing_session_header,
                              clipped.token_ids)
        start: Callable[[], Coroutine[Any, Any, Any]] = (
            (lambda: self.forwarding.open(kind, body, trace, route)) if stream
            else (lambda: self.forwarding.fetch(kind, body, trace, route)))
        hedge = Hedge(start, (lambda up: self.forwarding.close(up, trace)) if stream else None,
                      d.metrics) \
            if s.cache_hedge else None
        cache_control = request.headers.get("cache-control", "").lower()
        try:
            # an identical request's wait for the one in flight can be long: a client that
            # leaves meanwhile frees its slot and key lease now (found by a review)
            result = await until_disconnect(request, d.cache.lookup(CacheRequest(
                kind, body, tenant, "no-cache" in cache_control, "no-store" in cache_control,
                hedge, policy.exact_only(kind, tenant, request.headers.get(policy.SEMANTIC_HEADER),
                                         s.cache_exact_only),
                prompt_tokens=input_tokens if trace.weight == 1 else None,
                searchable=policy.searchable(kind, s.cache_exact_only))))
        except BaseException:
            if hedge is not None:
                await hedge.cancel()
            raise
        trace.cache = result.status
        headers["X-Cache"] = result.status.upper()
        if result.status == "hit" and (result.answer is not None or result.live is not None):
            if hedge is not None:
                await hedge.cancel()
            return answer_hit(kind, result, stream, openai.wants_usage(body), headers, trace,
                              self.finish)
        work = hedge.work() if hedge is not None else start()
        if stream:
            return await self.forwarding.stream(request, kind, body, result.ticket, headers,
                                               trace, work)
        return await self.forwarding.json(request, kind, body, result.ticket, headers, trace,
                                         work)

    async def drain(self) -> None:
        """At shutdown: let handed-over streams finish (and store) for their followers."""
        await self.forwarding.drain()

    async def aclose(self) -> None:
        await self.limits.aclose()
