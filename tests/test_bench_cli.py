"""`pagedmla bench` on a machine without a GPU: argument handling, the no-GPU message, the case plumbing (every
suite's inputs built and run once through the reference on CPU at tiny sizes), the timer's helpers and the
output writers."""

import csv
import io
import json

import pytest
import torch

from pagedmla import bench
from pagedmla.cli import main as cli_main
from pagedmla.testing import perf
from pagedmla.testing.flops import Cost
from pagedmla.testing.shapes import BenchCase, ModelShape

TINY = ModelShape("tiny", 2, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16,
                  hidden_size=64)


def _select(argv):
    return bench.select_cases(bench.build_parser().parse_args(argv))


def test_one_case_from_the_command_line():
    assert [c.name for c in _select(["decode", "--heads", "16", "--batch", "4", "--keys", "1024"])] == [
        "decode B4 N1024 H16"]


def test_lists_may_use_commas_or_repeats():
    a = _select(["decode", "--heads", "16,128", "--batch", "4", "--keys", "1024"])
    b = _select(["decode", "--heads", "16", "--heads", "128", "--batch", "4", "--keys", "1024"])
    c = _select(["decode", "--heads", "16", "128", "--batch", "4", "--keys", "1024"])
    assert [x.name for x in a] == [x.name for x in b] == [x.name for x in c]
    assert len(a) == 2


def test_all_is_the_default_and_covers_every_suite():
    suites = {c.suite for c in _select([])}
    assert suites == {"decode", "mtp", "prefill", "decompress", "cache-write", "sparse"}


@pytest.mark.parametrize("argv", [
    pytest.param(["decode", "--batch", "0"], id="batch0"),
    pytest.param(["decode", "--keys", "x"], id="not-an-int"),
    pytest.param(["mtp", "--keys", "1"], id="fewer-keys-than-query-tokens"),
])
def test_bad_sizes_exit_2_with_a_message(argv, capsys):
    assert bench.main(argv) == 2
    assert "pagedmla bench: error: Invalid" in capsys.readouterr().err


def test_unknown_suite_and_help(capsys):
    assert bench.main(["encode"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert bench.main(["--help"]) == 0
    assert "--heads" in capsys.readouterr().out


def test_without_a_gpu_it_refuses_with_a_clear_message(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status = cli_main(["bench", "decode", "--heads", "16", "--batch", "4", "--keys", "1024"])
    captured = capsys.readouterr()
    assert status != 0
    assert "no CUDA device" in captured.err
    assert captured.out == ""


def test_list_needs_no_gpu(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["prefill", "--list"]) == 0
    out = capsys.readouterr().out
    assert "prefill B1 L8192 H128" in out and "GFLOP" in out


SUITE_CASES = [
    pytest.param(BenchCase("decode", TINY, 3, 37, page_size=4), id="decode"),
    pytest.param(BenchCase("mtp", TINY, 2, 20, query_tokens=3, page_size=4, kv_dtype="fp8"), id="mtp-fp8"),
    pytest.param(BenchCase("sparse", TINY, 2, 40, query_tokens=2, topk=9, page_size=4), id="sparse"),
    pytest.param(BenchCase("sparse", TINY, 2, 40, query_tokens=2, topk=9, page_size=4, kv_dtype="fp8"),
                 id="sparse-fp8"),
    pytest.param(BenchCase("prefill", TINY, 2, 9, page_size=4), id="prefill"),
    pytest.param(BenchCase("prefill", TINY, 2, 9, cache_prefix=5, page_size=4), id="prefill-prefix"),
    pytest.param(BenchCase("decompress", TINY, 2, 10, page_size=4), id="decompress"),
    pytest.param(BenchCase("cache-write", TINY, 3, 2, page_size=4), id="cache-write"),
]


@pytest.mark.parametrize("case", SUITE_CASES)
def test_every_suite_builds_inputs_and_runs_once(case):
    specs = bench.case_specs(case, "cpu")
    ours = specs[0]
    # No CUDA here: "auto" resolves to the reference, which the row must say.
    assert (ours.impl, ours.backend) == ("pagedmla", "reference")
    assert "reference" in ours.note
    for spec in specs:
        if spec.make is None or spec.impl == "cudnn-sdpa":
            continue
        call, out = spec.make(0)
        call()
        assert out is not None and bool(torch.isfinite(out).all())
    impls = [s.impl for s in specs]
    assert impls.count("pagedmla") == 1 and "reference" not in impls
    if case.suite in ("decompress", "cache-write"):
        assert "torch.matmul" in impls
    if case.suite == "prefill":
        baseline = specs[impls.index("cudnn-sdpa")]
        assert (baseline.make is None) == bool(case.cache_prefix)


def test_sparse_indices_name_rows_of_the_query_sequence():
    case = BenchCase("sparse", TINY, 3, 24, query_tokens=2, topk=7, page_size=4)
    call, _ = bench.case_specs(case, "cpu")[0].make(0)
    kv, idx = call.args[2], call.keywords["indices"]
    table = kv.lookup_table.tolist()
    for token in range(case.tokens):
        mine = {table[token // 2][p] * 4 + s for p in range(6) for s in range(4)}
        assert set(idx[token].tolist()) <= mine
        assert len(set(idx[token].tolist())) == 7


def test_large_reference_cases_are_skipped_not_timed():
    case = BenchCase("decode", TINY, 3, 37, page_size=4)
    specs = bench.case_specs(case, "cpu", reference_max_flops=0)
    assert specs[0].make is None and specs[0].note.startswith("skipped")
    specs = bench.case_specs(case, "cpu", reference=False, baselines=False)
    assert len(specs) == 1 and specs[0].make is None and "--no-reference" in specs[0].note


def test_percentile_and_rotation():
    assert perf.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert perf.percentile([1.0, 2.0], 0.2) == pytest.approx(1.2)
    assert perf.percentile([7.0], 0.8) == 7.0
    with pytest.raises(ValueError):
        perf.percentile([], 0.5)
    l2 = 60 << 20
    assert perf.rotation_copies(1 << 30, l2) == 1
    assert perf.rotation_copies(l2 // 2, l2) == 6
    assert perf.rotation_copies(1, l2) == 64
    assert perf.rotation_copies(l2 * 3 // 2, l2) == 2


def test_timer_refuses_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA"):
        perf.time_gpu(lambda: None)
    assert perf.l2_cache_bytes() == perf.DEFAULT_L2_BYTES


def _synthetic_run():
    """Rows built from hand-made timings, to check the arithmetic and the writers (never printed as results)."""
    timing = perf.Timing(median_us=10.0, p20_us=9.0, p80_us=11.0, samples=5, calls_per_sample=100,
                         method="cuda-graph", copies=4)
    ceilings = perf.Ceilings(copy_bytes_per_s=1e12, matmul_flops_per_s=1e14, copy_timing=timing,
                             matmul_timing=timing, copy_bytes=1 << 30, matmul_size=8192)
    case = BenchCase("decode", TINY, 3, 37, page_size=4)
    spec = bench._Spec("pagedmla", "triton", Cost(flops=2_000_000_000, bytes=5_000_000), None)
    ok = bench._row(case, spec, status="ok", note="", timing=timing, ceilings=ceilings)
    skipped = bench._row(case, bench._Spec("reference", "reference", spec.cost, None), status="skipped",
                         note="skipped: too large")
    prov = {"gpu": "test-gpu", "sm_count": 1, "torch": "t", "triton": "tr", "cuda": "c", "python": "p",
            "commit": "abc", "date": "2026-01-01T00:00:00+00:00"}
    return [ok, skipped], ceilings, prov


def test_rows_report_rates_and_the_roofline_fraction():
    (ok, skipped), ceilings, prov = _synthetic_run()
    assert ok["tflops"] == pytest.approx(200.0)
    assert ok["gbps"] == pytest.approx(500.0)
    # Roofline time: max(5e6 / 1e12, 2e9 / 1e14) = 20 us; measured 10 us.
    assert ok["roofline_frac"] == pytest.approx(2.0)
    assert ok["bound"] == "compute"
    table = bench.format_table([ok, skipped], ceilings, prov)
    assert "decode B3 N37 H2" in table and "200.0" in table and "skipped: too large" in table
    assert "triton/graph" in table and "test-gpu" in table


def test_json_and_csv_rows_carry_provenance(tmp_path):
    rows, ceilings, prov = _synthetic_run()
    bench.write_json(str(tmp_path / "out" / "r.json"), rows, prov, ceilings)
    bench.write_csv(str(tmp_path / "r.csv"), rows, prov, ceilings)
    doc = json.loads((tmp_path / "out" / "r.json").read_text())
    assert doc["ceilings"]["matmul_tflop_per_s"] == pytest.approx(100.0)
    for row in doc["rows"]:
        assert row["gpu"] == "test-gpu" and row["commit"] == "abc" and row["date"].startswith("2026")
    with open(tmp_path / "r.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["status"] for r in table] == ["ok", "skipped"]
    assert all(r["triton"] == "tr" and r["torch"] == "t" for r in table)


def test_plot_needs_matplotlib(tmp_path):
    rows, ceilings, prov = _synthetic_run()
    wrote = bench.write_plot(str(tmp_path / "roofline.png"), rows, ceilings, prov)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert wrote is False
    else:
        assert wrote and (tmp_path / "roofline.png").stat().st_size > 0


def test_progress_bar():
    stream = io.StringIO()
    bar = bench._Progress(4, stream=stream, width=8)
    bar.update(2, "decode B4")
    bar.close()
    assert stream.getvalue() == "[####....] 2/4 decode B4\n"


def test_provenance_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    info = bench.provenance()
    assert info["gpu"] == "none" and info["torch"] == torch.__version__
    assert set(bench.PROVENANCE_FIELDS) - {"copy_tb_per_s", "matmul_tflop_per_s"} <= set(info)
    # an explicit commit wins over git's view (a runner's copy of the tree may carry stale git metadata)
    assert bench.provenance(commit="abc1234")["commit"] == "abc1234"
