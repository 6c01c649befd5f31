/*
 * utils.h - checked host I/O and memory helpers.
 *
 * Every helper either succeeds or prints exactly one line
 *     error: <path or context>: <problem>
 * to stderr and exits with status 1. Nothing here asserts or returns an error code.
 * Header-only (static inline), usable from C, C++ and CUDA host code. POSIX (LP64: long is
 * 64 bits, so file offsets above 2 GiB work with fseek/ftell).
 */
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define LLMC_NORETURN __attribute__((noreturn))
#define LLMC_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define LLMC_NORETURN
#define LLMC_PRINTF(fmt_idx, arg_idx)
#endif

// Prints "error: " + the printf-formatted message + "\n" to stderr and exits with status 1.
// The message should start with the file path or flag it concerns: die("%s: bad magic", path).
static inline LLMC_NORETURN LLMC_PRINTF(1, 2) void die(const char* fmt, ...) {
    fflush(stdout);
    va_list args;
    va_start(args, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    va_end(args);
    fflush(stderr);
    exit(1);
}

// fopen that dies with "error: <path>: cannot open (mode <mode>): <strerror>".
static inline FILE* fopen_check(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        die("%s: cannot open (mode %s): %s", path, mode, strerror(errno));
    }
    return f;
}

// Reads exactly n items of `size` bytes into p. A short read dies with
// "error: <path>: truncated while reading <what> (expected N bytes, got M)";
// a read error dies naming path, what and strerror.
static inline void fread_check(void* p, size_t size, size_t n, FILE* f, const char* path, const char* what) {
    if (size == 0 || n == 0) return;
    size_t got = fread(p, size, n, f);
    if (got != n) {
        if (ferror(f)) {
            die("%s: read error while reading %s: %s", path, what, strerror(errno));
        }
        die("%s: truncated while reading %s (expected %zu bytes, got %zu)", path, what, size * n, got * size);
    }
}

// Writes exactly n items of `size` bytes from p; dies naming path and strerror otherwise.
static inline void fwrite_check(const void* p, size_t size, size_t n, FILE* f, const char* path) {
    if (size == 0 || n == 0) return;
    size_t put = fwrite(p, size, n, f);
    if (put != n) {
        die("%s: write failed (%zu of %zu bytes written): %s", path, put * size, size * n, strerror(errno));
    }
}

// fseek (whence: SEEK_SET / SEEK_CUR / SEEK_END, offset in bytes); dies naming path on failure.
static inline void fseek_check(FILE* f, long off, int whence, const char* path) {
    if (fseek(f, off, whence) != 0) {
        die("%s: seek to offset %ld (whence %d) failed: %s", path, off, whence, strerror(errno));
    }
}

// fclose; dies naming path on failure (e.g. a buffered write that could not be flushed).
static inline void fclose_check(FILE* f, const char* path) {
    if (fclose(f) != 0) {
        die("%s: close failed: %s", path, strerror(errno));
    }
}

// Size of the open file in bytes; the current position is restored. Dies naming path.
static inline size_t file_size_check(FILE* f, const char* path) {
    long here = ftell(f);
    if (here < 0) die("%s: cannot get file position: %s", path, strerror(errno));
    fseek_check(f, 0, SEEK_END, path);
    long end = ftell(f);
    if (end < 0) die("%s: cannot get file size: %s", path, strerror(errno));
    fseek_check(f, here, SEEK_SET, path);
    return (size_t)end;
}

// malloc of n bytes (n == 0 allocates 1 byte so the result is never NULL).
// Dies with "error: out of host memory allocating N bytes".
static inline void* malloc_check(size_t n) {
    void* p = malloc(n == 0 ? 1 : n);
    if (p == NULL) die("out of host memory allocating %zu bytes", n);
    return p;
}

// calloc of n items of `size` bytes, zeroed; dies on overflow of n*size or out of memory.
static inline void* calloc_check(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size) die("out of host memory allocating %zu x %zu bytes (overflow)", n, size);
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) die("out of host memory allocating %zu bytes", n * size);
    return p;
}

// Atomic file replacement.
//     FILE* f = atomic_open(path);   // opens "<path>.tmp" for binary writing (truncates a stale one)
//     fwrite_check(..., f, path);    // write everything
//     atomic_commit(f, path);        // fflush + fsync + fclose, then rename "<path>.tmp" -> path
// No state is kept between the calls: atomic_commit derives "<path>.tmp" from path again, so
// both calls must get the same path. Until the commit, a previous file at path is untouched;
// a writer that dies before the commit leaves only "<path>.tmp" behind.

// Returns a malloc'd "<path>.tmp"; caller frees.
static inline char* atomic_tmp_path(const char* path) {
    size_t n = strlen(path);
    char* tmp = (char*)malloc_check(n + 5);
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    return tmp;
}

// Opens "<path>.tmp" for writing ("wb"); dies naming the .tmp path on failure.
static inline FILE* atomic_open(const char* path) {
    char* tmp = atomic_tmp_path(path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL) die("%s: cannot open for writing: %s", tmp, strerror(errno));
    free(tmp);
    return f;
}

// Flushes, fsyncs and closes f (opened by atomic_open(path)), then renames "<path>.tmp" over
// path and (best effort) fsyncs the containing directory. Dies naming the path on any failure.
static inline void atomic_commit(FILE* f, const char* path) {
    char* tmp = atomic_tmp_path(path);
    if (fflush(f) != 0) die("%s: flush failed: %s", tmp, strerror(errno));
    if (fsync(fileno(f)) != 0) die("%s: fsync failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0) die("%s: close failed: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0) die("%s: cannot rename %s over it: %s", path, tmp, strerror(errno));
    free(tmp);
    // make the rename itself durable: fsync the directory (ignore failures, e.g. unsupported fs)
    const char* slash = strrchr(path, '/');
    char* dir;
    if (slash == NULL) {
        dir = (char*)malloc_check(2);
        memcpy(dir, ".", 2);
    } else {
        size_t n = (slash == path) ? 1 : (size_t)(slash - path);
        dir = (char*)malloc_check(n + 1);
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

#endif // LLMC_UTILS_H
