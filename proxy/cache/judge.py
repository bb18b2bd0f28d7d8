"""The learned second stage: a cross-encoder reads both questions and scores "same answer".

The model (proxy/cache/judge_model/: an int8 ONNX mpnet cross-encoder, its tokenizer and its
calibration table; judge_model_minilm/: a MiniLM one, ~6x cheaper and less accurate) is trained
by `python -m tools.judge.sweep` on a GPU and exported by `python -m tools.judge.train`. At start
the threshold is picked from the table for the operator's `PROXY_CACHE_MAX_FALSE_HIT_RATE`.
Scoring runs on ONNX Runtime in one worker thread, one hop per lookup for all its candidates; a
pair longer than the model's window scores -inf (never a hit).

The model runs with integer products that are exact on every x86 CPU (judge_session.py: the
weights as stored where this CPU's u8 x s8 kernel sums exactly, as VNNI does, else rewritten
as unsigned; the same integers either way). At start the judge re-scores the reference pairs
judge.json stores with their logits; when the median pair moves by more than DRIFT_LIMIT,
this CPU does not compute what was calibrated, and the judge accepts nothing (the semantic
tier serves the same question only) and says so in the log and in /admin/cache/stats
(`judge_drift`). The median, not the largest move: the float ops around the integer products
differ a little between kernels, and a pair whose activations round the other way moves by up
to ~1.6 (docs/cache.md "Portability"), while a CPU that computes the wrong products moves the
median pair by logits.
"""

from __future__ import annotations

import asyncio
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from proxy.cache.calibrate import Row, pick
from proxy.cache.judge_session import Weights, open_session, served_weights

MODEL_DIR = Path(__file__).resolve().parent / "judge_model"
DRIFT_LIMIT = 0.1  # the median reference pair's |logit - reference|
log = logging.getLogger("proxy.cache")


class Judge:
    def __init__(self, session: Any, tokenizer: Any, rows: list[Row], rate: float,
                 max_tokens: int, floor: float, drift: float | None = None,
                 weights: str | None = None) -> None:
        self.session = session  # shareable between judges (thread-safe for run())
        self.tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        self.rows = rows
        self.rate = rate
        self.drift = drift  # median |logit - reference| at start; None: not checked
        self.weights = weights  # "stored" or "unsigned" (judge_session.py); None: not said
        self.threshold = math.inf if self.drifted else pick(rows, rate)
        self.max_tokens = max_tokens
        self.floor = floor  # the cosine floor the table was calibrated with
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-judge")
        self.pairs = 0  # pairs scored
        self.batches = 0
        self.pending = 0  # lookups queued for or in the worker thread now

    @property
    def drifted(self) -> bool:
        return self.drift is not None and not self.drift <= DRIFT_LIMIT  # NaN drifts too

    @staticmethod
    def open(rate: float, path: Path | None = None, threads: int = 1,
             check: bool = True, weights: Weights = "auto") -> Judge:
        """Blocking: load the model, re-score its reference pairs (unless `check` is off) and
        pick the threshold for `rate`. `weights` other than "auto": for tools.judge.speed."""
        from tokenizers import Tokenizer

        root = path or MODEL_DIR
        meta = orjson.loads((root / "judge.json").read_bytes())
        kind = served_weights(weights)
        session = open_session(root / meta["model"], threads, kind)
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        rows = [Row(*r) for r in meta["table"]]
        args = (session, tokenizer, rows, rate, int(meta["max_tokens"]), float(meta["floor"]))
        reference = meta.get("reference") if check else None
        if not reference:
            return Judge(*args, weights=kind)
        probe = Judge(*args)
        got = probe.logits([(a, b) for a, b, _ in reference])
        probe.close()
        drift = float(np.median([abs(g - float(want)) if math.isfinite(g) else math.inf
                                 for g, (_, _, want) in zip(got, reference, strict=True)]))
        judge = Judge(*args, drift=drift, weights=kind)
        if judge.drifted:
            log.error("cache judge %s: on this CPU its reference pairs score a median %.3f "
                      "away from the logits it was calibrated with; it accepts nothing (the "
                      "semantic tier serves the same question only)", root, drift)
        return judge

    @classmethod
    async def load(cls, rate: float, path: Path | None = None, threads: int = 1) -> Judge:
        return await asyncio.to_thread(cls.open, rate, path, threads)

    def logits(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Blocking: one logit per (query, cached) pair; higher means the same answer.

        Pairs run one at a time inside the batch: int8 dynamic quantisation scales the
        activations per run, so a padded batch would move each pair's score (by up to 0.27
        measured) with whatever else it was batched with; alone, a pair scores the same as
        in calibration, and without padding it costs no more.
        """
        encoded = self.tokenizer.encode_batch(pairs) if pairs else []
        out = []
        for e in encoded:
            if len(e.ids) > self.max_tokens:
                out.append(-math.inf)
                continue
            feed = {"input_ids": np.asarray([e.ids], dtype=np.int64),
                    "attention_mask": np.ones((1, len(e.ids)), dtype=np.int64),
                    "token_type_ids": np.asarray([e.type_ids], dtype=np.int64)}
            scores = self.session.run(None, {k: v for k, v in feed.items() if k in self._inputs})
            out.append(float(scores[0][0, 0]))
        return out

    async def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Off the event loop, all of one lookup's candidates in one executor hop."""
        self.pairs += len(pairs)
        self.batches += 1
        self.pending += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, self.logits, pairs)
        finally:
            self.pending -= 1

    def accepts(self, logit: float) -> bool:
        return logit >= self.threshold

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
