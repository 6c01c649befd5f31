/*
 * test_harness.h - a tiny test framework for the llmc host tests (one test program per file).
 *
 *   CHECK(cond, fmt, ...)                  count a pass, or a failure printed with file:line
 *   EXPECT_DIES(fn, ctx, "sub1", "sub2")   run fn(ctx) in a forked child with stderr captured;
 *                                          passes if the child exits with a non-zero status (not
 *                                          by a signal), its stderr is one line starting with
 *                                          "error: ", and that line contains every substring
 *   tmp_path("name")                       a path inside a per-run mkdtemp folder
 *   test_summary()                         removes the temp folder, prints "N passed, N failed"
 *                                          as the last line, returns the exit code
 * With TEST_VERBOSE=1 in the environment, the captured message of every passing EXPECT_DIES is
 * printed too (to review the wording of error messages).
 * POSIX only (fork, pipe, mkdtemp).
 */
#ifndef LLMC_TEST_HARNESS_H
#define LLMC_TEST_HARNESS_H

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int test_passes_ = 0;
static int test_failures_ = 0;
static char test_tmpdir_[256] = "";

#if defined(__GNUC__) || defined(__clang__)
#define TEST_PRINTF_(a, b) __attribute__((format(printf, a, b)))
#else
#define TEST_PRINTF_(a, b)
#endif

// Records one check; on failure prints "FAIL file:line: (cond) message" to stderr.
static inline TEST_PRINTF_(5, 6) int check_impl_(int ok, const char* file, int line, const char* expr, const char* fmt, ...) {
    if (ok) {
        test_passes_++;
        return 1;
    }
    test_failures_++;
    fprintf(stderr, "FAIL %s:%d: (%s) ", file, line, expr);
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
    return 0;
}

// CHECK(cond, fmt, ...): evaluates to 1 if cond holds, else 0 (and the failure is printed).
#define CHECK(cond, ...) check_impl_((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

// The per-run temporary folder (created on first use under $TMPDIR or /tmp).
static inline const char* test_tmpdir(void) {
    if (test_tmpdir_[0] == '\0') {
        const char* base = getenv("TMPDIR");
        if (base == NULL || base[0] == '\0') base = "/tmp";
        snprintf(test_tmpdir_, sizeof(test_tmpdir_), "%s/llmc_test_XXXXXX", base);
        if (mkdtemp(test_tmpdir_) == NULL) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return test_tmpdir_;
}

// "<tmpdir>/<name>" in one of 8 rotating static buffers (so a few can be live at once).
static inline const char* tmp_path(const char* name) {
    static char bufs[8][512];
    static int next = 0;
    char* b = bufs[next];
    next = (next + 1) % 8;
    const int n = snprintf(b, sizeof(bufs[0]), "%s/%s", test_tmpdir(), name);
    if (n < 0 || (size_t)n >= sizeof(bufs[0])) {  // a test's own bug: its path would be cut short
        fprintf(stderr, "tmp_path: %s/%s is longer than %zu bytes\n", test_tmpdir(), name, sizeof(bufs[0]) - 1);
        exit(2);
    }
    return b;
}

// Returns 1 if a file exists at path.
static inline int test_file_exists(const char* path) {
    return access(path, F_OK) == 0;
}

// Runs fn(ctx) in a child process with stderr captured; see the top of the file. The list of
// substrings ends with NULL (the EXPECT_DIES macro appends it).
static inline int expect_dies_impl_(const char* file, int line, const char* fn_name, void (*fn)(void*), void* ctx, ...) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) {
        perror("pipe");
        exit(2);
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        if (freopen("/dev/null", "w", stdout) == NULL) _exit(3);
        alarm(20);  // a hang becomes SIGALRM, reported as a failure
        fn(ctx);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    size_t cap = 4096, len = 0;
    char* out = (char*)malloc(cap);
    for (;;) {
        if (len + 1024 > cap) {
            cap *= 2;
            out = (char*)realloc(out, cap);
        }
        ssize_t n = read(fds[0], out + len, cap - len - 1);
        if (n <= 0) break;
        len += (size_t)n;
    }
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);

    int ok = 1;
    char why[256] = "";
    if (WIFSIGNALED(status)) {
        ok = 0;
        snprintf(why, sizeof(why), "child killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) == 0) {
        ok = 0;
        snprintf(why, sizeof(why), "child did not die (exit status 0)");
    } else if (strncmp(out, "error: ", 7) != 0) {
        ok = 0;
        snprintf(why, sizeof(why), "stderr does not start with \"error: \"");
    } else if (len == 0 || out[len - 1] != '\n' || strchr(out, '\n') != out + len - 1) {
        ok = 0;
        snprintf(why, sizeof(why), "stderr is not exactly one line");
    } else {
        va_list args;
        va_start(args, ctx);
        const char* sub;
        while ((sub = va_arg(args, const char*)) != NULL) {
            if (strstr(out, sub) == NULL) {
                ok = 0;
                snprintf(why, sizeof(why), "stderr lacks \"%s\"", sub);
                break;
            }
        }
        va_end(args);
    }
    if (ok) {
        test_passes_++;
        const char* verbose = getenv("TEST_VERBOSE");
        if (verbose != NULL && verbose[0] != '\0' && strcmp(verbose, "0") != 0) {
            fprintf(stderr, "ok %s:%d: %s", file, line, out);  // out is one line ending in '\n'
        }
    } else {
        test_failures_++;
        fprintf(stderr, "FAIL %s:%d: EXPECT_DIES(%s): %s; stderr was: %s%s", file, line, fn_name, why, out,
                (len > 0 && out[len - 1] == '\n') ? "" : "\n");
    }
    free(out);
    return ok;
}

// EXPECT_DIES(fn, ctx, "substring", ...): fn is void (*)(void*), called as fn(ctx) in a child.
#define EXPECT_DIES(fn, ctx, ...) expect_dies_impl_(__FILE__, __LINE__, #fn, fn, (void*)(ctx), __VA_ARGS__, (const char*)NULL)

// Removes the temporary folder (flat: files only), prints "N passed, N failed" as the last line
// of stdout, and returns the exit code: 0 if nothing failed, else 1.
static inline int test_summary(void) {
    if (test_tmpdir_[0] != '\0') {
        DIR* dir = opendir(test_tmpdir_);
        if (dir != NULL) {
            struct dirent* e;
            char p[1024];
            while ((e = readdir(dir)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                snprintf(p, sizeof(p), "%s/%s", test_tmpdir_, e->d_name);
                unlink(p);
            }
            closedir(dir);
        }
        if (rmdir(test_tmpdir_) != 0) {
            fprintf(stderr, "warning: could not remove %s\n", test_tmpdir_);
        }
        test_tmpdir_[0] = '\0';
    }
    fflush(stderr);
    printf("%d passed, %d failed\n", test_passes_, test_failures_);
    fflush(stdout);
    return test_failures_ == 0 ? 0 : 1;
}

#endif // LLMC_TEST_HARNESS_H
