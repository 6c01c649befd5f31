// test_tcast_config.c - the TensorCast build's cast plan (llmc/modes/tcast/tcast_config.h): --cast / --cast-gemm /
// --cast-lm-head parsed into a TcastPlan, and every malformed or impossible plan stopped before the GPU
// with `error:` naming the flag, the entry and the problem. Host only (the trainer calls the same
// functions while parsing flags).
#include "dev/test/test_harness.h"
#include "llmc/modes/tcast/tcast_config.h"

// d12 at B=64, T=1024 (C = 768, Vp = 50304) unless a case says otherwise.
typedef struct {
    const char* cast;
    const char* cast_gemm;
    int lm_head;
    int C, Vp, B, T;
} PlanCase;

static void plan_of(const PlanCase* c, TcastPlan* plan) {
    TcastOptions o = {c->cast, c->cast_gemm, c->lm_head, 0, 1, 0};  // stats 0, fuse 1, cutlass 0
    tcast_plan_init(plan, &o);
    tcast_plan_check_shapes(plan, c->C ? c->C : 768, c->Vp ? c->Vp : 50304, c->B ? c->B : 64, c->T ? c->T : 1024);
}

static void plan_die(void* ctx) {
    TcastPlan plan;
    plan_of((const PlanCase*)ctx, &plan);
}

int main(void) {
    TcastPlan plan;
    // the empty plan: nothing on, and the build then runs the BF16 code paths
    PlanCase empty = {"", "", 0, 0, 0, 0, 0};
    plan_of(&empty, &plan);
    CHECK(tcast_plan_empty(&plan), "empty options give an empty plan");

    // `all` then an override: every site on, logits in the later entry's type; names in any case
    PlanCase all = {"all=mxfp8e4,LOGITS=bfloat16", "", 0, 0, 0, 0, 0};
    plan_of(&all, &plan);
    int on = 0;
    for (int s = 0; s < NUM_BOUNDARY_SITES; s++) on += plan.site_on[s];
    CHECK(on == NUM_BOUNDARY_SITES, "all: %d of %d sites on", on, NUM_BOUNDARY_SITES);
    CHECK(strcmp(plan.site[LOGITS].name, "bfloat16") == 0, "a later entry wins: logits is %s", plan.site[LOGITS].name);
    CHECK(strcmp(plan.site[MATMUL_OUT].name, "mxfp8e4") == 0, "matmul_out is %s", plan.site[MATMUL_OUT].name);
    CHECK(plan.site[MATMUL_OUT].has_scale && plan.site[MATMUL_OUT].scale.tile == 32, "mxfp8e4: tile 32");
    CHECK(!tcast_plan_empty(&plan), "a site cast makes the plan non-empty");

    // operands with modifiers; the LM head flag kept
    PlanCase ops = {"", "x=mxfp8e4,w=mxfp4e2@stochastic,dy=mxfp8e5@nearest", 1, 0, 0, 0, 0};
    plan_of(&ops, &plan);
    CHECK(plan.op_on[TCAST_OP_X] && plan.op_on[TCAST_OP_W] && plan.op_on[TCAST_OP_DY], "three operands on");
    CHECK(plan.op[TCAST_OP_W].round == TCAST_ROUND_STOCHASTIC, "w @stochastic");
    CHECK(plan.op[TCAST_OP_DY].round == TCAST_ROUND_NEAREST, "dy @nearest");
    CHECK(plan.op[TCAST_OP_X].round == TCAST_ROUND_EVEN, "x: default @even");
    CHECK(plan.lm_head == 1, "lm_head kept");

    // an attention site with a tile-scaled type and 2:4 sparsity is fine
    PlanCase attn = {"attn_probs=e4m3fn_e8m0_t16@2:4", "", 0, 0, 0, 0, 0};
    plan_of(&attn, &plan);
    CHECK(plan.site_on[ATTN_PROBS] && plan.site[ATTN_PROBS].sparse_n == 4 && plan.site[ATTN_PROBS].sparse_m == 2, "attn_probs 2:4");

    // fixed scales pN (q115 = int16_p-1) at every site, attention included, and at every operand; any
    // shape fits (they cast element by element)
    PlanCase fixed = {"all=q115,attn_probs=int8_p-3@stochastic", "x=e4m3fn_p2,w=q115,dy=int16_p-5", 1, 96, 50304, 3, 50};
    plan_of(&fixed, &plan);
    CHECK(plan.site_on[ATTN_SCORES] && plan.site[ATTN_SCORES].fixed && plan.site[ATTN_SCORES].fixed_exp == -1 &&
              !plan.site[ATTN_SCORES].has_scale && strcmp(plan.site[ATTN_SCORES].name, "q115") == 0, "attn_scores=q115");
    CHECK(plan.site[ATTN_PROBS].fixed_exp == -3 && plan.site[ATTN_PROBS].round == TCAST_ROUND_STOCHASTIC, "attn_probs=int8_p-3@stochastic");
    CHECK(plan.op[TCAST_OP_X].fixed_exp == 2 && plan.op[TCAST_OP_DY].fixed_exp == -5 && plan.op[TCAST_OP_W].fixed, "operands pN");

    // errors, each naming the flag and what is wrong
    PlanCase bad_type = {"matmul_out=mxfp9", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &bad_type, "--cast", "matmul_out=mxfp9");
    PlanCase bad_site = {"attention=mxfp8e4", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &bad_site, "--cast", "unknown site 'attention'");
    PlanCase bad_op = {"", "z=mxfp8e4", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &bad_op, "--cast-gemm", "unknown operand 'z'");
    PlanCase no_eq = {"", "x", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &no_eq, "--cast-gemm", "'x' is not KEY=DTYPE");
    PlanCase trailing = {"all=mxfp8e4,", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &trailing, "--cast", "trailing comma");
    PlanCase dim_given = {"", "x=e4m3fn_e8m0_t32d0", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &dim_given, "--cast-gemm", "x=e4m3fn_e8m0_t32d0", "tile dimension");
    PlanCase lm_alone = {"", "", 1, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &lm_alone, "--cast-lm-head 1", "needs --cast-gemm");
    // a tensor scale cannot run inside the attention kernels; nor can a tile wider than their key tile
    PlanCase attn_tensor = {"attn_scores=int8_e", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &attn_tensor, "--cast", "attn_scores=int8_e", "per-tensor and channel scales");
    PlanCase unscaled_int = {"matmul_out=int8", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &unscaled_int, "--cast", "matmul_out=int8", "unscaled integer types are unsupported");
    PlanCase fixed_tile = {"attn_scores=int16_p-1_t32", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &fixed_tile, "--cast", "attn_scores=int16_p-1_t32", "no tile token");
    PlanCase fixed_range = {"", "w=e4m3fn_p200", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &fixed_range, "--cast-gemm", "w=e4m3fn_p200", "-127..127");
    PlanCase attn_wide = {"attn_scores=e4m3fn_e8m0_t128", "", 0, 0, 0, 0, 0};
    EXPECT_DIES(plan_die, &attn_wide, "--cast", "tile 128", "key tile");
    // tiles that do not divide a dimension the cast runs along: C = 96 with tile 64 (channels), and
    // B*T = 3 * 50 = 150 for the wgrad reduction of x with tile 32
    PlanCase tile_c = {"layernorm_out=e4m3fn_e8m0_t64", "", 0, 96, 50304, 4, 64};
    EXPECT_DIES(plan_die, &tile_c, "--cast", "layernorm_out", "tile 64 does not divide the channel dimension (96)");
    PlanCase tile_bt = {"", "x=mxfp8e4", 0, 768, 50304, 3, 50};
    EXPECT_DIES(plan_die, &tile_bt, "--cast-gemm", "tile 32 does not divide the reduction dimension (150)");
    PlanCase sparse = {"gelu_out=e4m3fn@3:8", "", 0, 97, 50304, 4, 64};
    EXPECT_DIES(plan_die, &sparse, "--cast", "gelu_out=e4m3fn", "sparsity group 8 does not divide the channel dimension (388)");
    return test_summary();
}
