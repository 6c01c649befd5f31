// tcast_config.h - the TensorCast build's run-time cast plan (doc/TCAST.md section 5): which
// datatype each storage boundary site (--cast) and each linear-layer operand (--cast-gemm) is cast
// to, parsed and checked against the model's shapes before the GPU is touched. Host-only C, so the
// parsing is unit-tested on the host (dev/test/test_tcast_config.c).
//
//   --cast SITE=DTYPE[,SITE=DTYPE...]     SITE: a boundary site name of llmc/core/boundary_sites.h (any
//                                         case: MATMUL_OUT or matmul_out), or `all`; a later entry
//                                         overrides an earlier one (`all=mxfp8e4,logits=bfloat16`).
//   --cast-gemm OP=DTYPE[,OP=DTYPE...]    OP: x (the layer input), w (the weight), dy (the output
//                                         gradient); each operand is cast along the reduction
//                                         dimension of every GEMM it enters (forward, dgrad, wgrad).
//   --cast-lm-head 0|1                    the LM head (logits = lnf . wte^T) takes --cast-gemm too.
//   --cast-stats N                        every N steps: saturation / flush fractions and the scale
//                                         histogram per site and operand.
//   --cast-cutlass 0|1                    1 (default): the qkv and fc GEMMs (MATMUL_OUT cast, fc with GELU and GELU_OUT)
//                                         run on CUTLASS with the casts in the epilogue (doc/TCAST.md 5.6); one line
//                                         and cuBLASLt + passes where the binary or the GPU cannot. 0: cuBLASLt + passes.
// DTYPE is doc/TCAST.md section 3's text (NAME or NUMBER[_SCALE], @modifiers; SCALE may be a fixed
// scale pN, e.g. q115 = int16_p-1, which casts element by element like an unscaled type). The tile (or channel)
// dimension is the trainer's choice: the channel dimension at the sites (the key dimension for the
// attention scores and probabilities) and the reduction dimension at the GEMM operands, so a scale
// spec with an explicit dY is refused. Every error stops the run with `error: <flag>: ...`.
#pragma once

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/core/boundary_sites.h"
#include "llmc/core/cli.h"
#include "llmc/core/utils.h"
#include "llmc/numerics/tcast.h"

// GEMM operands --cast-gemm names.
typedef enum { TCAST_OP_X = 0, TCAST_OP_W = 1, TCAST_OP_DY = 2, TCAST_NUM_OPS = 3 } TcastOperand;
static const char* const TCAST_OP_NAMES[TCAST_NUM_OPS] = {"x", "w", "dy"};

typedef struct {
    const char* cast;       // --cast
    const char* cast_gemm;  // --cast-gemm
    int lm_head;            // --cast-lm-head
    int stats;              // --cast-stats
    int fuse;               // --cast-fuse
    int cutlass;            // --cast-cutlass
} TcastOptions;

// What the options resolved to.
typedef struct {
    int site_on[NUM_BOUNDARY_SITES];
    TcastDataType site[NUM_BOUNDARY_SITES];
    int op_on[TCAST_NUM_OPS];
    TcastDataType op[TCAST_NUM_OPS];
    int lm_head;
    int stats;
    int fuse;  // casts inside their producers where implemented (doc/TCAST.md 5.5); the same bits either way
    int cutlass;  // --cast-cutlass (the mode checks it against the binary and the GPU at attach)
} TcastPlan;

#define TCAST_NUM_FLAGS 6

// Defaults (no casts), then the flag table (targets are o's fields) into flags; returns the count.
static inline int tcast_flags(TcastOptions* o, CliFlag* flags) {
    o->cast = "";
    o->cast_gemm = "";
    o->lm_head = 0;
    o->stats = 0;
    o->fuse = 1;
    o->cutlass = 1;
    const CliFlag f[TCAST_NUM_FLAGS] = {
        {"--cast", CLI_STRING, &o->cast,
         "TensorCast: SITE=DTYPE[,...] virtual casts at the storage boundaries (doc/TCAST.md), e.g. all=mxfp8e4; DTYPE may take a "
         "fixed scale pN (times 2^N: e4m3fn_p2, int8_p-3; q115 = int16_p-1, SF16's Q1.15)", 0, 0, NULL},
        {"--cast-gemm", CLI_STRING, &o->cast_gemm,
         "TensorCast: x=DTYPE,w=DTYPE,dy=DTYPE casts of every linear layer's GEMM operands (DTYPE as --cast, e.g. mxfp8e4, q115)", 0, 0,
         NULL},
        {"--cast-lm-head", CLI_INT, &o->lm_head, "TensorCast: 1 = the LM head takes --cast-gemm too", 0, 1, NULL},
        {"--cast-stats", CLI_INT, &o->stats, "TensorCast: every N steps print per site/operand saturation, flushes, scales (0 = off)", 0, INT_MAX, NULL},
        {"--cast-fuse", CLI_INT, &o->fuse, "TensorCast: 1 = casts run inside the kernels that produce the tensors where they can (same bits), 0 = separate passes", 0, 1, NULL},
        {"--cast-cutlass", CLI_INT, &o->cutlass,
         "TensorCast: 1 = the qkv and fc GEMMs run on CUTLASS with the matmul_out (and GELU, gelu_out) casts in the epilogue "
         "(sm_90 and a binary with the kernels, else cuBLASLt; doc/TCAST.md 5.6), 0 = cuBLASLt + casts", 0, 1, NULL},
    };
    memcpy(flags, f, sizeof(f));
    return TCAST_NUM_FLAGS;
}

// Case-insensitive equality.
static inline int tcast_name_eq(const char* a, const char* b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

// Parse one DTYPE for `flag` (naming `key` in messages) into dt; dies on a bad spec or an explicit
// tile dimension.
static inline void tcast_parse_entry(const char* flag, const char* key, const char* text, TcastDataType* dt) {
    char err[256];
    if (tcast_parse_datatype(text, dt, err, sizeof(err)) != 0) die("%s %s=%s: %s", flag, key, text, err);
    if (dt->has_scale && dt->scale.dim_given)
        die("%s %s=%s: the trainer chooses the tile dimension (channel or reduction dimension); drop the dY of the scale spec",
            flag, key, text);
}

// Split "k=v,k=v" into entries and hand each to fn(key, value, ctx); dies naming the flag on a
// malformed list. Keys and values are at most 127 characters.
static inline void tcast_for_each_entry(const char* flag, const char* list, void (*fn)(const char*, const char*, const char*, void*),
                                        void* ctx) {
    const char* p = list;
    while (*p) {
        const char* end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char entry[256], key[128], value[128];
        if (len == 0 || len >= sizeof(entry)) die("%s %s: empty or overlong entry (expected KEY=DTYPE[,KEY=DTYPE...])", flag, list);
        memcpy(entry, p, len);
        entry[len] = '\0';
        const char* eq = strchr(entry, '=');
        if (!eq || eq == entry || !eq[1] || (size_t)(eq - entry) >= sizeof(key) || strlen(eq + 1) >= sizeof(value))
            die("%s: '%s' is not KEY=DTYPE", flag, entry);
        memcpy(key, entry, (size_t)(eq - entry));
        key[eq - entry] = '\0';
        snprintf(value, sizeof(value), "%s", eq + 1);
        fn(key, value, flag, ctx);
        p += len + (end ? 1 : 0);
        if (end && !*p) die("%s %s: trailing comma", flag, list);
    }
}

static inline void tcast_site_entry(const char* key, const char* value, const char* flag, void* ctx) {
    TcastPlan* plan = (TcastPlan*)ctx;
    int all = tcast_name_eq(key, "all"), found = all;
    for (int s = 0; s < NUM_BOUNDARY_SITES; s++) {
        if (!all && !tcast_name_eq(key, BOUNDARY_SITE_NAMES[s])) continue;
        found = 1;
        tcast_parse_entry(flag, key, value, &plan->site[s]);
        plan->site_on[s] = 1;
    }
    if (!found) {
        char names[256] = "";
        for (int s = 0; s < NUM_BOUNDARY_SITES; s++) {
            strncat(names, BOUNDARY_SITE_NAMES[s], sizeof(names) - strlen(names) - 1);
            strncat(names, ", ", sizeof(names) - strlen(names) - 1);
        }
        die("%s: unknown site '%s' (sites: %sall)", flag, key, names);
    }
}

static inline void tcast_op_entry(const char* key, const char* value, const char* flag, void* ctx) {
    TcastPlan* plan = (TcastPlan*)ctx;
    for (int o = 0; o < TCAST_NUM_OPS; o++) {
        if (!tcast_name_eq(key, TCAST_OP_NAMES[o])) continue;
        tcast_parse_entry(flag, key, value, &plan->op[o]);
        plan->op_on[o] = 1;
        return;
    }
    die("%s: unknown operand '%s' (operands: x, w, dy)", flag, key);
}

// Resolve the options into plan (no shapes yet: see tcast_plan_check_shapes). Dies naming the flag.
static inline void tcast_plan_init(TcastPlan* plan, const TcastOptions* o) {
    memset(plan, 0, sizeof(*plan));
    tcast_for_each_entry("--cast", o->cast, tcast_site_entry, plan);
    tcast_for_each_entry("--cast-gemm", o->cast_gemm, tcast_op_entry, plan);
    if (o->lm_head && !plan->op_on[TCAST_OP_X] && !plan->op_on[TCAST_OP_W] && !plan->op_on[TCAST_OP_DY])
        die("--cast-lm-head 1: needs --cast-gemm (the LM head takes its operand casts)");
    plan->lm_head = o->lm_head;
    plan->stats = o->stats;
    plan->fuse = o->fuse;
    plan->cutlass = o->cutlass;
}

// True when the plan casts nothing (the TCAST build then runs the BF16 code paths).
static inline int tcast_plan_empty(const TcastPlan* plan) {
    for (int s = 0; s < NUM_BOUNDARY_SITES; s++)
        if (plan->site_on[s]) return 0;
    for (int o = 0; o < TCAST_NUM_OPS; o++)
        if (plan->op_on[o]) return 0;
    return 1;
}

// Die unless a cast of dt along a dimension of `size` elements is possible: the tile (t0 excepted)
// and the sparsity group must divide it. what names the tensor for the message.
static inline void tcast_check_dim(const char* flag, const char* key, const TcastDataType* dt, long size, const char* what) {
    if (dt->has_scale && dt->scale.tile > 0 && size % dt->scale.tile != 0)
        die("%s %s=%s: tile %d does not divide %s (%ld)", flag, key, dt->name, dt->scale.tile, what, size);
    if (dt->sparse_n > 0 && size % dt->sparse_n != 0)
        die("%s %s=%s: sparsity group %d does not divide %s (%ld)", flag, key, dt->name, dt->sparse_n, what, size);
}

// Check every cast against the dimensions it runs along for a GPT-2 of C channels, NH heads, padded
// vocabulary Vp, micro-batch B x T: the sites' channel dimensions (C, 3C, 4C, Vp; the attention
// sites' key tiles: the tile must fit the attention kernels' key tiles, ATTN_KEY_TILE_MAX), and the
// GEMM reduction dimensions (C, 4C for the forward; 3C, C, 4C, (Vp) for dgrad; B*T for wgrad).
#define TCAST_ATTN_TILE_MAX 64
static inline void tcast_plan_check_shapes(const TcastPlan* plan, int C, int Vp, int B, int T) {
    for (int s = 0; s < NUM_BOUNDARY_SITES; s++) {
        if (!plan->site_on[s]) continue;
        const TcastDataType* dt = &plan->site[s];
        const char* key = BOUNDARY_SITE_NAMES[s];
        if (s == ATTN_SCORES || s == ATTN_PROBS) {
            // unscaled and fixed-scale (pN: has_scale = 0) types cast element by element: always admitted
            if (dt->has_scale && dt->scale.tile <= 0)
                die("--cast %s=%s: the attention scores and probabilities take unscaled, fixed-scale (pN) or tile-scaled datatypes (tiles of up to %d keys); "
                    "per-tensor and channel scales would need the whole T x T matrix", key, dt->name, TCAST_ATTN_TILE_MAX);
            if (dt->has_scale && dt->scale.tile > TCAST_ATTN_TILE_MAX)
                die("--cast %s=%s: tile %d is larger than the attention kernels' key tile (%d)", key, dt->name, dt->scale.tile, TCAST_ATTN_TILE_MAX);
            if (dt->sparse_n > TCAST_ATTN_TILE_MAX)
                die("--cast %s=%s: sparsity group %d is larger than the attention kernels' key tile (%d)", key, dt->name, dt->sparse_n,
                    TCAST_ATTN_TILE_MAX);
            continue;
        }
        // the widths of the tensors this site stores: linear-layer outputs are 3C, C, 4C, C wide (and Vp for the LM head)
        const int mm[4] = {3 * C, C, 4 * C, Vp}, one_c[1] = {C}, gelu[1] = {4 * C}, logits[1] = {Vp};
        const int* w = s == MATMUL_OUT ? mm : s == GELU_OUT ? gelu : s == LOGITS ? logits : one_c;
        const int nw = s == MATMUL_OUT ? 4 : 1;
        for (int i = 0; i < nw; i++) {
            tcast_check_dim("--cast", key, dt, w[i], "the channel dimension");
        }
    }
    for (int o = 0; o < TCAST_NUM_OPS; o++) {
        if (!plan->op_on[o]) continue;
        const TcastDataType* dt = &plan->op[o];
        const char* key = TCAST_OP_NAMES[o];
        // reduction dimensions: x (N, Cin) forward over Cin in {C, 4C}, wgrad over N = B*T; w (OC, Cin) forward over
        // Cin, dgrad over OC in {3C, C, 4C}; dy (N, OC) dgrad over OC, wgrad over N
        const long x_dims[3] = {C, 4L * C, (long)B * T}, w_dims[3] = {C, 3L * C, 4L * C}, dy_dims[3] = {3L * C, C, 4L * C};
        const long* dims = o == TCAST_OP_X ? x_dims : o == TCAST_OP_W ? w_dims : dy_dims;
        for (int i = 0; i < 3; i++) {
            tcast_check_dim("--cast-gemm", key, dt, dims[i], "the reduction dimension");
        }
        if (o == TCAST_OP_DY) tcast_check_dim("--cast-gemm", key, dt, (long)B * T, "the wgrad reduction dimension B*T");
        if (plan->lm_head && o != TCAST_OP_X) tcast_check_dim("--cast-gemm", key, dt, Vp, "the LM head's dgrad reduction dimension Vp");
    }
}
