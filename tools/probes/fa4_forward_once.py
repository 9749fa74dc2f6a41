#!/usr/bin/env python3
"""FlashAttention-4's forward on one public workload, once under the CUDA profiler's range (for
ncu --profile-from-start off): the instructions per score of the fastest BF16 kernel on Hopper,
to set beside flamia's (docs/reference-fa4-sm90.md). Needs FA4_SITE (scripts/fa4-unpack).

    FA4_SITE=/tmp/fa4site ncu --profile-from-start off --metrics ... \
        python3 tools/probes/fa4_forward_once.py equal-8k
"""
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_attention as ba  # noqa: E402

name = sys.argv[1] if len(sys.argv) > 1 else "equal-8k"
w = json.loads((ROOT / "bench/workloads.json").read_text())["workloads"][name]
q, k, v, d_o, cu, max_len = ba.make_inputs(w)
run = ba.fa4_runner(q, k, v, d_o, cu, max_len)
run(False)  # JIT compile and warm-up outside the profiled range
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
run(False)
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
scores = sum(L * L / 2 for L in w["doc_lens"]) * w["heads_q"]  # causal convention
print(json.dumps({"workload": name, "scores": scores}))
