"""The target's responses to many prompts at once, by continuous batching, with its features and top-k log-probs
captured on the way (`graftlib.training.drafter.data.target_data` stores them as drafter training data).

`generate_sequences` decodes on the HF decoder body in `_Batch`'s named steps: admit, next tokens, record, release,
shrink, feed, compact. Finished rows are refilled with length-sorted prompts prefilled together (a prompt given
several times, the branches of one prompt, is prefilled once) and written right-aligned into free cache rows, so
the batch stays full; the cache's leading columns that no live row reads are dropped every few steps. Each step
costs one host sync.

Invariants: a greedy row's response is the target's greedy continuation of its prompt, token for token, whatever
else shares the batch (tests/test_drafter_train.py); a sampled row draws only for its sampled tokens
(tests/test_drafter_distill.py).
"""

from dataclasses import dataclass

import torch

from graftlib.core.errors import require
from graftlib.core.kvcache import BufferedLayer, target_cache
from graftlib.training.drafter.data.store import Sequence


@dataclass(frozen=True)
class Capture:
    """What decoding captures at every position: the hidden states after `layer_ids`, concatenated, as `dtype`,
    and the target's top-`top_k` log-probs (0: none)."""

    layer_ids: tuple[int, ...]
    top_k: int = 0
    dtype: torch.dtype = torch.float16


@dataclass(frozen=True)
class Sampled:
    """Which prompts sample: `temperatures[i]` = 0 decodes prompt i greedily, > 0 samples its first `tokens[i]`
    response tokens (default: all) at that temperature and the rest greedily, drawing from `generator`."""

    temperatures: list[float]
    tokens: list[int] | None = None
    generator: torch.Generator | None = None


REFILL_SHARE = 8  # a batch of R rows is refilled once R // 8 of them (at least one) have finished
COMPACT_EVERY, COMPACT_MIN = 16, 64  # every 16 steps, drop the cache's leading columns when >= 64 are no live row's
SHRINK_SHARE = 4  # with no prompt left to admit, finished rows leave the batch once a quarter has finished


def _prefill(model, prompts: list[list[int]], layer_ids: list[int], feature_dtype: torch.dtype, capacity: int):
    """One left-padded prefill of `prompts`: (its cache, its 2D mask [m, w], the last position's hidden
    state [m, H], each prompt's features [len(p), F]). A prompt given several times (the branches of one
    prompt, admitted together) is computed once and its rows copied."""
    unique = list(dict.fromkeys(map(tuple, prompts)))
    if len(unique) < len(prompts):
        cache, mask, last, feats = _prefill(model, [list(p) for p in unique], layer_ids, feature_dtype, capacity)
        where = {p: j for j, p in enumerate(unique)}
        rows = [where[tuple(p)] for p in prompts]
        idx = torch.tensor(rows, device=model.device)
        for layer in cache.layers:
            layer.batch_select_indices(idx)
        return cache, mask[idx], last[idx], [feats[j] for j in rows]
    device = model.device
    w = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), w, dtype=torch.long, device=device)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, w - len(p):] = torch.tensor(p, device=device)
        mask[i, w - len(p):] = 1
    cache = target_cache(model.config, capacity)
    require(all(isinstance(layer, BufferedLayer) for layer in cache.layers),
            f"drafter data: {type(model.config).__name__} has sliding-window layers, which batched generation "
            "with refilled rows does not support (a full-attention target is needed)")
    out = model.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                      cache=cache, use_cache=True, output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1).to(feature_dtype)
    return cache, mask, out.last_hidden_state[:, -1], [feats[i, w - len(p):] for i, p in enumerate(prompts)]


@dataclass
class _Responses:
    """What decoding captures, per sequence: response token j, the features of its position (j < r - 1 are
    kept), its top-k row, the response length and the prompt's features."""

    tokens: torch.Tensor  # [n, T] long
    feats: torch.Tensor  # [n, T, F]
    top_ids: torch.Tensor  # [n, T, k] int32
    top_logp: torch.Tensor  # [n, T, k] float16
    n: torch.Tensor  # [n] long
    prompt_feat: list

    @classmethod
    def empty(cls, n: int, max_new_tokens: int, n_feat: int, k: int, feature_dtype, device) -> "_Responses":
        return cls(torch.zeros(n, max_new_tokens, dtype=torch.long, device=device),
                   torch.zeros(n, max_new_tokens, n_feat, dtype=feature_dtype, device=device),
                   torch.zeros(n, max_new_tokens, k, dtype=torch.int32, device=device),
                   torch.zeros(n, max_new_tokens, k, dtype=torch.float16, device=device),
                   torch.zeros(n, dtype=torch.long, device=device), [None] * n)

    def sequences(self, prompts: list[list[int]], k: int) -> list[Sequence]:
        n = self.n.tolist()
        return [Sequence(torch.cat([torch.tensor(p), self.tokens[i, :n[i]].cpu()]), len(p),
                         torch.cat([self.prompt_feat[i], self.feats[i, :n[i] - 1]]).cpu(),
                         topk_ids=self.top_ids[i, :n[i]].cpu() if k else None,
                         topk_logp=self.top_logp[i, :n[i]].cpu() if k else None)
                for i, p in enumerate(prompts)]


class _Batch:
    """The continuous batch: per row its KV cache row, mask, last hidden state, next position, the sequence it
    decodes (`slot`, -1 when free) and the response tokens that sequence has fed (`fed`, host side)."""

    def __init__(self, model, prompts: list[list[int]], layer_ids: list[int], feature_dtype, first: list[int],
                 capacity: int, out: _Responses):
        self.model, self.prompts, self.layer_ids, self.feature_dtype = model, prompts, layer_ids, feature_dtype
        self.cache, self.mask, self.last, feats = _prefill(model, [prompts[i] for i in first], layer_ids,
                                                           feature_dtype, capacity)
        for i, f in zip(first, feats):
            out.prompt_feat[i] = f
        self.slot, self.fed = list(first), [0] * len(first)
        self.slot_t = torch.tensor(self.slot, device=model.device)
        self.pos = torch.tensor([len(prompts[i]) for i in first], device=model.device)

    def admit(self, queue: list[int], out: _Responses) -> list[int]:
        """Step 1: prefill waiting prompts into free rows once enough are free; the rest of the queue."""
        free = [r for r, s in enumerate(self.slot) if s < 0]
        enough = len(free) >= max(1, len(self.slot) // REFILL_SHARE) or len(free) == len(self.slot)
        if not (queue and free and enough):
            return queue
        device = self.model.device
        take, queue = queue[:len(free)], queue[len(free):]
        rows = free[:len(take)]
        sub, sub_mask, sub_last, feats = _prefill(self.model, [self.prompts[i] for i in take], self.layer_ids,
                                                  self.feature_dtype, max(len(self.prompts[i]) for i in take))
        width = sub_mask.shape[1] - self.mask.shape[1]
        if width > 0:  # the new prompts are longer than the cache: it grows at the front
            for layer in self.cache.layers:
                layer.shift_front(width)
            self.mask = torch.cat([self.mask.new_zeros(len(self.slot), width), self.mask], dim=1)
        idx = torch.tensor(rows, device=device)
        for layer, new in zip(self.cache.layers, sub.layers):
            layer.write_rows(idx, new.keys, new.values)
        self.mask[idx] = 0
        self.mask[idx, self.mask.shape[1] - sub_mask.shape[1]:] = sub_mask
        self.last = self.last.clone()
        self.last[idx] = sub_last
        for r, i, f in zip(rows, take, feats):
            self.slot[r], self.fed[r], out.prompt_feat[i] = i, 0, f
        self.slot_t = torch.tensor(self.slot, device=device)
        self.pos[idx] = torch.tensor([len(self.prompts[i]) for i in take], device=device)
        return queue

    def next_tokens(self, temps: list[float], until: list[int], generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Step 2: every row's next token and its logits ([rows, V]; finished rows compute and drop theirs): the
        argmax, or a draw for a live sequence with T > 0 inside its sampled span (host-side choice, no sync)."""
        logits = self.model.lm_head(self.last).float()
        nxt = logits.argmax(-1)
        drawing = [r for r, s in enumerate(self.slot) if s >= 0 and temps[s] > 0 and self.fed[r] < until[s]]
        if drawing:
            rows = torch.tensor(drawing, device=self.model.device)
            t = torch.tensor([temps[self.slot[r]] for r in drawing], dtype=torch.float32, device=self.model.device)
            probs = torch.softmax(logits[rows] / t[:, None], -1)
            nxt[rows] = torch.multinomial(probs, 1, generator=generator)[:, 0]
        return nxt, logits

    def record(self, nxt, logits, out: _Responses, k: int, eos_t, max_new_tokens: int) -> list[int]:
        """Step 3: the live rows' tokens (and top-k log-probs) written to their sequences; the rows that finished
        (EOS or the length), with the step's one host sync."""
        live = self.slot_t >= 0
        seq, j = self.slot_t[live], out.n[self.slot_t[live]]
        out.tokens[seq, j] = nxt[live]
        if k:
            logp = torch.log_softmax(logits[live], -1).topk(k, dim=-1)
            out.top_ids[seq, j] = logp.indices.to(torch.int32)
            out.top_logp[seq, j] = logp.values.to(torch.float16)
        out.n[seq] += 1
        done = live & (torch.isin(nxt, eos_t) | (out.n[self.slot_t.clamp(min=0)] >= max_new_tokens))
        return done.nonzero()[:, 0].tolist()

    def release(self, finished: list[int], progress) -> None:
        """Step 4: finished rows are freed (and counted)."""
        for r in finished:
            if progress is not None:
                progress(1, self.fed[r] + 1)
            self.slot[r] = -1
        if finished:
            self.slot_t = torch.tensor(self.slot, device=self.model.device)

    @property
    def idle(self) -> bool:
        return all(s < 0 for s in self.slot)

    def shrink(self, nxt: torch.Tensor) -> torch.Tensor:
        """Step 5, with no prompt left to admit: finished rows leave the batch once `SHRINK_SHARE` of it has."""
        if sum(s < 0 for s in self.slot) < max(1, len(self.slot) // SHRINK_SHARE):
            return nxt
        keep = [r for r, s in enumerate(self.slot) if s >= 0]
        idx = torch.tensor(keep, device=self.model.device)
        for layer in self.cache.layers:
            layer.batch_select_indices(idx)
        self.mask, self.pos = self.mask[idx], self.pos[idx]
        self.slot, self.fed = [self.slot[r] for r in keep], [self.fed[r] for r in keep]
        self.slot_t = torch.tensor(self.slot, device=self.model.device)
        return nxt[idx]

    def feed(self, nxt: torch.Tensor, out: _Responses) -> None:
        """Step 6: the tokens fed as [rows, 1] at each row's own position (the cache one column wider); the live
        rows' features of the fed position captured."""
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(self.slot), 1)], dim=1)
        step = self.model.model(input_ids=nxt[:, None], attention_mask=self.mask, position_ids=self.pos[:, None],
                                cache=self.cache, use_cache=True, output_hidden_states=True)
        live = self.slot_t >= 0
        seq = self.slot_t[live]
        out.feats[seq, out.n[seq] - 1] = torch.cat([step.hidden_states[i + 1] for i in self.layer_ids],
                                                   dim=-1)[live, 0].to(self.feature_dtype)
        self.last = step.last_hidden_state[:, -1]
        self.pos += 1
        self.fed = [f + 1 for f in self.fed]

    def compact(self) -> None:
        """Step 7: the cache's leading columns that are before every live row's prompt dropped (>= `COMPACT_MIN`)."""
        span = max((len(self.prompts[s]) + f for s, f in zip(self.slot, self.fed) if s >= 0), default=0)
        cut = self.mask.shape[1] - span
        if cut >= COMPACT_MIN:
            for layer in self.cache.layers:
                layer.shift_front(-cut)
            self.mask = self.mask[:, cut:]


@torch.inference_mode()
def generate_sequences(model, prompts: list[list[int]], capture: Capture, max_new_tokens: int, eos: list[int],
                       batch_size: int, progress=None, sampled: Sampled | None = None) -> list[Sequence]:
    """Responses for `prompts` (in their order), with what `capture` names captured while decoding, by continuous
    batching (module doc), in the named steps of `_Batch`; every prompt greedy unless `sampled` says otherwise;
    `progress(n, tokens)` is called as sequences finish."""
    layer_ids, feature_dtype, top_k = list(capture.layer_ids), capture.dtype, capture.top_k
    temperatures, sampled_tokens, generator = ((sampled.temperatures, sampled.tokens, sampled.generator) if sampled
                                               else (None, None, None))
    require(batch_size >= 1, f"batch_size must be >= 1, got {batch_size}")
    require(max_new_tokens >= 1, f"max_response_tokens must be >= 1, got {max_new_tokens}")
    require(all(len(p) > 0 for p in prompts), "empty prompt: nothing to condition on")
    if not prompts:
        return []
    device, n = model.device, len(prompts)
    temps = temperatures or [0.0] * n
    until = sampled_tokens or [max_new_tokens] * n
    k = min(top_k, model.config.vocab_size)
    out = _Responses.empty(n, max_new_tokens, len(layer_ids) * model.config.hidden_size, k, feature_dtype, device)
    eos_t = torch.tensor(eos or [-1], device=device)
    queue = sorted(range(n), key=lambda i: len(prompts[i]))  # prompts of similar length are admitted together
    first, queue = queue[:batch_size], queue[batch_size:]
    batch = _Batch(model, prompts, layer_ids, feature_dtype, first,
                   max(len(prompts[i]) for i in first) + max_new_tokens, out)
    for step in range(n * max_new_tokens + 1):
        queue = batch.admit(queue, out)
        nxt, logits = batch.next_tokens(temps, until, generator)
        batch.release(batch.record(nxt, logits, out, k, eos_t, max_new_tokens), progress)
        if batch.idle and not queue:
            break
        if not queue:
            nxt = batch.shrink(nxt)
        batch.feed(nxt, out)
        if step % COMPACT_EVERY == COMPACT_EVERY - 1:
            batch.compact()
    return out.sequences(prompts, k)
