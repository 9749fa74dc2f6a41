"""The result scripts the GPU runs feed: scripts/sass_hotspots.py (an Nsight Compute source-page
CSV summed by opcode), scripts/collect_results.py merge (keeps the previous h200.json's
A/B and profile keys), and scripts/sass_compare.py (two builds' SASS, function by function)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO

SCRIPTS = REPO / "scripts"

SOURCE_PAGE = """\
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_mio","stall_wait"
"0x10","MUFU.EX2 R1, R2","300","250","64","200","100"
"0x20","@!P0 MUFU.EX2 R3, R4","100","50","64","10","90"
"0x30","FADD R1, R2, -8","40","5","128","0","40"
"0x40","WARPGROUP.DEPBAR.LE gsb0, 0x0","1,000","900","8","0","3"
"""


def run(*args: str) -> str:
    return subprocess.run([sys.executable, *args], check=True, capture_output=True,
                          text=True).stdout


def test_sass_hotspots_sums_by_opcode(tmp_path):
    csv = tmp_path / "source.csv"
    csv.write_text("==PROF== a line before the table\n" + SOURCE_PAGE)
    out = run(str(SCRIPTS / "sass_hotspots.py"), str(csv))
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line[:1].isalpha() and len(line.split()) == 6}
#opcode, static count, samples, percent, not issued, executed
    assert rows["MUFU"][1:3] == ["2", "400"]  # the predicated one counts as MUFU
    assert rows["MUFU"][4:] == ["300", "128"]
    assert rows["WARPGROUP"][2] == "1000"  # "1,000" read as a number
    assert float(rows["WARPGROUP"][3]) == round(100 * 1000 / 1440, 1)
    hottest = out.split("hottest instructions")[1].splitlines()[1]
    assert "DEPBAR" in hottest and "stall_wait=3" in hottest


def test_collect_results_merge_keeps_previous_keys(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    timing = {"ms": 1.0, "tflops": 500.0}
    kernels = {"workloads": {"w": {"forward": timing, "backward": {
        "fp8": timing, "fp8-bf16grad": timing, "deterministic": timing}}}}
    (out / "kernels.json").write_text(json.dumps(kernels))
    (out / "tests.json").write_text(json.dumps({"passed": 3, "failed": 0, "skipped": 0}))
    results = tmp_path / "results"
    results.mkdir()
    (results / "h200.json").write_text(json.dumps({
        "commit": "old", "kernels": {"stale": True}, "commit_note": "old note",
        "forward_ab": {"what": "an A/B of an earlier commit"}}))
    run(str(SCRIPTS / "collect_results.py"), "merge", str(out), "--commit", "new",
        "--results", str(results))
    merged = json.loads((results / "h200.json").read_text())
    assert merged["commit"] == "new"
    assert merged["kernels"] == kernels  # replaced
    assert merged["forward_ab"] == {"what": "an A/B of an earlier commit"}  # kept
    assert "commit_note" not in merged  # the note described the old run
    table = (results / "h200.md").read_text()
    assert "Tests: 3 passed" in table and "| w | 1.000 (500) |" in table
    assert "carried_over" not in merged  # everything measured came from this run


def test_collect_results_merge_names_what_it_carried_over(tmp_path):
    """A merge whose OUT lacks a part h200.json had (here the tests and the quantize pass) keeps
    it, but under carried_over with the commit that measured it, and h200.md says so; through a
    second merge the first commit stays, not the merge's in between."""
    out = tmp_path / "out"
    out.mkdir()
    timing = {"ms": 1.0, "tflops": 500.0}
    (out / "kernels.json").write_text(json.dumps({"workloads": {"w": {
        "forward": timing, "backward": {"fp8": timing, "fp8-bf16grad": timing,
                                        "deterministic": timing}}}}))
    results = tmp_path / "results"
    results.mkdir()
    (results / "h200.json").write_text(json.dumps({
        "commit": "old", "tests": {"passed": 9, "failed": 0, "skipped": 0},
        "quantize": {"jobs": {}}}))
    for commit in ("new", "newer"):
        run(str(SCRIPTS / "collect_results.py"), "merge", str(out), "--commit", commit,
            "--results", str(results))
        merged = json.loads((results / "h200.json").read_text())
        assert merged["commit"] == commit
        assert merged["tests"]["passed"] == 9  # kept ...
        assert merged["carried_over"] == {"tests": "old", "quantize": "old"}  # ... and named
        table = (results / "h200.md").read_text()
        assert "kept from an earlier h200.json: tests (commit old); quantize (commit old)" in table


def test_collect_results_keep_stores_a_baselines_run(tmp_path):
    """collect_results.py keep: a bench_baselines.py run is copied to RESULTS/KEY.json and
    recorded under h200.json's KEY (what baselines_table renders); the other keys stay."""
    run_json = tmp_path / "run.json"
    run_json.write_text(json.dumps({"device": "H200", "causal": True, "workloads": {"w": {
        "fwd_flops": 1e12,
        "flamia": {"fwd_ms": 2.0, "fwdbwd_ms": 6.0, "fwd_tflops": 500.0},
        "fa4": {"fwd_ms": 1.5, "fwdbwd_ms": 5.0, "fwd_tflops": 666.0},
        "cudnn": {"error": "RuntimeError: no path"},
        "best_bf16_fwd": "fa4", "speedup_fwd": 0.75,
        "best_bf16_fwdbwd": "fa4", "speedup_fwdbwd": 5.0 / 6.0}}}))
    results = tmp_path / "results"
    results.mkdir()
    (results / "h200.json").write_text(json.dumps({"commit": "c", "other": {"kept": 1}}))
    run(str(SCRIPTS / "collect_results.py"), "keep", "windowed", str(run_json), "--what",
        "a test run.", "--command", "bench_baselines.py --window 8", "--results", str(results))
    merged = json.loads((results / "h200.json").read_text())
    assert merged["other"] == {"kept": 1}
    block = merged["windowed"]
    assert block["what"] == "a test run." and block["file"] == str(results / "windowed.json")
    assert block["workloads"]["w"] == {
        "flamia_fwd_ms": 2.0, "flamia_fwdbwd_ms": 6.0, "best_bf16_fwd": "fa4",
        "speedup_fwd": 0.75, "best_bf16_fwdbwd": "fa4", "speedup_fwdbwd": 5.0 / 6.0,
        "baselines": {"fa4": {"fwd_ms": 1.5, "fwdbwd_ms": 5.0}},
        "baseline_errors": {"cudnn": "RuntimeError: no path"}}  # the fastest BF16 lacks it
    assert json.loads((results / "windowed.json").read_text()) == json.loads(run_json.read_text())
    # h200.md says which backend failed (not only '-', which also means "no path for the shape")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import collect_results
    finally:
        sys.path.remove(str(SCRIPTS))
    table = collect_results.markdown({"sliding_window": block})
    assert "- w; failed, not timed: cudnn (RuntimeError: no path)" in table.splitlines()


def test_profile_forward_call_gaps_and_totals():
    sys.path.insert(0, str(REPO / "bench"))
    from profile_forward_call import summarize_call

    kernels = [{"name": "quantize", "start_us": 100.0, "us": 50.0},
               {"name": "plan", "start_us": 160.0, "us": 5.0},
               {"name": "forward", "start_us": 170.0, "us": 300.0}]
    s = summarize_call(kernels, wall_us=600.0)
    assert [k["gap_before_us"] for k in s["kernels"]] == [0.0, 10.0, 5.0]
    assert s["kernel_us"] == 355.0 and s["gpu_span_us"] == 370.0 and s["wall_us"] == 600.0
    assert summarize_call([], 1.0)["gpu_span_us"] == 0.0


def test_training_step_table_groups_kernels(tmp_path):
    """collect_results.training_step_table: each profiled kernel in its group, the rest among
    the small kernels, and the share outside the two attention kernels."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import collect_results
    finally:
        sys.path.remove(str(SCRIPTS))
    names_us = [("check_seqlens_kernel(int const*)", 2.0),
                ("void flamia::quantize::quantize_tensor_kernel<128, false>(JobBatch)", 250.0),
                ("void flamia::forward::forward_kernel<128, false, false>(Params)", 500.0),
                ("void flamia::quantize::quantize_tensor_kernel<128, true>(JobBatch)", 240.0),
                ("void flamia::backward::backward_kernel<128, false, false>(Params)", 1500.0),
                ("void flamia::backward::convert_dq_kernel<128>(float const*)", 100.0),
                ("Memset (Device)", 8.0)]
    kernels = [{"name": n, "us": us} for n, us in names_us]
    profile = {"commit": "abc", "calls": 3, "workloads": {"w": {"best_call": {
        "kernels": kernels, "kernel_us": sum(us for _, us in names_us)}}}}
    lines = collect_results.training_step_table(profile)
    row = next(line for line in lines if line.startswith("| w |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # workload, forward quantize, forward kernel, dO job, backward kernel, dQ, small, total, %
    assert cells[1:] == ["250", "500", "240", "1500", "100", "10", "2600", "23%"]
    assert collect_results.training_step_table({"workloads": {}}) == []


def test_markdown_renders_baseline_runs():
    """collect_results.markdown: a kept bench_baselines.py run (`long_context`) becomes a table
    with every backend's ms, '-' for one that did not run, and the ratios."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import collect_results
    finally:
        sys.path.remove(str(SCRIPTS))
    block = {"what": "W.", "command": "C", "workloads": {"one-128k": {
        "flamia_fwd_ms": 2.0, "flamia_fwdbwd_ms": 8.0, "best_bf16_fwd": "fa4",
        "speedup_fwd": 0.5, "best_bf16_fwdbwd": "flex", "speedup_fwdbwd": 1.25,
        "baselines": {"fa4": {"fwd_ms": 1.0, "fwdbwd_ms": 11.0},
                      "flex": {"fwd_ms": 3.0, "fwdbwd_ms": 10.0}}}}}
    text = collect_results.markdown({"long_context": block})
    row = next(line for line in text.splitlines() if line.startswith("| one-128k |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == ["2.000 / 8.000", "-", "-", "3.000 / 10.000", "1.000 / 11.000",
                         "0.50 (fa4)", "1.25 (flex)"]
    assert "## Non-causal" not in text


def workload_row(**extra) -> dict:
    """One workload of bench_attention.py's JSON: flamia 2.0 / 7.0 ms, FlexAttention the
    fastest BF16 baseline at 1.1x, plus `extra`."""
    return {"flamia_fwd_ms": 2.0, "flamia_fwd_tflops": 500.0, "flamia_fwdbwd_ms": 7.0,
            "flamia_fwdbwd_tflops": 500.0, "best_bf16_fwd_ms": 2.2, "best_bf16_fwd_name": "flex",
            "speedup_fwd": 1.1, "best_bf16_fwdbwd_ms": 7.7, "best_bf16_fwdbwd_name": "flex",
            "speedup_fwdbwd": 1.1, "baselines": {"flex": {"fwd_ms": 2.2, "fwdbwd_ms": 7.7}},
            **extra}


def test_workload_table_names_the_baselines_that_failed():
    """collect_results.workload_table: a BF16 baseline that raised in bench_attention.py
    (baseline_errors: FlashAttention-4 without its wheels, say) is named in h200.md, so a
    speedup against the fastest of fewer backends says so; none failed, nothing added."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import collect_results
    finally:
        sys.path.remove(str(SCRIPTS))
    r = workload_row(baseline_errors={
        "fa4": "RuntimeError: FA4_SITE not set\n(scripts/fetch-fa4-wheels)"})
    lines = collect_results.workload_table({"w": r})
    row = next(line for line in lines if line.startswith("- w:"))
    assert row == ("- w: flex 2.200/7.700 (fwd/fwd+bwd ms); failed, not timed: fa4 "
                   "(RuntimeError: FA4_SITE not set (scripts/fetch-fa4-wheels))")
    del r["baseline_errors"]
    row = next(line for line in collect_results.workload_table({"w": r})
               if line.startswith("- w:"))
    assert row == "- w: flex 2.200/7.700 (fwd/fwd+bwd ms)"


def test_markdown_names_a_failed_fp8_baseline_apart_from_the_bf16_ones():
    """cuDNN's FP8 forward (not a BF16 baseline) that raised is listed on its own line in
    h200.md, not among the BF16 baselines a speedup was taken without."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import collect_results
    finally:
        sys.path.remove(str(SCRIPTS))
    r = workload_row(fp8_baseline_errors={"cudnn_fp8": "ImportError: No module named 'cudnn'"})
    text = collect_results.markdown({"workloads": {"w": r}})
    assert "- w: flex 2.200/7.700 (fwd/fwd+bwd ms)\n" in text  # no BF16 failure named
    assert ("- w: cuDNN FP8; failed, not timed: cudnn_fp8 (ImportError: No module named "
            "'cudnn')") in text


def write_stamps(path, slots: dict[int, list[int]]) -> None:
    """A timeline file (kernels/common/timeline.h: 65536 slots x 16 uint64) with `slots` set."""
    import struct
    values = [0] * (65536 * 16)
    for slot, row in slots.items():
        values[slot * 16:(slot + 1) * 16] = row
    path.write_bytes(struct.pack(f"<{len(values)}Q", *values))


def test_timeline_report_backward_phases(tmp_path):
    # Two SMs at 1 cycle per ns, two CTAs each: prologue 1000 cycles, 100 per step (3 or 5
    # steps), key epilogue 200, dQ warpgroup 300 behind the key steps and 50 for its wait, then
    # 100 cycles to the SM's next CTA.
    slots, index = {}, 0
    for sm in (0, 1):
        start = 5000
        for steps in (3, 5):
            s1 = start + 1000
            s2 = s1 + 100 * steps
            end = s2 + 350
            counters = [30, 60] + [10 * steps * (k + 1) for k in range(6)]  # k + 1 per step
            slots[index] = [start, s1, s2, s2 + 200, start + 400, s2 + 300, end, *counters,
                            (sm << 32) | steps]
            index += 1
            start = end + 100
    f = tmp_path / "bwd.bin"
    write_stamps(f, slots)
    span_ns = 2 * 1350 + 800 + 100  # an SM's first start to last end, in cycles = ns
    report = json.loads(run(str(REPO / "bench" / "timeline_report.py"), "backward", str(f),
                            "--kernel-ms", str(span_ns / 1e6)))
    assert report["ctas"] == 4 and report["sms"] == 2
    assert abs(report["clock_ghz"] - 1.0) < 1e-9
    us = report["mean_us"]
    assert us["prologue (entry -> first step ready)"] == 1.0
    assert us["key epilogue (dK, dV stores)"] == 0.2
    assert us["dQ final reduction wait"] == 0.05
    assert us["end (steps done -> CTA done)"] == 0.35
    assert us["gap to the next CTA on the SM"] == 0.1
    assert us["key warpgroups wait for a free hand-off buffer"] == 0.03
    assert us["dQ warpgroup waits for a full hand-off buffer"] == 0.06
    assert us["step: dP's second half (per step)"] == 0.03
    assert us["step: next loads landed and the barrier (per step)"] == 0.06
    assert report["steps_fit_us"] == {"per_cta": 0.0, "per_step": 0.1}


def test_timeline_report_forward_phases(tmp_path):
    # One SM, three items of 2, 4 and 6 key tiles: 50 cycles per item and 100 per tile in the
    # loop, an epilogue of 30, consumer 1 10 cycles behind, 20 cycles to the next item.
    slots, t = {}, 1000
    for index, tiles in enumerate((2, 4, 6)):
        loop_end = t + 50 + 100 * tiles
        slots[index] = [t, loop_end, loop_end + 30, t + 10, loop_end + 10, loop_end + 40,
                        *[0] * 9, tiles]
        t = loop_end + 30 + 20
    f = tmp_path / "fwd.bin"
    write_stamps(f, slots)
    span_ns = slots[2][5] - slots[0][0]
    report = json.loads(run(str(REPO / "bench" / "timeline_report.py"), "forward", str(f),
                            "--kernel-ms", str(span_ns / 1e6)))
    assert report["items"] == 3
    us = report["mean_us"]
    assert us["consumer 0: epilogue"] == 0.03
    assert us["consumer 1 starts after consumer 0"] == 0.01
    assert us["consumer 0: wait for the next item"] == 0.02
    assert report["loop_fit_us"] == {"per_item": 0.05, "per_key_tile": 0.1}


def test_time_in_rounds_alternates_order_and_keeps_the_best():
    """bench_attention.time_in_rounds: each backend's best (fwd, fwd+bwd) over the rounds, the
    order reversed every other round, a failing backend reported once and not run again, a
    backend that returns None (no path for the shape) left out."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_attention

    calls = []
    measured = {"a": iter([(2.0, 9.0), (3.0, 8.0), (1.5, 9.5)]), "c": iter([(4.0, 4.0)] * 3)}

    def backend(name):
        def run():
            calls.append(name)
            if name == "broken":
                raise ValueError("no kernel for this shape")
            if name == "absent":
                return None
            return next(measured[name])
        return run

    names = ("a", "broken", "absent", "c")
    best, errors = bench_attention.time_in_rounds({n: backend(n) for n in names}, 3)
    assert best == {"a": (1.5, 8.0), "c": (4.0, 4.0)}
    assert errors == {"broken": "ValueError: no kernel for this shape"}
    assert calls == ["a", "broken", "absent", "c", "c", "absent", "a", "a", "absent", "c"]


def test_time_in_rounds_drops_a_backend_that_fails_in_a_later_round():
    """A backend timed in round 1 that raises in round 2 is reported as failed and its round-1
    time is not kept: one result, not both a best time and an error, and no time from a backend
    that did not run every round."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_attention

    outcomes = iter([(1.0, 2.0), RuntimeError("out of memory")])

    def flaky():
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    best, errors = bench_attention.time_in_rounds(
        {"steady": lambda: (3.0, 4.0), "flaky": flaky}, 2)
    assert best == {"steady": (3.0, 4.0)}
    assert errors == {"flaky": "RuntimeError: out of memory"}


def test_collect_results_keeps_and_renders_the_power_state(tmp_path):
    """collect_results.py keep-power-state: tools/probes/power_state.py's two runs go under
    h200.json's power_state and render as the sustained table (x = FA4 / flamia) and the
    by-condition table, conditions in the probe's order."""
    after = "1965 MHz, 689.11 W, 0x0000000000000004"
    conditions = {"mode": "conditions", "runs": {
        f"w/{b}/{phase}/{label}": {"ms": ms, "after": after}
        for b, base in (("flamia", 2.0), ("fa4", 1.0))
        for phase in ("fwd", "fwdbwd")
        for label, ms in (("idle", base), ("warm", base * 1.5))}}
    sustained = {"mode": "sustained", "runs": {
        f"w/{b}/{phase}/sustained": {"ms": ms, "after": after}
        for b, ms in (("flamia", 2.0), ("fa4", 1.6)) for phase in ("fwd", "fwdbwd")}}
    (tmp_path / "c.json").write_text(json.dumps(conditions))
    (tmp_path / "s.json").write_text(json.dumps(sustained))
    results = tmp_path / "results"
    results.mkdir()
    (results / "h200.json").write_text(json.dumps({"commit": "c"}))
    run(str(SCRIPTS / "collect_results.py"), "keep-power-state", str(tmp_path / "c.json"),
        str(tmp_path / "s.json"), "--what", "a test.", "--command", "probe", "--results",
        str(results))
    block = json.loads((results / "h200.json").read_text())["power_state"]
    assert block["sustained"] == sustained and block["conditions"] == conditions
    table = (results / "h200.md").read_text()
    assert "| w | 2.000 | 1.600 | 0.80 | 2.000 | 1.600 | 0.80 |" in table
    assert "| workload / backend / phase | idle | warm |" in table
    assert "| w/fa4/fwd | 1.000 (1965 MHz, 689.11 W) | 1.500 (1965 MHz, 689.11 W) |" in table


SASS_A = """\
		Function : kernel_same
        /*0000*/                   MOV R1, c[0x0][0x28] ;                  /* 0x00000a0000017a02 */
        /*0010*/                   EXIT ;                                   /* 0x000000000000794d */
		Function : kernel_moved
        /*0000*/                   R2UR UR8, R6 ;                           /* 0x00000000060872ca */
        /*0010*/              @!P0 IMAD R2, R3, 0x4, R2 ;                   /* 0x0000000403028824 */
        /*0020*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ; /* 0x0 */
"""


def test_sass_compare_reads_every_instruction(tmp_path):
    a = tmp_path / "a.sass"
    b = tmp_path / "b.sass"
    a.write_text(SASS_A)
    # kernel_same differs only in addresses and encodings; kernel_moved loses its R2UR and IMAD
    b.write_text(SASS_A.replace("/*0010*/                   EXIT ;                                   "
                                "/* 0x000000000000794d */",
                                "/*0020*/                   EXIT ; /* 0x1111 */")
                 .replace("        /*0000*/                   R2UR UR8, R6 ;"
                          "                           /* 0x00000000060872ca */\n", "")
                 .replace("@!P0 IMAD R2, R3, 0x4, R2", "UIADD3 UR8, UR4, 0x4, URZ"))
    out = run(str(SCRIPTS / "sass_compare.py"), str(a), str(b)).splitlines()
    assert out[0] == "1 identical, 1 different (of 2 functions matching '')"
    assert out[1].startswith("kernel_moved: 3 -> 2 instructions; ")
    assert set(out[1].split("; ")[1].split(" ")) == {"IMAD", "-1", "R2UR", "UIADD3", "+1"}
    # a renamed register is a change
    b.write_text(SASS_A.replace("MOV R1,", "MOV R2,"))
    out = run(str(SCRIPTS / "sass_compare.py"), str(a), str(b), "--filter", "same").splitlines()
    assert out == ["0 identical, 1 different (of 1 functions matching 'same')",
                   "kernel_same: 2 -> 2 instructions; (same opcodes; operands or order differ)"]


NVDISASM_G = """\
//--------------------- .text.kernel_other --------------------------
        /*0000*/                   EXIT ;
//--------------------- .text.kernel_loop --------------------------
\t//## File "/work/x/src/kernels/a.cuh", line 3
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_7:
\t//## File "/work/x/src/kernels/a.cuh", line 5
        /*0010*/                   FFMA R2, R2, R3, R4 ;
        /*0020*/                   FFMA R5, R2, R3, R4 ;
\t//## File "/work/x/src/kernels/b.cuh", line 9
        /*0030*/                   MUFU.EX2 R2, R2 ;
        /*0040*/               @P0 BRA `(.L_x_7) ;
        /*0050*/                   EXIT ;
"""


def test_sass_lines_attributes_a_loop_to_source_lines(tmp_path, monkeypatch):
    text = tmp_path / "k.txt"
    text.write_text(NVDISASM_G)
    monkeypatch.setattr("sys.path", [str(SCRIPTS)] + sys.path)
    import sass_lines
    name, instructions, labels = sass_lines.disassemble(str(text), "kernel_loop")
    assert name == "kernel_loop" and labels == {"7": 0x10}
    assert [(a, loc) for a, _, loc in instructions][1] == (0x10, ("kernels/a.cuh", 5))
    assert sass_lines.loops(instructions, labels, min_loop=2) == [(1, 4)]
    assert sass_lines.loops(instructions, labels) == []  # a short branch is a spin wait
    out = run(str(SCRIPTS / "sass_lines.py"), str(text), "--function", "kernel_loop",
              "--min-loop", "2", "--loop", "0", "--by-file").splitlines()
    assert out[:2] == ["kernel_loop", "  loop 0: 0x10-0x40, 4 instructions"]
    assert out[2].split() == ["2", "50.0%", "kernels/a.cuh"]
    assert out[3].split() == ["2", "50.0%", "kernels/b.cuh"]
    assert out[4].split()[:4] == ["2", "kernels/a.cuh:5", "FFMA", "2"]
    assert out[5].split()[:6] == ["2", "kernels/b.cuh:9", "MUFU", "1", "BRA", "1"]


PTXAS_LOG = """\
ptxas info    : Compiling entry function '_ZN6flamia8backward15backward_kernelILi128ELb0ELb0ELb0ELb1EEEvNS0_14BackwardParamsE' for 'sm_90a'
ptxas info    : Function properties for _ZN6flamia8backward15backward_kernelILi128ELb0ELb0ELb0ELb1EEEvNS0_14BackwardParamsE
    SPILLS_PRODUCTION bytes stack frame, SPILLS_PRODUCTION bytes spill stores, SPILLS_PRODUCTION bytes spill loads
ptxas info    : Used 168 registers
ptxas info    : Compiling entry function '_ZN6flamia8backward15backward_kernelILi128ELb0ELb1ELb0ELb1EEEvNS0_14BackwardParamsE' for 'sm_90a'
    32 bytes stack frame, 48 bytes spill stores, 44 bytes spill loads
ptxas info    : Used 168 registers
ptxas info    : Compiling entry function '_ZN6flamia7forward14forward_kernelILi64ELb1ELb0ELb0ELb1EEEvNS0_13ForwardParamsE' for 'sm_90a'
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : (C7517) warpgroup.wait is injected in around line 1 by compiler to allow use of registers defined by GMMA in function '_ZN6flamia8backward15backward_kernelILi128ELb0ELb0ELb0ELb1EEEvNS0_14BackwardParamsE'
"""


def test_ptxas_report_fails_on_production_spills_and_serialization(tmp_path):
    script = str(SCRIPTS / "ptxas_report.py")

    def report(log):
        return subprocess.run([sys.executable, script, "src/x.cu"], input=log, text=True,
                              capture_output=True)

    # the test instruments' spills (backward kDebugPHat, forward kDebugProbabilities) and the
    # injected waits (C7517) pass
    clean = report(PTXAS_LOG.replace("SPILLS_PRODUCTION", "0"))
    assert clean.returncode == 0, clean.stdout
    assert clean.stdout.splitlines()[0] == "x.cu: 3 functions, 2 spill"
    assert all(line.startswith("  debug: ") for line in clean.stdout.splitlines()[1:])
    spilling = report(PTXAS_LOG.replace("SPILLS_PRODUCTION", "8"))
    assert spilling.returncode == 1
    assert "  PRODUCTION: _ZN6flamia8backward15backward_kernelILi128ELb0ELb0ELb0ELb1E" in \
        spilling.stdout
    serialized = report(PTXAS_LOG.replace("SPILLS_PRODUCTION", "0").replace(
        "(C7517) warpgroup.wait is injected",
        "(C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized"))
    assert serialized.returncode == 1
    assert "wgmma serialized (C7512)" in serialized.stdout


def test_accuracy_only_run_feeds_a_timing_run(tmp_path, monkeypatch):
    """bench_attention.py --accuracy-only writes each workload's accuracy fields (the scale mode
    asked for, fp8-bf16grad's, static's) and nothing timed; --accuracy-from refuses a file of
    another scale mode or one that lacks a workload of the run, and a run told to measure the
    accuracy too or not at all, before anything is timed."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_attention

    asked = []

    def fake_accuracy(w, cli, scale_mode, precision="fp8"):
        asked.append((w["head_dim"], scale_mode, precision))
        return {"o_rel_l2_vs_ref": 0.003 if precision == "fp8" else 0.002}

    monkeypatch.setattr(bench_attention, "accuracy", fake_accuracy)
    measured = tmp_path / "accuracy.json"
    monkeypatch.setattr(sys, "argv", ["bench_attention.py", "--accuracy-only", "--json",
                                      str(measured), "--workloads", "equal-2k"])
    assert bench_attention.main() == 0
    data = json.loads(measured.read_text())
    assert data == {"scale_mode": "exact", "workloads": {"equal-2k": {
        "o_rel_l2_vs_ref": 0.003, "bf16grad_accuracy": {"o_rel_l2_vs_ref": 0.002},
        "static_accuracy": {"o_rel_l2_vs_ref": 0.003}}}}
    assert asked == [(128, "exact", "fp8"), (128, "exact", "fp8-bf16grad"),
                     (128, "static", "fp8")]
    timed = tmp_path / "attention.json"
    for extra in (["--scale-mode", "static"], ["--workloads", "equal-2k,uniform"],
                  ["--no-accuracy"], ["--accuracy-only"]):
        monkeypatch.setattr(sys, "argv", ["bench_attention.py", "--accuracy-from", str(measured),
                                          "--json", str(timed), "--workloads", "equal-2k",
                                          *extra])
        with pytest.raises(SystemExit) as refused:
            bench_attention.main()
        assert refused.value.code == 2
        assert not timed.exists()


def test_accuracy_fields_measures_only_the_parts_asked_for(monkeypatch):
    """bench_attention.accuracy_fields with parts: only those run `flamia accuracy`; every
    other field is the base record's, and the record names the parts it measured."""
    sys.path.insert(0, str(REPO / "bench"))
    import bench_attention

    runs = []

    def fake_accuracy(w, cli, scale_mode, precision="fp8"):
        runs.append((scale_mode, precision))
        return {"o_rel_l2_vs_ref": 0.5, "new": True}

    monkeypatch.setattr(bench_attention, "accuracy", fake_accuracy)
    base = {"o_rel_l2_vs_ref": 0.003, "dq_rel_l2_vs_ref": 0.007,
            "bf16grad_accuracy": {"o_rel_l2_vs_ref": 0.004},
            "static_accuracy": {"o_rel_l2_vs_ref": 0.009},
            "accuracy_parts_measured": ["scale_mode", "bf16grad", "static"]}
    fields = bench_attention.accuracy_fields({}, "exact", ["static"], base)
    assert runs == [("static", "fp8")]
    assert fields == {"o_rel_l2_vs_ref": 0.003, "dq_rel_l2_vs_ref": 0.007,
                      "bf16grad_accuracy": {"o_rel_l2_vs_ref": 0.004},
                      "static_accuracy": {"o_rel_l2_vs_ref": 0.5, "new": True},
                      "accuracy_parts_measured": ["static"]}
    runs.clear()
    fields = bench_attention.accuracy_fields({}, "exact")
    assert runs == [("exact", "fp8"), ("exact", "fp8-bf16grad"), ("static", "fp8")]
    assert "accuracy_parts_measured" not in fields  # a whole record, as before
