"""Models: the target, the DFlash drafter and the (target, tokenizer, drafter) pair.

`target` loads targets (embedded GGUF -> cached safetensors, local directories, the HF cache);
`drafter` is the DFlash drafter (z-lab layout, strict loading); `eagle3` the EAGLE-3 drafter (the
release's layout); `pair` joins them (`load_pair`, `Pair`, `PairId`, `weights_id`, `fingerprint`,
`hardware`); `chat` is the chat template every prompt goes through; `tiny` builds tiny random models
(tests, the device check, a stand-in pair).
`from graftlib.models import load_pair` works: the pair's names are re-exported lazily, so
importing `graftlib.models.chat` stays free of torch.

May import: `graftlib.core`.
"""


def __getattr__(name: str):
    if name in ("Pair", "load_pair", "weights_id", "hardware"):
        from graftlib.models import pair

        return getattr(pair, name)
    raise AttributeError(f"module 'graftlib.models' has no attribute {name!r}")
