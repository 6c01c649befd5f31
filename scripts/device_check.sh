#!/usr/bin/env bash
# Build, test and benchmark on a GPU machine in one call; prints a short table last.
#
#   scripts/device_check.sh [stage ...]      stages: build ref kernels tests train resume bench gutenberg sf16
#                                            sf16_curves mgpu mgpu_bench mgpu_lowp (NGPU GPUs, default 2) lowp
#                                            lowp_curves lowp_knobs data tcast tcast_bench tcast_curves tstats
#                                            sweep mgpu_net speed gaps producers kernel_table same cudnn cutlass
#                                            cutlass_rerun tcast_cutlass attn_sweep attn_profile
#                                            (default: build ref kernels tests train resume)
# Environment: OUT (where logs.tgz and table.txt are left; default /tmp/device_check_out),
# BUILD_JOBS, BENCH_STEPS, SF16_REPS (rounds of the sf16 stage's step times). Logs are written under /tmp/device_check and packed into $OUT/logs.tgz.
# Binaries already in build/<variant>/ (e.g. compiled elsewhere and carried) are used when they run;
# otherwise `build` compiles them here. Data: data/ must hold the Tiny Shakespeare shards (and the
# Gutenberg shards for `bench`/`gutenberg`).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${OUT:-/tmp/device_check_out}
OUT=/tmp/device_check
mkdir -p "$OUT" "$RESULTS"
export NCCL_NVLS_ENABLE=0   # never use NVLink multicast on shared machines
read -r -a VARIANTS <<< "${VARIANTS:-bf16 fp32 fp16}"   # the builds the build/tests/train stages use
declare -A PREC=([bf16]=BF16 [fp32]=FP32 [fp16]=FP16)
# make variables of the other variants (the `build` stage compiles any of them)
declare -A VARS=([bf16]="PRECISION=BF16" [fp32]="PRECISION=FP32" [fp16]="PRECISION=FP16" [q115]="ENABLE_Q115=1"
                 [q115_tf]="ENABLE_Q115=1 SF16_TRUE_FORWARD=1" [fp8]="FP8=1" [tcfp12]="TCFP12=1" [tcast]="TCAST=1"
                 [bf16_flash]="USE_CUDNN=0" [fp16_flash]="PRECISION=FP16 USE_CUDNN=0" [fp8_flash]="FP8=1 USE_CUDNN=0"
                 [tcfp12_flash]="TCFP12=1 USE_CUDNN=0" [tcast_flash]="TCAST=1 USE_CUDNN=0")
# bf16, fp16, fp8, tcfp12 and tcast use cuDNN's attention where make finds cuDNN (on the GPU image: the wheel of
# its PyTorch; the frontend headers from CUDNN_FRONTEND_PATH or the venv; tcast: in the runs that cast no
# attention site); *_flash: the built-in attention kernels
# HARNESSES_<variant>="a b" (environment): the dev/cuda harnesses that variant's build compiles (default: all)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build ref kernels tests train resume)
TABLE="$OUT/table.txt"
: > "$TABLE"
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$TABLE"; }
has_stage() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
# the loss / norm of every step line and every val loss line of a training log, timings dropped (equality checks)
loss_lines() { grep -E '^step +[0-9]+(/| \| val)' "$1" | awk -F'|' '{print $1 "|" $2 "|" $3}'; }
# The FP8 build's knobs before its defaults became the recipe (llmc/modes/lowp/mode.cuh: lowp_default_options): per-tensor
# current scaling, no fast accumulation, the LM head in BF16 (what the quantized reference states model)
FP8_CURRENT="--fp8-delayed 0 --fp8-fast-accum 0 --fp8-lm-head 0"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
row "device" "$(head -n1 "$OUT/gpu.txt")"
row "commit" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+dirty')"

if has_stage build; then
    # every variant at once (one nvcc per translation unit: the variants build in parallel)
    pids=(); names=()
    for v in "${VARIANTS[@]}"; do
        if [ -x "build/$v/train_gpt2cu" ] && ! ldd "build/$v/train_gpt2cu" | grep -q "not found" \
           && "build/$v/train_gpt2cu" --help >/dev/null 2>&1; then row "build $v" "carried binaries run"; continue; fi
        # shellcheck disable=SC2086
        hv=HARNESSES_$v
        harn=(); [ -n "${!hv+x}" ] && harn=("HARNESSES=${!hv}")
        ( t0=$(date +%s); make -j"${BUILD_JOBS:-8}" --no-print-directory cuda ${VARS[$v]} "${harn[@]}" > "$OUT/build_$v.log" 2>&1; rc=$?
          echo "$rc $(( $(date +%s) - t0 ))" > "$OUT/build_$v.rc" ) &
        pids+=($!); names+=("$v")
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for v in "${names[@]}"; do
        read -r rc secs < "$OUT/build_$v.rc"
        if [ "$rc" = 0 ]; then row "build $v" "ok ($secs s)"; else row "build $v" "FAILED (see build_$v.log)"; grep -m5 error "$OUT/build_$v.log"; fi
    done
fi

if has_stage data; then
    # Tiny Shakespeare and Gutenberg shards from the carried shared data (LLMC_SHARED_DATA), offline
    t0=$(date +%s)
    { python3 dev/data/tinyshakespeare.py && python3 dev/data/gutenberg.py; } > "$OUT/data.log" 2>&1
    row "data (tokenize)" "rc=$? ($(( $(date +%s) - t0 )) s) $(ls data/gutenberg/*.bin 2>/dev/null | wc -l) gutenberg shards"
fi

if has_stage ref; then
    t0=$(date +%s)
    if python3 dev/reference/gpt2_reference.py --device cuda --out-dir build/ref --sf16-states --tcast-states --lowp-states > "$OUT/reference.log" 2>&1; then
        row "reference state (torch, GPU)" "ok ($(( $(date +%s) - t0 )) s)"
    else
        row "reference state" "FAILED"; tail -n 20 "$OUT/reference.log"
    fi
fi

if has_stage kernels; then
    for bin in build/bf16/dev/*; do
        name=$(basename "$bin")
        timeout "${KERNEL_TIMEOUT:-240}" "$bin" > "$OUT/kernel_$name.log" 2>&1
        rc=$?
        row "kernel $name (bf16)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/kernel_$name.log" | tail -n1) rc=$rc"
    done
    for v in ${KERNEL_CHECK_VARIANTS:-fp32 fp16}; do
        for bin in build/$v/dev/*; do
            [ -x "$bin" ] || continue
            name=$(basename "$bin")
            timeout "${KERNEL_TIMEOUT:-240}" "$bin" --check-only > "$OUT/kernel_${name}_$v.log" 2>&1
            rc=$?
            row "kernel $name ($v, check)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/kernel_${name}_$v.log" | tail -n1) rc=$rc"
        done
    done
fi

if has_stage tests; then
    for v in "${VARIANTS[@]}"; do
        timeout 300 "build/$v/test_gpt2cu" > "$OUT/test_gpt2cu_$v.log" 2>&1
        rc=$?
        row "test_gpt2cu $v" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/test_gpt2cu_$v.log" | tail -n1) rc=$rc"
    done
fi

if has_stage train; then
    for v in "${VARIANTS[@]}"; do
        timeout 300 "build/$v/train_gpt2cu" -e d4 -b 16 -t 256 -x 60 -l 1e-3 -u 10 -v 30 -m 8 -s 60 -g 32 \
            -o "$OUT/ts_$v" > "$OUT/train_ts_$v.log" 2>&1
        rc=$?
        row "train d4 tinyshakespeare $v" "rc=$rc $(grep 'val loss' "$OUT/train_ts_$v.log" | tail -n1 | sed 's/.*|//')"
    done
fi

# an uninterrupted 20-step run vs 10 steps + resume for 10 of build/$1/train_gpt2cu with the knobs $2: the printed
# losses must be identical (one table row). Validation every 5 steps, so an evaluation forward runs between the
# checkpoint's weight update and the save. The FP8 / TCFP-12 runs carry their GEMM state (error feedback, amax
# histories, weight codes) in lowp_*.bin. Leaves the run folders in $OUT/res_a, $OUT/res_b.
resume_check() {
    local v=$1 knobs=$2 tag="$1${2// /}" a b
    args=(-e d4 -b 8 -t 256 -x 20 -l 1e-3 -u 5 -v 5 -m 2 -s 0 -n 10 $knobs)
    rm -rf "$OUT/res_a" "$OUT/res_b"
    "build/$v/train_gpt2cu" "${args[@]}" -o "$OUT/res_a" > "$OUT/resume_${tag}_full.log" 2>&1
    "build/$v/train_gpt2cu" "${args[@]}" -o "$OUT/res_b" > "$OUT/resume_${tag}_part1.log" 2>&1
    rm -f "$OUT"/res_b/*_00000020*.bin
    "build/$v/train_gpt2cu" "${args[@]}" -o "$OUT/res_b" -y 1 > "$OUT/resume_${tag}_part2.log" 2>&1
    a=$(grep -E '^step +[0-9]+/20' "$OUT/resume_${tag}_full.log" | awk -F'|' '$1 ~ /step +(1[1-9]|20)\// {print $1 $2 $3}')
    b=$(grep -E '^step +[0-9]+/20' "$OUT/resume_${tag}_part2.log" | awk -F'|' '{print $1 $2 $3}')
    if [ -n "$a" ] && [ "$a" = "$b" ]; then row "resume bit-exact ($v $knobs)" "ok (steps 11-20 identical)"
    else row "resume bit-exact ($v $knobs)" "FAIL"; diff <(echo "$a") <(echo "$b") | head; tail -3 "$OUT/resume_${tag}_part2.log"; fi
}

if has_stage resume; then
    resume_cases=("bf16|" "fp8|" "fp8|--fp8-delayed 4 --fp8-warmup 3" "tcfp12|--tcfp-ef 1 --fp8-delayed 4" "tcfp12|--tcfp-srr 1"
                  "tcfp12|--tcfp-block 128 --tcfp-ef 1" "bf16_flash|" "fp16|" "fp8_flash|--fp8-delayed 4 --fp8-warmup 3")
    for rc in "${resume_cases[@]}"; do
        v=${rc%%|*}; knobs=${rc#*|}
        [ -x "build/$v/train_gpt2cu" ] || continue
        resume_check "$v" "$knobs"
        if [ "$v" = fp8 ] && [ -z "$knobs" ]; then
            # the LM head's knob is in the state (version 2): resuming with another value stops naming it
            rm -f "$OUT"/res_b/*_00000020*.bin
            "build/$v/train_gpt2cu" "${args[@]}" --fp8-lm-head 0 -o "$OUT/res_b" -y 1 > "$OUT/resume_bad_lm_head.log" 2>&1
            rc1=$?
            row "resume, other --fp8-lm-head" "exit $rc1: $(grep -m1 error "$OUT/resume_bad_lm_head.log" | cut -c1-110)"
        fi
        if [ "$v" = tcfp12 ] && [ "$knobs" = "--tcfp-ef 1 --fp8-delayed 4" ]; then
            # bad resumes: other options, or the GEMM state file missing: a message naming the file, non-zero exit
            rm -f "$OUT"/res_b/*_00000020*.bin   # (part 2 wrote step 20 again) resume from step 10
            "build/$v/train_gpt2cu" "${args[@]//--tcfp-ef/--tcfp-abd}" -o "$OUT/res_b" -y 1 > "$OUT/resume_bad_opt.log" 2>&1
            rc1=$?
            rm -f "$OUT"/res_b/lowp_00000010.bin
            "build/$v/train_gpt2cu" "${args[@]}" -o "$OUT/res_b" -y 1 > "$OUT/resume_bad_missing.log" 2>&1
            rc2=$?
            row "resume, other --tcfp-ef" "exit $rc1: $(grep -m1 error "$OUT/resume_bad_opt.log" | cut -c1-110)"
            row "resume, lowp state missing" "exit $rc2: $(grep -m1 error "$OUT/resume_bad_missing.log" | cut -c1-110)"
        fi
    done
    rm -rf "$OUT/res_a" "$OUT/res_b"
fi

if has_stage same; then
    # behaviour unchanged against a base build (a refactor's check): BASE_BUILD=<folder holding
    # <variant>/train_gpt2cu>, e.g. an older checkout's build/. For each run below, d6 on Tiny Shakespeare for
    # 30 steps with both binaries; the loss and norm of every step line and every val loss line must be
    # identical, byte for byte (timings are dropped).
    same_runs=("bf16|" "fp32|" "fp16|" "q115|" "q115_tf|" "fp8|" "tcfp12|" "tcast|--cast-gemm x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5"
               "tcast|--cast all=mxfp8e4")
    for r in "${same_runs[@]}"; do
        v=${r%%|*}; knobs=${r#*|}; tag="$v${knobs//[ =,]/_}"
        [ -x "build/$v/train_gpt2cu" ] && [ -x "${BASE_BUILD:-/nonexistent}/$v/train_gpt2cu" ] || { row "same $v $knobs" "skipped (no binary)"; continue; }
        for side in base new; do
            bin="build/$v/train_gpt2cu"; [ $side = base ] && bin="$BASE_BUILD/$v/train_gpt2cu"
            # shellcheck disable=SC2086
            timeout 300 "$bin" -e d6 -b 16 -t 256 -x 30 -l 1e-3 -u 10 -v 10 -m 4 -s 0 $knobs > "$OUT/same_${tag}_$side.log" 2>&1
        done
        a=$(loss_lines "$OUT/same_${tag}_base.log"); b=$(loss_lines "$OUT/same_${tag}_new.log")
        n=$(grep -c . <<< "$a")
        if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$n" -ge 33 ]; then row "same $v $knobs" "ok ($n loss / norm / val lines identical)"
        else row "same $v $knobs" "FAIL"; diff <(echo "$a") <(echo "$b") | head -5; tail -3 "$OUT/same_${tag}_new.log"; fi
    done
fi

if has_stage cudnn; then
    # The cuDNN attention backend (the default of bf16, fp16, fp8, tcfp12 where found; *_flash: the built-in
    # kernels): the attention harness of each build (float64 reference, bitwise reruns, amax, an unplannable
    # shape; in bf16 with timing: both backends' TFLOP/s), then the step time of each build with and without
    # cuDNN at d12 B=64 and d24 B=32, same lease, the pair run back to back.
    row "cuDNN" "$(make -s --no-print-directory info | grep -E 'cuDNN|attention' | sed 's/^ *//' | paste -sd' ')"
    for v in bf16 fp16 fp8 tcfp12 bf16_flash; do
        [ -x "build/$v/dev/attention" ] || continue
        opt=(); [ "$v" = bf16 ] || opt=(--check-only)
        timeout 400 "build/$v/dev/attention" "${opt[@]}" > "$OUT/cudnn_attention_$v.log" 2>&1
        rc=$?
        row "attention harness $v" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/cudnn_attention_$v.log" | tail -n1) rc=$rc"
    done
    if [ -f "$OUT/cudnn_attention_bf16.log" ]; then
        grep -E '^\((32|64),1024,(12|16),64\) +\| +[0-9]' "$OUT/cudnn_attention_bf16.log" | while read -r l; do row "attn TFLOP/s cudnn f/b, ours f/b" "$l"; done
        row "attn targets" "$(grep -m1 '^targets' "$OUT/cudnn_attention_bf16.log")"
    fi
    steps=${BENCH_STEPS:-30}
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        for v in bf16_flash bf16 fp8_flash fp8 tcfp12_flash tcfp12; do
            [ -x "build/$v/train_gpt2cu" ] || continue
            log="$OUT/cudnn_speed_$1_$v.log"
            timeout 300 "build/$v/train_gpt2cu" -e "$1" -b "$2" -t 1024 -x "$steps" -v 0 -s 0 -l 6e-4 -lg "$steps" \
                -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
            row "speed $1 B=$2 $v" "$(grep 'median step' "$log" | sed 's/median step //;s/ over.*//') $(grep -o 'gpu memory [0-9]*' "$log" | tail -n1) MiB $(grep -m1 -o 'attention=[a-z]*' "$log")"
        done
    done
fi

if has_stage producers; then
    # FP8 / TCFP-12 with the GELU / GELU' producers writing the codes (speculative current scaling; under delayed
    # scaling, the FP8 default, one pass) against the separate quantization passes (--fp8-producers 0): same recipe, so
    # the printed losses (train and val, every step) must be identical; the re-quantization count is printed by the
    # producers' run.
    prod_cases=("fp8|$FP8_CURRENT" "fp8|" "fp8|--fp8-delayed 4" "tcfp12|" "tcfp12|--tcfp-ef 1" "tcfp12|--tcfp-abd 1")
    for pc in "${prod_cases[@]}"; do
        v=${pc%%|*}; knobs=${pc#*|}; tag="$v${knobs// /}"
        [ -x "build/$v/train_gpt2cu" ] || continue
        args=(-e d4 -b 8 -t 256 -x 30 -l 1e-3 -u 5 -v 10 -m 2 -s 0 $knobs)
        "build/$v/train_gpt2cu" "${args[@]}" --fp8-producers 1 > "$OUT/producers_${tag}_on.log" 2>&1
        "build/$v/train_gpt2cu" "${args[@]}" --fp8-producers 0 > "$OUT/producers_${tag}_off.log" 2>&1
        a=$(grep -E '^step +[0-9]+/30|val loss' "$OUT/producers_${tag}_on.log" | awk -F'|' '{print $1 $2 $3}')
        b=$(grep -E '^step +[0-9]+/30|val loss' "$OUT/producers_${tag}_off.log" | awk -F'|' '{print $1 $2 $3}')
        spec=$(grep -m1 -o '[0-9]* tensors quantized by their producers.*' "$OUT/producers_${tag}_on.log")
        if [ -n "$a" ] && [ "$a" = "$b" ]; then row "producers = separate ($v $knobs)" "ok (30 steps identical; ${spec:-no speculative use})"
        else row "producers = separate ($v $knobs)" "FAIL"; diff <(echo "$a") <(echo "$b") | head -5; fi
    done
fi

if has_stage bench; then
    steps=${BENCH_STEPS:-20}
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        log="$OUT/bench_$1.log"
        timeout 400 build/bf16/train_gpt2cu -e "$1" -b "$2" -t 1024 -x "$steps" -v 0 -s 0 -l 6e-4 \
            -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
        row "bench $1 B=$2 T=1024 bf16" "$(grep 'median step' "$log" | sed 's/median step //') $(grep -o 'device memory in use.*' "$log")"
    done
fi

if has_stage speed; then
    # BF16 step time of the speed issue, same lease: BASE_BIN (optional, e.g. the previous commit's
    # build/bf16/train_gpt2cu) with its defaults, then this build with its defaults (-r -1, the per-shape
    # GELU' epilogue) and with the old recompute default (-r 1)
    steps=${BENCH_STEPS:-30}
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        runs=("new|build/bf16/train_gpt2cu|" "new -r 1|build/bf16/train_gpt2cu|-r 1")
        [ -n "${BASE_BIN:-}" ] && runs=("base|$BASE_BIN|" "${runs[@]}")
        for r in "${runs[@]}"; do
            IFS='|' read -r name bin knobs <<< "$r"
            log="$OUT/speed_$1_${name// /}.log"
            # shellcheck disable=SC2086
            timeout 300 "$bin" -e "$1" -b "$2" -t 1024 -x "$steps" -v 0 -s 0 -l 6e-4 -lg "$steps" $knobs \
                -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
            row "speed $1 B=$2 $name" "$(grep 'median step' "$log" | sed 's/median step //;s/ over.*//') $(grep -m1 -o 'recompute (-r -1): level [0-9]' "$log") $(grep -o 'gpu memory [0-9]*' "$log" | tail -n1) MiB"
        done
    done
fi

if has_stage gaps; then
    # idle time between the kernels of a training step (CUPTI, dev/tools/kernel_gaps.cpp): the tool's own
    # check on a known timeline first, then d12 B=64 and d24 B=32 with the default flags
    dev/tools/check_kernel_gaps.sh > "$OUT/gaps_check.log" 2>&1
    row "kernel_gaps self-check" "$(tail -n1 "$OUT/gaps_check.log")"
    lib=$(realpath build/tools/libkernel_gaps.so)
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        log="$OUT/gaps_$1.log"
        CUDA_INJECTION64_PATH=$lib KERNEL_GAPS_OUT="$OUT/gaps_$1.json" timeout 300 build/bf16/train_gpt2cu -e "$1" -b "$2" \
            -t 1024 -x "${BENCH_STEPS:-30}" -v 0 -s 0 -l 6e-4 -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
        row "gaps $1 B=$2" "$(grep -m1 -o 'idle = [0-9.]*% of the step' "$log") | $(grep 'median step' "$log" | sed 's/median step //;s/ over.*//')"
    done
fi

if has_stage kernel_table; then
    # where the time of a step goes, per kernel (CUPTI, dev/tools/kernel_gaps.cpp KERNEL_GAPS_TOP): each
    # variant of KT_VARIANTS at d12 B=64 and d24 B=32, default flags; the tables are in the logs
    lib=$(realpath build/tools/libkernel_gaps.so)
    for v in ${KT_VARIANTS:-bf16 fp8}; do
        for cfg in "d12 64" "d24 32"; do
            set -- $cfg
            log="$OUT/kernels_${v}_$1.log"
            CUDA_INJECTION64_PATH=$lib KERNEL_GAPS_TOP=${KT_TOP:-40} timeout 300 "build/$v/train_gpt2cu" -e "$1" -b "$2" -t 1024 \
                -x "${BENCH_STEPS:-20}" -v 0 -s 0 -l 6e-4 -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
            row "kernels $v $1 B=$2" "$(grep -m1 -o 'all kernels: .*' "$log")"
        done
    done
fi

if has_stage gutenberg; then
    v=${GUTENBERG_VARIANT:-bf16}
    timeout 590 "build/$v/train_gpt2cu" -e d12 -b 64 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -c 0.1 -v 50 -m 10 -s 0 \
        -i "data/gutenberg/gutenberg_train_*.bin" -j "data/gutenberg/gutenberg_val_*.bin" -o "$OUT/gutenberg_$v" \
        -n 300 > "$OUT/gutenberg_$v.log" 2>&1
    rm -f "$OUT"/gutenberg_*/model_*.bin "$OUT"/gutenberg_*/state_*.bin   # too large to bring back
    row "gutenberg d12 300 steps $v" "$(grep 'val loss' "$OUT/gutenberg_$v.log" | tail -n1 | sed 's/.*|//')"
fi

if has_stage sf16; then
    # SF16 builds: tests against the SF16 reference and step time relative to BF16 (same run);
    # sf16_curves: Gutenberg loss curves with saturation statistics
    for v in q115 q115_tf; do
        timeout 300 "build/$v/test_gpt2cu" > "$OUT/test_gpt2cu_$v.log" 2>&1
        rc=$?
        row "test_gpt2cu $v" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/test_gpt2cu_$v.log" | tail -n1) rc=$rc"
    done
    # bf16_flash (VARIANTS="... bf16_flash"): the BF16 step with the same built-in attention SF16 runs (doc/SF16.md).
    # d12 B=64 and d24 B=32 (issue 27's bar: <= 1.07x the BF16 step, true forward <= 1.09x), SF16_REPS rounds (default
    # 1) with the variants interleaved; last, each variant's median step over the rounds as a ratio of BF16's
    declare -A sf16_ms=()
    for rep in $(seq 1 "${SF16_REPS:-1}"); do
        for cfg in "d12 64" "d24 32"; do
            set -- $cfg
            for v in bf16 bf16_flash q115 q115_tf; do
                [ -x "build/$v/train_gpt2cu" ] || { [ $v = bf16_flash ] && continue; }
                log="$OUT/bench_sf16_${v}_$1_$rep.log"
                timeout 200 "build/$v/train_gpt2cu" -e "$1" -b "$2" -t 1024 -x 24 -v 0 -s 0 -l 6e-4 \
                    -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
                row "step time $1 B=$2 $v ($rep)" "$(grep 'median step' "$log" | sed 's/median step //')"
                sf16_ms[$v $1]+=" $(grep -o 'median step [0-9.]*' "$log" | awk '{print $3}')"
            done
        done
    done
    median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END {if (NR) print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
    for d in d12 d24; do
        base=$(echo "${sf16_ms[bf16 $d]:-}" | median)
        for v in bf16_flash q115 q115_tf; do
            m=$(echo "${sf16_ms[$v $d]:-}" | median)
            [ -n "$m" ] && [ -n "$base" ] && row "SF16 ratio $d $v / bf16" "$(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.3fx (%s / %s ms)", a / b, a, b}')"
        done
    done
fi

if has_stage sf16_curves; then
    for v in q115 q115_tf; do
        timeout 300 "build/$v/train_gpt2cu" -e d12 -b 64 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -c 0.1 -v 50 -m 10 -s 0 \
            --q115-stats 50 -i "data/gutenberg/gutenberg_train_*.bin" -j "data/gutenberg/gutenberg_val_*.bin" \
            -o "$OUT/gutenberg_$v" > "$OUT/gutenberg_$v.log" 2>&1
        row "gutenberg d12 300 steps $v" "rc=$? $(grep 'val loss' "$OUT/gutenberg_$v.log" | tail -n1 | sed 's/.*|//')"
    done
fi

if has_stage mgpu; then
    # N GPUs vs 1 GPU at the same global batch (1 GPU: N micro-batches of B accumulated), 20 steps,
    # in BF16 (ZeRO 0, ZeRO 1, ZeRO 1 with fp32 gradients on the wire) and SF16 (ZeRO 1); then
    # resume at N GPUs (10 steps + -y 1 + 10 vs 20 steps: identical printed losses).
    n=${NGPU:-2}
    rtol=${MGPU_RTOL:-0.01}
    common=(-e d12 -t 1024 -b 4 -x 20 -l 6e-4 -u 5 -v 0 -s 0 -i "data/gutenberg/gutenberg_train_*.bin")
    for v in bf16 q115; do
        [ -x "build/$v/train_gpt2cu" ] || continue
        timeout 300 "build/$v/train_gpt2cu" "${common[@]}" -d $((4 * 1024 * n)) > "$OUT/mgpu_${v}_1gpu.log" 2>&1
        cfgs=("-z 1")
        [ "$v" = bf16 ] && [ -z "${MGPU_QUICK:-}" ] && cfgs=("-z 0" "-z 1" "-z 1 -gw fp32")
        for cfg in "${cfgs[@]}"; do
            tag=$(echo "$cfg" | tr -d ' -')
            # shellcheck disable=SC2086
            BIN="build/$v/train_gpt2cu" timeout 300 scripts/multi_gpu.sh "$n" "${common[@]}" $cfg > "$OUT/mgpu_${v}_${n}gpu_$tag.log" 2>&1
            row "$n GPUs vs 1, $v $cfg" "rc=$? $(python3 scripts/compare_losses.py "$OUT/mgpu_${v}_1gpu.log" "$OUT/mgpu_${v}_${n}gpu_$tag.log" --rtol "$rtol")"
        done
    done
    # the two rendezvous without MPI: TCP and a shared folder (processes started here)
    NO_MPIRUN=1 timeout 300 scripts/multi_gpu.sh "$n" "${common[@]}" -z 1 > "$OUT/mgpu_bf16_${n}gpu_tcp.log" 2>&1
    row "$n GPUs vs 1, bf16 -z 1, -pi tcp" "rc=$? $(python3 scripts/compare_losses.py "$OUT/mgpu_bf16_1gpu.log" "$OUT/mgpu_bf16_${n}gpu_tcp.log" --rtol "$rtol")"
    rm -rf "$OUT/rdv" && mkdir -p "$OUT/rdv"
    pids=()
    for ((r = 0; r < n; r++)); do
        timeout 300 build/bf16/train_gpt2cu "${common[@]}" -z 1 -pi fs -pf "$OUT/rdv" -pn "$n" -pr "$r" > "$OUT/mgpu_bf16_${n}gpu_fs_r$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    row "$n GPUs vs 1, bf16 -z 1, -pi fs" "$(python3 scripts/compare_losses.py "$OUT/mgpu_bf16_1gpu.log" "$OUT/mgpu_bf16_${n}gpu_fs_r0.log" --rtol "$rtol")"
    args=(-e d12 -t 1024 -b 4 -x 20 -l 6e-4 -u 5 -v 0 -s 0 -n 10 -z 1 -i "data/gutenberg/gutenberg_train_*.bin")
    rm -rf "$OUT/mres_a" "$OUT/mres_b"
    timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_a" > "$OUT/mgpu_resume_full.log" 2>&1
    timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_b" > "$OUT/mgpu_resume_part1.log" 2>&1
    rm -f "$OUT"/mres_b/*_00000020*
    timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_b" -y 1 > "$OUT/mgpu_resume_part2.log" 2>&1
    row "resume at $n GPUs (bf16, -z 1)" "$(python3 scripts/compare_losses.py "$OUT/mgpu_resume_full.log" "$OUT/mgpu_resume_part2.log" --steps 11-20 --exact)"
fi

if has_stage mgpu_lowp; then
    # FP8 / TCFP-12 at N GPUs (ZeRO-1) vs 1 GPU at the same global batch, and resume at N GPUs with the
    # per-rank GEMM state (lowp_<step>_rank<r>.bin). Two tolerances: steps 1-5 within 1e-3 (relative), where the runs
    # agree to <= 2e-4; all 20 steps within MGPU_LOWP_RTOL (2e-2): later the low-precision runs drift apart (0.3-1.2%
    # by step 20; BF16: 5e-5). The runs differ by the order of the gradient sums, and for TCFP-12 by the split's source
    # (the fp32 master at 1 GPU, the BF16 parameters under ZeRO-1: gemm_lowp.cuh); a rounding flip that such a
    # difference causes moves an E4M3 value by one ulp, 1/16-1/8 of it (BF16: 1/256-1/128), and delayed scaling's
    # histories are per rank. Data: Tiny Shakespeare (MGPU_LOWP_DATA overrides): on the first Gutenberg shard the batch
    # of step 20 raises the loss by 0.4-1.0 in every run and turns the same drift into 3-7% (doc/benchmarks.md, session 15).
    n=${NGPU:-2}
    rtol=${MGPU_LOWP_RTOL:-0.02}
    mdata=${MGPU_LOWP_DATA:-data/tinyshakespeare/tiny_shakespeare_train.bin}
    common=(-e d12 -t 1024 -b 4 -x 20 -l 6e-4 -u 5 -v 0 -s 0 -i "$mdata")
    for run in "fp8" "tcfp12" "tcfp12 --tcfp-ef 1 --fp8-delayed 4"; do
        read -r -a r <<< "$run"
        tag=$(echo "$run" | tr -d ' -')
        timeout 300 "build/${r[0]}/train_gpt2cu" "${common[@]}" "${r[@]:1}" -d $((4 * 1024 * n)) > "$OUT/mgpu_${tag}_1gpu.log" 2>&1
        BIN="build/${r[0]}/train_gpt2cu" timeout 300 scripts/multi_gpu.sh "$n" "${common[@]}" "${r[@]:1}" -z 1 > "$OUT/mgpu_${tag}_${n}gpu.log" 2>&1
        rc=$?
        row "$n GPUs vs 1, $run -z 1, steps 1-5" "rc=$rc $(python3 scripts/compare_losses.py "$OUT/mgpu_${tag}_1gpu.log" "$OUT/mgpu_${tag}_${n}gpu.log" --rtol 0.001 --steps 1-5)"
        row "$n GPUs vs 1, $run -z 1, all" "$(python3 scripts/compare_losses.py "$OUT/mgpu_${tag}_1gpu.log" "$OUT/mgpu_${tag}_${n}gpu.log" --rtol "$rtol")"
    done
    args=(-e d12 -t 1024 -b 4 -x 20 -l 6e-4 -u 5 -v 0 -s 0 -n 10 -z 1 --tcfp-ef 1 --fp8-delayed 4 -i "$mdata")
    rm -rf "$OUT/mres_a" "$OUT/mres_b"
    BIN=build/tcfp12/train_gpt2cu timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_a" > "$OUT/mgpu_lowp_resume_full.log" 2>&1
    BIN=build/tcfp12/train_gpt2cu timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_b" > "$OUT/mgpu_lowp_resume_part1.log" 2>&1
    rm -f "$OUT"/mres_b/*_00000020*
    BIN=build/tcfp12/train_gpt2cu timeout 300 scripts/multi_gpu.sh "$n" "${args[@]}" -o "$OUT/mres_b" -y 1 > "$OUT/mgpu_lowp_resume_part2.log" 2>&1
    row "resume at $n GPUs (tcfp12 ef, -z 1)" "$(ls "$OUT"/mres_b/lowp_00000010_rank*.bin 2>/dev/null | wc -l) lowp files; $(python3 scripts/compare_losses.py "$OUT/mgpu_lowp_resume_full.log" "$OUT/mgpu_lowp_resume_part2.log" --steps 11-20 --exact)"
    rm -rf "$OUT/mres_a" "$OUT/mres_b"
fi

if has_stage mgpu_bench; then
    # scaling efficiency tok/s(N) / (N tok/s(1)) at the same per-GPU batch, same machine and run
    n=${NGPU:-2}
    steps=${BENCH_STEPS:-30}
    for v in ${BENCH_VARIANTS:-bf16}; do
        zs=${BENCH_ZS:-0 1}
        [ "$v" = bf16 ] || zs="1"
        for cfg in "d12 64" "d24 32"; do
            set -- $cfg
            base=(-e "$1" -b "$2" -t 1024 -x "$steps" -v 0 -s 0 -l 6e-4 -i "data/gutenberg/gutenberg_train_*.bin")
            timeout 300 "build/$v/train_gpt2cu" "${base[@]}" > "$OUT/scale_${v}_$1_1gpu.log" 2>&1
            one=$(grep -o 'median step.*' "$OUT/scale_${v}_$1_1gpu.log" | awk '{print $5}')
            row "scale $v $1 B=$2 1 GPU" "$(grep -o 'median step.*' "$OUT/scale_${v}_$1_1gpu.log")"
            for z in $zs; do
                BIN="build/$v/train_gpt2cu" timeout 300 scripts/multi_gpu.sh "$n" "${base[@]}" -z $z > "$OUT/scale_${v}_$1_${n}gpu_z$z.log" 2>&1
                many=$(grep -o 'median step.*' "$OUT/scale_${v}_$1_${n}gpu_z$z.log" | awk '{print $5}')
                eff=$(python3 -c "print(f'{$many / ($n * $one):.3f}')" 2>/dev/null || echo "?")
                row "scale $v $1 B=$2 $n GPUs -z $z" "efficiency $eff | $(grep -o 'median step.*' "$OUT/scale_${v}_$1_${n}gpu_z$z.log")"
            done
        done
    done
fi

if has_stage lowp; then
    # FP8 and TCFP-12 builds: tests against the reference, then step time (median), recompute level,
    # device memory and the producers' re-quantizations against BF16 (same lease) at d12 B=64 and d24 B=32
    for v in fp8 tcfp12; do
        timeout 300 "build/$v/test_gpt2cu" > "$OUT/test_gpt2cu_$v.log" 2>&1
        rc=$?
        row "test_gpt2cu $v" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/test_gpt2cu_$v.log" | tail -n1) rc=$rc"
    done
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        runs=("bf16" "fp8" "fp8 --fp8-producers 0" "fp8 $FP8_CURRENT" "tcfp12" "tcfp12 --fp8-producers 0" "tcfp12 --tcfp-abd 1"
              "tcfp12 --tcfp-block 128")
        [ -n "${LOWP_RUNS:-}" ] && IFS=',' read -r -a runs <<< "$LOWP_RUNS"   # e.g. LOWP_RUNS="bf16,fp8 --fp8-producers 0"
        for run in "${runs[@]}"; do
            read -r -a r <<< "$run"
            tag=$(echo "$run" | tr -d ' -')
            log="$OUT/lowp_bench_$1_$tag.log"
            timeout 200 "build/${r[0]}/train_gpt2cu" -e "$1" -b "$2" -t 1024 -x "${BENCH_STEPS:-20}" -v 0 -s 0 -l 6e-4 "${r[@]:1}" \
                -i "data/gutenberg/gutenberg_train_*.bin" > "$log" 2>&1
            row "step $1 B=$2 $run" "$(grep -o 'median step.*' "$log" | sed 's/ over.*//;s/median step //') | r=$(grep -m1 -o 'level [0-9]' "$log" | cut -c7) | $(grep -o 'in use at the end: [0-9]* MiB' "$log" | cut -c20-) | requant $(grep -m1 -o '[0-9]* re-quantized ([0-9.]*%)' "$log" | cut -d' ' -f1,3)"
        done
    done
fi

if has_stage lowp_curves; then
    for run in "fp8" "fp8 $FP8_CURRENT" "tcfp12" "tcfp12 --tcfp-ef 1"; do
        read -r -a r <<< "$run"
        tag=$(echo "$run" | tr -d ' -')
        timeout 300 "build/${r[0]}/train_gpt2cu" -e d12 -b 64 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -c 0.1 -v 50 -m 10 -s 0 "${r[@]:1}" \
            -i "data/gutenberg/gutenberg_train_*.bin" -j "data/gutenberg/gutenberg_val_*.bin" -o "$OUT/gutenberg_$tag" \
            > "$OUT/gutenberg_$tag.log" 2>&1
        row "gutenberg d12 300 steps $run" "rc=$? $(grep 'val loss' "$OUT/gutenberg_$tag.log" | tail -n1 | sed 's/.*|//')"
    done
fi

if has_stage lowp_knobs; then
    # every FP8 / TCFP-12 knob trains (d6 on Tiny Shakespeare, 30 steps): final loss vs BF16; the one
    # impossible combination must stop with a message
    for run in "bf16" "fp8" "fp8 $FP8_CURRENT" "fp8 --fp8-hp-wgrad 1" "fp8 --fp8-fast-accum 1" "fp8 --fp8-fast-accum 0" "fp8 --fp8-warmup 10" \
               "fp8 --fp8-lm-head 0" "tcfp12" "tcfp12 --tcfp-ef 1" "tcfp12 --tcfp-srr 1" "tcfp12 --tcfp-abd 1" \
               "tcfp12 --tcfp-block 128 --tcfp-ef 1" "tcfp12 --tcfp-block 64" "tcfp12 --tcfp-block 32 --tcfp-abd 1" \
               "tcfp12 --tcfp-ef 1 --tcfp-srr 1"; do
        read -r -a r <<< "$run"
        tag=$(echo "$run" | tr -d ' -')
        timeout 120 "build/${r[0]}/train_gpt2cu" -e d6 -b 8 -t 256 -x 30 -l 1e-3 -u 5 -v 0 -s 0 "${r[@]:1}" > "$OUT/knob_$tag.log" 2>&1
        rc=$?
        row "knob $run" "rc=$rc $(grep -E '^step +30/30' "$OUT/knob_$tag.log" | cut -d'|' -f2) $(grep -m1 '^error' "$OUT/knob_$tag.log")"
    done
fi

BENCH_ARGS=(-e d12 -b 64 -t 1024 -v 0 -s 0 -l 6e-4 -i "data/gutenberg/gutenberg_train_*.bin")
med() { grep -o 'median step.*' "$1" | sed 's/ over.*//'; }
med_ms() { grep -o 'median step [0-9.]* ms' "$1" | awk '{print $3}'; }

if has_stage tcast; then
    # TensorCast build: the cast kernels and the attention sites bit-exact against the host reference
    # (test_gpt2cu: the tests stage), bit-exact resume with stochastic rounding, every predefined type
    for h in tcast attention; do
        timeout 400 "build/tcast/dev/$h" > "$OUT/kernel_${h}_tcast.log" 2>&1
        row "kernel $h (tcast)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/kernel_${h}_tcast.log" | tail -n1) rc=$?"
    done
    knobs="--cast all=mxfp6e2@stochastic --cast-gemm x=mxfp8e4,w=mxfp4e2@stochastic,dy=mxfp8e5"
    args=(-e d4 -b 8 -t 256 -x 20 -l 1e-3 -u 5 -v 5 -m 2 -s 0 -n 10 $knobs)
    rm -rf "$OUT/res_a" "$OUT/res_b"
    build/tcast/train_gpt2cu "${args[@]}" -o "$OUT/res_a" > "$OUT/resume_tcast_full.log" 2>&1
    build/tcast/train_gpt2cu "${args[@]}" -o "$OUT/res_b" > "$OUT/resume_tcast_part1.log" 2>&1
    rm -f "$OUT"/res_b/*_00000020*.bin
    build/tcast/train_gpt2cu "${args[@]}" -o "$OUT/res_b" -y 1 > "$OUT/resume_tcast_part2.log" 2>&1
    row "resume bit-exact (tcast stochastic)" "$(python3 scripts/compare_losses.py "$OUT/resume_tcast_full.log" "$OUT/resume_tcast_part2.log" --steps 11-20 --exact)"
    rm -rf "$OUT/res_a" "$OUT/res_b"
    # every predefined datatype at every site and operand trains a few steps; bad specs stop at start-up
    for dt in ${TCAST_KNOB_TYPES:-mxfp8e5 mxfp8e4 mxfp6e3 mxfp6e2 mxfp4e2 mxint8 mxint4 bfp16 int8_b32 uint4_bi32 e4m3fn@stochastic \
              e3m2fnuz_e8m0_t16@2:4@nearest int8_e uint8_bb}; do
        tag=$(echo "$dt" | tr -c 'a-z0-9' _)
        sites="all=$dt"   # per-tensor / channel types: not at the attention sites (refused there)
        case $dt in int8_e|uint8_bb) sites="residual_out=$dt,layernorm_out=$dt,matmul_out=$dt,gelu_out=$dt";; esac
        timeout 120 build/tcast/train_gpt2cu -e d4 -b 8 -t 256 -x 6 -l 1e-3 -v 0 -s 0 --cast "$sites" --cast-gemm "x=$dt,w=$dt,dy=$dt" \
            --cast-stats 3 > "$OUT/tcast_knob_$tag.log" 2>&1
        row "tcast all + gemm = $dt" "rc=$? $(grep -E '^step +6/6' "$OUT/tcast_knob_$tag.log" | cut -d'|' -f2) $(grep -m1 '^error' "$OUT/tcast_knob_$tag.log" | cut -c1-90)"
    done
    for bad in "--cast all=mxfp9" "--cast attn_scores=int8" "--cast-gemm x=e4m3fn_e8m0_t48" "--cast-lm-head 1"; do
        timeout 60 build/tcast/train_gpt2cu -e d4 -b 8 -t 256 -x 2 $bad > "$OUT/tcast_bad.log" 2>&1
        row "tcast bad: $bad" "exit $? $(grep -m1 '^error' "$OUT/tcast_bad.log" | cut -c1-100)"
    done
fi

if has_stage tcast_bench; then
    # step time of the TensorCast build against BF16 at d12 B=64 (same run), median of 20 steps
    for run in "bf16" "tcast" "tcast --cast-gemm x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5" "tcast --cast all=mxfp8e4" \
               "tcast --cast-gemm x=mxfp8e4,w=mxfp4e2,dy=mxfp8e5" "tcast --cast all=mxfp8e4 --cast-gemm x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5"; do
        read -r -a r <<< "$run"
        tag=$(echo "$run" | tr -c 'a-z0-9' _)
        timeout 200 "build/${r[0]}/train_gpt2cu" "${BENCH_ARGS[@]}" -x 23 "${r[@]:1}" > "$OUT/tcast_bench_$tag.log" 2>&1
        row "step d12 B=64 $run" "$(med "$OUT/tcast_bench_$tag.log") $(grep -m1 '^error' "$OUT/tcast_bench_$tag.log")"
    done
fi

if has_stage tcast_cutlass; then
    # issue 26, doc/TCAST.md 5.6: the TensorCast build's CUTLASS GEMMs with the matmul_out cast (and the fc layer's GELU
    # and gelu_out cast) in the epilogue (--cast-cutlass 1). Builds the TCAST trainer and the CUTLASS harness (CUTLASS_HOME
    # or the venv's headers); the harness (bits on small shapes with --quick, then the timing table against cuBLASLt +
    # the pass / GELU-sites kernel), d4 loss lines (--cast-cutlass 0 == 1, and with 1 --cast-fuse 0 == 1), then the d12
    # B=64 / d24 B=32 steps of the BF16 build and of --cast all=mxfp8e4 with --cast-cutlass 0 and 1, twice, interleaved.
    make -j"${BUILD_JOBS:-16}" --no-print-directory build/tcast/train_gpt2cu build/tcast/dev/cutlass_tcast_gemm build/bf16/train_gpt2cu \
        TCAST=1 > "$OUT/tcast_cutlass_build.log" 2>&1
    rc=$?
    row "tcast_cutlass build" "rc=$rc $(make --no-print-directory info TCAST=1 | grep -io 'cutlass[^;]*' | head -n1)"
    timeout 300 build/tcast/dev/cutlass_tcast_gemm --quick > "$OUT/tcast_cutlass_harness.log" 2>&1
    rc=$?
    row "cutlass_tcast_gemm --quick" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/tcast_cutlass_harness.log" | tail -n1) rc=$rc"
    grep -A40 '^==== timing' "$OUT/tcast_cutlass_harness.log" | grep -E 'cuBLASLt \+|\+ (2x )?mxfp8e4'
    for k in "c0|--cast-cutlass 0" "c1|--cast-cutlass 1" "c1f0|--cast-cutlass 1 --cast-fuse 0"; do
        # shellcheck disable=SC2086
        timeout 120 build/tcast/train_gpt2cu -e d4 -b 8 -t 256 -x 12 -v 4 -s 0 --cast all=mxfp8e4 ${k#*|} > "$OUT/tcast_cutlass_d4_${k%%|*}.log" 2>&1
    done
    a=$(loss_lines "$OUT/tcast_cutlass_d4_c0.log"); b=$(loss_lines "$OUT/tcast_cutlass_d4_c1.log"); c=$(loss_lines "$OUT/tcast_cutlass_d4_c1f0.log")
    if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$b" = "$c" ]; then row "tcast_cutlass d4 loss lines" "ok ($(grep -c . <<< "$a") lines: c0 == c1 == c1 fuse 0)"
    else row "tcast_cutlass d4 loss lines" "FAIL"; diff <(echo "$a") <(echo "$b") | head -3; diff <(echo "$b") <(echo "$c") | head -3; fi
    for rep in 1 2; do
        for cfg in "d12 64" "d24 32"; do
            set -- $cfg
            gi=(-i "data/gutenberg/gutenberg_train_*.bin" -e "$1" -b "$2" -t 1024 -x "${CUTLASS_STEPS:-24}" -v 0 -s 0)
            timeout 200 build/bf16/train_gpt2cu "${gi[@]}" > "$OUT/tcast_cutlass_$1_bf16_$rep.log" 2>&1
            row "bf16 $1 B=$2 ($rep)" "$(med "$OUT/tcast_cutlass_$1_bf16_$rep.log")"
            for c in 0 1; do
                log="$OUT/tcast_cutlass_$1_c${c}_$rep.log"
                timeout 200 build/tcast/train_gpt2cu "${gi[@]}" --cast all=mxfp8e4 --cast-cutlass $c > "$log" 2>&1
                row "tcast $1 B=$2 all=mxfp8e4 --cast-cutlass $c ($rep)" "$(med "$log") $(grep -m1 '^error' "$log" | cut -c1-90)"
            done
        done
    done
fi

if has_stage attn_sweep; then
    # the built-in attention kernels' configurations (dev/cuda/attention.cu --sweep), in the plain (bf16_flash) and SF16
    # (q115) builds: the recomputing schedule's dQ and dK/dV candidates, and the dS-handed schedule's kernel by kernel
    # (D, dK/dV storing dS, dQ from dS; every candidate checked against the default, the dQ-from-dS ones bit for bit).
    # The configurations are the ATTN_*_CFG_64 macros of llmc/kernels/attention/attention.cuh (doc/benchmarks.md, session 9).
    { make -j"${BUILD_JOBS:-16}" --no-print-directory build/bf16_flash/dev/attention USE_CUDNN=0 &&
      make -j"${BUILD_JOBS:-16}" --no-print-directory build/q115/dev/attention ENABLE_Q115=1; } > "$OUT/attn_sweep_build.log" 2>&1
    row "attn_sweep build" "rc=$?"
    for v in bf16_flash q115; do
        timeout 300 "build/$v/dev/attention" --sweep > "$OUT/attn_sweep_$v.log" 2>&1
        rc=$?
        row "attention --sweep ($v)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/attn_sweep_$v.log" | tail -n1) rc=$rc"
        grep -E '^(dq|dkv|D alone)' "$OUT/attn_sweep_$v.log" | cut -c1-100
        row "  $v fastest" "$(grep -m1 '^fastest' "$OUT/attn_sweep_$v.log" | cut -c10-200)"
        row "  $v backward" "$(grep -m1 '^backward with' "$OUT/attn_sweep_$v.log" | cut -c15-200)"
    done
fi

if has_stage attn_profile; then
    # where the built-in attention kernels' warps wait (scripts/kernel_stalls.py: Nsight Compute's warp-state and pipe
    # metrics) in one d12 B=64 training step of the plain (bf16_flash) and SF16 (q115) builds: the 12 forwards and the
    # backward's D, dK/dV + dS and dQ-from-dS kernels of the first step (48 launches)
    { make -j"${BUILD_JOBS:-16}" --no-print-directory build/bf16_flash/train_gpt2cu USE_CUDNN=0 &&
      make -j"${BUILD_JOBS:-16}" --no-print-directory build/q115/train_gpt2cu ENABLE_Q115=1; } > "$OUT/attn_profile_build.log" 2>&1
    row "attn_profile build" "rc=$?"
    for v in bf16_flash q115; do
        timeout 400 python3 scripts/kernel_stalls.py --kernels 'attn_' --count 48 --save "$OUT/attn_profile_$v.csv" -- \
            "build/$v/train_gpt2cu" -e d12 -b 64 -t 1024 -x 1 -v 0 -s 0 -i "data/gutenberg/gutenberg_train_*.bin" \
            > "$OUT/attn_profile_$v.log" 2>&1
        row "attn_profile $v" "rc=$? ($(grep -c ' calls)' "$OUT/attn_profile_$v.log") kernels)"
        cat "$OUT/attn_profile_$v.log"
    done
fi

if has_stage tcast_curves; then
    for run in "mxfp8|--cast-gemm x=mxfp8e4,w=mxfp8e4,dy=mxfp8e5" "mxfp6w|--cast-gemm x=mxfp8e4,w=mxfp6e2,dy=mxfp8e5" \
               "mxfp4w|--cast-gemm x=mxfp8e4,w=mxfp4e2,dy=mxfp8e5" "mxint8|--cast-gemm x=mxint8,w=mxint8,dy=mxint8" \
               "bfp16|--cast-gemm x=bfp16,w=bfp16,dy=bfp16" "all_mxfp8e4|--cast all=mxfp8e4"; do
        tag=${run%%|*}; knobs=${run#*|}
        # shellcheck disable=SC2086
        timeout 300 build/tcast/train_gpt2cu -e d12 -b 64 -t 1024 -x 300 -l 6e-4 -u 30 -q 0.1 -c 0.1 -v 50 -m 10 -s 0 -n -1 $knobs \
            -i "data/gutenberg/gutenberg_train_*.bin" -j "data/gutenberg/gutenberg_val_*.bin" -o "$OUT/gutenberg_tcast_$tag" \
            > "$OUT/gutenberg_tcast_$tag.log" 2>&1
        row "gutenberg d12 300 tcast $tag" "rc=$? $(grep 'val loss' "$OUT/gutenberg_tcast_$tag.log" | tail -n1 | sed 's/.*|//') $(med "$OUT/gutenberg_tcast_$tag.log")"
    done
fi

if has_stage tstats; then
    # --tensor-stats: harness + numpy check, then its cost at N = 100 against no statistics (same run,
    # 201 steps so that two recording steps fall inside the median's window... the mean is what counts)
    timeout 300 build/bf16/dev/tensor_stats --dump "$OUT/ts_dump" > "$OUT/kernel_tensor_stats.log" 2>&1
    row "kernel tensor_stats (bf16)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/kernel_tensor_stats.log" | tail -n1) rc=$?"
    python3 dev/cuda/check_tensor_stats.py "$OUT/ts_dump" > "$OUT/check_tensor_stats.log" 2>&1
    row "tensor_stats vs numpy" "$(tail -n1 "$OUT/check_tensor_stats.log") rc=$?"
    for i in 1 2; do
        for run in "none|" "ts100|--tensor-stats 100"; do
            tag=${run%%|*}; knobs=${run#*|}
            # shellcheck disable=SC2086
            timeout 200 build/bf16/train_gpt2cu "${BENCH_ARGS[@]}" -x 201 -n -1 $knobs -o "$OUT/tstats_$tag" > "$OUT/tstats_${tag}_$i.log" 2>&1
            row "tensor-stats cost $tag (rep $i)" "$(grep -o 'mean step.*' "$OUT/tstats_${tag}_$i.log" | head -n1) | $(med "$OUT/tstats_${tag}_$i.log")"
        done
    done
    head -n 3 "$OUT/tstats_ts100/tensor_stats.csv" > "$OUT/tensor_stats_head.csv" 2>/dev/null
fi

if has_stage sweep; then
    # the ready sweep (7 runs), interrupted after the second run finished and started again
    rm -rf out/precision_d12
    timeout "${SWEEP_FIRST_S:-150}" python3 scripts/sweep.py scripts/sweeps/precision_d12.toml --no-build > "$OUT/sweep_part1.log" 2>&1
    row "sweep part 1 (stopped)" "rc=$? $(ls out/precision_d12/*/run.json 2>/dev/null | wc -l) runs recorded"
    timeout 560 python3 scripts/sweep.py scripts/sweeps/precision_d12.toml --no-build > "$OUT/sweep_part2.log" 2>&1
    row "sweep part 2 (resumed)" "rc=$? $(ls out/precision_d12/*/run.json 2>/dev/null | wc -l) runs recorded; $(grep -c 'skip' "$OUT/sweep_part2.log") skipped"
    mkdir -p "$RESULTS/sweep"
    cp out/precision_d12/report.md out/precision_d12/*.png "$RESULTS/sweep/" 2>/dev/null
    tar -czf "$RESULTS/sweep_logs.tgz" --exclude='*.bin' -C out precision_d12
fi

if has_stage mgpu_net; then
    # the all-reduce over the network transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: sockets between
    # the two processes, as between nodes) against NVLink, ZeRO-1, same per-GPU batch
    n=${NGPU:-2}
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        base=(-e "$1" -b "$2" -t 1024 -x "${BENCH_STEPS:-30}" -v 0 -s 0 -l 6e-4 -i "data/gutenberg/gutenberg_train_*.bin")
        timeout 300 build/bf16/train_gpt2cu "${base[@]}" > "$OUT/net_$1_1gpu.log" 2>&1
        one=$(med_ms "$OUT/net_$1_1gpu.log")
        row "net $1 B=$2 1 GPU" "$(med "$OUT/net_$1_1gpu.log")"
        for tr in nvlink socket; do
            envs=(); [ $tr = socket ] && envs=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO)
            env "${envs[@]}" NO_MPIRUN=1 timeout 300 scripts/multi_gpu.sh "$n" "${base[@]}" -z 1 > "$OUT/net_$1_${tr}.log" 2>&1
            many=$(med_ms "$OUT/net_$1_${tr}.log")
            eff=$(python3 -c "print(f'{$one / $many:.3f}')" 2>/dev/null || echo "?")
            row "net $1 B=$2 $n GPUs $tr -z 1" "efficiency $eff | $(med "$OUT/net_$1_${tr}.log") | $(grep -m1 -o 'NET/[A-Za-z]*' "$OUT/net_$1_${tr}.log")"
        done
    done
fi

if has_stage cutlass || has_stage cutlass_rerun; then
    # issue 27, doc/TCFP12.md "Fifth round": the FP8 build's fused CUTLASS epilogues (--fp8-cutlass 1). Builds the FP8
    # trainer and test (they link the CUTLASS kernels: CUTLASS_HOME or the venv's headers) and (stage cutlass only) the
    # fcproj dgrad's harness, writes the reference states meanwhile; then the harness on the trainer's configuration
    # (column sums, codes, timing table; stage cutlass only), test_gpt2cu (every check once more with --fp8-cutlass 1, and
    # --fp8-cutlass 1 under delayed scaling against 0), bit-exact resume with it under current and delayed scaling, and
    # the d12 B=64 / d24 B=32 steps of the BF16 build (the ratio's baseline) and of FP8 with --fp8-cutlass 0 and 1, under
    # current scaling ($FP8_CURRENT) and the default recipe (delayed scaling, forward fast accumulation, the LM head
    # in FP8).
    # cutlass_rerun: the same without the harness (under 6 minutes). CUTLASS_STEPS: steps of each step row (default 24;
    # a 21-step median resolves a difference of two rows to about +-2 ms, 95%: doc/TCFP12.md). Data: Tiny Shakespeare.
    t0=$(date +%s)
    ( python3 dev/reference/gpt2_reference.py --device cuda --out-dir build/ref --lowp-states > "$OUT/cutlass_ref.log" 2>&1; echo $? > "$OUT/cutlass_ref.rc" ) &
    refpid=$!
    make -j"${BUILD_JOBS:-16}" --no-print-directory build/fp8_flash/train_gpt2cu build/fp8_flash/test_gpt2cu FP8=1 USE_CUDNN=0 \
        > "$OUT/cutlass_build.log" 2>&1 &
    fp8pid=$!
    make -j4 --no-print-directory build/bf16_flash/train_gpt2cu USE_CUDNN=0 > "$OUT/cutlass_build_bf16.log" 2>&1  # the ratio's baseline
    wait "$fp8pid"
    brc=$?
    if has_stage cutlass && [ $brc = 0 ]; then
        make -j"${BUILD_JOBS:-16}" --no-print-directory build/bf16_flash/dev/cutlass_fp8_dgelu USE_CUDNN=0 >> "$OUT/cutlass_build.log" 2>&1
        brc=$?
    fi
    wait "$refpid"
    row "cutlass build + reference" "build rc=$brc, reference rc=$(cat "$OUT/cutlass_ref.rc") ($(( $(date +%s) - t0 )) s); $(make --no-print-directory info FP8=1 | grep -o 'FP8 trainer: .*')"
    [ $brc = 0 ] || grep -m5 -i error "$OUT/cutlass_build.log"
    if has_stage cutlass; then
        timeout 200 build/bf16_flash/dev/cutlass_fp8_dgelu --config coop_fa256_e128x32 > "$OUT/cutlass_dgelu.log" 2>&1
        rc=$?
        row "dgelu harness (coop_fa256_e128x32)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/cutlass_dgelu.log" | tail -n1) rc=$rc"
        grep -m2 "column sums:" "$OUT/cutlass_dgelu.log" | cut -c1-200
        grep -E "^  d(12|24) " "$OUT/cutlass_dgelu.log"
    fi
    timeout 300 build/fp8_flash/test_gpt2cu > "$OUT/cutlass_test.log" 2>&1
    rc=$?
    row "test_gpt2cu fp8_flash (+ --fp8-cutlass 1)" "$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/cutlass_test.log" | tail -n1) rc=$rc"
    grep -E "fused CUTLASS epilogues ran|FAIL|--fp8-cutlass 1|fused epilogues:|use counts|losses \(|^error" "$OUT/cutlass_test.log" | head -12
    resume_check fp8_flash "--fp8-cutlass 1"
    resume_check fp8_flash "--fp8-cutlass 1 --fp8-delayed 4 --fp8-warmup 3"
    # the report's counts: fused fc forwards, fcproj dgrads, taken by their consumers, computed in BF16, under delayed scaling
    fused() { sed -nE 's/.*fused CUTLASS epilogues: ([0-9]+) fc.*, ([0-9]+) fcproj.*; ([0-9]+) taken.*, ([0-9]+) computed.*; ([0-9]+) under.*/fused fc \1 dgrad \2 taken \3 bf16 \4 delayed \5 | /p' "$1"; }
    for cfg in "d12 64" "d24 32"; do
        set -- $cfg
        timeout 200 build/bf16_flash/train_gpt2cu -e "$1" -b "$2" -t 1024 -x "${CUTLASS_STEPS:-24}" -v 0 -s 0 > "$OUT/cutlass_$1_bf16.log" 2>&1
        row "bf16_flash $1 B=$2" "$(med "$OUT/cutlass_$1_bf16.log")"
        for sc in "$FP8_CURRENT" ""; do
            for c in 0 1; do
                log="$OUT/cutlass_$1_$c${sc:+_current}.log"
                # shellcheck disable=SC2086
                timeout 200 build/fp8_flash/train_gpt2cu -e "$1" -b "$2" -t 1024 -x "${CUTLASS_STEPS:-24}" -v 0 -s 0 --fp8-cutlass $c $sc > "$log" 2>&1
                row "fp8_flash $1 B=$2 --fp8-cutlass $c${sc:+ $sc}" "$(med "$log") | $(fused "$log")$(grep -o '[0-9]* re-quantized ([0-9.]*%)' "$log")$(grep -m1 '^error' "$log" | cut -c1-100)"
            done
        done
    done
fi

find "$OUT" -name '*.bin' -size +1M -delete   # checkpoints are too large to bring back
tar -czf "$RESULTS/logs.tgz" -C "$OUT" .
cp "$TABLE" "$RESULTS/table.txt"
echo
echo "==== summary ===="
cat "$TABLE"
