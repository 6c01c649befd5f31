#!/usr/bin/env bash
# What the README's two commands need on a fresh Debian/Ubuntu machine, in one place
# (scripts/quickstart.sh runs it; the Makefile runs it for `make venv`, `make data`, `make test`):
#   1. system packages: gcc and make (build-essential), the system Python 3 with venv and numpy,
#      and with --torch PyTorch (python3-torch: make test's reference state). Missing ones are
#      installed with apt-get when we are root or have passwordless sudo; otherwise one message
#      names the command to run, and the exit status is 1.
#   2. the venv .venv: sees the system's packages (Debian's torch and numpy) and adds tiktoken,
#      pytest, ml_dtypes, matplotlib, tqdm and pyarrow from PyPI. .venv/.complete is written last,
#      so a venv left half made (an interrupted run) is made again, never used.
#   3. for the cuDNN attention (the default of the CUDA builds wherever cuDNN is found): the header-only
#      cuDNN frontend into the venv unless the system has it, and with --cudnn, where the system has no
#      cuDNN, cuDNN itself (nvidia-cudnn-cu13 / -cu12, about 700 MB: not downloaded unasked).
#   4. for the CUTLASS kernels (llmc/kernels/gemm/cutlass_*.cu): the CUTLASS headers into the venv unless the
#      system has them (nvidia-cutlass, 6 MB, --no-deps).
# usage: scripts/setup_env.sh [--torch] [--cudnn]   Quiet and quick when everything is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
# make -j may start two of us: one at a time (the lock is on this file, so nothing is left behind)
if command -v flock >/dev/null; then exec 9<"$0"; flock 9; fi

TORCH=0 CUDNN=0
for a in "$@"; do
    case "$a" in
        --torch) TORCH=1 ;;
        --cudnn) CUDNN=1 ;;
        *) echo "usage: $0 [--torch] [--cudnn]" >&2; exit 2 ;;
    esac
done
VENV=${VENV:-.venv}
# the venv is made from the system Python, where apt puts its packages, not a pyenv/conda one on PATH
PY_BASE=${PY_BASE:-$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)}
# tqdm and pyarrow: dev/data/fineweb.py (progress bar, parquet); pyarrow 26 needs NumPy 2, and the venv
# keeps the system's numpy (1.24 on Debian 12)
PIP_REQS=('tiktoken>=0.6' 'pytest>=7' numpy 'ml_dtypes>=0.5,<0.6' 'matplotlib>=3.7' 'tqdm>=4.60' 'pyarrow>=15,<26')
# a venv is good when these import and the system's torch, if any, can use its numpy
VENV_CHECK='import numpy, tiktoken, pytest, ml_dtypes, matplotlib, tqdm, pyarrow.parquet, importlib.util
if importlib.util.find_spec("torch"):
    import torch; torch.from_numpy(numpy.zeros(1))'
TORCH_PIP="$VENV/bin/python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"

die() { printf 'error: %s\n' "$1" >&2; shift; printf '%s\n' "$@" >&2; exit 1; }   # one message
has_module() { "$1" -c "import importlib.util as u, sys; sys.exit(u.find_spec('$2') is None)" 2>/dev/null; }

# --- 1. system packages ----------------------------------------------------------------------------
find_missing() {   # fills MISSING with the Debian packages of what is not there
    MISSING=()
    command -v gcc >/dev/null && command -v make >/dev/null || MISSING+=(build-essential)
    # Debian's python3 has no ensurepip (so no venv with pip) without python3-venv
    has_module "$PY_BASE" ensurepip || MISSING+=(python3 python3-venv)
    # the venv uses the system's numpy: the one Debian's torch is built for
    has_module "$PY_BASE" numpy || MISSING+=(python3-numpy)
    if [ "$TORCH" = 1 ]; then   # torch from apt, or installed into the venv with pip
        local py=$PY_BASE
        [ -x "$VENV/bin/python" ] && py=$VENV/bin/python
        has_module "$py" torch || MISSING+=(python3-torch)
    fi
    return 0
}

find_missing
TORCH_UNPACKAGED=0
if [ ${#MISSING[@]} -gt 0 ]; then
    command -v apt-get >/dev/null ||
        die "missing: ${MISSING[*]} (Debian package names); install them with this system's package manager, then run this again"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        HINT=()
        [[ " ${MISSING[*]} " != *" python3-torch "* ]] ||
            HINT=("(where apt has no python3-torch, e.g. Ubuntu without universe: leave it out, then: $TORCH_PIP)")
        { command -v sudo >/dev/null && sudo -n true 2>/dev/null; } ||
            die "missing system packages: ${MISSING[*]}. Install them (as root), then run this again:" \
                "  sudo apt-get update && sudo apt-get install -y ${MISSING[*]}" "${HINT[@]}"
        SUDO=sudo
    fi
    echo "installing system packages: ${MISSING[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q >/dev/null
    if [[ " ${MISSING[*]} " == *" python3-torch "* ]] && ! apt-cache show python3-torch >/dev/null 2>&1; then
        TORCH_UNPACKAGED=1   # not in this distribution's archive: pip into the venv instead (below)
        read -ra MISSING <<< "${MISSING[*]/python3-torch/}"
    fi
    [ ${#MISSING[@]} -eq 0 ] || $SUDO apt-get install -y -q --no-install-recommends "${MISSING[@]}" >/dev/null
    find_missing
    [ ${#MISSING[@]} -eq 0 ] || [ "${MISSING[*]}" = python3-torch ] ||
        die "still missing after apt-get install: ${MISSING[*]}"
fi

# --- 2. the venv ---------------------------------------------------------------------------------
if [ ! -f "$VENV/.complete" ]; then
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$VENV_CHECK" 2>/dev/null; then
        echo "$VENV: complete, marking it so"   # made before .complete existed
    else
        echo "creating $VENV: system site packages + ${PIP_REQS[*]} from PyPI"
        rm -rf "$VENV"
        "$PY_BASE" -m venv --system-site-packages "$VENV"
        # keep the system's numpy: pip would upgrade it (matplotlib wants a newer one) to a numpy 2
        # that Debian's torch 1.13 cannot use (torch.from_numpy: "Numpy is not available")
        "$VENV/bin/python" -c 'import numpy; print("numpy==" + numpy.__version__)' > "$VENV/constraints.txt"
        "$VENV/bin/python" -m pip install -q -c "$VENV/constraints.txt" "${PIP_REQS[@]}"
        "$VENV/bin/python" -c "$VENV_CHECK" || die "$VENV: the packages above do not import (see the message)"
    fi
    touch "$VENV/.complete"
fi

# --- 3. cuDNN for the cuDNN attention (make USE_CUDNN=1) ------------------------------------------------
# The header-only cuDNN frontend unless the system has cudnn_frontend.h, pinned to 1.18.0 (from 1.19 on its
# headers compile an NVRTC engine into every includer; the Makefile links libnvrtc for those); --no-deps: the
# wheel's Python side wants CUTLASS DSL packages the headers do not need. With --cudnn, where nvcc is installed
# but neither the system nor a Python package has cuDNN, cuDNN itself: nvidia-cudnn-cu13, or -cu12 under a
# CUDA 12 nvcc. The Makefile finds both in the venv (make info says where each came from). Quick when present.
CUDNN_FE_REQ='nvidia-cudnn-frontend==1.18.0'
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
NVCC_BIN=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
CUDA_INC=${CUDA_HOME:-$([ -n "$NVCC_BIN" ] && dirname "$(dirname "$(readlink -f "$NVCC_BIN")")")}/include
sys_header() { local d; for d in "$CUDA_INC" /usr/include /usr/local/include; do [ -f "$d/$1" ] && return 0; done; return 1; }
if ! sys_header cudnn_frontend.h && [ ! -f "$SITE/include/cudnn_frontend.h" ]; then
    echo "installing $CUDNN_FE_REQ (cuDNN frontend headers) into $VENV"
    # not fatal (an offline machine, say): without the frontend make builds the built-in attention kernels
    "$VENV/bin/python" -m pip install -q --no-deps "$CUDNN_FE_REQ" ||
        echo "note: pip install $CUDNN_FE_REQ failed (see above): the CUDA builds use the built-in attention kernels"
fi
if [ "$CUDNN" = 1 ] && [ -n "$NVCC_BIN" ] && ! sys_header cudnn.h && ! has_module "$VENV/bin/python" nvidia.cudnn; then
    major=$("$NVCC_BIN" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    echo "installing nvidia-cudnn-cu$major into $VENV (no system cuDNN; about 700 MB)"
    "$VENV/bin/python" -m pip install -q --no-deps "nvidia-cudnn-cu$major>=9.1,<10" || die "pip install nvidia-cudnn-cu$major failed"
fi

# --- 4. CUTLASS headers (llmc/kernels/gemm/cutlass_*.cu) ----------------------------------------------
# Header-only; the Makefile looks in CUTLASS_HOME/include, /usr/include, /usr/local/include, then the venv, where
# the nvidia-cutlass wheel keeps them in site-packages/cutlass_library/source/include. --no-deps: its Python side
# (the CUTLASS Python interface and library generator) wants cuda-python, scipy, networkx and more that the headers
# do not need. Pinned: the kernels are compiled and checked against this version.
CUTLASS_REQ='nvidia-cutlass==4.2.0.0'
cutlass_found() {
    local d
    for d in ${CUTLASS_HOME:+"$CUTLASS_HOME/include"} /usr/include /usr/local/include "$SITE/cutlass_library/source/include"; do
        [ -f "$d/cutlass/version.h" ] && return 0
    done
    return 1
}
if ! cutlass_found; then
    echo "installing $CUTLASS_REQ (CUTLASS headers) into $VENV"
    "$VENV/bin/python" -m pip install -q --no-deps "$CUTLASS_REQ" || die "pip install $CUTLASS_REQ failed (see above)"
fi

if [ "$TORCH" = 1 ] && ! has_module "$VENV/bin/python" torch; then
    die "PyTorch is needed (make test: the reference state) and $([ $TORCH_UNPACKAGED = 1 ] &&
        echo "apt has no python3-torch here" || echo "is not installed"). Install it into the venv, then run this again:" \
        "  $TORCH_PIP"
fi
