"""The (target, tokenizer, drafter) pair every command and notebook starts from.

`load_pair` loads the target (`graftlib.models.target`), then the drafter (`graftlib.models.drafter`) on the
same device and dtype, checks that they fit each other, and reports whether the drafter is
trained. `Pair.prompt_ids(text)` wraps raw text in the target's chat template. `Pair.describe()`
is what every result's setting starts from; it names the drafter by a hash of its weights
(`weights_id`), so results of a retrained drafter never mix with an older one's.

The EAGLE-3 drafter of the AR-drafted methods (`graftlib.models.eagle3`) is loaded on first use
(`Pair.eagle3_drafter()`): from `eagle3_path` (`--eagle3 PATH`), else, for the embedded target,
from `EMBEDDED_EAGLE3_DIR`; with neither it raises a GraftError that names the missing drafter and
how to get one. `Pair.eagle3_describe()` names it (path and weights hash) in a result's setting.
`Pair.identity()` (a `PairId`) is what artifacts fitted for a pair (a TDES scorer, a SABA
calibration; `graftlib.inputs.artifacts`) record and are checked against: the names as given
and a `fingerprint` of each model's weights. Unlike `weights_id` the fingerprint does not depend
on the device or dtype the weights were loaded in (it hashes a sample rounded to bfloat16), so the
embedded pair is the same pair in float32 on a CPU and in bfloat16 on a GPU.
"""

import hashlib
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from graftlib.core.errors import require
from graftlib.core.hardware import cpu_matmul_units, cpu_model
from graftlib.core.paths import portable
from graftlib.models.chat import conversation_ids
from graftlib.models.dflash2 import SELECTOR_PREFIX
from graftlib.models.drafter import EMBEDDED_DRAFTER, DFlashDrafter, load_drafter
from graftlib.models.eagle3 import EMBEDDED_EAGLE3_DIR, Eagle3Drafter, load_eagle3
from graftlib.models.target import EMBEDDED_TARGET, load_target


@dataclass
class Pair:
    target: torch.nn.Module
    tokenizer: object
    drafter: DFlashDrafter
    drafter_trained: bool
    target_name: str
    drafter_name: str
    drafter_id: str = ""  # weights_id(drafter), computed once (by load_pair or on first describe)
    eagle3_path: str | None = None  # the AR-drafted methods' EAGLE-3 drafter (None: the embedded target's)
    _eagle3: Eagle3Drafter | None = field(default=None, repr=False)
    pair_id: "PairId | None" = None  # identity(), computed once

    @property
    def device(self) -> torch.device:
        return self.target.device

    @property
    def eos_ids(self) -> list[int]:
        eos = self.target.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        return eos

    def prompt_ids(self, text: str) -> list[int]:
        return conversation_ids(self.tokenizer, [text])

    def with_drafter(self, drafter: str) -> "Pair":
        """The same target (shared, not reloaded) with the DFlash drafter `drafter` (a name or a path)."""
        draft, trained = load_drafter(drafter, self.target.config, device=self.device, dtype=self.target.dtype)
        return Pair(self.target, self.tokenizer, draft, trained, self.target_name, drafter,
                    eagle3_path=self.eagle3_path)

    def with_strength(self, strength) -> "Pair":
        """The same pair with its DFlash drafter at `strength` (a `graftlib.models.strength.Strength`: a construction
        that drafts along a known greedy continuation, walked decodes only)."""
        from graftlib.models.strength import StrengthDrafter

        return Pair(self.target, self.tokenizer, StrengthDrafter(self.drafter, strength), self.drafter_trained,
                    self.target_name, self.drafter_name, self.drafter_id, eagle3_path=self.eagle3_path)

    def _drafter_id(self) -> str:
        self.drafter_id = weights_id(self.drafter)
        return self.drafter_id

    def eagle3_dir(self) -> Path:
        """Where the EAGLE-3 drafter is: `eagle3_path`, else the embedded target's, which must hold weights."""
        if self.eagle3_path is not None:
            return Path(self.eagle3_path).expanduser()
        require(self.target_name == EMBEDDED_TARGET,
                f"no EAGLE-3 drafter for target {self.target_name!r}: pass --eagle3 PATH (an EAGLE-3 checkpoint "
                "directory: config.json + *.safetensors)")
        require(any(EMBEDDED_EAGLE3_DIR.glob("*.safetensors")),
                f"no EAGLE-3 drafter for the embedded target: {portable(EMBEDDED_EAGLE3_DIR)} holds no weights; "
                "train one into it with `graft train-eagle3` (see `graft train-eagle3 --help`) or pass --eagle3 PATH")
        return EMBEDDED_EAGLE3_DIR

    def eagle3_drafter(self) -> Eagle3Drafter:
        """The EAGLE-3 drafter (loaded once, on the target's device and dtype, checked against it)."""
        if self._eagle3 is None:
            embed = self.target.get_input_embeddings().weight.detach()
            self._eagle3 = load_eagle3(self.eagle3_dir(), embed, self.device, self.target.dtype).fit(self.target.config)
        return self._eagle3

    def eagle3_describe(self) -> dict:
        return {"eagle3": portable(self.eagle3_dir()), "eagle3_id": weights_id(self.eagle3_drafter())}

    def identity(self) -> "PairId":
        """The pair's `PairId` (names + weight fingerprints), computed once."""
        if self.pair_id is None:
            self.pair_id = identify(self.target, self.drafter, self.target_name, self.drafter_name)
        return self.pair_id

    def describe(self) -> dict:
        return {"target": self.target_name, "drafter": self.drafter_name, "drafter_trained": self.drafter_trained,
                "drafter_id": self.drafter_id or self._drafter_id(),
                "device": self.device.type, "dtype": str(self.target.dtype).removeprefix("torch."),
                "threads": torch.get_num_threads(), "hardware": hardware(self.device)}


def weights_id(module: torch.nn.Module) -> str:
    """12 hex digits of sha256 over the module's parameter and buffer names, dtypes and bytes."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        t = t.detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:12]


FINGERPRINT_SAMPLE = 4096  # values per tensor


def fingerprint(module: torch.nn.Module, skip: tuple[str, ...] = ()) -> str:
    """12 hex digits of sha256 over the module's tensor names and shapes and, per tensor, an evenly
    spaced sample of at most FINGERPRINT_SAMPLE values, floats rounded to bfloat16: the same for
    the same weights on any device and in any dtype they round to (a few ms for a 135M target).
    Tensors whose names start with one of `skip` are left out."""
    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        if name.startswith(skip):
            continue
        flat = t.detach().reshape(-1)
        sample = flat[::max(1, flat.numel() // FINGERPRINT_SAMPLE)][:FINGERPRINT_SAMPLE]
        sample = sample.to(torch.bfloat16).view(torch.int16) if sample.is_floating_point() else sample.long()
        h.update(f"{name}:{tuple(t.shape)}".encode())
        h.update(sample.cpu().numpy().tobytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class PairId:
    """A model pair as artifacts record it: names as given ('?' when unknown) and weight fingerprints.
    Two PairIds are the same pair iff their fingerprints are equal (`same`); names only word messages."""

    target: str
    drafter: str
    target_fingerprint: str
    drafter_fingerprint: str

    def same(self, other: "PairId") -> bool:
        return (self.target_fingerprint, self.drafter_fingerprint) == (other.target_fingerprint,
                                                                        other.drafter_fingerprint)

    def __str__(self) -> str:
        return (f"target {self.target} ({self.target_fingerprint}) + drafter {self.drafter} "
                f"({self.drafter_fingerprint})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d, where: str) -> "PairId":
        fields = set(cls.__dataclass_fields__)
        require(isinstance(d, dict) and set(d) == fields and all(isinstance(v, str) for v in d.values()),
                f"{where}: 'pair' must be an object with the strings {sorted(fields)}, got {d!r}")
        return cls(**d)


def identify(target: torch.nn.Module, drafter: torch.nn.Module, target_name: str = "?",
             drafter_name: str = "?") -> PairId:
    """The `PairId` of loaded models (fingerprints of both); names as the user gave them. A DFlash 2 drafter's
    selector is left out of its fingerprint: it does not change the draft distributions q that the artifacts
    (TDES scorers, SABA calibrations) are fitted on, so a selector trained on a frozen drafter keeps them."""
    return PairId(target_name, drafter_name, fingerprint(target), fingerprint(drafter, (SELECTOR_PREFIX,)))


def hardware(device: torch.device) -> str:
    """A short machine description for figure captions and records: the GPU's name, or the CPU's
    cores, model and matrix units ("2-core AMD EPYC, AVX512-BF16")."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    units = cpu_matmul_units()
    return f"{os.cpu_count()}-core {cpu_model()}" + (f", {units}" if units else f" ({platform.machine()})")


def load_pair(target: str = EMBEDDED_TARGET, drafter: str = EMBEDDED_DRAFTER, device: str | None = None,
              device_map: str | None = None, eagle3: str | None = None, dtype: str | None = None) -> Pair:
    """`eagle3`: an EAGLE-3 drafter directory for the AR-drafted methods (loaded on first use); `dtype`:
    float32 / bfloat16 / float16 for the target and the drafters (None: float32 on a CPU, bfloat16 on CUDA)."""
    model, tok = load_target(target, device=device, dtype=dtype, device_map=device_map)
    draft, trained = load_drafter(drafter, model.config, device=model.device, dtype=model.dtype)
    return Pair(model, tok, draft, trained, target, drafter, eagle3_path=eagle3)
