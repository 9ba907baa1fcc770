"""`Decoder`: the decode loop with a method's parts chosen by name.

`graftlib.core.decode.DecodeLoop` runs whatever builder and controller it is given;
`Decoder.for_method(target, drafter, "graft", 64, eos_ids=..., inputs=MethodInputs(tdes=..., beta=..., saba=...))`
builds them from the registry (`graftlib.methods.registry.make_parts`) over the target's embeddings: a run's inputs
travel as one `MethodInputs`, every option by keyword. Constructing a `Decoder`
with explicit parts is the same as constructing the loop; `WalkedDecoder.for_method` the same
loop with its rounds walked along greedy AR's tokens (`graftlib.core.ar_path`). An AR-drafted method (`eagle3`,
`opt-tree`) gets a `TreeDecoder`, the loop whose draft step grows the tree with an EAGLE-3
drafter (`graftlib.core.ar_drafting.TreeDraftLoop`); `drafter_for(pair, method)` picks the pair's
drafter a method drafts with. A method that loads a
fitted artifact (a TDES scorer, a SABA calibration) checks it against this pair and machine
(`graftlib.inputs.artifacts`): `pair` is the pair's `PairId` (`Pair.identity()`; default: the
models' fingerprints, without names).
"""

from graftlib.core.ar_drafting import TreeDraftLoop
from graftlib.core.ar_path import WalkedLoop
from graftlib.core.decode import DecodeLoop
from graftlib.core.errors import require
from graftlib.core.hardware import hardware_id
from graftlib.core.sampling import GREEDY, Sampling
from graftlib.methods.registry import (
    AR_METHODS,
    FITTED_METHODS,
    SELECTOR_METHODS,
    SHIPPED_INPUTS,
    MethodInputs,
    make_parts,
)
from graftlib.methods.selector import Selector
from graftlib.models.pair import PairId, identify


class Decoder(DecodeLoop):
    """Target + drafter + (builder, controller); `for_method` picks the parts by method name."""

    @classmethod
    def for_method(cls, target, drafter, method: str, budget: int = 32, *, eos_ids=None,
                   inputs: MethodInputs = SHIPPED_INPUTS, sampling: Sampling = GREEDY,
                   pair: PairId | None = None) -> "Decoder":
        if method in AR_METHODS:
            policy, controller = make_parts(method, budget, 0)
            return TreeDecoder(target, drafter, policy, controller, eos_ids, sampling)
        block = drafter.block_size if drafter is not None else 16
        embed = target.get_input_embeddings().weight.detach()
        hardware = ""
        if method in FITTED_METHODS and drafter is not None:  # what its scorer / calibration is checked against
            pair, hardware = pair or identify(target, drafter), hardware_id(target.device, target.dtype)
        selector = Selector.of(drafter, method) if method in SELECTOR_METHODS else None
        builder, controller = make_parts(method, budget, block, inputs=inputs, embed=embed, pair=pair,
                                         hardware=hardware, selector=selector)
        return cls(target, drafter, builder, controller, eos_ids, sampling)


class TreeDecoder(TreeDraftLoop, Decoder):
    """A `Decoder` whose drafter is autoregressive: target + EAGLE-3 drafter + (tree policy, controller)."""


class WalkedDecoder(WalkedLoop, Decoder):
    """A `Decoder` whose rounds are walked along greedy AR's tokens, not verified (`graftlib.core.ar_path`:
    T = 0, DFlash-drafted methods; `decode_along(prompt_ids, ar_tokens, max_new_tokens)`)."""

    @classmethod
    def for_method(cls, target, drafter, method: str, budget: int = 32, **options) -> "WalkedDecoder":
        require(method not in AR_METHODS and method != "ar", f"a walked decode runs the DFlash-drafted tree and "
                f"chain methods, not {method!r}")
        return super().for_method(target, drafter, method, budget, **options)


def drafter_for(pair, method: str):
    """The drafter `method` drafts with: the pair's EAGLE-3 drafter for AR-drafted methods, else its DFlash one."""
    return pair.eagle3_drafter() if method in AR_METHODS else pair.drafter
