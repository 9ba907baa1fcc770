"""The cost profile of the machine at hand (`graftlib.lab.run.costs.machine_costs`): the shipped one where it was
fitted, else measured once per machine and pair and cached, and SABA deciding with it."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny import random_prompt, tiny_drafter, tiny_target

from graftlib.core.errors import GraftError
from graftlib.inputs.cost_profile import CostProfile, default_profile
from graftlib.lab.run.costs import machine_costs
from graftlib.lab.run.costs.machine_costs import cache_path, deciding, machine_profile, measure_profile
from graftlib.methods.saba_params import default_params
from graftlib.models import Pair

SHIPPED = default_profile()


@pytest.fixture
def tiny_pair(one_thread):
    return Pair(tiny_target("qwen3"), SimpleNamespace(eos_token_id=None), tiny_drafter(), False, "tiny-qwen3", "tiny")


def _as_shipped_pair(pair):
    """`pair` under the names the shipped profile was fitted for."""
    return Pair(pair.target, pair.tokenizer, pair.drafter, False, SHIPPED.fitted_from["target"],
                SHIPPED.fitted_from["drafter"])


def test_the_shipped_profile_where_it_was_fitted_else_one_measured_once_and_cached(tiny_pair, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("GRAFT_COSTS", str(tmp_path / "costs"))
    calls = []

    def fake(pair, log=print):
        calls.append(pair.target_name)
        return CostProfile("measured-here", "cpu:2-threads:Another CPU", [0.05, 0.002, 0.0], [0.04, 0.0], 0.006)

    monkeypatch.setattr(machine_costs, "hardware_id", lambda device, dtype=None: SHIPPED.hardware)
    shipped_pair = _as_shipped_pair(tiny_pair)
    assert machine_profile(shipped_pair, measure=fake, log=lambda *_: None).id == SHIPPED.id and not calls
    # another machine: measured once, then read from the cache
    monkeypatch.setattr(machine_costs, "hardware_id", lambda device, dtype=None: "cpu:2-threads:Another CPU")
    lines = []
    first = machine_profile(shipped_pair, measure=fake, log=lines.append)
    again = machine_profile(shipped_pair, measure=fake, log=lines.append)
    assert first.id == again.id != SHIPPED.id and len(calls) == 1 and cache_path(shipped_pair).is_file()
    assert cache_path(shipped_pair).parent == tmp_path / "costs"
    assert "fitted on " + SHIPPED.hardware in lines[0] and "Another CPU" in lines[0]
    # another pair on the shipped machine prices with the shipped profile, as before
    monkeypatch.setattr(machine_costs, "hardware_id", lambda device, dtype=None: SHIPPED.hardware)
    assert machine_profile(tiny_pair, measure=fake, log=lambda *_: None).id == SHIPPED.id
    assert calls == [SHIPPED.fitted_from["target"]]
    # an explicit file is never overridden
    path = SHIPPED.save(tmp_path / "mine.json")
    assert machine_profile(tiny_pair, path, measure=fake).id == SHIPPED.id and len(calls) == 1
    with pytest.raises(GraftError, match="nope.json"):
        machine_profile(tiny_pair, tmp_path / "nope.json", measure=fake)


def test_saba_decides_with_the_machines_costs_and_keeps_its_gain():
    assert deciding(None, SHIPPED) is None  # the shipped calibration, as shipped
    other = CostProfile("measured-here", "cpu:2-threads:Another CPU", [0.05, 0.002, 0.0], [0.04, 0.0], 0.006)
    params, shipped = deciding(None, other), default_params()
    assert list(params.c) == other.c and list(params.c_ar) == other.c_ar and params.c_draft == other.c_draft
    assert params.phi == shipped.phi and params.alpha == shipped.alpha and params.grid == shipped.grid
    assert params.meta["cost_profile"] == other.label


def test_a_measured_profile_prices_rounds_and_names_its_machine(tiny_pair, tmp_path):
    prompts = [random_prompt(i, 12) for i in range(2)]
    p = measure_profile(tiny_pair, log=lambda *_: None, prompts=prompts, new_tokens=24)
    assert p.c[0] > 0 and p.c[1] >= 0 and p.c_ar[0] > 0 and p.c_draft > 0
    assert p.c_ar_draft is None  # no EAGLE-3 drafter: AR-drafted rounds cannot be priced, and say so
    with pytest.raises(GraftError, match="no AR drafter cost"):
        p.require_ar_draft()
    made = p.fitted_from
    assert made["target"] == "tiny-qwen3" and made["prompts"] == 2 and made["new_tokens"] == 24
    assert made["machine"] == tiny_pair.describe()["hardware"] and p.hardware.startswith("cpu:")
    assert CostProfile.load(p.save(tmp_path / "p.json")).id == p.id


def test_the_suite_measures_into_its_own_home_never_the_users():
    """tests/conftest.py points GRAFT_COSTS at a folder of this run's: a profile measured under the suite's load
    never reaches the user's GRAFT_HOME."""
    import os

    from graftlib.core.paths import costs_dir, graft_home

    assert "graft-test-costs-" in os.environ["GRAFT_COSTS"] and costs_dir() == Path(os.environ["GRAFT_COSTS"])
    assert not costs_dir().resolve().is_relative_to(graft_home().resolve())
