/*
 * test_dataloader.c - token shard loader: layout, advancing, epochs, globs, ranks, state, errors.
 *   cc -std=gnu11 -O2 -Wall -Wextra -I. dev/test/test_dataloader.c -lm -o /tmp/test_dataloader && /tmp/test_dataloader
 */
#include <stdint.h>

#include "dev/test/test_harness.h"
#include "llmc/data/dataloader.h"
#include "llmc/core/utils.h"

#define V_GPT2 50257

// token i of shard `id` in the test pattern (distinct per shard, always < 50000)
static int pattern_token(int id, size_t i) {
    return (int)((size_t)id * 10000 + i) % 50000;
}

// Writes a shard with header words magic/version/count and `ntok` tokens of pattern `id`
// (or, if bad_pos < ntok, the value bad_val at position bad_pos); extra bytes appended.
static void write_shard_ex(const char* path, int32_t magic, int32_t version, int32_t count, size_t ntok, int id,
                           size_t bad_pos, uint16_t bad_val, size_t extra) {
    int32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    FILE* f = fopen_check(path, "wb");
    fwrite_check(header, sizeof(header), 1, f, path);
    for (size_t i = 0; i < ntok; i++) {
        uint16_t t = (i == bad_pos) ? bad_val : (uint16_t)pattern_token(id, i);
        fwrite_check(&t, sizeof(t), 1, f, path);
    }
    for (size_t i = 0; i < extra; i++) fputc(0, f);
    fclose_check(f, path);
}

static void write_shard(const char* path, size_t ntok, int id) {
    write_shard_ex(path, 20240520, 1, (int32_t)ntok, ntok, id, (size_t)-1, 0, 0);
}

// checks that the current batch is the B*T+1 tokens of shard `id` starting at pos
static int batch_is(const DataLoader* d, int id, size_t pos) {
    size_t bt = d->B * d->T;
    for (size_t i = 0; i < bt; i++) {
        if (d->inputs[i] != pattern_token(id, pos + i)) return 0;
        if (d->targets[i] != pattern_token(id, pos + i + 1)) return 0;
    }
    return 1;
}

static void test_single_shard(void) {
    const char* p = tmp_path("single.bin");
    write_shard(p, 100, 3);
    DataLoader d;
    dataloader_init(&d, p, 2, 4, 0, 1, V_GPT2);
    CHECK(d.num_tokens == 100, "num_tokens %zu", d.num_tokens);
    CHECK(d.B == 2 && d.T == 4, "B, T");
    dataloader_next_batch(&d);
    // explicit layout of the first batch: row-major (b, t)
    int ok = 1;
    for (int b = 0; b < 2; b++) {
        for (int t = 0; t < 4; t++) {
            if (d.inputs[b * 4 + t] != 30000 + b * 4 + t) ok = 0;
            if (d.targets[b * 4 + t] != 30000 + b * 4 + t + 1) ok = 0;
        }
    }
    CHECK(ok, "first batch layout: inputs[0]=%d targets[0]=%d inputs[7]=%d targets[7]=%d", d.inputs[0], d.targets[0],
          d.inputs[7], d.targets[7]);
    // 100 tokens, B*T = 8: batches at 0, 8, ..., 88 (88 + 9 <= 100), i.e. 12 per epoch
    int seq_ok = 1;
    for (size_t k = 1; k < 12; k++) {
        DataLoaderState s = dataloader_get_state(&d);
        if (s.shard != 0 || s.position != 8 * k || s.epoch != 0) seq_ok = 0;
        dataloader_next_batch(&d);
        if (!batch_is(&d, 3, 8 * k)) seq_ok = 0;
    }
    CHECK(seq_ok, "12 consecutive batches advance by B*T");
    DataLoaderState s = dataloader_get_state(&d);
    CHECK(s.shard == 0 && s.position == 0 && s.epoch == 1, "wrapped: shard %zu position %zu epoch %zu", s.shard,
          s.position, s.epoch);
    dataloader_next_batch(&d);
    CHECK(batch_is(&d, 3, 0), "epoch 2 starts at the beginning again");
    for (int k = 0; k < 12; k++) dataloader_next_batch(&d);
    s = dataloader_get_state(&d);
    CHECK(s.epoch == 2 && s.position == 8, "after 25 batches: epoch %zu position %zu", s.epoch, s.position);

    dataloader_reset(&d);
    s = dataloader_get_state(&d);
    CHECK(s.shard == 0 && s.position == 0 && s.epoch == 0, "reset state");
    dataloader_next_batch(&d);
    CHECK(batch_is(&d, 3, 0), "reset gives the first batch again");
    dataloader_free(&d);

    // exactly B*T+1 tokens: every batch is the same one, each one an epoch
    p = tmp_path("exact.bin");
    write_shard(p, 9, 1);
    dataloader_init(&d, p, 2, 4, 0, 1, V_GPT2);
    dataloader_next_batch(&d);
    dataloader_next_batch(&d);
    s = dataloader_get_state(&d);
    CHECK(batch_is(&d, 1, 0) && s.epoch == 2, "minimal shard: epoch %zu", s.epoch);
    dataloader_free(&d);
}

// reference model of the stream: the (shard, position) of batch k for one rank. A shard is left
// when the next group batch (nranks*B*T+1 tokens starting rank*B*T before the rank's position)
// does not fit, so all ranks leave it together.
typedef struct {
    size_t shard, position, epoch;
} Pos;

static size_t reference_stream(const size_t* ntok, size_t nshards, size_t bt, int rank, int nranks, Pos* out,
                               size_t max) {
    size_t k = 0;
    for (size_t epoch = 0; k < max; epoch++) {
        for (size_t s = 0; s < nshards && k < max; s++) {
            for (size_t pos = (size_t)rank * bt; pos - (size_t)rank * bt + (size_t)nranks * bt + 1 <= ntok[s] && k < max;
                 pos += (size_t)nranks * bt) {
                out[k].shard = s;
                out[k].position = pos;
                out[k].epoch = epoch;
                k++;
            }
        }
    }
    return k;
}

static void test_multi_shard(void) {
    // created out of order; glob must return them sorted. ids: shard file k holds pattern k+5
    const size_t ntok[3] = {50, 30, 41};
    char name[64];
    for (int k = 2; k >= 0; k--) {
        snprintf(name, sizeof(name), "multi_train_%06d.bin", k);
        write_shard(tmp_path(name), ntok[k], k + 5);
    }
    write_shard(tmp_path("multi_val_000000.bin"), 20, 9);  // must not match the pattern
    char pattern[600];
    snprintf(pattern, sizeof(pattern), "%s/multi_train_*.bin", test_tmpdir());

    DataLoader d;
    const size_t B = 1, T = 4;
    dataloader_init(&d, pattern, B, T, 0, 1, V_GPT2);
    CHECK(d.num_tokens == 121, "num_tokens over 3 shards %zu", d.num_tokens);
    Pos ref[100];
    reference_stream(ntok, 3, B * T, 0, 1, ref, 100);
    // shard 0 (50 tokens): positions 0..44 step 4 -> 12 batches; shard 1 (30): 0..24 -> 7; shard 2 (41): 0..36 -> 10
    CHECK(ref[11].shard == 0 && ref[11].position == 44 && ref[12].shard == 1 && ref[12].position == 0, "reference model");
    int ok = 1;
    size_t first_bad = 0;
    for (size_t k = 0; k < 100; k++) {
        DataLoaderState s = dataloader_get_state(&d);
        dataloader_next_batch(&d);
        if (s.shard != ref[k].shard || s.position != ref[k].position || s.epoch != ref[k].epoch ||
            !batch_is(&d, (int)ref[k].shard + 5, ref[k].position)) {
            if (ok) first_bad = k;
            ok = 0;
        }
    }
    CHECK(ok, "3 shards in sorted order over 3+ epochs (first mismatch at batch %zu)", first_bad);
    dataloader_free(&d);

    // one shard of the glob being bad stops init, naming that shard
}

static void test_ranks(void) {
    const size_t ntok[2] = {200, 150};
    write_shard(tmp_path("ranks_a.bin"), ntok[0], 1);
    write_shard(tmp_path("ranks_b.bin"), ntok[1], 2);
    char pattern[600];
    snprintf(pattern, sizeof(pattern), "%s/ranks_?.bin", test_tmpdir());
    const size_t B = 2, T = 8;
    DataLoader r0, r1, single;
    dataloader_init(&r0, pattern, B, T, 0, 2, V_GPT2);
    dataloader_init(&r1, pattern, B, T, 1, 2, V_GPT2);
    dataloader_init(&single, pattern, 2 * B, T, 0, 1, V_GPT2);
    size_t bt = B * T;
    int same = 1, disjoint = 1, lockstep = 1;
    for (int k = 0; k < 40; k++) {
        DataLoaderState s0 = dataloader_get_state(&r0), s1 = dataloader_get_state(&r1);
        if (s1.shard != s0.shard || s1.epoch != s0.epoch) lockstep = 0;
        if (s1.position != s0.position + bt) disjoint = 0;
        dataloader_next_batch(&r0);
        dataloader_next_batch(&r1);
        dataloader_next_batch(&single);
        if (memcmp(r0.inputs, single.inputs, bt * sizeof(int)) != 0) same = 0;
        if (memcmp(r1.inputs, single.inputs + bt, bt * sizeof(int)) != 0) same = 0;
        if (memcmp(r0.targets, single.targets, bt * sizeof(int)) != 0) same = 0;
        if (memcmp(r1.targets, single.targets + bt, bt * sizeof(int)) != 0) same = 0;
        if (r0.inputs[0] == r1.inputs[0]) disjoint = 0;
    }
    CHECK(same, "ranks 0 and 1 of 2 together equal the single-rank stream with 2B, over shards and epochs");
    CHECK(disjoint, "rank 1 reads the B*T tokens right after rank 0's");
    // shard b has 150 tokens: rank 0 alone could fit a 5th batch at 128 (128+17 <= 150), but the
    // group batch 128..161 does not, so both ranks read 4 batches there and stay in lockstep
    CHECK(lockstep, "ranks stay on the same shard and epoch");
    DataLoaderState s1 = dataloader_get_state(&r1);
    CHECK(s1.epoch >= 1, "ranks test crossed an epoch (epoch %zu)", s1.epoch);
    // rank 1's reference positions
    Pos ref[60];
    reference_stream(ntok, 2, bt, 1, 2, ref, 60);
    dataloader_reset(&r1);
    int ok = 1;
    for (int k = 0; k < 60; k++) {
        DataLoaderState s = dataloader_get_state(&r1);
        dataloader_next_batch(&r1);
        if (s.shard != ref[k].shard || s.position != ref[k].position || s.epoch != ref[k].epoch ||
            !batch_is(&r1, (int)ref[k].shard + 1, ref[k].position)) {
            ok = 0;
        }
    }
    CHECK(ok, "rank 1 follows the reference positions (start r*B*T, stride nranks*B*T)");
    dataloader_reset(&r1);
    DataLoaderState s = dataloader_get_state(&r1);
    CHECK(s.shard == 0 && s.position == bt && s.epoch == 0, "reset of rank 1 -> position B*T");
    dataloader_free(&r0);
    dataloader_free(&r1);
    dataloader_free(&single);
}

static void test_state(void) {
    const char* p1 = tmp_path("state_000000.bin");
    const char* p2 = tmp_path("state_000001.bin");
    write_shard(p1, 70, 4);
    write_shard(p2, 45, 6);
    char pattern[600];
    snprintf(pattern, sizeof(pattern), "%s/state_*.bin", test_tmpdir());
    DataLoader d, e;
    dataloader_init(&d, pattern, 2, 3, 0, 1, V_GPT2);
    for (int k = 0; k < 13; k++) dataloader_next_batch(&d);
    DataLoaderState saved = dataloader_get_state(&d);
    int rec_in[30][6], rec_tg[30][6];
    for (int k = 0; k < 30; k++) {
        dataloader_next_batch(&d);
        memcpy(rec_in[k], d.inputs, sizeof(rec_in[k]));
        memcpy(rec_tg[k], d.targets, sizeof(rec_tg[k]));
    }
    DataLoaderState end = dataloader_get_state(&d);
    // same loader
    dataloader_set_state(&d, saved);
    DataLoaderState again = dataloader_get_state(&d);
    CHECK(again.shard == saved.shard && again.position == saved.position && again.epoch == saved.epoch,
          "get after set returns the same state");
    int ok = 1;
    for (int k = 0; k < 30; k++) {
        dataloader_next_batch(&d);
        if (memcmp(rec_in[k], d.inputs, sizeof(rec_in[k])) || memcmp(rec_tg[k], d.targets, sizeof(rec_tg[k]))) ok = 0;
    }
    DataLoaderState end2 = dataloader_get_state(&d);
    CHECK(ok && end2.shard == end.shard && end2.position == end.position && end2.epoch == end.epoch,
          "set_state replays the same batches (same loader)");
    // a fresh loader (a resumed run)
    dataloader_init(&e, pattern, 2, 3, 0, 1, V_GPT2);
    dataloader_set_state(&e, saved);
    ok = 1;
    for (int k = 0; k < 30; k++) {
        dataloader_next_batch(&e);
        if (memcmp(rec_in[k], e.inputs, sizeof(rec_in[k])) || memcmp(rec_tg[k], e.targets, sizeof(rec_tg[k]))) ok = 0;
    }
    CHECK(ok, "set_state replays the same batches (fresh loader)");
    CHECK(saved.epoch == 0 && end.epoch >= 1, "state test crossed an epoch (saved epoch %zu, end epoch %zu)",
          saved.epoch, end.epoch);
    // a state at the very last batch of a shard
    DataLoaderState last = {1, 45 - 7, 5};
    dataloader_set_state(&e, last);
    dataloader_next_batch(&e);
    DataLoaderState after = dataloader_get_state(&e);
    CHECK(batch_is(&e, 6, 38) && after.shard == 0 && after.position == 0 && after.epoch == 6,
          "last batch of the last shard, then wrap: %zu %zu %zu", after.shard, after.position, after.epoch);
    dataloader_free(&d);
    dataloader_free(&e);
}

// ---- bad input ----

typedef struct {
    const char* pattern;
    size_t B, T;
    int rank, nranks, V;
    int batches;           // next_batch calls after init
    int set_state;         // call set_state(state) after init
    DataLoaderState state;
} LoadCtx;

static void die_load(void* ctx) {
    LoadCtx* c = (LoadCtx*)ctx;
    DataLoader d;
    dataloader_init(&d, c->pattern, c->B, c->T, c->rank, c->nranks, c->V);
    if (c->set_state) dataloader_set_state(&d, c->state);
    for (int k = 0; k < c->batches; k++) dataloader_next_batch(&d);
    dataloader_free(&d);
}

static LoadCtx load_ctx(const char* pattern) {
    LoadCtx c;
    memset(&c, 0, sizeof(c));
    c.pattern = pattern;
    c.B = 2;
    c.T = 4;
    c.rank = 0;
    c.nranks = 1;
    c.V = V_GPT2;
    return c;
}

static void test_bad_input(void) {
    static LoadCtx c[32];
    int n = 0;
    const char* p;

    p = tmp_path("bad_magic.bin");
    write_shard_ex(p, 12345, 1, 100, 100, 0, (size_t)-1, 0, 0);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "bad magic 12345", "20240520");
    n++;

    p = tmp_path("bad_version.bin");
    write_shard_ex(p, 20240520, 2, 100, 100, 0, (size_t)-1, 0, 0);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "version", "2");
    n++;

    p = tmp_path("short_header.bin");
    {
        FILE* f = fopen_check(p, "wb");
        int32_t h[3] = {20240520, 1, 100};
        fwrite_check(h, sizeof(h), 1, f, p);
        fclose_check(f, p);
    }
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "header", "truncated");
    n++;

    p = tmp_path("short_body.bin");
    write_shard_ex(p, 20240520, 1, 100, 99, 0, (size_t)-1, 0, 0);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "truncated");
    n++;

    p = tmp_path("odd_body.bin");  // one stray byte short of a token
    write_shard_ex(p, 20240520, 1, 100, 99, 0, (size_t)-1, 0, 1);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "truncated");
    n++;

    p = tmp_path("trailing.bin");
    write_shard_ex(p, 20240520, 1, 100, 100, 0, (size_t)-1, 0, 3);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "trailing bytes");
    n++;

    p = tmp_path("empty.bin");
    write_shard_ex(p, 20240520, 1, 0, 0, 0, (size_t)-1, 0, 0);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "empty shard");
    n++;

    p = tmp_path("negative.bin");
    write_shard_ex(p, 20240520, 1, -4, 0, 0, (size_t)-1, 0, 0);
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "empty shard");
    n++;

    // bad token at position 37: init succeeds, the batch holding it dies (batches 4 and 5 cover
    // tokens 32..40 and 40..48; position 37 is in the 5th batch, k = 4)
    p = tmp_path("bad_token.bin");
    write_shard_ex(p, 20240520, 1, 100, 100, 0, 37, 50300, 0);
    {
        DataLoader d;
        dataloader_init(&d, p, 2, 4, 0, 1, V_GPT2);
        for (int k = 0; k < 4; k++) dataloader_next_batch(&d);
        CHECK(d.inputs[7] == 31 && d.targets[7] == 32, "batches before the bad token are fine");
        dataloader_free(&d);
    }
    c[n] = load_ctx(p);
    c[n].batches = 5;
    EXPECT_DIES(die_load, &c[n], p, "position 37", "50300", "50257");
    n++;
    // the bad token as the very last target of a batch (position 40 of batch 32..40) also dies
    p = tmp_path("bad_last_target.bin");
    write_shard_ex(p, 20240520, 1, 100, 100, 0, 40, 65535, 0);
    c[n] = load_ctx(p);
    c[n].batches = 5;
    EXPECT_DIES(die_load, &c[n], p, "position 40", "65535");
    n++;
    // a smaller vocabulary makes the pattern's own ids invalid
    p = tmp_path("small_vocab.bin");
    write_shard(p, 100, 0);
    c[n] = load_ctx(p);
    c[n].V = 20;
    c[n].batches = 3;
    EXPECT_DIES(die_load, &c[n], p, "position 20", "not < vocab size 20");
    n++;

    p = tmp_path("missing.bin");
    c[n] = load_ctx(p);
    EXPECT_DIES(die_load, &c[n], p, "No such file");
    n++;

    static char nomatch[600];
    snprintf(nomatch, sizeof(nomatch), "%s/nothing_*.bin", test_tmpdir());
    c[n] = load_ctx(nomatch);
    EXPECT_DIES(die_load, &c[n], nomatch, "no files match");
    n++;

    // too small for nranks*B*T+1: 16 tokens, B=2, T=4, 2 ranks -> needs 17
    p = tmp_path("too_small.bin");
    write_shard(p, 16, 0);
    c[n] = load_ctx(p);
    c[n].nranks = 2;
    c[n].rank = 1;
    EXPECT_DIES(die_load, &c[n], p, "too small", "16", "17");
    n++;
    c[n] = load_ctx(p);  // 1 rank, B*T+1 = 9 fits: must not die (checked below)
    c[n].batches = 3;
    {
        DataLoader d;
        dataloader_init(&d, p, 2, 4, 0, 1, V_GPT2);
        dataloader_next_batch(&d);
        CHECK(batch_is(&d, 0, 0), "16-token shard is fine for one rank");
        dataloader_free(&d);
    }

    // one bad shard inside a glob: named, even though the others are fine
    write_shard(tmp_path("mixed_000000.bin"), 100, 0);
    write_shard_ex(tmp_path("mixed_000001.bin"), 20240520, 1, 100, 100, 0, (size_t)-1, 0, 2);
    write_shard(tmp_path("mixed_000002.bin"), 100, 0);
    static char mixed[600];
    snprintf(mixed, sizeof(mixed), "%s/mixed_*.bin", test_tmpdir());
    c[n] = load_ctx(mixed);
    EXPECT_DIES(die_load, &c[n], "mixed_000001.bin", "trailing bytes");
    n++;

    // bad arguments and bad states
    p = tmp_path("fine.bin");
    write_shard(p, 100, 0);
    c[n] = load_ctx(p);
    c[n].B = 0;
    EXPECT_DIES(die_load, &c[n], p, "B=0");
    n++;
    c[n] = load_ctx(p);
    c[n].rank = 2;
    c[n].nranks = 2;
    EXPECT_DIES(die_load, &c[n], p, "rank 2 of 2");
    n++;
    c[n] = load_ctx(p);
    c[n].set_state = 1;
    c[n].state.shard = 1;
    EXPECT_DIES(die_load, &c[n], "state", "shard index 1");
    n++;
    c[n] = load_ctx(p);
    c[n].set_state = 1;
    c[n].state.position = 92;  // 92 + 9 > 100
    EXPECT_DIES(die_load, &c[n], p, "state", "position 92");
    n++;
    c[n] = load_ctx(p);
    c[n].set_state = 1;
    c[n].state.position = (size_t)-1;
    EXPECT_DIES(die_load, &c[n], p, "state", "position");
    n++;
    {
        DataLoader d;
        dataloader_init(&d, p, 2, 4, 0, 1, V_GPT2);
        DataLoaderState s = {0, 91, 3};  // last position that fits, unaligned
        dataloader_set_state(&d, s);
        dataloader_next_batch(&d);
        CHECK(batch_is(&d, 0, 91), "unaligned but fitting state is accepted");
        dataloader_free(&d);
    }
    CHECK(n <= 32, "ctx table size");
}

int main(void) {
    test_single_shard();
    test_multi_shard();
    test_ranks();
    test_state();
    test_bad_input();
    return test_summary();
}
