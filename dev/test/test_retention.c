/*
 * test_retention.c - llmc/train/checkpoint_retention.h: -nk / -nm retention and resuming only complete
 * checkpoints.
 *   - file names: exactly the ones the trainers write are recognized (not .tmp, not other names);
 *   - the plan (pure): keep the N newest complete checkpoints and the multiples of M, delete the rest
 *     up to the step just written (also incomplete leftovers), nothing newer, nothing when the written
 *     one is not complete;
 *   - folders of one and of two processes: what remains after retention run rank by rank in either
 *     order, and after every interleaving of a crash inside a deletion: the newest complete checkpoint
 *     never changes, a half-deleted set is never "complete", and ckpt_recover finishes the marker;
 *   - markers naming files of another checkpoint are refused.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev/test/test_harness.h"
#include "llmc/train/checkpoint_retention.h"

static void touch(const char* dir, const char* name) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE* f = fopen(p, "wb");
    fputs("x", f);
    fclose(f);
}

static int exists(const char* dir, const char* name) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void clear_dir(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

static int count_files(const char* dir) {
    DIR* d = opendir(dir);
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

// Write the files of checkpoint `step` for nranks processes (state files when with_state).
static void write_set(const char* dir, int step, int nranks, int with_state, int with_lowp) {
    char name[96];
    ckpt_name(name, sizeof(name), 'm', step, -1);
    touch(dir, name);
    for (int r = 0; r < nranks && with_state; r++) {
        ckpt_name(name, sizeof(name), 's', step, nranks == 1 ? -1 : r);
        touch(dir, name);
        if (with_lowp) {
            ckpt_name(name, sizeof(name), 'l', step, nranks == 1 ? -1 : r);
            touch(dir, name);
        }
    }
}

static void test_names(void) {
    CkptFile f;
    CHECK(ckpt_parse_name("model_00000012.bin", &f) && f.kind == 'm' && f.step == 12 && f.rank == -1, "model name");
    CHECK(ckpt_parse_name("state_00000012_rank3.bin", &f) && f.kind == 's' && f.step == 12 && f.rank == 3, "state name of rank 3");
    CHECK(ckpt_parse_name("lowp_123456789.bin", &f) && f.kind == 'l' && f.step == 123456789, "lowp name, 9 digits");
    CHECK(ckpt_parse_name("delete_00000004_rank1.pending", &f) && f.kind == 'd' && f.step == 4 && f.rank == 1, "marker name");
    const char* bad[] = {"model_00000012.bin.tmp", "model_12.bin", "model_00000012_rank0.bin", "state_00000012_rank.bin",
                         "main.log", "model_0000001x.bin", "delete_00000004.pending.tmp", "state_-0000001.bin", "lowp_00000001_rank01.bin"};
    int ok = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (ckpt_parse_name(bad[i], &f)) { ok = 0; fprintf(stderr, "accepted %s\n", bad[i]); }
    CHECK(ok, "other names (tmp files, wrong widths, logs) are not checkpoint files");
}

static void test_plan(void) {
    int steps[16], complete[16], del[16];
    for (int i = 0; i < 7; i++) { steps[i] = 2 * (i + 1); complete[i] = 1; }  // 2, 4, ..., 14
    int nd = ckpt_retention_plan(steps, complete, 7, 14, 2, 6, del);
    CHECK(nd == 4 && del[0] == 2 && del[1] == 4 && del[2] == 8 && del[3] == 10, "-nk 2 -nm 6 after 14: delete 2 4 8 10 (got %d)", nd);
    nd = ckpt_retention_plan(steps, complete, 7, 14, 2, 0, del);
    CHECK(nd == 5 && del[4] == 10, "-nk 2 without -nm: delete 2..10");
    CHECK(ckpt_retention_plan(steps, complete, 7, 14, 0, 0, del) == 0, "-nk 0: nothing");
    CHECK(ckpt_retention_plan(steps, complete, 7, 14, 10, 0, del) == 0, "fewer checkpoints than -nk: nothing");
    nd = ckpt_retention_plan(steps, complete, 7, 8, 1, 0, del);  // 10..14 belong to another (earlier, longer) run
    CHECK(nd == 3 && del[0] == 2 && del[2] == 6, "newer steps than the written one are left alone (got %d)", nd);
    complete[6] = 0;  // 14 not complete
    CHECK(ckpt_retention_plan(steps, complete, 7, 14, 1, 0, del) == 0, "the written step is not complete: nothing");
    complete[6] = 1;
    complete[5] = 0;  // 12 incomplete (a leftover): it does not count as kept, and goes
    nd = ckpt_retention_plan(steps, complete, 7, 14, 2, 0, del);
    CHECK(nd == 5 && del[0] == 2 && del[1] == 4 && del[2] == 6 && del[3] == 8 && del[4] == 12, "kept: 14 and 10; incomplete 12 goes");
    complete[5] = 1;
    int one[1] = {5}, c1[1] = {1};
    CHECK(ckpt_retention_plan(one, c1, 1, 5, 1, 0, del) == 0, "the only checkpoint is never deleted");
}

static void test_single_process(void) {
    const char* dir = tmp_path("ck1");
    mkdir(dir, 0755);
    for (int s = 2; s <= 14; s += 2) {  // as the CPU trainer: model files only, retention after each
        write_set(dir, s, 1, 0, 0);
        ckpt_apply_retention(dir, s, 2, 6, 0, 1, 0);
    }
    CHECK(exists(dir, "model_00000006.bin") && exists(dir, "model_00000012.bin") && exists(dir, "model_00000014.bin") &&
              count_files(dir) == 3,
          "-n 2 -nk 2 -nm 6 up to 14 leaves 6 12 14 (%d files)", count_files(dir));
    CHECK(ckpt_find_latest(dir, 1, 0) == 14, "latest 14");
    clear_dir(dir);
    // the CUDA layout of one process: model + state + lowp
    for (int s = 1; s <= 5; s++) {
        write_set(dir, s, 1, 1, 1);
        ckpt_apply_retention(dir, s, 1, 0, 0, 1, 1);
    }
    CHECK(count_files(dir) == 3 && exists(dir, "model_00000005.bin") && exists(dir, "state_00000005.bin") && exists(dir, "lowp_00000005.bin"),
          "-nk 1: only step 5's three files remain");
    clear_dir(dir);
    rmdir(dir);
}

// Two ranks: retention applied by rank 0 then rank 1 and the other way round gives the same folder.
static void test_two_ranks(void) {
    const char* dir = tmp_path("ck2");
    mkdir(dir, 0755);
    for (int order = 0; order < 2; order++) {
        clear_dir(dir);
        for (int s = 10; s <= 50; s += 10) {
            write_set(dir, s, 2, 1, 1);
            ckpt_apply_retention(dir, s, 2, 0, order == 0 ? 0 : 1, 2, 1);
            ckpt_apply_retention(dir, s, 2, 0, order == 0 ? 1 : 0, 2, 1);
        }
        CHECK(count_files(dir) == 10, "order %d: 2 sets x 5 files remain (%d)", order,
              count_files(dir));
        CHECK(ckpt_find_latest(dir, 2, 1) == 50, "latest 50");
        CHECK(exists(dir, "state_00000040_rank1.bin") && exists(dir, "lowp_00000040_rank0.bin") && !exists(dir, "model_00000030.bin") &&
                  !exists(dir, "state_00000030_rank1.bin"),
              "order %d: 40 and 50 kept, 30 gone", order);
    }
    // only rank 1 has deleted its part of 40 (rank 0 crashed before): 40 is not complete, 50 is the
    // latest; the next retention (after 60) plans 40 again and removes what is left
    clear_dir(dir);
    write_set(dir, 40, 2, 1, 0);
    write_set(dir, 50, 2, 1, 0);
    write_set(dir, 60, 2, 1, 0);
    CkptDir d;
    ckpt_scan(dir, &d);
    ckpt_delete(dir, &d, 40, 1, 2);
    ckpt_dir_free(&d);
    CHECK(!exists(dir, "state_00000040_rank1.bin") && exists(dir, "model_00000040.bin") && ckpt_find_latest(dir, 2, 1) == 60,
          "rank 1's part of 40 gone, 40 no longer complete");
    unlink(tmp_path("ck2/model_00000060.bin"));
    unlink(tmp_path("ck2/state_00000060_rank0.bin"));
    unlink(tmp_path("ck2/state_00000060_rank1.bin"));
    CHECK(ckpt_find_latest(dir, 2, 1) == 50, "a half-deleted 40 is never picked: 50");
    write_set(dir, 60, 2, 1, 0);
    ckpt_apply_retention(dir, 60, 2, 0, 0, 2, 1);
    ckpt_apply_retention(dir, 60, 2, 0, 1, 2, 1);
    CHECK(!exists(dir, "model_00000040.bin") && !exists(dir, "state_00000040_rank0.bin") && count_files(dir) == 6,
          "the leftover of 40 is deleted at the next checkpoint (%d files)", count_files(dir));
    // a foreign layout (a one-process state file in a two-process run) goes with rank 0's part
    touch(dir, "state_00000050.bin");
    write_set(dir, 70, 2, 1, 0);
    ckpt_apply_retention(dir, 70, 2, 0, 0, 2, 1);
    CHECK(!exists(dir, "state_00000050.bin") && !exists(dir, "model_00000050.bin") && exists(dir, "state_00000050_rank1.bin"),
          "rank 0 deletes the model and the foreign state file, not rank 1's");
    ckpt_apply_retention(dir, 70, 2, 0, 1, 2, 1);
    CHECK(count_files(dir) == 6, "then rank 1 its own (%d files)", count_files(dir));
    clear_dir(dir);
    rmdir(dir);
}

static void die_bad_marker(void* ctx) { ckpt_recover((const char*)ctx); }

// A crash inside a deletion: the marker is on disk and any prefix of its files is gone.
static void test_recovery(void) {
    const char* dir = tmp_path("ck3");
    mkdir(dir, 0755);
    const char* files[3] = {"model_00000004.bin", "state_00000004.bin", "lowp_00000004.bin"};
    for (int gone = 0; gone <= 3; gone++) {
        clear_dir(dir);
        write_set(dir, 4, 1, 1, 1);
        write_set(dir, 8, 1, 1, 1);
        char marker[1024];
        snprintf(marker, sizeof(marker), "%s/delete_00000004.pending", dir);
        FILE* f = fopen(marker, "w");
        for (int i = 0; i < 3; i++) fprintf(f, "%s\n", files[i]);
        fclose(f);
        for (int i = 0; i < gone; i++) {
            char p[1024];
            snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
            unlink(p);
        }
        CHECK(ckpt_find_latest(dir, 1, 1) == 8, "%d files gone: latest is 8", gone);
        // with 8 gone too, 4 is never picked while its marker is pending
        CkptDir d;
        ckpt_scan(dir, &d);
        int pending4 = 0;
        for (int i = 0; i < d.n; i++) pending4 |= d.files[i].kind == 'd' && d.files[i].step == 4;
        ckpt_dir_free(&d);
        CHECK(pending4, "the marker is seen");
        int finished = ckpt_recover(dir);
        CHECK(finished == 1 && count_files(dir) == 3 && exists(dir, "model_00000008.bin"), "%d gone: recovery finishes 4 (%d files)",
              gone, count_files(dir));
    }
    // a set whose marker is pending is not resumed even when its files are all still there
    clear_dir(dir);
    write_set(dir, 4, 1, 1, 0);
    touch(dir, "delete_00000004.pending");
    CHECK(ckpt_find_latest(dir, 1, 1) == -1, "pending deletion: not a resume candidate");
    // a marker's .tmp (the crash came before the marker was committed): removed, nothing else
    clear_dir(dir);
    write_set(dir, 4, 1, 1, 0);
    touch(dir, "delete_00000004.pending.tmp");
    CHECK(ckpt_recover(dir) == 0 && count_files(dir) == 2 && ckpt_find_latest(dir, 1, 1) == 4, "a marker .tmp is dropped, the set stays");
    // markers must name files of their own checkpoint
    clear_dir(dir);
    write_set(dir, 4, 1, 1, 0);
    char marker[1024];
    snprintf(marker, sizeof(marker), "%s/delete_00000004.pending", dir);
    FILE* f = fopen(marker, "w");
    fprintf(f, "model_00000008.bin\n");
    fclose(f);
    EXPECT_DIES(die_bad_marker, dir, "delete_00000004.pending", "not a file of checkpoint 4");
    f = fopen(marker, "w");
    fprintf(f, "../main.log\n");
    fclose(f);
    EXPECT_DIES(die_bad_marker, dir, "delete_00000004.pending", "../main.log");
    clear_dir(dir);
    rmdir(dir);
}

int main(void) {
    test_names();
    test_plan();
    test_single_process();
    test_two_ranks();
    test_recovery();
    return test_summary();
}
