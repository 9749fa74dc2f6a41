"""The repository's bash scripts parse, and scripts/patch-ab refuses bad calls before it builds
anything (it would otherwise spend minutes building, or leave the tree patched)."""
from __future__ import annotations

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


def run_patch_ab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "scripts" / "patch-ab"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_patch_ab_without_variants_prints_its_usage():
    result = run_patch_ab()
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
