/*
 * tokenizer.h - GPT-2 token decoding (tokenizer file magic 20240328, versions 1 and 2).
 *
 * Layout (doc/FORMATS.md): 256 int32 header words (magic, version, V, and for version 2 the
 * end-of-text id), then for each id 0..V-1 a uint8 length L (1..255) and L raw bytes.
 * Decoding only; encoding is done in Python when the data is prepared.
 */
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "llmc/core/utils.h"

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_HEADER_BYTES 1024

typedef struct {
    uint32_t vocab_size;
    char** token_table;  // vocab_size NUL-terminated byte strings (pointing into `storage`)
    int eot_token;       // end-of-text id (header word 3; version 1 files: vocab_size - 1)
    char* storage;       // private: one allocation holding all token strings
} Tokenizer;

// Loads the tokenizer file at path. Dies naming path on: missing/unreadable file, header shorter
// than 1024 bytes, bad magic, version other than 1/2, V <= 0, end-of-text id outside [0, V),
// a zero-length token, a table cut short ("truncated"), or bytes after the table.
static inline void tokenizer_init(Tokenizer* t, const char* path) {
    memset(t, 0, sizeof(*t));
    FILE* f = fopen_check(path, "rb");
    size_t size = file_size_check(f, path);
    if (size < TOKENIZER_HEADER_BYTES) {
        die("%s: header: truncated (file is %zu bytes, the header alone is %d)", path, size, TOKENIZER_HEADER_BYTES);
    }
    int32_t header[256];
    fread_check(header, sizeof(int32_t), 256, f, path, "tokenizer header");
    if (header[0] != TOKENIZER_MAGIC) {
        die("%s: bad magic %d (expected %d): not a tokenizer file", path, header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != 1 && header[1] != 2) {
        die("%s: version: unsupported tokenizer version %d (expected 1 or 2)", path, header[1]);
    }
    if (header[2] <= 0) die("%s: vocab size: %d must be > 0", path, header[2]);
    uint32_t V = (uint32_t)header[2];
    int eot = (header[1] == 2) ? header[3] : (int)(V - 1);
    if (eot < 0 || (uint32_t)eot >= V) {
        die("%s: end-of-text token: id %d outside the vocabulary [0, %u)", path, eot, V);
    }
    // the table: read the rest of the file in one go, then parse it in place
    size_t body = size - TOKENIZER_HEADER_BYTES;
    unsigned char* raw = (unsigned char*)malloc_check(body);
    fread_check(raw, 1, body, f, path, "token table");
    fclose_check(f, path);
    // each token's L bytes become L bytes + NUL: storage needs body - V + V = body bytes at most
    // (length bytes turn into terminators), so allocate body + 1 and check bounds while parsing.
    char* storage = (char*)malloc_check(body + 1);
    char** table = (char**)malloc_check((size_t)V * sizeof(char*));
    size_t in = 0, out = 0;
    for (uint32_t id = 0; id < V; id++) {
        if (in >= body) {
            die("%s: token table: truncated at token %u of %u (file is %zu bytes)", path, id, V, size);
        }
        size_t len = raw[in++];
        if (len == 0) die("%s: token table: token %u has zero length", path, id);
        if (body - in < len) {
            die("%s: token table: truncated inside token %u of %u (needs %zu bytes, %zu left)", path, id, V, len, body - in);
        }
        table[id] = storage + out;
        memcpy(storage + out, raw + in, len);
        storage[out + len] = '\0';
        in += len;
        out += len + 1;
    }
    if (in != body) {
        die("%s: token table: trailing bytes (%zu bytes after the last token)", path, body - in);
    }
    free(raw);
    t->vocab_size = V;
    t->token_table = table;
    t->eot_token = eot;
    t->storage = storage;
}

// The NUL-terminated raw bytes of token id (may be a partial UTF-8 sequence; valid until
// tokenizer_free). Dies if id >= vocab_size.
static inline const char* tokenizer_decode(const Tokenizer* t, uint32_t id) {
    if (id >= t->vocab_size) {
        die("tokenizer: token id %u out of range (vocab size %u)", id, t->vocab_size);
    }
    return t->token_table[id];
}

// Prints a decoded token to stdout. A token that is a single byte which is neither printable
// ASCII nor whitespace (a raw byte of a multi-byte character, a control code) is skipped so it
// cannot garble the terminal; everything else is printed as is. NULL or "" prints nothing.
static inline void safe_print_token(const char* piece) {
    if (piece == NULL || piece[0] == '\0') return;
    if (piece[1] == '\0') {
        unsigned char b = (unsigned char)piece[0];
        if (!(isprint(b) || isspace(b))) return;
    }
    fputs(piece, stdout);
}

// Frees the token table; the struct is zeroed.
static inline void tokenizer_free(Tokenizer* t) {
    free(t->token_table);
    free(t->storage);
    memset(t, 0, sizeof(*t));
}

#endif // LLMC_TOKENIZER_H
