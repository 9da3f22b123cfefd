"""ingest.naming: the default name of a run, from its folder or file, else from its content."""

from __future__ import annotations

import pytest
from gpuscope.ingest.naming import (
    content_name,
    default_run_name,
    is_generic,
    meta_from_head,
    stem,
    upload_name,
)

NS_2026 = 1_790_857_026_000_000_000  # 2026-10-01 12:17:06 UTC


@pytest.mark.parametrize(
    "source,expected",
    [
        ("llama_rank0.pt.trace.json.gz", "llama"),
        ("before", "before"),
        ("runs/ddp-8gpu/", "ddp-8gpu"),
        ("my run.json", "my run"),
        ("resnet50.pt.trace.json", "resnet50"),
    ],
)
def test_a_meaningful_folder_or_file_name_wins(source: str, expected: str) -> None:
    assert (
        default_run_name(source, {"model": "ignored", "baseTimeNanoseconds": NS_2026}) == expected
    )


@pytest.mark.parametrize(
    "source", ["trace.json.gz", "trace.json", "0", "tmpab12cd", "rank0.pt.trace.json", None]
)
def test_a_generic_name_gives_way_to_the_content(source: str | None) -> None:
    meta = {"model": "gpt2-small", "hostname": "node7", "baseTimeNanoseconds": NS_2026}
    assert default_run_name(source, meta) == "gpt2-small node7 2026-10-01 12:17:06"


def test_tensorboard_handler_file_names_give_host_and_date() -> None:
    name = "gpu-node-3_4242.1790857026000.pt.trace.json"
    assert is_generic(stem(name))
    assert default_run_name(name, {}) == "gpu-node-3 2026-10-01 12:17:06"
    assert content_name({"config": "after"}, name) == "after gpu-node-3 2026-10-01 12:17:06"


def test_nothing_known_keeps_the_generic_name() -> None:
    assert default_run_name("trace.json.gz", {}) == "trace"
    assert default_run_name(None, None) == "trace"
    assert default_run_name("trace.json", {"baseTimeNanoseconds": "garbage"}) == "trace"
    assert default_run_name("trace.json", {"model": {"nested": 1}}) == "trace"


def test_upload_names() -> None:
    assert upload_name(["ddp_rank0.pt.trace.json.gz", "ddp_rank1.pt.trace.json.gz"]) == "ddp"
    assert upload_name(["trace.json.gz"], {"model": "vit", "host": "h1"}) == "vit h1"
    assert upload_name(["rank0.json", "rank1.json"], {"hostname": "h2"}) == "h2"


def test_meta_from_head_reads_the_naming_keys_only() -> None:
    head = '{"schemaVersion": 1, "model": "bert \\"base\\"", "hostname": "n1", "traceEvents": ['
    assert meta_from_head(head) == {"model": 'bert "base"', "hostname": "n1"}
    assert meta_from_head('{"baseTimeNanoseconds": 1790857026000000000}') == {
        "baseTimeNanoseconds": 1790857026000000000
    }
    assert meta_from_head("not json") == {}
