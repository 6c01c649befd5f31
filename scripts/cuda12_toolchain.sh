#!/usr/bin/env bash
# A CUDA 12.4 toolkit in a folder (nothing installed into the system), for compiling the CUDA trainer
# with the oldest CUDA 12 that users run. Prints, on stdout, the make variables that select it:
#
#   make cuda $(scripts/cuda12_toolchain.sh)          # -> build/cuda12.4/bf16/... (NVCC=... BUILD=...)
#   scripts/cuda12_toolchain.sh --env                 # prints `export LD_LIBRARY_PATH=...` to run them
#
# Folder: $CUDA12_DIR (default build/toolchain/cuda-12.4, inside the git-ignored build/). A second call
# with the same pins reuses it. Everything is CUDA 12.4.1 (nvcc 12.4.131, cudart 12.4.127, cuBLAS 12.4.5.8):
#   * PyPI wheels (pip install --target): nvidia-cuda-nvcc-cu12 (ptxas, libdevice, the crt/ headers),
#     nvidia-cuda-runtime-cu12 (headers, libcudart.so.12), nvidia-cublas-cu12 (cublasLt.h,
#     libcublasLt.so.12), nvidia-nccl-cu12 (nccl.h, libnccl.so.2; so -DMULTI_GPU is compiled too),
#     nvidia-cudnn-cu12 9.19.0 (cudnn*.h, libcudnn*.so.9: the cuDNN attention these builds use by default;
#     the header-only frontend comes from the project's venv, scripts/setup_env.sh).
#   * The compiler driver. No nvidia-cuda-nvcc-cu12 wheel (12.4 ... 12.9) ships nvcc itself, cicc,
#     cudafe++, fatbinary or nvlink, only ptxas and libnvvm. They come from Debian's non-free package
#     nvidia-cuda-toolkit 12.4.131~12.4.1-2 (Debian 13 "trixie"; the same 12.4.1 release: its ptxas is
#     byte-identical to the wheel's), fetched with `apt-get download` under a private apt configuration
#     in the folder (the system's sources and packages are untouched) and unpacked with dpkg-deb -x.
# The assembled tree has the usual layout (bin/nvcc + nvcc.profile, nvvm/bin/cicc, include/, lib64/
# with the unversioned .so links the linker needs), so the Makefile's discovery treats it like
# /usr/local/cuda. The wheels ship no libcudart_static.a: the Makefile then links -cudart shared.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
    ""|--env) ;;
    *) echo "usage: scripts/cuda12_toolchain.sh [--env]   (folder: \$CUDA12_DIR, default build/toolchain/cuda-12.4)" >&2; exit 2 ;;
esac

NVCC_WHL=12.4.131 CUDART_WHL=12.4.127 CUBLAS_WHL=12.4.5.8 NCCL_WHL=2.21.5 CUDNN_WHL=9.19.0.56
DEB_VERSION="12.4.131~12.4.1-2"

ROOT=${CUDA12_DIR:-build/toolchain/cuda-12.4}
mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
TREE="$ROOT/cuda"
STAMP="nvcc-cu12==$NVCC_WHL runtime-cu12==$CUDART_WHL cublas-cu12==$CUBLAS_WHL nccl-cu12==$NCCL_WHL cudnn-cu12==$CUDNN_WHL nvidia-cuda-toolkit=$DEB_VERSION"
log() { echo "cuda12_toolchain: $*" >&2; }

print_vars() {
    if [ "${1:-}" = "--env" ]; then
        echo "export LD_LIBRARY_PATH=$TREE/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
    else
        echo "NVCC=$TREE/bin/nvcc BUILD=build/cuda12.4"
    fi
}

if [ -f "$ROOT/.complete" ] && [ "$(cat "$ROOT/.complete")" = "$STAMP" ] && [ -x "$TREE/bin/nvcc" ]; then
    print_vars "${1:-}"
    exit 0
fi
rm -rf "$ROOT/wheels" "$ROOT/deb" "$ROOT/apt" "$TREE" "$ROOT/.complete"

# 1. wheels
PY=${PYTHON:-$(test -x .venv/bin/python && echo .venv/bin/python || echo python3)}
log "pip install --target $ROOT/wheels (CUDA 12.4 wheels)"
"$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --no-compile --target "$ROOT/wheels" \
    "nvidia-cuda-nvcc-cu12==$NVCC_WHL" "nvidia-cuda-runtime-cu12==$CUDART_WHL" \
    "nvidia-cublas-cu12==$CUBLAS_WHL" "nvidia-nccl-cu12==$NCCL_WHL" "nvidia-cudnn-cu12==$CUDNN_WHL" >&2
W="$ROOT/wheels/nvidia"

# 2. the compiler driver from Debian's nvidia-cuda-toolkit (private apt state: index of trixie non-free only)
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then log "error: apt-get and dpkg-deb are needed"; exit 1; fi
A="$ROOT/apt"
mkdir -p "$A/lists/partial" "$A/archives/partial" "$A/prefs" "$ROOT/deb"
echo "deb http://deb.debian.org/debian trixie non-free" > "$A/sources.list"
: > "$A/status"
apt_opts=(-o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/nonexistent
          -o Dir::Etc::Preferences=/nonexistent -o Dir::Etc::PreferencesParts="$A/prefs"
          -o Dir::State="$A" -o Dir::State::Lists="$A/lists" -o Dir::State::status="$A/status"
          -o Dir::Cache="$A" -o Dir::Cache::Archives="$A/archives" -q)
[ "$(id -u)" -eq 0 ] && apt_opts+=(-o APT::Sandbox::User=root)   # root: no _apt sandbox for a folder of ours
log "apt-get download nvidia-cuda-toolkit=$DEB_VERSION (Debian trixie non-free, private apt state in $A)"
apt-get "${apt_opts[@]}" update >&2
if ! (cd "$ROOT/deb" && apt-get "${apt_opts[@]}" download "nvidia-cuda-toolkit=$DEB_VERSION" >&2); then
    # another Debian revision of the same upstream release (the nvcc version is checked below)
    alt=$(apt-cache "${apt_opts[@]}" madison nvidia-cuda-toolkit | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
          grep "^${DEB_VERSION%%~*}~" | head -n 1 || true)
    [ -n "$alt" ] || { log "error: no nvidia-cuda-toolkit ${DEB_VERSION%%~*} in Debian trixie non-free any more"; exit 1; }
    log "warning: nvidia-cuda-toolkit=$DEB_VERSION is gone, using $alt"
    (cd "$ROOT/deb" && apt-get "${apt_opts[@]}" download "nvidia-cuda-toolkit=$alt" >&2)
fi
DEB=$(ls "$ROOT"/deb/nvidia-cuda-toolkit_*.deb)
DEB_SHA256=$(sha256sum "$DEB" | cut -d' ' -f1)
log "$(basename "$DEB") sha256 $DEB_SHA256"
dpkg-deb -x "$DEB" "$ROOT/deb/x"
X="$ROOT/deb/x/usr"

# 3. the toolkit tree
mkdir -p "$TREE/bin/crt" "$TREE/nvvm/bin" "$TREE/nvvm" "$TREE/include" "$TREE/lib64"
cp "$X/lib/nvidia-cuda-toolkit/bin/nvcc" "$TREE/bin/"   # (Debian's /usr/bin/nvcc is a wrapper script)
for f in cudafe++ fatbinary nvlink bin2c nvprune cuobjdump; do cp "$X/bin/$f" "$TREE/bin/"; done
cp "$X"/lib/nvidia-cuda-toolkit/bin/crt/*.stub "$TREE/bin/crt/"
cp "$X/lib/nvidia-cuda-toolkit/bin/cicc" "$TREE/nvvm/bin/"
ln -s "$W/cuda_nvcc/bin/ptxas" "$TREE/bin/ptxas"
ln -s "$W/cuda_nvcc/nvvm/libdevice" "$TREE/nvvm/libdevice"
cat > "$TREE/bin/nvcc.profile" <<'EOF'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
EOF
# include/: every wheel's headers side by side (a name in two wheels is an error, never a silent pick)
for d in cuda_runtime cuda_nvcc cublas nccl cudnn; do
    for e in "$W/$d/include"/*; do
        n=$(basename "$e")
        [ "$n" = __init__.py ] || [ "$n" = __pycache__ ] && continue
        [ -e "$TREE/include/$n" ] && { log "error: include/$n is in two wheels"; exit 1; }
        ln -s "$e" "$TREE/include/$n"
    done
done
# lib64/: the versioned libraries and the unversioned names the linker looks for (as a -dev package has)
for so in cuda_runtime/lib/libcudart.so.12 cublas/lib/libcublas.so.12 cublas/lib/libcublasLt.so.12 nccl/lib/libnccl.so.2 \
          cudnn/lib/libcudnn.so.9; do
    b=$(basename "$so")
    ln -s "$W/$so" "$TREE/lib64/$b"
    ln -s "$b" "$TREE/lib64/${b%.so.*}.so"
done
# cuDNN's engine libraries, which libcudnn.so.9 loads at run time from its own folder ($ORIGIN, here lib64/)
for so in "$W"/cudnn/lib/libcudnn_*.so.9; do ln -s "$so" "$TREE/lib64/$(basename "$so")"; done
rm -rf "$ROOT/deb" "$A"   # only the tree and the wheels are kept

v=$("$TREE/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')
[ "$v" = "$NVCC_WHL" ] || { log "error: $TREE/bin/nvcc reports '$v', expected $NVCC_WHL"; exit 1; }
echo "$STAMP" > "$ROOT/.complete"
log "ready: $TREE (nvcc $v; to run its binaries: eval \"\$(scripts/cuda12_toolchain.sh --env)\")"
print_vars "${1:-}"
