"""Multi-turn benchmark prompts: MT-Bench with every turn, as DDTree's benchmark runs it.

Protocol. A prompt with several user turns is decoded turn by turn by the run under test. Turn 1
decodes the prompt's own ids. After each turn its new tokens, decoded to text without special
tokens (EOS dropped), become the assistant message; the next user turn is appended and the whole
conversation goes through the target's chat template again (`graftlib.models.chat`), then is
decoded afresh: its prefill covers the whole conversation (no KV reuse across turns, as in
DDTree's `benchmark.py`), and each turn is timed like a one-turn decode. Every run continues from
its *own* answers: at T = 0 they are AR's by exactness, so every run decodes the same turn-2
prompt; at T > 0 the turn-2 prompts differ between runs as their outputs do. Turn k > 1 takes its
seed from `turn_uid` (turn 1 keeps the prompt's uid, so its tokens are those of a one-turn run).
Only turn 1 is cut to `--max-prompt-tokens` (`graftlib.data.prompts.format_prompt`), so a cut
prompt cannot be run with its later turns (the bench refuses it).

Record (`combine`). The one-turn fields hold totals over the turns: `tokens` (every turn's new
tokens, in order), `new_tokens`, `prefill_s`, `decode_s`, `rounds`, `accepted_sum`, `nodes_sum`,
`stage_s` and the other counts summed, the per-round lists (`accepted`, `round_shapes`)
concatenated in turn order (any other field must agree across turns). `turns` holds one entry per turn (`TURN_FIELDS`
plus its `prompt_tokens` and `TURN_OPTIONAL`), so a reader that knows nothing of turns reads a prompt's totals, and
`turn_records` splits a record into one-turn records. Each turn's
first token comes from its prefill, so the decoded tokens of a record are new_tokens - 1 per turn
(`turn_entries`, `graftlib.lab.report.metrics.decoded_tokens`). Exactness (`matches`) holds when every
turn's tokens equal AR's for that turn; its verdict (`judge`, `graftlib.core.exactness`) is that of
the first turn that differs, whose prompt is AR's own conversation up to there (every earlier turn
equal). A one-turn prompt's record has no `turns` field.
"""

from collections.abc import Callable

from graftlib.core.errors import require
from graftlib.core.exactness import Divergence, Verdict, verdict
from graftlib.models.chat import conversation_ids

TURNS = ("all", "1")  # the bench's --turns: every user turn of a prompt, or the first only
TURN_FIELDS = ("tokens", "new_tokens", "prefill_s", "decode_s", "rounds", "accepted_sum", "nodes_sum")
TURN_OPTIONAL = ("modeled_s", "ar_rounds", "stage_s")  # kept per turn where a record has them


def user_turns(text: str, followups: tuple[str, ...], turns: str) -> tuple[str, ...]:
    """The user messages a bench prompt decodes with `--turns turns`: () for one turn."""
    require(turns in TURNS, f"unknown --turns {turns!r}: choose from {', '.join(TURNS)}")
    return (text, *followups) if turns == "all" and followups else ()


def turn_uid(uid: str, turn: int) -> str:
    """The uid a turn decodes under (the sampling seed's key): the prompt's own for the first turn."""
    return uid if turn == 0 else f"{uid}/turn{turn + 1}"


def decode_turns(decode: Callable[[tuple[int, ...], int], dict], tokenizer, first_ids: tuple[int, ...],
                 messages: tuple[str, ...]) -> dict:
    """The record of one prompt: `decode(ids, turn)` (a one-turn record) on `first_ids`, then on each
    later user message of `messages` after the answers so far (module doc); fewer than two messages:
    `decode(first_ids, 0)` as it is."""
    if len(messages) < 2:
        return decode(first_ids, 0)
    history: list[str] = []
    records = []
    for turn, user in enumerate(messages):
        history.append(user)
        ids = first_ids if turn == 0 else tuple(conversation_ids(tokenizer, history))
        rec = decode(ids, turn)
        records.append(dict(rec, prompt_tokens=len(ids)))
        history.append(tokenizer.decode(rec["tokens"], skip_special_tokens=True))
    return combine(records)


def combine(records: list[dict]) -> dict:
    """Totals over one-turn records with the per-turn entries under `turns` (module doc)."""
    total: dict = {}
    for key, first in records[0].items():
        values = [r[key] for r in records]
        if isinstance(first, list):  # per-token and per-round lists
            total[key] = [x for v in values for x in v]
        elif key == "stage_s":  # stage times add up; any other dict (a tree setting) is the run's, as below
            total[key] = {k: sum(v[k] for v in values) for k in first}
        elif isinstance(first, (int, float)) and not isinstance(first, bool) and key != "prompt_tokens":
            total[key] = sum(values)
        elif key != "prompt_tokens":
            require(all(v == first for v in values), f"turns disagree on the record field {key!r}: {values}")
            total[key] = first
    total["turns"] = [{k: r[k] for k in (*TURN_FIELDS, "prompt_tokens", *TURN_OPTIONAL) if k in r} for r in records]
    return total


def turn_records(rec: dict) -> list[dict]:
    """A record as one-turn records, one per turn (its `uid` the turn's, `turn_uid`; its totals the turn's, a
    `turn` index), so a reader can take one turn of every prompt (the mixed workload's MT-Bench categories)."""
    if "turns" not in rec:
        return [dict(rec, turn=0)]
    base = {k: v for k, v in rec.items() if k != "turns" and not isinstance(v, list)}
    return [dict(base, **entry, uid=turn_uid(rec["uid"], i), turn=i) for i, entry in enumerate(rec["turns"])]


def turn_entries(rec: dict) -> list[dict]:
    """A record's per-turn entries: its `turns`, or the record itself when it has one turn."""
    return rec.get("turns") or [rec]


def matches(rec: dict, ar: dict) -> bool:
    """Whether `rec` decoded AR's tokens turn by turn; a multi-turn record's entries get their own flag."""
    mine, ref = turn_entries(rec), turn_entries(ar)
    flags = [len(mine) == len(ref) and m["tokens"] == a["tokens"] for m, a in zip(mine, ref)]
    if "turns" in rec:
        for entry, flag in zip(mine, flags):
            entry["matches_ar"] = flag
    return len(mine) == len(ref) and all(flags)


def judge(target, tokenizer, first_ids: tuple[int, ...], messages: tuple[str, ...], rec: dict, ar: dict) -> dict:
    """The record's exactness fields against AR's record of the same prompt: `matches_ar` (tokens equal
    turn by turn), `verdict` (exact / tie / mismatch) and `divergence` (its position, tokens, gap and
    tolerance, with `turn`), from the first turn that differs (module doc)."""
    exact = matches(rec, ar)
    mine, ref = turn_entries(rec), turn_entries(ar)
    if exact:
        return {"matches_ar": True, **Verdict("exact").to_dict()}
    if len(mine) != len(ref):
        return {"matches_ar": False, **Verdict("mismatch", Divergence(-1, -1, -1, float("inf"))).to_dict()}
    history: list[str] = []  # as `decode_turns` builds it, with AR's answers (equal so far)
    for turn, (m, a) in enumerate(zip(mine, ref)):
        history += messages[turn:turn + 1]
        ids = first_ids if turn == 0 else tuple(conversation_ids(tokenizer, history))
        if m["tokens"] != a["tokens"]:
            out = verdict(target, list(ids), a["tokens"], m["tokens"]).to_dict()
            out["divergence"]["turn"] = turn
            return {"matches_ar": False, **out}
        history.append(tokenizer.decode(a["tokens"], skip_special_tokens=True))
    raise AssertionError("unreachable: records differ but no turn does")
