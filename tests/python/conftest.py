"""Shared setup for the flamia Python tests."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
STUB_SOURCE = pathlib.Path(__file__).resolve().parent / "stub" / "flamia_stub.c"

# Test the checkout's package unless one is installed on purpose (FLAMIA_TEST_INSTALLED=1).
if os.environ.get("FLAMIA_TEST_INSTALLED", "") in ("", "0"):
    sys.path.insert(0, str(REPO / "python"))


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
