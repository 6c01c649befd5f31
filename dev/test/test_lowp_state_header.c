/*
 * test_lowp_state_header.c - the header of the FP8 / TCFP-12 checkpoint file lowp_<step>.bin
 * (llmc/modes/lowp/lowp_state_header.h): a header written now is accepted by the same knobs; each knob a resume must
 * share, when it differs, is refused with a message naming the file and the flag; a version 1 header (which did not
 * record --fp8-fast-accum and --fp8-lm-head) is accepted whatever those two are, but not when another knob differs;
 * bad magic, other versions, the other build and out-of-range fields are refused.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_lowp_state_header.c -o /tmp/t && /tmp/t
 */
#include <stdio.h>
#include <string.h>

#include "dev/test/test_harness.h"
#include "llmc/modes/lowp/lowp_state_header.h"

#define PATH "out/lowp_00000010.bin"

// 1 when the check refuses h for knobs k with a message containing each of a and b (b may be NULL).
static int refused(const int64_t* h, const LowpStateKnobs* k, const char* a, const char* b) {
    char err[512] = "";
    if (!lowp_state_header_check(h, k, 256, PATH, err, sizeof(err))) return 0;
    const int ok = strncmp(err, PATH ": ", strlen(PATH) + 2) == 0 && strstr(err, a) && (!b || strstr(err, b));
    if (!ok || getenv("TEST_VERBOSE")) fprintf(stderr, "  message: %s\n", err);
    return ok;
}

static int accepted(const int64_t* h, const LowpStateKnobs* k) {
    char err[512] = "";
    const int rc = lowp_state_header_check(h, k, 256, PATH, err, sizeof(err));
    if (rc) fprintf(stderr, "  refused: %s\n", err);
    return rc == 0;
}

int main(void) {
    // The FP8 build's defaults (llmc/modes/lowp/mode.cuh lowp_default_options) and TCFP-12's.
    const LowpStateKnobs fp8 = {1, 0, 0, 16, 2, 1}, tcfp = {2, 0, 1, 4, 0, 0};
    int64_t h[LOWP_STATE_HEADER_WORDS];

    // Written now: every word where doc/FORMATS.md puts it, accepted by the same knobs.
    lowp_state_header_fill(h, &fp8, 11, 10, 49);
    CHECK(h[0] == LOWP_STATE_MAGIC && h[1] == 2 && h[2] == 1 && h[3] == 0 && h[4] == 0 && h[5] == 16 && h[6] == 11 && h[7] == 10 &&
              h[8] == 49 && h[9] == 2 && h[10] == 1 && h[11] == 0 && h[15] == 0,
          "header words");
    CHECK(accepted(h, &fp8), "same knobs: accepted");
    lowp_state_header_fill(h, &tcfp, 3, 2, 48);
    CHECK(accepted(h, &tcfp), "TCFP-12, same knobs: accepted");

    // Each knob a resume must share, one at a time.
    const char* flags[5] = {"--tcfp-block", "--tcfp-ef", "--fp8-delayed", "--fp8-fast-accum", "--fp8-lm-head"};
    for (int i = 0; i < 5; i++) {
        lowp_state_header_fill(h, &fp8, 11, 10, 49);
        LowpStateKnobs run = fp8;
        int* knob[5] = {&run.block, &run.error_feedback, &run.delayed, &run.fast_accum, &run.lm_head};
        *knob[i] = i == 0 ? 128 : (*knob[i] == 0);
        CHECK(refused(h, &run, flags[i], "resume with the same value"), "%s differs: refused naming it", flags[i]);
    }
    // The case the version exists for: a run written with the former FP8 defaults, resumed with today's.
    const LowpStateKnobs former = {1, 0, 0, 0, 0, 0};
    lowp_state_header_fill(h, &former, 11, 10, 48);
    CHECK(refused(h, &fp8, "written with --fp8-delayed 0", "this run has --fp8-delayed 16"), "former defaults: refused at --fp8-delayed");
    LowpStateKnobs only_delayed = former;
    only_delayed.delayed = 16;
    lowp_state_header_fill(h, &only_delayed, 11, 10, 48);
    CHECK(refused(h, &fp8, "written with --fp8-fast-accum 0", "this run has --fp8-fast-accum 2"), "then at --fp8-fast-accum");

    // Version 1: words 9 and 10 were 0 and are not checked; the other knobs still are.
    lowp_state_header_fill(h, &only_delayed, 11, 10, 48);
    h[1] = 1;
    h[9] = h[10] = 0;
    CHECK(accepted(h, &fp8), "version 1: --fp8-fast-accum / --fp8-lm-head not recorded, accepted");
    LowpStateKnobs other = fp8;
    other.delayed = 4;
    CHECK(refused(h, &other, "--fp8-delayed", NULL), "version 1: --fp8-delayed still checked");

    // Not a state of this build or this format.
    lowp_state_header_fill(h, &fp8, 11, 10, 49);
    h[0] = 0x4C4F5751LL;
    CHECK(refused(h, &fp8, "bad magic", NULL), "bad magic");
    for (int64_t v = 0; v <= 3; v += 3) {
        lowp_state_header_fill(h, &fp8, 11, 10, 49);
        h[1] = v;
        CHECK(refused(h, &fp8, "unsupported version", "expected 1 or 2"), "version %lld refused", (long long)v);
    }
    lowp_state_header_fill(h, &tcfp, 3, 2, 48);
    CHECK(refused(h, &fp8, "written by the TCFP-12 build, this is FP8", NULL), "TCFP-12 state in the FP8 build");
    lowp_state_header_fill(h, &fp8, 11, 10, 49);
    CHECK(refused(h, &tcfp, "written by the FP8 build, this is TCFP-12", NULL), "FP8 state in the TCFP-12 build");

    // Fields out of range: weight version < 1, negative steps, too many or negative layers; the limit itself is fine.
    const struct { int word; int64_t value; } bad[] = {{6, 0}, {7, -1}, {8, -1}, {8, 257}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        lowp_state_header_fill(h, &fp8, 11, 10, 49);
        h[bad[i].word] = bad[i].value;
        CHECK(refused(h, &fp8, "header fields out of range", NULL), "word %d = %lld refused", bad[i].word, (long long)bad[i].value);
    }
    lowp_state_header_fill(h, &fp8, 1, 0, 256);
    CHECK(accepted(h, &fp8), "weight version 1, no steps, 256 layers: accepted");
    return test_summary();
}
