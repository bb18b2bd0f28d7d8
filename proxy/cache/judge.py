"""The learned second stage: a cross-encoder reads both questions and scores "same answer".

The model (proxy/cache/judge_model/: an int8 ONNX mpnet cross-encoder, its tokenizer and its
calibration table; judge_model_minilm/: a MiniLM one, ~6x cheaper and less accurate) is trained
by `python -m tools.judge.sweep` on a GPU and exported by `python -m tools.judge.train`. At start
the threshold is picked from the table for the operator's `PROXY_CACHE_MAX_FALSE_HIT_RATE`.
Scoring runs on ONNX Runtime in one worker thread, one hop per lookup for all its candidates; a
pair longer than the model's window scores -inf (never a hit).
"""

from __future__ import annotations

import asyncio
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from proxy.cache.calibrate import Row, pick

MODEL_DIR = Path(__file__).resolve().parent / "judge_model"


class Judge:
    def __init__(self, session: Any, tokenizer: Any, rows: list[Row], rate: float,
                 max_tokens: int, floor: float) -> None:
        self.session = session  # shareable between judges (thread-safe for run())
        self.tokenizer = tokenizer
        self._inputs = {i.name for i in session.get_inputs()}
        self.rows = rows
        self.rate = rate
        self.threshold = pick(rows, rate)
        self.max_tokens = max_tokens
        self.floor = floor  # the cosine floor the table was calibrated with
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-judge")
        self.pairs = 0  # pairs scored
        self.batches = 0
        self.pending = 0  # lookups queued for or in the worker thread now

    @staticmethod
    def open(rate: float, path: Path | None = None, threads: int = 1) -> Judge:
        """Blocking: load the model and pick the threshold for `rate`."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        root = path or MODEL_DIR
        meta = orjson.loads((root / "judge.json").read_bytes())
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(str(root / meta["model"]), options,
                                       providers=["CPUExecutionProvider"])
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        rows = [Row(*r) for r in meta["table"]]
        return Judge(session, tokenizer, rows, rate, int(meta["max_tokens"]),
                     float(meta["floor"]))

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
