"""`Decoder`: the decode loop with a method's parts chosen by name.

`graftlib.core.decode.DecodeLoop` runs whatever builder and controller it is given;
`Decoder.for_method(target, drafter, "graft", budget=64, ...)` builds them from the registry
(`graftlib.methods.registry.make_parts`) over the target's embeddings. Constructing a `Decoder`
with explicit parts is the same as constructing the loop.
"""

from graftlib.core.decode import DecodeLoop
from graftlib.core.sampling import GREEDY, Sampling
from graftlib.methods.registry import make_parts


class Decoder(DecodeLoop):
    """Target + drafter + (builder, controller); `for_method` picks the parts by method name."""

    @classmethod
    def for_method(cls, target, drafter, method: str, budget: int = 32, eos_ids=None, tdes: str | None = None,
                   beta: float | None = None, sampling: Sampling = GREEDY) -> "Decoder":
        block = drafter.block_size if drafter is not None else 16
        embed = target.get_input_embeddings().weight.detach()
        builder, controller = make_parts(method, budget, block, tdes, beta, embed=embed)
        return cls(target, drafter, builder, controller, eos_ids, sampling)
