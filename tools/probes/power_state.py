#!/usr/bin/env python3
"""How a backend's measured time depends on the GPU's power state (session 28). Under sustained
load the H200 sits at its ~690 W power cap and lowers the SM clock by how much power a kernel
draws: FlashAttention-4's BF16 kernels drop to ~1.6 GHz, flamia's FP8 kernels stay at 1.85-1.98.
A benchmark that times a few calls after an idle GPU measures the boost clock instead.

    conditions WORKLOADS OUT.json   flamia's and FA4's forward and fwd+bwd, the median of 15
        calls queued back to back after (a) 2 s idle and 3 warm-up calls, (b) 0.2 s of warm-up,
        (c) 3 s of warm-up, (d) 2 s idle and 3 calls again
    sustained WORKLOADS OUT.json S  the same medians after S seconds of warm-up each
    energy WORKLOADS OUT.json S     joules per call and mean power: after S seconds of warm-up,
        NVML's energy counter around at least ENERGY_SECONDS of calls queued back to back

Each with the SM clock, power draw and throttle reasons nvidia-smi reports right after (0x4 =
the software power cap). Needs FA4_SITE (scripts/fa4-unpack) and FLAMIA_LIBRARY:

    FA4_SITE=/tmp/fa4site FLAMIA_LIBRARY=build/libflamia.so \\
        python3 tools/probes/power_state.py sustained equal-8k,uniform OUT.json 2
"""
import ctypes
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import torch  # noqa: E402

import bench_attention as ba  # noqa: E402

CONDITIONS = (("idle2s_3calls", 0.0, 2.0), ("warm0.2s", 0.2, 0.0), ("warm3s", 3.0, 0.0),
              ("idle2s_3calls_again", 0.0, 2.0))  # (label, warm-up seconds, idle seconds)


ENERGY_SECONDS = 2.0  # the energy mode's measured stretch of calls (NVML's counter is coarse)


class EnergyCounter:
    """GPU 0's total energy counter (NVML, millijoules since the driver loaded) through ctypes,
    so that nothing but the driver is needed."""

    def __init__(self):
        self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
        self.check(self.nvml.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        self.check(self.nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)),
                   "nvmlDeviceGetHandleByIndex_v2")

    @staticmethod
    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what} failed with NVML status {status}")

    def millijoules(self):
        value = ctypes.c_ulonglong()
        self.check(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(value)),
                   "nvmlDeviceGetTotalEnergyConsumption")
        return value.value


def energy_per_call(call, counter, warm_seconds):
    """{"ms", "joules_per_call", "watts", "calls"}: the median time after the warm-up, then the
    energy of at least ENERGY_SECONDS of the same calls queued back to back."""
    ba.set_warmup(warm_seconds)
    ms = ba.median_ms(call)
    calls = max(10, int(ENERGY_SECONDS * 1e3 / ms))
    torch.cuda.synchronize()
    start_mj, start_s = counter.millijoules(), time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    joules = (counter.millijoules() - start_mj) / 1e3
    seconds = time.perf_counter() - start_s
    return {"ms": round(ms, 4), "joules_per_call": round(joules / calls, 5),
            "watts": round(joules / seconds, 1), "calls": calls}


def gpu_state():
    query = "clocks.sm,power.draw,clocks_throttle_reasons.active"
    return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()


def timed_calls(workloads):
    """(workload, backend, "fwd" or "fwdbwd", the call) for flamia and FA4 on each workload."""
    for name in workloads:
        q, k, v, d_o, cu, max_len = ba.make_inputs(ba.all_workloads()[name])
        runs = {"flamia": ba.flamia_runner(q, k, v, d_o, cu, max_len),
                "fa4": ba.fa4_runner(q, k, v, d_o, cu, max_len)}
        for backend, run in runs.items():
            def step(run=run):
                out, _, d_o_ = run(True)
                out.backward(d_o_)
            yield name, backend, "fwd", lambda run=run: run(False)[0]
            yield name, backend, "fwdbwd", step


def main():
    mode, workloads, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    if mode == "energy":
        counter, warm_seconds = EnergyCounter(), float(sys.argv[4])
        results = {"mode": mode, "warm_seconds": warm_seconds, "runs": {}}
        for name, backend, phase, call in timed_calls(workloads):
            key = f"{name}/{backend}/{phase}"
            results["runs"][key] = dict(energy_per_call(call, counter, warm_seconds),
                                        after=gpu_state())
            print(key, results["runs"][key], flush=True)
        Path(out).write_text(json.dumps(results, indent=1))
        return
    conditions = (CONDITIONS if mode == "conditions" else
                  (("sustained", float(sys.argv[4]), 0.0),))
    results = {"mode": mode, "runs": {}}
    for name, backend, phase, call in timed_calls(workloads):
        for label, warm_seconds, idle_seconds in conditions:
            torch.cuda.synchronize()
            time.sleep(idle_seconds)
            ba.set_warmup(warm_seconds)
            key = f"{name}/{backend}/{phase}/{label}"
            results["runs"][key] = {"ms": round(ba.median_ms(call), 4), "after": gpu_state()}
            print(key, results["runs"][key], flush=True)
    Path(out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
