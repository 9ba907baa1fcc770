"""The exact core: trees, tree builders, verification, the KV cache and the decode loop.

Holds what makes speculative decoding exact and nothing method- or model-specific: errors and
paths (`errors`, `paths`, `version`), the hardware string (`hardware`), JSON/JSONL records (`records`), trees as plain
data and their verify inputs (`tree`), the `TreeBuilder` / `BudgetController` interfaces with the chain
and DDTree heap builders (`builders`), the `Drafter` protocol (`drafting`), an autoregressive
drafter's draft step, a tree grown depth by depth (`ar_drafting`), target verification
(`verify`), the preallocated target KV cache (`kvcache`), stage timing (`timing`), the decode
loop (`decode`) and divergence diagnostics (`exactness`).

May import: only the standard library, torch, numpy and transformers' cache classes; no other
graftlib layer (`graftlib.LAYERS`; `tests/test_layers.py` checks it).
"""
