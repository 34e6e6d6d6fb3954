"""CPU tests of the benchmark tools' bookkeeping (benchmarks/bench_attention.py, compare_anchors.py):
which tensors each FP8-run column times, and the ratios the tables print. No kernel runs here."""
import importlib.util
import json
import pathlib
import sys
import types

import pytest

torch = pytest.importorskip("torch")

BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture()
def bench(monkeypatch):
    mod = _load("bench_attention")
    monkeypatch.setattr(mod, "DEVICE", "cpu")
    return mod


def _impls(mod, args, flash_attn_func):
    """bench_attention's Impls with a stand-in for flashcute.flash_attn_func (no kernel)."""
    impls = mod.Impls(torch, args)
    impls.flashcute = types.SimpleNamespace(flash_attn_func=flash_attn_func)
    return impls


def _fp8_case(mod, impls):
    args = mod.parse_args(["--dtype", "fp8", "--impls", impls, "--hdims", "64", "--seqlens", "1024",
                           "--causal", "no"])
    case = dict(mod.make_cases(args)[0], batch=1, seqlen=33, heads=3)
    return args, case


def test_fp8_columns_time_the_tensors_they_name(bench):
    args, case = _fp8_case(bench, "flashcute,flashcute_bf16,flashcute_bf16src,cudnn")
    seen = {}
    impls = _impls(bench, args, lambda q, k, v, **kw: seen.setdefault("qkv", (q, k, v)))
    inputs = impls.make_inputs(case)
    src, e4m3, same = inputs["bshd_src"], inputs["bshd"], inputs["bshd16"]
    for s, f, b in zip(src, e4m3, same):
        assert s.dtype == torch.bfloat16 and f.dtype == torch.float8_e4m3fn and b.dtype == torch.bfloat16
        assert torch.equal(f.to(torch.bfloat16), b)          # same values as the e4m3 kernel sees
        assert torch.equal(s.to(torch.float8_e4m3fn).to(torch.bfloat16), b)  # their bf16 source
        assert not torch.equal(s, b)                          # randn has bits that e4m3 drops
    for col, want in (("flashcute_bf16", same), ("flashcute_bf16src", src)):
        seen.clear()
        fn, _, layout = impls.runner(col, case, inputs)
        fn()
        assert layout == "bshd" and all(a is w for a, w in zip(seen["qkv"], want)), col


def test_bf16_columns_need_fp8(bench, capsys):
    args = bench.parse_args(["--impls", "flashcute,flashcute_bf16src", "--hdims", "64", "--seqlens", "1024"])
    impls = _impls(bench, args, lambda *a, **k: None)
    case = dict(bench.make_cases(args)[0], batch=1, seqlen=8, heads=2)
    with pytest.raises(bench.Unavailable):
        impls.runner("flashcute_bf16src", case, impls.make_inputs(case))
    # the default column list has the fp8-only columns in fp8 runs only
    for dtype, present in (("bf16", False), ("fp8", True)):
        bench.main(["--dry-run", "--dtype", dtype, "--hdims", "64", "--seqlens", "1024"])
        cols = capsys.readouterr().out.split("columns (", 1)[1].split(")", 1)[0].split(", ")
        assert all((c in cols) == present for c in bench.FP8_BF16_IMPLS), (dtype, cols)


def test_fp8_table_prints_e4m3_over_both_bf16_columns(bench):
    args, _ = _fp8_case(bench, "flashcute,flashcute_bf16,flashcute_bf16src,cudnn")
    cols = bench.column_names(args.impls, args.backend)
    tf = {"flashcute": 840.0, "flashcute_bf16": 700.0, "flashcute_bf16src": 600.0, "cudnn": 560.0}
    results = [dict(hdim=64, causal=False, seqlen=1024, impl=c, tflops=tf[c]) for c in cols]
    table = bench.markdown_table(results, [], cols, args)
    head = [h.strip() for h in table.splitlines()[2].strip("|").split("|")]
    row = [x.strip() for x in table.splitlines()[4].strip("|").split("|")]
    got = dict(zip(head, row))
    assert got["flashcute÷flashcute bf16"] == "1.20"
    assert got["flashcute÷flashcute bf16 (source)"] == "1.40"
    assert got["flashcute÷cuDNN"] == "1.50"


def test_compare_anchors_fp8_ratios(tmp_path, capsys):
    ca = _load("compare_anchors")
    rows = [dict(hdim=128, causal=False, seqlen=16384, impl=i, tflops=t)
            for i, t in (("flashcute", 900.0), ("flashcute_bf16", 750.0),
                         ("flashcute_bf16src", 720.0), ("cudnn", 650.0))]
    path = tmp_path / "fp8.json"
    path.write_text(json.dumps(dict(results=rows, config=dict(dtype="fp8"), timer="t")))
    _, dtype, cases = ca.load(str(path))
    assert dtype == "fp8"
    assert cases[(128, False, 16384)] == {"ours": 900.0, "bf16": 750.0, "bf16src": 720.0, "cudnn": 650.0}
    ca.fp8_over_bf16(cases)
    line = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("128")][0]
    # e4m3 / bf16 on the same values, on the source tensors, and FA3's own 942 / 684 (ANCHORS.md)
    assert line.split("|")[1].split() == ["1.200", "1.250"]
    assert line.split("|")[2].split() == [f"{942 / 684:.3f}"]


def test_fp8_mode_bench_switch_columns_set_and_restore_the_switch(monkeypatch):
    """bench_fp8_mode.py's -bfly columns run their call with FLASHCUTE_FP8_QUANTIZE_MMA=0 (the
    butterflies) and leave the environment as it was, set or unset, also when the call raises."""
    import os
    sys.path.insert(0, str(BENCH))  # bench_fp8_mode imports bench_attention by name
    try:
        mod = _load("bench_fp8_mode")
    finally:
        sys.path.remove(str(BENCH))
    name = mod.MMA_ENV
    seen = []
    run = mod.with_env(lambda: seen.append(os.environ.get(name)), name, "0")
    for before in (None, "1"):
        if before is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, before)
        run()
        assert seen[-1] == "0"
        assert os.environ.get(name) == before

    def boom():
        raise RuntimeError("kernel failed")
    with pytest.raises(RuntimeError):
        mod.with_env(boom, name, "0")()
    assert os.environ.get(name) == "1"
    assert {"quant-blocks-bfly", "fp8-mode-bfly"} <= set(mod.COLUMNS)
