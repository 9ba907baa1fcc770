"""The (target, tokenizer, drafter) pair every command and notebook starts from.

`load_pair` loads the target (`graftlib.target`), then the drafter (`graftlib.drafter`) on the
same device and dtype, checks that they fit each other, and reports whether the drafter is
trained. `Pair.prompt_ids(text)` wraps raw text in the target's chat template.
"""

import os
import platform
from dataclasses import dataclass

import torch

from graftlib.drafter import EMBEDDED_DRAFTER, DFlashDrafter, load_drafter
from graftlib.target import EMBEDDED_TARGET, load_target


@dataclass
class Pair:
    target: torch.nn.Module
    tokenizer: object
    drafter: DFlashDrafter
    drafter_trained: bool
    target_name: str
    drafter_name: str

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
        from graftlib.data import chat_text

        return list(self.tokenizer.encode(chat_text(self.tokenizer, text), add_special_tokens=False))

    def describe(self) -> dict:
        return {"target": self.target_name, "drafter": self.drafter_name, "drafter_trained": self.drafter_trained,
                "device": self.device.type, "dtype": str(self.target.dtype).removeprefix("torch."),
                "threads": torch.get_num_threads(), "hardware": hardware(self.device)}


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
