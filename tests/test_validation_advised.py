"""sample_traces/validation/record_advised.py: recorded cases' planted variants against their fixed
variants with what gpuscope's code adds to the recipe's fix (v72cl, v88cl: bf16 autocast with the
model in channels_last). Built on the CPU at the --quick sizes; nothing here is read by the truth."""

from __future__ import annotations

import pytest
from validation_parts import (
    VAL,
    counting_autocast,
    make_truth,
    record_advised,
    record_blind4,
    record_blind5,
)


def test_each_case_is_a_recorded_case_with_the_recipes_fix_and_more() -> None:
    for case, spec in record_advised.CASES.items():
        base = {4: record_blind4, 5: record_blind5}[4 if spec["base"] == "v72" else 5].CASES[
            spec["base"]
        ]
        assert spec["model"] == base["model"] and spec["planted"] == base["planted"]
        assert spec["expected_fix"] == base["expected_fix"] == "mixed_precision"
        assert spec["fix"].startswith(base["fix"]) and "channels_last" in spec["fix"]
        assert case not in make_truth.FIRST_FIXES
    truth = (VAL / "truth.json").read_text()
    assert not any(f'"{c}"' in truth for c in record_advised.CASES)


@pytest.mark.slow
def test_only_the_fixed_variant_runs_in_bf16_with_its_model_in_channels_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)
    entered = counting_autocast(monkeypatch)
    for case in record_advised.CASES:
        for variant in ("planted", "fixed"):
            entered.clear()
            step, n, meta, model = record_advised.build(case, variant, "cpu")
            step()
            convs = [p for p in model.parameters() if p.dim() == 4]
            fixed = variant == "fixed"
            assert n > 0 and convs, case
            assert meta["channels_last"] is fixed
            assert len(entered) == (1 if fixed else 0), (case, variant)
            cl = torch.channels_last  # a 1x1 kernel's weight is contiguous in both layouts
            if fixed:
                assert all(p.is_contiguous(memory_format=cl) for p in convs), case
                assert any(not p.is_contiguous() for p in convs), case
            else:
                assert all(p.is_contiguous() for p in convs), case
