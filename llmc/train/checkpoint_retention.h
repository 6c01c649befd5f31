/*
 * checkpoint_retention.h - the checkpoints in an output folder: which are complete, which is the
 * newest to resume from, and -nk / -nm retention (llm.c's flags): keep the newest N checkpoints,
 * never delete those whose step is a multiple of M. Host-only C, shared by both trainers.
 *
 * A checkpoint of step S is model_<S>.bin plus, in the CUDA trainer, state_<S>.bin (one process)
 * or state_<S>_rank<r>.bin (every rank r of N), and lowp_<S>[_rank<r>].bin in the FP8 / TCFP-12
 * builds (<S> printed as %08d). It is complete when the model file and every rank's state file
 * exist (need_state; the CPU trainer writes model files only). Resuming (-y 1) picks the newest
 * complete checkpoint without a pending deletion.
 *
 * Deleting a checkpoint never leaves a set that can be resumed half-deleted: each process first
 * writes a marker delete_<S>[_rank<r>].pending (atomically) naming the files it is about to delete,
 * then deletes them (the model file first, so the set stops being complete before anything else
 * goes), then removes the marker. Rank 0 deletes the model file (and files of another process
 * layout left in the folder), every rank its own state and lowp files. After a crash, the next start
 * (ckpt_recover, rank 0, before anyone looks for a checkpoint) finishes every marker it finds.
 *
 * Several processes (the CUDA trainer calls this after a barrier, so every rank has written step W
 * and sees the same folder): every rank computes the same plan from the folder. The plan only ever
 * deletes sets that are not among the kept ones, so it does not change when another rank's
 * deletions are seen half-done; a crash between the ranks' deletions leaves sets that are not
 * complete (never resumed) and, once the crashed rank's marker is finished or the set is planned
 * again at the next checkpoint, gone.
 */
#ifndef LLMC_CHECKPOINT_RETENTION_H
#define LLMC_CHECKPOINT_RETENTION_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmc/core/utils.h"

// One file of a checkpoint (or a deletion marker) found in the folder.
typedef struct {
    char kind;       // 'm' model, 's' state, 'l' lowp, 'd' deletion marker
    int step;
    int rank;        // -1: the single-process name (no _rank<r>)
    char name[96];
} CkptFile;

typedef struct {
    CkptFile* files;
    int n, cap;
} CkptDir;

// The name of a checkpoint file: kind 'm' -> model_<S>.bin, 's' state_, 'l' lowp_, 'd' the marker
// delete_<S>[_rank<r>].pending (rank -1: no _rank part).
static inline void ckpt_name(char* out, size_t n, char kind, int step, int rank) {
    const char* prefix = kind == 'm' ? "model" : kind == 's' ? "state" : kind == 'l' ? "lowp" : "delete";
    const char* ext = kind == 'd' ? "pending" : "bin";
    if (kind == 'm' || rank < 0) snprintf(out, n, "%s_%08d.%s", prefix, step, ext);
    else snprintf(out, n, "%s_%08d_rank%d.%s", prefix, step, rank, ext);
}

// Parse a file name written by ckpt_name; 0 when it is none (e.g. a .tmp file, another name).
static inline int ckpt_parse_name(const char* name, CkptFile* out) {
    static const char kinds[4] = {'m', 's', 'l', 'd'};
    static const char* const prefixes[4] = {"model_", "state_", "lowp_", "delete_"};
    for (int k = 0; k < 4; k++) {
        size_t pl = strlen(prefixes[k]);
        if (strncmp(name, prefixes[k], pl) != 0) continue;
        const char* p = name + pl;
        if (*p < '0' || *p > '9') return 0;
        char* end = NULL;
        long step = strtol(p, &end, 10);
        if (step < 0 || step > 0x7FFFFFFF) return 0;
        long rank = -1;
        if (kinds[k] != 'm' && strncmp(end, "_rank", 5) == 0) {
            const char* r = end + 5;
            if (*r < '0' || *r > '9') return 0;
            rank = strtol(r, &end, 10);
            if (rank < 0 || rank > 1000000) return 0;
        }
        char canonical[96];
        ckpt_name(canonical, sizeof(canonical), kinds[k], (int)step, (int)rank);
        if (strcmp(canonical, name) != 0) return 0;  // exactly the names the trainers write
        out->kind = kinds[k];
        out->step = (int)step;
        out->rank = (int)rank;
        memcpy(out->name, canonical, sizeof(out->name));  // == name
        return 1;
    }
    return 0;
}

// Every checkpoint file and marker in dir (an absent folder has none).
static inline void ckpt_scan(const char* dir, CkptDir* out) {
    memset(out, 0, sizeof(*out));
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        CkptFile f;
        if (!ckpt_parse_name(e->d_name, &f)) continue;
        if (out->n == out->cap) {
            out->cap = out->cap ? 2 * out->cap : 64;
            CkptFile* grown = (CkptFile*)realloc(out->files, (size_t)out->cap * sizeof(CkptFile));
            if (!grown) die("%s: out of host memory listing checkpoints", dir);
            out->files = grown;
        }
        out->files[out->n++] = f;
    }
    closedir(d);
}

static inline void ckpt_dir_free(CkptDir* d) {
    free(d->files);
    memset(d, 0, sizeof(*d));
}

static inline int ckpt_has_(const CkptDir* d, char kind, int step, int rank) {
    for (int i = 0; i < d->n; i++)
        if (d->files[i].kind == kind && d->files[i].step == step && (kind == 'm' || d->files[i].rank == rank)) return 1;
    return 0;
}

// 1 when step has its model file and (need_state) the state file of every one of nranks ranks.
static inline int ckpt_complete(const CkptDir* d, int step, int nranks, int need_state) {
    if (!ckpt_has_(d, 'm', step, -1)) return 0;
    if (!need_state) return 1;
    if (nranks == 1) return ckpt_has_(d, 's', step, -1);
    for (int r = 0; r < nranks; r++)
        if (!ckpt_has_(d, 's', step, r)) return 0;
    return 1;
}

static inline int ckpt_pending_(const CkptDir* d, int step) {
    for (int i = 0; i < d->n; i++)
        if (d->files[i].kind == 'd' && d->files[i].step == step) return 1;
    return 0;
}

// The newest complete checkpoint in dir without a pending deletion, or -1.
static inline int ckpt_find_latest(const char* dir, int nranks, int need_state) {
    CkptDir d;
    ckpt_scan(dir, &d);
    int best = -1;
    for (int i = 0; i < d.n; i++) {
        const CkptFile* f = &d.files[i];
        if (f->kind == 'm' && f->step > best && ckpt_complete(&d, f->step, nranks, need_state) && !ckpt_pending_(&d, f->step))
            best = f->step;
    }
    ckpt_dir_free(&d);
    return best;
}

static inline int ckpt_cmp_int_(const void* a, const void* b) {
    int x = *(const int*)a, y = *(const int*)b;
    return (x > y) - (x < y);
}

// The retention plan after writing checkpoint `written` (pure; unit-tested): steps[0..n) are the
// distinct steps that have any checkpoint file, complete[i] whether step i is complete. Of the
// steps <= written (newer ones belong to another run and are left alone), keep the `keep` newest
// complete ones, and every step that is a multiple of `major` (> 0); every other one (also an
// incomplete leftover) goes into del (ascending). Nothing is deleted when keep <= 0 or when
// `written` is not complete. Returns the number of steps in del.
static inline int ckpt_retention_plan(const int* steps, const int* complete, int n, int written, int keep, int major, int* del) {
    if (keep <= 0) return 0;
    int written_ok = 0;
    for (int i = 0; i < n; i++)
        if (steps[i] == written && complete[i]) written_ok = 1;
    if (!written_ok) return 0;
    int* order = (int*)malloc_check((size_t)(n > 0 ? n : 1) * sizeof(int));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (steps[i] <= written) order[m++] = i;
    // newest first: count the kept complete ones
    int nd = 0, kept = 0;
    int* sorted = (int*)malloc_check((size_t)(m > 0 ? m : 1) * sizeof(int));
    for (int i = 0; i < m; i++) sorted[i] = steps[order[i]];
    qsort(sorted, m, sizeof(int), ckpt_cmp_int_);
    for (int j = m - 1; j >= 0; j--) {
        const int s = sorted[j];
        int is_complete = 0;
        for (int i = 0; i < n; i++)
            if (steps[i] == s) is_complete = complete[i];
        if (is_complete && kept < keep) { kept++; continue; }
        if (major > 0 && s % major == 0) continue;
        del[nd++] = s;
    }
    free(order);
    free(sorted);
    qsort(del, nd, sizeof(int), ckpt_cmp_int_);
    return nd;
}

static inline int ckpt_kind_order_(char k) { return k == 'm' ? 0 : k == 's' ? 1 : 2; }

// Delete this process's files of checkpoint `step` (found in d) behind a marker, as described at
// the top. rank 0 also deletes the model file and state / lowp files of another process layout.
static inline void ckpt_delete(const char* dir, const CkptDir* d, int step, int rank, int nranks) {
    const int own = nranks == 1 ? -1 : rank;
    const CkptFile* mine[256];
    int n = 0;
    for (int pass = 0; pass < 3; pass++)  // model, state, lowp
        for (int i = 0; i < d->n && n < 256; i++) {
            const CkptFile* f = &d->files[i];
            if (f->step != step || f->kind == 'd' || ckpt_kind_order_(f->kind) != pass) continue;
            const int foreign = nranks == 1 ? f->rank != -1 : (f->rank == -1 || f->rank >= nranks);
            if ((f->kind == 'm' && rank == 0) || (f->kind != 'm' && (f->rank == own || (rank == 0 && foreign)))) mine[n++] = f;
        }
    if (n == 0) return;
    char marker[4096], name[96], path[4096];
    ckpt_name(name, sizeof(name), 'd', step, own);
    snprintf(marker, sizeof(marker), "%s/%s", dir, name);
    FILE* f = atomic_open(marker);
    for (int i = 0; i < n; i++) fprintf(f, "%s\n", mine[i]->name);
    atomic_commit(f, marker);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, mine[i]->name);
        if (unlink(path) != 0 && errno != ENOENT) die("%s: cannot delete (-nk): %s", path, strerror(errno));
    }
    if (unlink(marker) != 0) die("%s: cannot delete: %s", marker, strerror(errno));
}

// -nk / -nm after checkpoint `written` was written (by every rank): computes the plan from the
// folder and deletes this process's part of every planned checkpoint. Returns the number of
// checkpoints planned for deletion (the same on every rank).
static inline int ckpt_apply_retention(const char* dir, int written, int keep, int major, int rank, int nranks, int need_state) {
    if (keep <= 0) return 0;
    CkptDir d;
    ckpt_scan(dir, &d);
    int* steps = (int*)malloc_check((size_t)(d.n > 0 ? d.n : 1) * sizeof(int));
    int* complete = (int*)malloc_check((size_t)(d.n > 0 ? d.n : 1) * sizeof(int));
    int ns = 0;
    for (int i = 0; i < d.n; i++) {
        if (d.files[i].kind == 'd') continue;
        int seen = 0;
        for (int j = 0; j < ns && !seen; j++) seen = steps[j] == d.files[i].step;
        if (seen) continue;
        steps[ns] = d.files[i].step;
        complete[ns] = ckpt_complete(&d, steps[ns], nranks, need_state);
        ns++;
    }
    int* del = (int*)malloc_check((size_t)(ns > 0 ? ns : 1) * sizeof(int));
    const int nd = ckpt_retention_plan(steps, complete, ns, written, keep, major, del);
    for (int i = 0; i < nd; i++) {
        ckpt_delete(dir, &d, del[i], rank, nranks);
        if (rank == 0) printf("deleted checkpoint %d (-nk %d%s)\n", del[i], keep, major > 0 ? ", not a multiple of -nm" : "");
    }
    free(steps); free(complete); free(del);
    ckpt_dir_free(&d);
    return nd;
}

// Finish the deletions a crash interrupted (every marker in dir, whatever process wrote it; call on
// one process before any process looks for a checkpoint). Returns how many were finished.
static inline int ckpt_recover(const char* dir) {
    DIR* dd = opendir(dir);
    if (!dd) return 0;
    char path[4096];
    struct dirent* e;
    while ((e = readdir(dd)) != NULL) {  // a marker's .tmp: its deletion had not started
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "delete_", 7) == 0 && len > 12 && strcmp(e->d_name + len - 12, ".pending.tmp") == 0) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (unlink(path) != 0 && errno != ENOENT) die("%s: cannot delete: %s", path, strerror(errno));
        }
    }
    closedir(dd);
    CkptDir d;
    ckpt_scan(dir, &d);
    int finished = 0;
    for (int i = 0; i < d.n; i++) {
        if (d.files[i].kind != 'd') continue;
        char marker[4096], line[256];
        snprintf(marker, sizeof(marker), "%s/%s", dir, d.files[i].name);
        FILE* f = fopen_check(marker, "r");
        while (fgets(line, sizeof(line), f)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (!*line) continue;
            CkptFile c;
            if (!ckpt_parse_name(line, &c) || c.kind == 'd' || c.step != d.files[i].step)
                die("%s: names '%s', not a file of checkpoint %d", marker, line, d.files[i].step);
            snprintf(path, sizeof(path), "%s/%s", dir, line);
            if (unlink(path) != 0 && errno != ENOENT) die("%s: cannot delete: %s", path, strerror(errno));
        }
        fclose(f);
        if (unlink(marker) != 0) die("%s: cannot delete: %s", marker, strerror(errno));
        printf("finished deleting checkpoint %d (interrupted earlier: %s)\n", d.files[i].step, d.files[i].name);
        finished++;
    }
    ckpt_dir_free(&d);
    return finished;
}

#endif // LLMC_CHECKPOINT_RETENTION_H
