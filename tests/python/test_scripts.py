"""The repository's bash scripts parse, scripts/patch-ab refuses bad calls before it builds
anything (it would otherwise spend minutes building, or leave the tree patched), and the run.sh
it generates for the device parses and runs its parts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from conftest import REPO as ROOT

BASH_SCRIPTS = sorted(p for p in (ROOT / "scripts").iterdir()
                      if p.is_file() and p.read_text(errors="replace").startswith("#!/usr/bin/env bash"))


def test_there_are_bash_scripts():
    assert len(BASH_SCRIPTS) >= 5, [p.name for p in BASH_SCRIPTS]


@pytest.mark.parametrize("script", BASH_SCRIPTS, ids=lambda p: p.name)
def test_bash_script_parses(script):
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def run_patch_ab(*args: str, tests: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TESTS"}
    if tests is not None:
        env["TESTS"] = tests
    return subprocess.run(["bash", str(ROOT / "scripts" / "patch-ab"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)


# (no variant builds main alone only when TESTS names main: its tests for a device call)
@pytest.mark.parametrize("tests", [None, "", "fold", "mainly,x"])
def test_patch_ab_without_variants_prints_its_usage(tests):
    result = run_patch_ab(tests=tests)
    assert result.returncode == 2
    assert "NAME=PATCH[+PATCH...]" in result.stdout


def git_status(*options: str) -> str:
    return subprocess.run(["git", "status", "--porcelain", *options], cwd=ROOT,
                          capture_output=True, text=True).stdout


def clean_tree_with_build() -> bool:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return False
    dirty = git_status("--untracked-files=no").strip()
    return not dirty and (ROOT / "build" / "build.ninja").exists()


@pytest.mark.parametrize("spec, message", [
    ("bogus", "bad variant 'bogus'"),
    ("main=bench/results/scores_ahead/scores_ahead.patch", "bad variant"),
    ("x=no-such.patch", "does not apply"),
    # each applies to main alone, not one after the other (a plain `git apply --check` of both
    # would pass them)
    ("x=bench/results/scores_ahead/scores_ahead.patch"
     "+bench/results/hoisted_key_warpgroup/hoisted_key_warpgroup.patch", "does not apply after"),
])
def test_patch_ab_rejects_bad_variants_before_building(spec, message):
    if not clean_tree_with_build():
        pytest.skip("needs a clean checkout with build/ configured (patch-ab's own preconditions)")
    before = git_status()
    result = run_patch_ab(spec)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "== main" not in result.stdout  # nothing was built
    assert git_status() == before  # the tree is as it was


FAKE_COMPARE_BUILDS = """import json, sys
json.dump({"a": sys.argv[1], "b": sys.argv[2]}, open(sys.argv[sys.argv.index("--json") + 1], "w"))
"""


def test_patch_ab_run_sh_parts(tmp_path):
    """The generated run.sh parses, and `run.sh bits` compares every variant with main (one
    bits.json) without running the test sets."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("patch-ab stamps run.sh with the git revision")
    result = run_patch_ab("--run-sh", "fast", "slow")
    assert result.returncode == 0, result.stderr
    run_sh = tmp_path / "pab" / "run.sh"
    run_sh.parent.mkdir()
    run_sh.write_text(result.stdout)
    assert "$d/main.so $d/fast.so $d/slow.so" in result.stdout
    assert subprocess.run(["bash", "-n", str(run_sh)]).returncode == 0
    for name in ("main", "fast", "slow"):
        (run_sh.parent / f"{name}.so").touch()
    marker = tmp_path / "ran-a-test"
    tests = run_sh.parent / "tests" / "fast"
    tests.mkdir(parents=True)
    (tests / "flamia_gpu_x").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (tests / "flamia_gpu_x").chmod(0o755)
    work = tmp_path / "work"  # run.sh runs from a repository root: bench/ here is a fake
    (work / "bench").mkdir(parents=True)
    (work / "bench" / "compare_builds.py").write_text(FAKE_COMPARE_BUILDS)
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(run_sh), "bits"], cwd=work,
                          env={**os.environ, "OUT": str(out)}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()  # bits runs no test set
    report = json.loads((out / "bits.json").read_text())
    assert set(report) == {"fast", "slow"}
    assert report["slow"]["a"].endswith("/main.so") and report["slow"]["b"].endswith("/slow.so")
