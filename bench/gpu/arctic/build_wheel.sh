#!/usr/bin/env bash
# Builds arctic-inference 0.3.0 (only what vLLM's suffix speculative decoding imports:
# arctic_inference.suffix_decoding, a nanobind C++ extension, no CUDA, no torch) as a
# manylinux2014 wheel for one Python, and puts it with install.sh and smoke_test.py into a carry
# folder (default .gpuarc/ at the repo root, ignored by git as /.gpu*/). PyPI has no wheel of
# it for the GPU machine's Python 3.12, and the GPU machine has no network to build one.
#
#   bash bench/gpu/arctic/build_wheel.sh [PYTHON] [OUT]
#     PYTHON: the interpreter the wheel is for (default: pyenv's newest 3.12, else python3.12 on
#             PATH; the GPU machine's vLLM runs 3.12). `.venv/bin/python` gives this machine's
#             cp311 one (for tests/test_spec_suffix_cpu.py).
#     OUT:    where the wheel, install.sh, smoke_test.py and SHA256SUMS go (default .gpuarc)
#
# Needs the network once (pip download from the configured indexes, into $ARC_DL, default
# ~/.cache/arctic-build: the sdist and the build tools of build-requirements.txt, every file
# checked against its sha256, and numpy for the smoke test; ~145 MB, ziglang most of it). Offline
# afterwards: PIP_NO_INDEX=1 PIP_FIND_LINKS=~/.cache/arctic-build. ~3 min on 2 cores.
# How it builds: zig's clang (ziglang) with its static, hidden libc++ targeting glibc 2.17, so
# the .so needs only libc/libm/libpthread/libdl and no libstdc++; setup.py imports torch only
# for a CMake path the suffix-decoding CMakeLists never uses, so a stub torch (torchstub/) is on
# PYTHONPATH while it builds; ARCTIC_INFERENCE_PRECOMPILED_OPS stays unset (no CUDA ops).
# The result: with these pins the cp312 _C.so is byte-identical to the one built on 2026-11-28
# (sha256 below; the script says whether it matched); in any case smoke_test.py must pass.
# On the GPU host: `bash .gpuarc/install.sh python3 /root/pw` (bench/gpu/flags_goodput.sh does
# it when .gpuarc/ is carried). Never set ARCTIC_INFERENCE_ENABLED: the wheel's vLLM plugin is
# inert without it, and with it would monkey-patch vLLM.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
VERSION=0.3.0
SDIST_SHA=7f22e3e1b1071c6061c0d6951be17c0fb50b08d06d6e543144c8f52faba60a36
# _C.so of the wheels built on 2026-11-28 with these pins (zig clang, glibc 2.17 target)
declare -A KNOWN_SO=(
  [cp312]=c4976a74c6299ae762e794d52a557801539821cb1b136e466572ae2348dbaf8b
  [cp311]=194f2e4f4b5478acf0cd6cd3be82d0e581146baee2db641d69afdea5867dd578
)
PY="${1:-}"
if [ -z "$PY" ]; then
  PY="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3.12 2>/dev/null \
        | sort -V | tail -1)"
  PY="${PY:-$(command -v python3.12 || true)}"
  [ -n "$PY" ] || { echo "no python3.12 (pyenv install 3.12, or pass PYTHON)" >&2; exit 2; }
fi
OUT="${2:-$ROOT/.gpuarc}"
DL="${ARC_DL:-$HOME/.cache/arctic-build}"
TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
W="$(mktemp -d /tmp/arcbuild.XXXXXX)"
trap 'rm -rf "$W"' EXIT
echo "building arctic-inference $VERSION for $PY ($TAG) in $W -> $OUT"
mkdir -p "$DL" "$OUT"

"$PY" -m venv "$W/venv"
VPY="$W/venv/bin/python"
"$VPY" -m pip download -q -d "$DL" --only-binary :all: --require-hashes \
  -r "$HERE/build-requirements.txt"
"$VPY" -m pip install -q --no-index --find-links "$DL" --require-hashes \
  -r "$HERE/build-requirements.txt"
# The sdist: pip prepares its metadata by running setup.py, hence the stub torch and no
# isolation (the build tools are all in the venv already).
echo "arctic-inference==$VERSION --hash=sha256:$SDIST_SHA" > "$W/sdist.txt"
PATH="$W/venv/bin:$PATH" PYTHONPATH="$HERE/torchstub" \
  "$VPY" -m pip download -q -d "$DL" --no-deps --no-binary :all: --no-build-isolation \
  --require-hashes -r "$W/sdist.txt"
echo "$SDIST_SHA  $DL/arctic_inference-$VERSION.tar.gz" | sha256sum -c --quiet

printf '#!/bin/sh\nexec %s -m ziglang c++ -target x86_64-linux-gnu.2.17 "$@"\n' "$VPY" \
  > "$W/zigcxx"
chmod +x "$W/zigcxx"
tar -xzf "$DL/arctic_inference-$VERSION.tar.gz" -C "$W"
(
  cd "$W/arctic_inference-$VERSION"
  unset ARCTIC_INFERENCE_PRECOMPILED_OPS ARCTIC_MINIMAL_BUILD DEBUG CMAKE_GENERATOR CXXFLAGS \
    LDFLAGS CPPFLAGS
  PATH="$W/venv/bin:$PATH" PYTHONPATH="$HERE/torchstub" \
    CMAKE_ARGS="-DCMAKE_CXX_COMPILER=$W/zigcxx" \
    "$VPY" -m pip wheel -q --no-index --no-build-isolation --no-deps -w "$W/dist" .
)
"$W/venv/bin/auditwheel" show "$W"/dist/*.whl
"$VPY" -m wheel tags --remove \
  --platform-tag manylinux_2_17_x86_64.manylinux2014_x86_64 "$W"/dist/*.whl
WHL="$(ls "$W"/dist/arctic_inference-"$VERSION"-"$TAG"-*manylinux*.whl)"

# the extension, byte for byte against the 2026-11-28 build
mkdir "$W/unz"
"$VPY" -m zipfile -e "$WHL" "$W/unz"
SO_SHA="$(sha256sum "$W"/unz/arctic_inference/suffix_decoding/_C.*.so | cut -d' ' -f1)"
if [ "${KNOWN_SO[$TAG]:-}" = "$SO_SHA" ]; then
  echo "_C.so sha256 $SO_SHA: byte-identical to the 2026-11-28 build"
else
  echo "_C.so sha256 $SO_SHA: differs from the 2026-11-28 build (${KNOWN_SO[$TAG]:-none for" \
    "$TAG}); the smoke test decides"
fi

# smoke test: the wheel as vLLM imports it, in the build venv (+ numpy, its one import)
"$VPY" -m pip download -q -d "$DL" --only-binary :all: numpy
"$VPY" -m pip install -q --no-index --find-links "$DL" numpy
"$VPY" -m pip install -q --no-index --no-deps --target "$W/site" "$WHL"
(cd / && PYTHONPATH="$W/site" "$VPY" "$HERE/smoke_test.py")

rm -f "$OUT"/arctic_inference-"$VERSION"-"$TAG"-*.whl
cp "$WHL" "$HERE/install.sh" "$HERE/smoke_test.py" "$OUT/"
(cd "$OUT" && sha256sum ./*.whl install.sh smoke_test.py > SHA256SUMS)
ls -la "$OUT"
