"""benchmarks/validate_gains_set.py's selection of the set's parts: ``--groups`` and ``--seen``
judge exactly the parts named (v01-v235's, blind ones included when named), never a later blind
part, and ``--blind`` keeps meaning every blind part."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from validate_gains_set import SEEN_GROUPS, main, select  # noqa: E402

CASES = [
    {"case": "v01", "group": "calibration"},
    {"case": "v03", "held_out": True},
    {"case": "v29", "group": "blind"},
    {"case": "v41", "group": "blind2"},
    {"case": "v55", "group": "blind3"},
    {"case": "v70", "group": "blind4"},
    {"case": "v86", "group": "blind5"},
    {"case": "v101", "group": "blind6"},
    {"case": "v116", "group": "blind7"},
    {"case": "v131", "group": "blind8"},
    {"case": "v146", "group": "blind9"},
    {"case": "v161", "group": "blind10"},
    {"case": "v176", "group": "blind11"},
    {"case": "v186", "group": "blind12"},
    {"case": "v194", "group": "blind13"},
    {"case": "v203", "group": "blind14"},
    {"case": "v210", "group": "blind15"},
    {"case": "v216", "group": "blind16"},
    {"case": "v224", "group": "blind17"},
    {"case": "v227", "group": "blind18"},
    {"case": "v231", "group": "blind19"},
    {"case": "v237", "group": "blind20"},
    {"case": "v60", "group": "new"},
]


def names(cases: list[dict]) -> list[str]:
    return [c["case"] for c in cases]


def test_named_groups_only_judge_those_groups() -> None:
    assert names(select(CASES, [], blind=False, groups=("blind", "blind2"))) == ["v29", "v41"]
    assert names(select(CASES, ["v41"], blind=False, groups=("blind2",))) == ["v41"]
    assert names(select(CASES, [], blind=False, groups=("held_out_third",))) == ["v03"]


def test_seen_is_v01_to_v235_and_never_a_later_blind_part() -> None:
    assert "blind19" in SEEN_GROUPS and "blind20" not in SEEN_GROUPS
    assert names(select(CASES, [], blind=True, groups=SEEN_GROUPS)) == [
        "v01",
        "v03",
        "v29",
        "v41",
        "v55",
        "v70",
        "v86",
        "v101",
        "v116",
        "v131",
        "v146",
        "v161",
        "v176",
        "v186",
        "v194",
        "v203",
        "v210",
        "v216",
        "v224",
        "v227",
        "v231",
        "v60",
    ]
    assert names(select(CASES, ["v237"], blind=True, groups=SEEN_GROUPS)) == []


def test_blind_still_means_every_blind_part() -> None:
    assert names(select(CASES, [], blind=True)) == names(CASES)
    assert names(select(CASES, [], blind=False)) == ["v01", "v03", "v60"]


def test_seen_and_groups_are_one_or_the_other() -> None:
    with pytest.raises(SystemExit):
        main(["--seen", "--groups", "blind"])
