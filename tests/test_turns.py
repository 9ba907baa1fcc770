"""Multi-turn bench prompts (MT-Bench as DDTree runs it): each turn after the run's own answer, every turn timed."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny import MASK_ID, tiny_drafter, tiny_target, tiny_tokenizer

from graftlib.core.errors import GraftError
from graftlib.core.records import read_records
from graftlib.data import prompts as data
from graftlib.lab.report.metrics import decoded_tokens, summarize
from graftlib.lab.report.multiturn import TURN_FIELDS, combine, matches
from graftlib.lab.run import bench
from graftlib.models import Pair
from graftlib.models.chat import conversation_ids

EOS = MASK_ID  # the tiny tokenizer's <eos>
# Role marks from the tiny vocabulary: ',' opens a user turn, '!' an assistant turn, '.' the generation prompt.
TEMPLATE = ("{% for m in messages %}{{ ',' if m['role'] == 'user' else '!' }}{{ m['content'] }}{% endfor %}"
            "{% if add_generation_prompt %}.{% endif %}")
USER = ("tell me a story", "now shorter")


@pytest.fixture(scope="module")
def pair(one_thread):
    tok = tiny_tokenizer()
    tok.chat_template = TEMPLATE
    return Pair(tiny_target("qwen3", seed=1), tok, tiny_drafter(seed=1), False, "tiny-qwen3", "tiny")


@pytest.fixture
def spy(monkeypatch):
    """Every one-turn decode the bench makes: (run key, uid, prompt ids)."""
    calls = []
    inner = bench.decode_record

    def record(pair, run, prompt, *args, **kw):
        calls.append((run.key, prompt.uid, prompt.input_ids))
        return inner(pair, run, prompt, *args, **kw)

    monkeypatch.setattr(bench, "decode_record", record)
    return calls


def _prompts(tok):
    two = bench.BenchPrompt("mt-bench", "q1", tuple(conversation_ids(tok, [USER[0]])), user_turns=USER)
    one = bench.BenchPrompt("mt-bench", "q2", tuple(conversation_ids(tok, ["what is red"])))
    return [two, one]


def test_second_turn_follows_the_runs_own_answer(pair, spy, tmp_path):
    tok, out = pair.tokenizer, tmp_path / "bench.jsonl"
    runs = [bench.Run("ar", None), bench.Run("dflash", 3), bench.Run("ddtree", 8)]
    recs = bench.run_bench(pair, _prompts(tok), runs, out, bench.BenchSpec(14, warmup=False), progress=False)
    two = {r["key"]: r for r in recs if r["uid"] == "q1"}
    turn1_ids = conversation_ids(tok, [USER[0]])
    for key, rec in two.items():
        t1, t2 = rec["turns"]
        answer = [t for t in t1["tokens"] if t != EOS]
        assert answer and t1["tokens"][len(answer):] in ([], [EOS])  # EOS only ends a turn
        second = conversation_ids(tok, [USER[0], tok.decode(t1["tokens"], skip_special_tokens=True), USER[1]])
        start = len(USER[0]) + 2  # ',' + the first user message + '!'
        assert second[:start - 1] == turn1_ids[:-1] and second[start:start + len(answer)] == answer
        assert second[start - 1] == tok.convert_tokens_to_ids("!")
        assert [ids for k, uid, ids in spy if k == key and uid.startswith("q1")] == [tuple(turn1_ids),
                                                                                     tuple(second)] * (
            2 if key == "ar" else 1)  # AR decodes the prompt twice (bracketing)
        assert [uid for k, uid, _ in spy if k == key and uid.startswith("q1")][:2] == ["q1", "q1/turn2"]
        assert (t1["prompt_tokens"], t2["prompt_tokens"]) == (len(turn1_ids), len(second))
        assert all(set(TURN_FIELDS) <= set(t) for t in rec["turns"])
        assert rec["tokens"] == t1["tokens"] + t2["tokens"] and rec["new_tokens"] == t1["new_tokens"] + t2["new_tokens"]
        for field in ("rounds", "accepted_sum", "decode_s", "prefill_s"):
            assert rec[field] == pytest.approx(t1[field] + t2[field])
        assert decoded_tokens(rec) == rec["new_tokens"] - 2
        assert rec["tokens_per_s"] == pytest.approx(decoded_tokens(rec) / rec["decode_s"])
        assert rec["setting"]["turns"] == "all" and rec["prompt_tokens"] == len(turn1_ids)
        if key == "ar":
            assert all(len(t["decode_s_runs"]) == 2 for t in (rec, t1, t2))
        else:
            assert rec["matches_ar"] and t1["matches_ar"] and t2["matches_ar"]
            assert rec["tokens"] == two["ar"]["tokens"] and len(rec["round_shapes"]) == rec["rounds"]
    assert all("turns" not in r and r["matches_ar"] is not False for r in recs if r["uid"] == "q2")
    rows = {r["key"]: r for r in summarize(recs)}
    for key, row in rows.items():  # a 2-turn record counts as its totals
        mine = [r for r in recs if r["key"] == key]
        assert row["mat"] == pytest.approx(sum(r["accepted_sum"] for r in mine) / sum(r["rounds"] for r in mine))
        assert row["tokens_per_s"] == pytest.approx(sum(r["new_tokens"] - len(r.get("turns", [0])) for r in mine)
                                                    / sum(r["decode_s"] for r in mine))

    n = len(spy)  # resumable: a re-run decodes nothing; a lost record is decoded again, both turns
    assert len(bench.run_bench(pair, _prompts(tok), runs, out, bench.BenchSpec(14, warmup=False), progress=False)) == 6
    assert len(spy) == n
    lines = out.read_text().splitlines()
    lost = next(i for i, line in enumerate(lines) if '"q1"' in line and '"ddtree@8"' in line)
    out.write_text("\n".join(lines[:lost] + lines[lost + 1:]) + "\n")
    bench.run_bench(pair, _prompts(tok), runs, out, bench.BenchSpec(14, warmup=False), progress=False)
    assert [(k, uid) for k, uid, _ in spy[n:]] == [("ddtree@8", "q1"), ("ddtree@8", "q1/turn2")]
    assert len(read_records(out)) == 6

    # --turns 1: the first turn alone, under the one-turn setting (old results), not the 2-turn one
    first_only = [bench.BenchPrompt(p.task, p.uid, p.input_ids) for p in _prompts(tok)]
    one = bench.run_bench(pair, first_only, runs[:1], out, bench.BenchSpec(14, warmup=False), progress=False)
    assert len(read_records(out)) == 8 and all("turns" not in r and "turns" not in r["setting"] for r in one)
    assert {r["uid"]: r["tokens"] for r in one}["q1"] == two["ar"]["turns"][0]["tokens"]


def test_combine_and_matches():
    a = dict(tokens=[1, 2], new_tokens=2, decode_s=0.5, rounds=1, stage_s={"draft": 0.1}, accepted=[2],
             prompt_tokens=5, prefill_s=0.1, accepted_sum=2, nodes_sum=3)
    b = dict(a, tokens=[3], new_tokens=1, accepted=[1], rounds=0, prompt_tokens=9)
    rec = combine([a, b])
    assert rec["tokens"] == [1, 2, 3] and rec["accepted"] == [2, 1] and rec["stage_s"] == {"draft": 0.2}
    assert rec["decode_s"] == 1.0 and "prompt_tokens" not in rec
    assert [t["prompt_tokens"] for t in rec["turns"]] == [5, 9]
    # an AR-drafted run's tree setting is the run's, not a total; its per-round drafter forwards concatenate
    setting = {"depth": 7, "top_k": 10, "total_tokens": 61}
    tree = combine([dict(a, tree_setting=setting, draft_step_s=[[0.1, 0.2]]),
                    dict(b, tree_setting=dict(setting), draft_step_s=[])])
    assert tree["tree_setting"] == setting and tree["draft_step_s"] == [[0.1, 0.2]]
    other = combine([a, dict(b, tokens=[4])])
    assert not matches(other, rec) and [t["matches_ar"] for t in other["turns"]] == [True, False]
    assert matches(combine([a, b]), rec) and not matches(a, rec)  # a one-turn record never matches two turns
    with pytest.raises(GraftError, match="turns disagree on the record field 'note'"):
        combine([dict(a, note="x"), dict(b, note="y")])


def test_task_prompts_carry_mt_bench_turns(monkeypatch):
    monkeypatch.setenv("GRAFT_DATA_FILES", str(Path(__file__).parent / "fixtures" / "data" / "files"))
    data.clear_cache()
    pair = SimpleNamespace(tokenizer=tiny_tokenizer())
    try:
        both = bench.task_prompts(pair, "mt-bench", 2)
        items = data.load_items("mt-bench", limit=2)
        assert [p.user_turns for p in both] == [(i.text, *i.followups) for i in items]
        assert all(len(p.user_turns) == 2 for p in both)
        assert all(p.user_turns == () for p in bench.task_prompts(pair, "mt-bench", 2, turns="1"))
        assert all(p.user_turns == () for p in bench.task_prompts(pair, "gsm8k", 2))  # one-turn sets as before
        with pytest.raises(GraftError, match="unknown --turns '2'"):
            bench.task_prompts(pair, "mt-bench", 1, turns="2")
        with pytest.raises(GraftError, match="cut to --max-prompt-tokens 20.*--turns 1"):
            bench.task_prompts(pair, "mt-bench", 1, max_prompt_tokens=20)
        assert bench.task_prompts(pair, "mt-bench", 1, max_prompt_tokens=20, turns="1")[0].truncated_from > 20
    finally:
        data.clear_cache()
