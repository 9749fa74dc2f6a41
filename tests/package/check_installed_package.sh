#!/usr/bin/env bash
# ctest c_api_installed_package: installs the build tree into a fresh prefix, builds the C example
# (examples/c_api) against the installed CMake package alone, and runs it. Exit 77 (no sm_90
# GPU: the example ran its host-side checks only) is reported as skipped.
#   check_installed_package.sh BUILD_DIR EXAMPLE_DIR WORK_DIR
set -euo pipefail
build=$1 example=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/include/flamia/flamia.h" && ls "$work"/prefix/lib*/libflamia.so >/dev/null
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$example" -B "$work/example" "${generator[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/configure.log"
cmake --build "$work/example" >"$work/build.log"
# The example finds libflamia.so through the installed target's RPATH.
"$work/example/flamia_c_example"
