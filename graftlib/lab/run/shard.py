"""Sharding a sweep over processes or GPUs with `torchrun`, one results file per rank.

`torchrun --standalone --nproc-per-node N -m graftlib bench --n-prompts K ...` starts N copies (the
prompt count is `--n-prompts`: torchrun's own parser claims every prefix of its options, `--n`
among them); each reads its rank from
the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK), decodes every N-th prompt
(`shard`), runs on `cuda:LOCAL_RANK` when CUDA is there, and appends to its own file
`<stem>.rank<r>-of-<N><suffix>` (`shard_path`), so ranks never write the same file and an
interrupted rank resumes from its own records. Readers merge the base file and every rank file
(`merged_records`); records carry their prompt uid and setting id, so a merge is a plain union.
No process group is needed: ranks never talk to each other. The one table of the whole sweep
is printed by rank 0 once every rank's records are in (`wait_for_records` reads the files until
each wanted (prompt, run) pair of the setting has a record); if a rank fails, torchrun stops
the others, rank 0 included, so the wait cannot outlive the sweep.
"""

import os
import time
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


def wait_for_records(out: str | Path, setting: str, wanted: set[tuple[str, str]], poll_s: float = 2.0,
                     say=print) -> list[dict]:
    """The records of `setting` for every (uid, key) in `wanted`, read from `out` and its rank files;
    blocks, re-reading every `poll_s` seconds, until all are there (rank 0 of a sharded sweep)."""
    require(len(wanted) > 0, "nothing to wait for: no (prompt, run) pairs")
    announced = False
    while True:
        have = {(r["uid"], r["key"]): r for r in merged_records(out) if r.get("setting_id") == setting}
        missing = wanted - have.keys()
        if not missing:
            return [have[k] for k in sorted(wanted)]
        if not announced:
            say(f"waiting for the other ranks: {len(wanted) - len(missing)} of {len(wanted)} decodes in")
            announced = True
        time.sleep(poll_s)
