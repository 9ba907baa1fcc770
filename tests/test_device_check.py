"""The device check's CPU run at its smallest (`graft device-check --device cpu --tiny`): every section
on the tiny random Qwen3 pair, one JSON file and a table; a failing section is recorded, not fatal."""

import json
from dataclasses import replace

import pytest

from graftlib.cli import main
from graftlib.core.paths import ASSETS_DIR
from graftlib.inputs.cost_profile import CostProfile
from graftlib.lab.run import device_check

pytestmark = pytest.mark.usefixtures("one_thread")
COSTS = ASSETS_DIR / "costs"


def test_cpu_run_writes_every_section(tmp_path, capsys):
    code = main(["device-check", "--device", "cpu", "--tiny", "--out", str(tmp_path)])
    table = capsys.readouterr().out
    report = json.loads((tmp_path / "device-check.json").read_text())
    s = report["sections"]
    assert list(s) == list(device_check.SECTIONS) and report["hardware"].startswith("cpu:")
    assert code == 0 and all(e["status"] == "ok" for e in s.values()), {n: e.get("error") for n, e in s.items()}
    assert {r["budget"] for r in s["host"]["result"]["table"]["rows"]} == {8, 64}
    ex = s["exactness"]["result"]
    assert ex["passed"] and ex["exact"] == 60 and {r["model"] for r in ex["rows"]} == {"tiny-llama", "tiny-qwen3"}
    assert {r["run"] for r in ex["rows"]} >= {"eagle3@59", "opt-tree@8"} and ex["dtype"] == "float32"
    assert sorted(map(int, s["costs"]["result"]["verify_ms"])) == [1, 2, 4, 8, 16, 32, 64]
    steps = s["prepare"]["result"]["manifest"]["steps"]
    assert {k: v["status"] for k, v in steps.items()} == {"traces": "made", "tdes": "made", "saba": "made"}
    assert (tmp_path / "cost-profile.json").is_file()
    rows = {r["key"]: r for r in s["bench"]["result"]["rows"]}
    assert set(rows) == {"ar", "dflash@7", "ddtree@8", "graft@16"} and all(r["exact"] for r in rows.values())
    assert s["bench"]["result"]["artifacts"] == "prepared"
    assert "exactness  ok" in table and "graft@16" in table


def test_a_failing_section_is_recorded_not_fatal(tmp_path, monkeypatch):
    def broken(cfg, pair):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(device_check, "costs_section", broken)
    monkeypatch.setattr(device_check, "exactness_section", lambda cfg, pair: {
        "dtype": "float32", "rows": [], "exact": 0, "tie": 0, "mismatch": 0, "passed": True})
    cfg = device_check.tiny(device_check.CheckConfig(device="cpu", run_prepare=False))
    report = device_check.device_check(cfg, tmp_path, log=lambda _: None)
    s = report["sections"]
    assert s["costs"]["status"] == "error" and "no such kernel" in s["costs"]["error"]
    assert s["prepare"]["status"] == "skipped" and s["bench"]["status"] == "ok"  # the later sections still ran
    assert {r["key"] for r in s["bench"]["result"]["rows"]} == {"ar", "dflash@7", "ddtree@8"}  # no artifacts: no graft
    assert json.loads((tmp_path / "device-check.json").read_text())["sections"]["costs"]["status"] == "error"
    spent = device_check.device_check(device_check.replace(cfg, minutes=1e-6), tmp_path, log=lambda _: None)
    assert {e["status"] for e in spent["sections"].values()} == {"skipped"}  # the time budget holds every section


def test_bfloat16_run_gives_verdicts_and_no_mismatch(tmp_path):
    """The GPU's numerics on the CPU: every method on the tiny pairs in bfloat16, each decode exact or
    a certified tie, none a mismatch; the report and the pair say bfloat16."""
    cfg = device_check.tiny(device_check.CheckConfig(device="cpu", dtype="bfloat16", run_prepare=False))
    report = device_check.device_check(replace(cfg, minutes=10), tmp_path, log=lambda _: None)
    ex = report["sections"]["exactness"]["result"]
    assert report["dtype"] == "bfloat16" and ex["dtype"] == "bfloat16"
    assert ex["mismatch"] == 0 and ex["exact"] + ex["tie"] == 60, [r for r in ex["rows"] if r["mismatch"]]
    rows = report["sections"]["bench"]["result"]["rows"]
    assert all(r["mismatches"] == 0 for r in rows)
    records = [json.loads(line) for line in (tmp_path / "bench.jsonl").read_text().splitlines()]
    assert {r["setting"]["dtype"] for r in records} == {"bfloat16"}
    assert all(r["verdict"] in ("exact", "tie") for r in records if r["method"] != "ar")


def test_the_shipped_h200_profile_is_derived_from_its_committed_report():
    """graftlib/assets/costs/h200-bfloat16.json = `device_profile` of the device check report beside it."""
    report = json.loads((COSTS / "h200-bfloat16.device-check.json").read_text())
    shipped = CostProfile.load(COSTS / "h200-bfloat16.json")
    derived = device_check.device_profile(report, name="h200-bfloat16")
    assert derived.to_dict() == shipped.to_dict() and shipped.hardware == "cuda:NVIDIA H200"
    verify_ms = report["sections"]["costs"]["result"]["verify_ms"]
    assert shipped.c_ar[0] == verify_ms["1"] / 1000 and 0 < shipped.c[1] < 1e-5  # flat: a node ~0.02% of a step
    assert shipped.c_ar_draft is not None and report["dtype"] == "bfloat16"
