/*
 * dataloader.h - reads batches of tokens from token shards (magic 20240520, doc/FORMATS.md).
 *
 * A shard is a 1024-byte header (magic, version 1, N) followed by N uint16 token ids.
 * The loader takes a glob pattern, reads the matching shards in sorted order, and hands out
 * batches of B*T inputs and B*T targets (the same tokens shifted by one).
 *
 * With nranks processes, rank r reads the batch at position r*B*T of a shard, then advances by
 * nranks*B*T, so the ranks together read each shard as one contiguous stream, interleaved: the
 * ranks' batches of one step are exactly the rows of the single-rank batch with nranks*B rows.
 * When the next group batch (all ranks' batches of one step: nranks*B*T+1 tokens, starting
 * r*B*T tokens before rank r's position) would run past the end of a shard, every rank moves to
 * the next shard (position r*B*T again); after the last shard it wraps to the first and
 * increments the epoch. The ranks thus stay in lockstep: same shard, same epoch, same number of
 * batches per shard.
 * Only the B*T+1 tokens a batch needs are read from disk (fseek + fread).
 */
#ifndef LLMC_DATALOADER_H
#define LLMC_DATALOADER_H

#include <glob.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "llmc/core/utils.h"

#define DATALOADER_MAGIC 20240520
#define DATALOADER_VERSION 1
#define DATALOADER_HEADER_BYTES 1024

typedef struct {
    // public
    size_t B, T;
    int* inputs;        // B*T token ids of the current batch, row-major (b, t)
    int* targets;       // B*T next-token ids (targets[i] is the token after inputs[i])
    size_t num_tokens;  // total tokens over all shards
    // private
    int rank, nranks, vocab_size;
    size_t num_shards;
    char** shard_paths;     // num_shards malloc'd paths, sorted
    size_t* shard_tokens;   // N of each shard
    size_t shard;           // shard of the next batch
    size_t position;        // token offset of the next batch in that shard
    size_t epoch;           // number of completed passes over all shards
    FILE* file;             // open handle of shard `file_shard`, or NULL
    size_t file_shard;
    uint16_t* buffer;       // B*T+1 raw tokens
} DataLoader;

// Where the loader is: the next batch comes from shard index `shard` (in sorted glob order) at
// token offset `position`, during pass `epoch` (0-based). Saved with checkpoints to resume.
typedef struct {
    size_t shard;
    size_t position;
    size_t epoch;
} DataLoaderState;

// Internal: opens, checks and returns the token count of one shard (header, length).
static inline size_t dataloader_check_shard_(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) die("%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) die("%s: not a regular file", path);
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < DATALOADER_HEADER_BYTES) {
        die("%s: header: truncated (file is %zu bytes, the header alone is %d)", path, size, DATALOADER_HEADER_BYTES);
    }
    int32_t header[256];
    fread_check(header, sizeof(int32_t), 256, f, path, "shard header");
    fclose_check(f, path);
    if (header[0] != DATALOADER_MAGIC) {
        die("%s: bad magic %d (expected %d): not a token shard", path, header[0], DATALOADER_MAGIC);
    }
    if (header[1] != DATALOADER_VERSION) {
        die("%s: version: unsupported shard version %d (expected %d)", path, header[1], DATALOADER_VERSION);
    }
    if (header[2] <= 0) {
        die("%s: empty shard: number of tokens is %d (must be > 0)", path, header[2]);
    }
    size_t n = (size_t)(uint32_t)header[2];
    size_t expected = DATALOADER_HEADER_BYTES + 2 * n;
    if (size < expected) {
        die("%s: truncated: file is %zu bytes, header says %zu tokens = %zu bytes", path, size, n, expected);
    }
    if (size > expected) {
        die("%s: trailing bytes: file is %zu bytes, header says %zu tokens = %zu bytes", path, size, n, expected);
    }
    return n;
}

// Internal: 1 if the group batch that rank `rank`'s batch at `position` belongs to fits in a
// shard of n tokens. The group batch starts rank*B*T tokens earlier and spans nranks*B*T+1
// tokens, so all ranks change shards together and stay in lockstep (a per-rank test would let
// low ranks read one more batch of a shard than high ranks).
static inline int dataloader_group_fits_(const DataLoader* d, size_t position, size_t n) {
    size_t bt = d->B * d->T;
    size_t offset = (size_t)d->rank * bt;
    size_t group = (size_t)d->nranks * bt + 1;
    return position >= offset && position - offset <= n && n - (position - offset) >= group;
}

// Internal: if the next group batch does not fit into the current shard, move to the next shard
// (wrapping to the first one and incrementing the epoch after the last).
static inline void dataloader_fit_(DataLoader* d) {
    if (!dataloader_group_fits_(d, d->position, d->shard_tokens[d->shard])) {
        d->shard++;
        if (d->shard == d->num_shards) {
            d->shard = 0;
            d->epoch++;
        }
        d->position = (size_t)d->rank * d->B * d->T;
    }
}

// Sets up a loader over the shards matching `pattern` (glob; a plain file name is fine), batch
// B x T, for process `rank` of `nranks`; token ids must be < vocab_size. Validates every shard's
// header and length and that each shard holds at least nranks*B*T+1 tokens. Dies naming the
// pattern (no match) or the shard (bad header/length/size). Allocates inputs/targets.
static inline void dataloader_init(DataLoader* d, const char* pattern, size_t B, size_t T, int rank, int nranks, int vocab_size) {
    memset(d, 0, sizeof(*d));
    if (B == 0 || T == 0) die("%s: dataloader: batch size B=%zu and sequence length T=%zu must be > 0", pattern, B, T);
    if (nranks <= 0 || rank < 0 || rank >= nranks) die("%s: dataloader: bad rank %d of %d processes", pattern, rank, nranks);
    if (vocab_size <= 0) die("%s: dataloader: vocab_size %d must be > 0", pattern, vocab_size);
    glob_t g;
    memset(&g, 0, sizeof(g));
    int rc = glob(pattern, 0, NULL, &g);
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        globfree(&g);
        if (strpbrk(pattern, "*?[") == NULL) die("%s: cannot open: %s", pattern, strerror(ENOENT));
        die("%s: no files match this pattern", pattern);
    }
    if (rc != 0) {
        globfree(&g);
        die("%s: glob failed (code %d)", pattern, rc);
    }
    d->B = B;
    d->T = T;
    d->rank = rank;
    d->nranks = nranks;
    d->vocab_size = vocab_size;
    d->num_shards = g.gl_pathc;  // glob sorts its result (GLOB_NOSORT not given)
    d->shard_paths = (char**)malloc_check(d->num_shards * sizeof(char*));
    d->shard_tokens = (size_t*)malloc_check(d->num_shards * sizeof(size_t));
    size_t min_tokens = (size_t)nranks * B * T + 1;
    for (size_t i = 0; i < d->num_shards; i++) {
        size_t len = strlen(g.gl_pathv[i]);
        d->shard_paths[i] = (char*)malloc_check(len + 1);
        memcpy(d->shard_paths[i], g.gl_pathv[i], len + 1);
        size_t n = dataloader_check_shard_(d->shard_paths[i]);
        if (n < min_tokens) {
            die("%s: shard too small: %zu tokens, need at least nranks*B*T+1 = %d*%zu*%zu+1 = %zu",
                d->shard_paths[i], n, nranks, B, T, min_tokens);
        }
        d->shard_tokens[i] = n;
        d->num_tokens += n;
    }
    globfree(&g);
    d->inputs = (int*)malloc_check(B * T * sizeof(int));
    d->targets = (int*)malloc_check(B * T * sizeof(int));
    d->buffer = (uint16_t*)malloc_check((B * T + 1) * sizeof(uint16_t));
    d->file = NULL;
    d->shard = 0;
    d->epoch = 0;
    d->position = (size_t)rank * B * T;
}

// Loads the next batch into d->inputs / d->targets and advances. Every token handed out is
// checked: an id >= vocab_size dies with the shard path, the token's position in the shard and
// its value. I/O errors die naming the shard.
static inline void dataloader_next_batch(DataLoader* d) {
    size_t bt = d->B * d->T;
    dataloader_fit_(d);  // a no-op: init, reset, set_state and the advance below keep the state fitting
    const char* path = d->shard_paths[d->shard];
    if (d->file == NULL || d->file_shard != d->shard) {
        if (d->file != NULL) fclose_check(d->file, d->shard_paths[d->file_shard]);
        d->file = fopen_check(path, "rb");
        d->file_shard = d->shard;
    }
    fseek_check(d->file, (long)(DATALOADER_HEADER_BYTES + 2 * d->position), SEEK_SET, path);
    fread_check(d->buffer, sizeof(uint16_t), bt + 1, d->file, path, "tokens");
    for (size_t i = 0; i <= bt; i++) {
        if (d->buffer[i] >= (unsigned)d->vocab_size) {
            die("%s: token at position %zu is %u, not < vocab size %d", path, d->position + i,
                (unsigned)d->buffer[i], d->vocab_size);
        }
    }
    for (size_t i = 0; i < bt; i++) {
        d->inputs[i] = (int)d->buffer[i];
        d->targets[i] = (int)d->buffer[i + 1];
    }
    d->position += (size_t)d->nranks * bt;
    dataloader_fit_(d);
}

// Back to the start: first shard, position rank*B*T, epoch 0.
static inline void dataloader_reset(DataLoader* d) {
    d->shard = 0;
    d->position = (size_t)d->rank * d->B * d->T;
    d->epoch = 0;
}

// The position of the next batch (see DataLoaderState).
static inline DataLoaderState dataloader_get_state(const DataLoader* d) {
    DataLoaderState s;
    s.shard = d->shard;
    s.position = d->position;
    s.epoch = d->epoch;
    return s;
}

// Resumes at a saved state. Dies if s.shard is not a shard index or if the group batch of the
// position does not fit in that shard (s.position >= rank*B*T and s.position - rank*B*T +
// nranks*B*T + 1 <= tokens of the shard). Alignment to the B*T grid is not required, so a state
// saved with another B still resumes at that token.
static inline void dataloader_set_state(DataLoader* d, DataLoaderState s) {
    if (s.shard >= d->num_shards) {
        die("dataloader state: shard index %zu out of range (%zu shards)", s.shard, d->num_shards);
    }
    if (!dataloader_group_fits_(d, s.position, d->shard_tokens[s.shard])) {
        die("%s: dataloader state: position %zu of rank %d does not leave a batch of nranks*B*T+1 = %zu tokens (shard has %zu)",
            d->shard_paths[s.shard], s.position, d->rank, (size_t)d->nranks * d->B * d->T + 1, d->shard_tokens[s.shard]);
    }
    d->shard = s.shard;
    d->position = s.position;
    d->epoch = s.epoch;
}

// Frees everything dataloader_init allocated and closes the open shard. The struct is zeroed.
static inline void dataloader_free(DataLoader* d) {
    if (d->file != NULL) fclose_check(d->file, d->shard_paths[d->file_shard]);
    for (size_t i = 0; i < d->num_shards; i++) free(d->shard_paths[i]);
    free(d->shard_paths);
    free(d->shard_tokens);
    free(d->inputs);
    free(d->targets);
    free(d->buffer);
    memset(d, 0, sizeof(*d));
}

#endif // LLMC_DATALOADER_H
