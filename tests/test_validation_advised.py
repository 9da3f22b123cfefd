"""sample_traces/validation/record_advised.py: recorded cases' planted variants against their fixed
variants with what gpuscope's code adds to the recipe's fix (``vNNcl``: bf16 autocast with the
model in channels_last; ``vNNpm``: the batches through ``DataLoader(pin_memory=True)``), and bf16 in
channels_last timed as a first fix on other cases' planted variants (``vNNmc``, which the truth
reads as first fixes). Built on the CPU at the --quick sizes."""

from __future__ import annotations

import pytest
from validation_parts import VAL, counting_autocast, make_truth, record_advised


def test_each_case_is_a_recorded_case_with_the_recipes_fix_and_more() -> None:
    first = set(record_advised.FIRST_FIXES)
    for case, spec in record_advised.CASES.items():
        base = record_advised.PARTS[spec["base"]].CASES[spec["base"]]
        if case in first:
            continue
        if spec["base"] in record_advised.BF16_NCHW:
            assert case == spec["base"] + "nc" and "NCHW" in spec["fix"]
            continue
        assert case == spec["base"] + (
            "cl" if spec["base"] in record_advised.CHANNELS_LAST else "pm"
        )
        assert spec["model"] == base["model"] and spec["planted"] == base["planted"]
        assert spec["expected_fix"] == base["expected_fix"]
        if case.endswith("cl"):
            assert spec["expected_fix"] == "mixed_precision"
            assert spec["fix"].startswith(base["fix"]) and "channels_last" in spec["fix"]
        else:
            assert spec["expected_fix"] == "pin_memory"
            assert "DataLoader(pin_memory=True)" in spec["fix"]
        assert case not in make_truth.FIRST_FIXES
    truth = (VAL / "truth.json").read_text()
    assert not any(f'"{c}"' in truth for c in set(record_advised.CASES) - first)


def test_the_first_fixes_in_channels_last_are_read_by_the_truth_from_their_bases_folders() -> None:
    """Each ``vNNmc`` is a first fix of make_truth (``mixed_precision`` on the base's planted
    variant, its timing in the base's folder), a case named once, its base none of the ``cl``
    ones (whose recipe's fix is bf16 already); every one was timed, 3 rounds each."""
    import json

    specs = record_advised.FIRST_FIXES
    assert set(specs) == {f"{c}mc" for c in record_advised.BF16_CHANNELS_LAST_FIRST}
    assert not {s["base"] for s in specs.values()} & set(record_advised.CHANNELS_LAST)
    timed = {c["case"]: c for c in json.loads((VAL / "truth.json").read_text())["first_fixes"]}
    for case, spec in specs.items():
        assert make_truth.FIRST_FIXES[case] is spec
        assert spec["expected_fix"] == "mixed_precision" and spec["how"] == "bf16"
        assert (VAL / spec["base"] / record_advised.FIRST_FIX_TIMING).is_file(), case
        assert timed[case]["base"] == spec["base"]
        assert len(timed[case]["gain_pct_by_round"]) == 3, case
    # v51's null optimizer pair gained 68.1 % so; v142's lost 13.0 (sample_traces/validation)
    assert round(timed["v51mc"]["gain_pct"], 1) == 68.1
    assert round(timed["v142mc"]["gain_pct"], 1) == -13.0


def test_a_first_fix_in_channels_last_runs_the_planted_variant_so_in_bf16(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both variants of each ``vNNmc`` build the base's planted variant; the fixed one enters the
    kit's bf16 autocast each step, its convolutions' weights in channels_last (channels_last_3d
    for v226's 3-D net), the planted one neither. v176's TCN has 1-D convolutions, whose 3-D
    weights no memory format changes: bf16 alone."""
    torch = pytest.importorskip("torch")
    entered = counting_autocast(monkeypatch)
    for case in record_advised.FIRST_FIXES:
        for variant in ("planted", "fixed"):
            entered.clear()
            step, n, meta, model = record_advised.build(case, variant, "cpu")
            step()
            fixed = variant == "fixed"
            assert n > 0 and meta["applied"] is fixed and meta["first_fix"] == "bf16_channels_last"
            assert len(entered) == (1 if fixed else 0), (case, variant)
            convs = [p for p in model.parameters() if p.dim() in (4, 5)]
            if case == "v176mc":  # Conv1d weights only: as they were
                assert not convs and any(p.dim() == 3 for p in model.parameters())
                continue
            assert convs, case
            three_d = convs[0].dim() == 5
            assert three_d == (case == "v226mc")
            fmt = torch.channels_last_3d if three_d else torch.channels_last
            if fixed:
                assert meta["memory_format"] == ("channels_last_3d" if three_d else "channels_last")
                assert all(p.is_contiguous(memory_format=fmt) for p in convs), case
            else:
                assert all(p.is_contiguous() for p in convs), case


def test_the_pool_pinned_per_batch_gives_the_recipes_batches_in_turn_through_a_loader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under ``PIN_PER_BATCH`` the pool gives each batch through ``DataLoader(pin_memory=True)``
    (pinned when taken; on a machine without a GPU the loader leaves it as it is), in the order
    the recipe takes them, ``pool[n % len(pool)]``; the switch off, the pool is pinned once (not
    on a CPU: the recipes pin only on a GPU)."""
    torch = pytest.importorskip("torch")
    import record_common

    pool = [(torch.full((2,), float(i)), torch.tensor([i])) for i in range(3)]
    monkeypatch.setattr(record_common, "PIN_PER_BATCH", True)
    seen = []
    import torch.utils.data as tud

    real = tud.DataLoader

    def loader(*a, **kw):  # type: ignore[no-untyped-def]
        seen.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(tud, "DataLoader", loader)
    got = record_common.pinned_pool(pool)
    assert [kw["pin_memory"] for kw in seen] == [True] and len(got) == 3
    taken = [got[n % len(got)] for n in range(7)]
    assert [int(b[1]) for b in taken] == [0, 1, 2, 0, 1, 2, 0]
    assert all(isinstance(b, tuple) and torch.equal(b[0], pool[int(b[1])][0]) for b in taken)


OWN_AUTOCAST = frozenset({"v45cl"})
"""Cases whose recipe makes its own ``torch.autocast`` rather than entering the kit's."""


@pytest.mark.slow
def test_only_the_fixed_variant_runs_in_bf16_with_its_model_in_channels_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    entered = counting_autocast(monkeypatch)
    for case in (c for c in record_advised.CASES if c.endswith("cl")):
        for variant in ("planted", "fixed"):
            entered.clear()
            step, n, meta, model = record_advised.build(case, variant, "cpu")
            step()
            convs = [p for p in model.parameters() if p.dim() == 4]
            fixed = variant == "fixed"
            assert n > 0 and convs, case
            assert meta["channels_last"] is fixed
            # v45's recipe opens its own autocast (not the kit's), enabled on a GPU only
            want = 1 if fixed and case not in OWN_AUTOCAST else 0
            assert len(entered) == want, (case, variant)
            cl = torch.channels_last  # a 1x1 kernel's weight is contiguous in both layouts
            if fixed:
                assert all(p.is_contiguous(memory_format=cl) for p in convs), case
                assert any(not p.is_contiguous() for p in convs), case
            else:
                assert all(p.is_contiguous() for p in convs), case


def test_bf16_in_nchw_runs_the_planted_variant_under_autocast_in_its_own_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``v232nc``: both variants build v232's planted variant; the fixed one enters the kit's bf16
    autocast each step and leaves its convolutions' weights as built (NCHW), as the planted one."""
    torch = pytest.importorskip("torch")
    entered = counting_autocast(monkeypatch)
    for variant in ("planted", "fixed"):
        entered.clear()
        step, n, meta, model = record_advised.build("v232nc", variant, "cpu")
        step()
        assert n > 0 and meta["bf16_nchw"] is (variant == "fixed")
        assert len(entered) == (1 if variant == "fixed" else 0)
        convs = [p for p in model.parameters() if p.dim() == 4]
        assert convs and all(p.is_contiguous() for p in convs)
        assert any(not p.is_contiguous(memory_format=torch.channels_last) for p in convs)
