"""Sharding a sweep over processes or GPUs with `torchrun`, one results file per rank.

`torchrun --nproc-per-node N -m graftlib.lab.cli bench ...` starts N copies; each reads its rank from
the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK), decodes every N-th prompt
(`shard`), runs on `cuda:LOCAL_RANK` when CUDA is there, and appends to its own file
`<stem>.rank<r>-of-<N><suffix>` (`shard_path`), so ranks never write the same file and an
interrupted rank resumes from its own records. Readers merge the base file and every rank file
(`merged_records`); records carry their prompt uid and setting id, so a merge is a plain union.
No process group is needed: ranks never talk to each other.
"""

import os
from pathlib import Path

from graftlib.core.errors import GraftError, require
from graftlib.core.records import read_records


def rank_world() -> tuple[int, int]:
    """(rank, world size) from torchrun's environment; (0, 1) outside torchrun."""
    try:
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise GraftError(f"RANK={os.environ.get('RANK')!r} / WORLD_SIZE={os.environ.get('WORLD_SIZE')!r} "
                         f"are not integers") from None
    require(world >= 1 and 0 <= rank < world, f"RANK={rank} is not in [0, WORLD_SIZE={world})")
    return rank, world


def rank_device() -> str | None:
    """cuda:LOCAL_RANK under torchrun with CUDA, else None (the loaders' default)."""
    import torch

    if "LOCAL_RANK" in os.environ and torch.cuda.is_available():
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return None


def shard(items: list, rank: int, world: int) -> list:
    """Every `world`-th item starting at `rank` (prompts of similar kind spread over ranks)."""
    return list(items[rank::world])


def shard_path(out: str | Path, rank: int, world: int) -> Path:
    out = Path(out)
    return out if world == 1 else out.with_name(f"{out.stem}.rank{rank}-of-{world}{out.suffix}")


def merged_records(out: str | Path) -> list[dict]:
    """Records of `out` and of every rank file written next to it."""
    out = Path(out)
    files = [out] + sorted(out.parent.glob(f"{out.stem}.rank*-of-*{out.suffix}"))
    return [r for f in files if f.is_file() for r in read_records(f)]
