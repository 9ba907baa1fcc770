"""The (target, tokenizer, drafter) pair every command and notebook starts from.

`load_pair` loads the target (`graftlib.models.target`), then the drafter (`graftlib.models.drafter`) on the
same device and dtype, checks that they fit each other, and reports whether the drafter is
trained. `Pair.prompt_ids(text)` wraps raw text in the target's chat template. `Pair.describe()`
is what every result's setting starts from; it names the drafter by a hash of its weights
(`weights_id`), so results of a retrained drafter never mix with an older one's.
"""

import hashlib
import os
import platform
from dataclasses import dataclass

import torch

from graftlib.models.chat import conversation_ids
from graftlib.models.drafter import EMBEDDED_DRAFTER, DFlashDrafter, load_drafter
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

    def _drafter_id(self) -> str:
        self.drafter_id = weights_id(self.drafter)
        return self.drafter_id

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


def hardware(device: torch.device) -> str:
    """A short machine description for figure captions and records."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{os.cpu_count()}-core CPU ({platform.machine()})"


def load_pair(target: str = EMBEDDED_TARGET, drafter: str = EMBEDDED_DRAFTER, device: str | None = None,
              device_map: str | None = None) -> Pair:
    model, tok = load_target(target, device=device, device_map=device_map)
    draft, trained = load_drafter(drafter, model.config, device=model.device, dtype=model.dtype)
    return Pair(model, tok, draft, trained, target, drafter)
