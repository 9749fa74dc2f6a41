"""Shared setup for the flamia Python tests."""

from __future__ import annotations

import os
import pathlib
import secrets
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB_SOURCE = pathlib.Path(__file__).resolve().parent / "stub" / "flamia_stub.c"

# Test the checkout's package unless one is installed on purpose (FLAMIA_TEST_INSTALLED=1).
if os.environ.get("FLAMIA_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, str(REPO / "python"))

# Inputs of the GPU tests are fresh per run: one seed per session, from FLAMIA_TEST_SEED when
# set, else random; shown in the header and with every failure, so a failing run can be repeated
# with FLAMIA_TEST_SEED=<value>. The test modules read it from the environment.
RUN_SEED = int(os.environ.get("FLAMIA_TEST_SEED") or secrets.randbits(32))
os.environ["FLAMIA_TEST_SEED"] = str(RUN_SEED)


def pytest_report_header(config):
    return f"FLAMIA_TEST_SEED={RUN_SEED} (set it to repeat this run's inputs)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("flamia", f"FLAMIA_TEST_SEED={RUN_SEED}"))


def c_compiler() -> str | None:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="session")
def stub_library(tmp_path_factory) -> pathlib.Path:
    """tests/python/stub/flamia_stub.c built as a shared library (a CPU stand-in for
    libflamia.so)."""
    cc = c_compiler()
    if cc is None:
        pytest.skip("no C compiler (cc, gcc or clang) to build the stub library")
    out = tmp_path_factory.mktemp("stub") / "libflamia_stub.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror",
                    f"-I{REPO / 'include'}", str(STUB_SOURCE), "-o", str(out)], check=True)
    return out


def pytest_sessionfinish(session, exitstatus):
    # A run that selected no test must not pass as green (pytest's exit code 5 would read as
    # "ran no test" to CI): make it a failure that says why.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("flamia: no test was selected; failing the run on purpose",
                                red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
