/*
 * checkpoint.h - GPT-2 model checkpoints (magic 20240326): version 3 = fp32, version 5 = bf16.
 *
 * Layout (doc/FORMATS.md): 256 int32 header words (magic, version, maxT, V, L, NH, C, Vp, rest 0),
 * then all parameters in checkpoint order (gpt2_config.h), fp32 or bf16.
 */
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llmc/model/gpt2_config.h"
#include "llmc/numerics/bf16.h"
#include "llmc/core/utils.h"

#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION_FP32 3
#define CHECKPOINT_VERSION_BF16 5
#define CHECKPOINT_HEADER_WORDS 256

// elements converted per chunk when writing/reading bf16 (bounded scratch memory)
#define CHECKPOINT_BF16_CHUNK ((size_t)1 << 20)

// Writes a checkpoint atomically (path.tmp, then rename). params: gpt2_num_parameters(c) floats
// in checkpoint order. version 3 stores them as fp32 bit-exactly; version 5 stores
// bf16_from_float of each value. Dies on an invalid config (naming path), a version other than
// 3/5, or any I/O error.
static inline void checkpoint_write_model(const char* path, const GPT2Config* c, const float* params, int version) {
    if (version != CHECKPOINT_VERSION_FP32 && version != CHECKPOINT_VERSION_BF16) {
        die("%s: checkpoint version %d unsupported for writing (3 = fp32, 5 = bf16)", path, version);
    }
    gpt2_config_validate(c, path);
    int32_t header[CHECKPOINT_HEADER_WORDS];
    memset(header, 0, sizeof(header));
    header[0] = CHECKPOINT_MAGIC;
    header[1] = version;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
    size_t n = gpt2_num_parameters(c);
    FILE* f = atomic_open(path);
    fwrite_check(header, sizeof(int32_t), CHECKPOINT_HEADER_WORDS, f, path);
    if (version == CHECKPOINT_VERSION_FP32) {
        fwrite_check(params, sizeof(float), n, f, path);
    } else {
        size_t chunk = n < CHECKPOINT_BF16_CHUNK ? n : CHECKPOINT_BF16_CHUNK;
        uint16_t* buf = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
        for (size_t i = 0; i < n; i += chunk) {
            size_t m = (n - i < chunk) ? n - i : chunk;
            for (size_t j = 0; j < m; j++) buf[j] = bf16_from_float(params[i + j]);
            fwrite_check(buf, sizeof(uint16_t), m, f, path);
        }
        free(buf);
    }
    atomic_commit(f, path);
}

// Opens a checkpoint and validates its header: length >= 1024 bytes, magic, version (3 or 5),
// the config (sizes > 0, C % NH == 0, V <= Vp) and that the file length is exactly
// 1024 + nparams * (4 for v3 | 2 for v5). Fills c and returns the version. Errors name path and
// field: "error: <path>: <field>: <problem>". The file is closed again.
static inline int checkpoint_read_header(const char* path, GPT2Config* c) {
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < CHECKPOINT_HEADER_WORDS * sizeof(int32_t)) {
        die("%s: header: truncated (file is %zu bytes, the header alone is 1024)", path, size);
    }
    int32_t header[CHECKPOINT_HEADER_WORDS];
    fread_check(header, sizeof(int32_t), CHECKPOINT_HEADER_WORDS, f, path, "checkpoint header");
    fclose_check(f, path);
    if (header[0] != CHECKPOINT_MAGIC) {
        die("%s: magic: bad magic %d (expected %d): not a model checkpoint", path, header[0], CHECKPOINT_MAGIC);
    }
    int version = header[1];
    if (version != CHECKPOINT_VERSION_FP32 && version != CHECKPOINT_VERSION_BF16) {
        die("%s: version: unsupported checkpoint version %d (expected 3 = fp32 or 5 = bf16)", path, version);
    }
    GPT2Config cfg;
    cfg.max_seq_len = header[2];
    cfg.vocab_size = header[3];
    cfg.num_layers = header[4];
    cfg.num_heads = header[5];
    cfg.channels = header[6];
    cfg.padded_vocab_size = header[7];
    gpt2_config_validate(&cfg, path);
    size_t n = gpt2_num_parameters(&cfg);
    size_t elem = (version == CHECKPOINT_VERSION_FP32) ? 4 : 2;
    size_t expected = CHECKPOINT_HEADER_WORDS * sizeof(int32_t) + n * elem;
    if (size != expected) {
        die("%s: file length: %zu bytes, but the header says %zu (1024 + %zu parameters x %zu bytes): %s",
            path, size, expected, n, elem, size < expected ? "truncated" : "trailing bytes");
    }
    *c = cfg;
    return version;
}

// Reads a checkpoint (v3 or v5, validated as checkpoint_read_header does), fills c, and returns
// malloc'd fp32 parameters (gpt2_num_parameters(c) floats, checkpoint order; bf16 values widened
// exactly). The caller frees. Dies naming path on any problem.
static inline float* checkpoint_read_model(const char* path, GPT2Config* c) {
    GPT2Config cfg;
    int version = checkpoint_read_header(path, &cfg);
    size_t n = gpt2_num_parameters(&cfg);
    float* params = (float*)malloc_check(n * sizeof(float));
    FILE* f = fopen_check(path, "rb");
    fseek_check(f, CHECKPOINT_HEADER_WORDS * sizeof(int32_t), SEEK_SET, path);
    if (version == CHECKPOINT_VERSION_FP32) {
        fread_check(params, sizeof(float), n, f, path, "fp32 parameters");
    } else {
        size_t chunk = n < CHECKPOINT_BF16_CHUNK ? n : CHECKPOINT_BF16_CHUNK;
        uint16_t* buf = (uint16_t*)malloc_check(chunk * sizeof(uint16_t));
        for (size_t i = 0; i < n; i += chunk) {
            size_t m = (n - i < chunk) ? n - i : chunk;
            fread_check(buf, sizeof(uint16_t), m, f, path, "bf16 parameters");
            for (size_t j = 0; j < m; j++) params[i + j] = bf16_to_float(buf[j]);
        }
        free(buf);
    }
    fclose_check(f, path);
    *c = cfg;
    return params;
}

#endif // LLMC_CHECKPOINT_H
