/*
 * test_multi_gpu.c - host tests of the multi-GPU plumbing that needs no GPU:
 *   - llmc/dist/zero.h: slices cover the flat parameter buffer exactly once, buckets are layers then
 *     globals, shard offsets are compact, and non-divisible shapes are refused with a message;
 *   - llmc/dist/rendezvous.h: rank discovery from flags and launcher variables, method selection, and
 *     the tcp and fs broadcasts between real forked processes (3 ranks), plus their errors; a rank
 *     that never connects, a client that vanishes, a rank 0 that hangs or closes: each ends within -pt;
 *   - llmc/train/train_state.h: sharded (ZeRO-1) state files round-trip, and damaged ones are refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dev/test/test_harness.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/dist/rendezvous.h"
#include "llmc/train/train_state.h"
#include "llmc/dist/zero.h"

static void test_zero_plan(const char* desc, int nranks) {
    GPT2Config c;
    gpt2_config_from_descriptor(&c, desc);
    static ZeroPlan p;
    char err[256] = "";
    int rc = zero_plan_init(&p, &c, nranks, err, sizeof(err));
    if (!CHECK(rc == 0, "%s over %d ranks: %s", desc, nranks, err)) return;
    const size_t n = gpt2_num_parameters(&c);
    CHECK(p.num_parameters == n, "plan covers %zu of %zu parameters", p.num_parameters, n);
    CHECK(p.num_slices == 12 * c.num_layers + 4, "%d slices", p.num_slices);
    CHECK(p.shard_size * (size_t)nranks == n, "shard %zu x %d != %zu", p.shard_size, nranks, n);
    // every element in exactly one slice; shard offsets compact and in order
    unsigned char* seen = (unsigned char*)calloc(n, 1);
    int overlap = 0, shard_gap = 0;
    size_t covered = 0, shard = 0;
    for (int i = 0; i < p.num_slices; i++) {
        const ZeroSlice* s = &p.slices[i];
        for (size_t k = 0; k < s->count; k++) overlap += seen[s->offset + k]++ != 0;
        covered += s->count;
        shard_gap += s->shard_offset != shard;
        shard += s->count / nranks;
        if (s->count % nranks) overlap++;
    }
    free(seen);
    CHECK(covered == n && overlap == 0, "%s: %zu covered, %d overlaps", desc, covered, overlap);
    CHECK(shard_gap == 0 && shard == p.shard_size, "shard offsets not compact");
    // bucket b < L holds layer b's 12 tensors; bucket L the 4 globals (wte, wpe, lnfw, lnfb)
    int first, count, bad = 0;
    for (int b = 0; b < c.num_layers; b++) {
        zero_bucket_range(&p, b, &first, &count);
        bad += count != 12;
        for (int i = first; i < first + count; i++) bad += p.slices[i].layer != b || !zero_tensor_is_per_layer(p.slices[i].tensor);
    }
    zero_bucket_range(&p, c.num_layers, &first, &count);
    bad += count != 4;
    for (int i = first; i < first + count; i++) bad += p.slices[i].layer != -1;
    CHECK(bad == 0, "%s: %d bucket errors", desc, bad);
    // tensor_offset: qkvw of layer 3 starts 3 * 3C^2 into the tensor
    if (c.num_layers > 3) {
        const ZeroSlice* q = &p.slices[3 * 12 + 2];
        CHECK(q->tensor == 4 && q->tensor_offset == 3 * (size_t)3 * c.channels * c.channels, "qkvw slice of layer 3");
    }
}

static void test_zero_refuses(void) {
    GPT2Config c;
    gpt2_config_from_descriptor(&c, "d2,c96,h2");  // 96 channels: not divisible by 5 or 7
    static ZeroPlan p;
    char err[256] = "";
    CHECK(zero_plan_init(&p, &c, 7, err, sizeof(err)) != 0, "7 ranks accepted for C=96");
    CHECK(strstr(err, "not a multiple of 7") != NULL && strstr(err, "ln1w of layer 0") != NULL, "message: %s", err);
}

// ---- rendezvous

static void set_env(const char* k, const char* v) {
    if (v) setenv(k, v, 1);
    else unsetenv(k);
}

static void clear_launcher_env(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
                          "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL};
    for (int i = 0; vars[i]; i++) unsetenv(vars[i]);
}

static void test_discovery(void) {
    clear_launcher_env();
    CHECK(rendezvous_method_from_name("auto", -1, "") == RDV_NONE, "auto alone is a single process");
    CHECK(rendezvous_method_from_name("auto", 2, "") == RDV_TCP, "auto with -pn 2 is tcp");
    CHECK(rendezvous_method_from_name("auto", 2, "/tmp") == RDV_FS, "auto with -pn 2 -pf is fs");
    set_env("OMPI_COMM_WORLD_SIZE", "4");
    set_env("OMPI_COMM_WORLD_RANK", "2");
    set_env("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    CHECK(rendezvous_method_from_name("auto", -1, "") == RDV_TCP, "under mpirun without MPI: tcp");
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, -1, -1, -1, NULL, NULL, 5);
    CHECK(g.nranks == 4 && g.rank == 2 && g.local_rank == 1, "Open MPI variables: %d %d %d", g.nranks, g.rank, g.local_rank);
    rendezvous_init(&g, RDV_TCP, 3, 0, -1, NULL, NULL, 5);  // flags win over the environment
    CHECK(g.nranks == 3 && g.rank == 0 && g.local_rank == 1, "flags over environment");
    clear_launcher_env();
    set_env("PMI_SIZE", "2");
    set_env("PMI_RANK", "1");
    rendezvous_init(&g, RDV_FS, -1, -1, -1, NULL, "/tmp", 5);
    CHECK(g.nranks == 2 && g.rank == 1 && g.local_rank == 1, "PMI variables, local rank = rank");
    clear_launcher_env();
}

static void die_bad_method(void* ctx) { (void)ctx; rendezvous_method_from_name("carrier-pigeon", 2, ""); }
static void die_no_rank(void* ctx) {
    (void)ctx;
    clear_launcher_env();
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, 2, -1, -1, NULL, NULL, 5);
}
static void die_rank_range(void* ctx) {
    (void)ctx;
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, 2, 2, -1, NULL, NULL, 5);
}
static void die_fs_no_folder(void* ctx) {
    (void)ctx;
    ProcessGroup g;
    rendezvous_init(&g, RDV_FS, 2, 0, -1, NULL, "", 5);
}
static void die_bad_server(void* ctx) {
    (void)ctx;
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, 2, 1, -1, "localhost", NULL, 1);
    char blob[8];
    rendezvous_broadcast(&g, blob, sizeof(blob));
}
static void die_tcp_timeout(void* ctx) {  // rank 1 and nobody listening
    (void)ctx;
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, 2, 1, -1, "127.0.0.1:1", NULL, 1);
    char blob[8];
    rendezvous_broadcast(&g, blob, sizeof(blob));
}
static void die_fs_timeout(void* ctx) {
    ProcessGroup g;
    rendezvous_init(&g, RDV_FS, 2, 1, -1, NULL, (const char*)ctx, 1);
    char blob[8];
    rendezvous_broadcast(&g, blob, sizeof(blob));
}

// ---- rendezvous with a rank that died or never came: every wait ends within -pt, naming the rank

// A port for lost-rank case k (different per test process and case).
static int test_port(int k) { return 20000 + (int)((getpid() * 7 + k * 131) % 20000); }

// A listening socket on 127.0.0.1:port (the kernel completes connections to it without accept).
static int listen_on(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 || listen(fd, 4) != 0) return -1;
    return fd;
}

// One rank of an nranks TCP rendezvous on 127.0.0.1:port with -pt timeout_s.
static void rank_broadcast(int rank, int nranks, int port, int timeout_s) {
    char server[64];
    snprintf(server, sizeof(server), "127.0.0.1:%d", port);
    ProcessGroup g;
    rendezvous_init(&g, RDV_TCP, nranks, rank, -1, server, NULL, timeout_s);
    char blob[16] = "the nccl id";
    rendezvous_broadcast(&g, blob, sizeof(blob));
}

static void die_tcp_nobody_connects(void* ctx) {  // rank 0 alone: the accept used to wait forever
    (void)ctx;
    rank_broadcast(0, 2, test_port(1), 1);
}

static void die_tcp_one_missing(void* ctx) {  // ranks 0 and 1 of 3 meet, rank 2 never comes
    (void)ctx;
    const int port = test_port(2);
    if (fork() == 0) {
        usleep(100000);
        rank_broadcast(1, 3, port, 5);
        _exit(0);
    }
    rank_broadcast(0, 3, port, 2);
}

static void die_tcp_client_vanishes(void* ctx) {  // something connects to rank 0 and closes without a word
    (void)ctx;
    const int port = test_port(3);
    if (fork() == 0) {
        usleep(100000);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr*)&a, sizeof(a)) == 0) close(fd);
        _exit(0);
    }
    rank_broadcast(0, 2, port, 2);
}

static void die_tcp_server_silent(void* ctx) {  // rank 0 accepted (backlog) but never answers: hung or stopped
    (void)ctx;
    const int port = test_port(4);
    if (listen_on(port) < 0) return;
    rank_broadcast(1, 2, port, 1);
}

static void die_tcp_server_closes(void* ctx) {  // rank 0 accepts, then dies before sending the id
    (void)ctx;
    const int port = test_port(5);
    int fd = listen_on(port);
    if (fd < 0) return;
    if (fork() == 0) {
        int c = accept(fd, NULL, NULL);
        close(c);
        _exit(0);
    }
    close(fd);
    rank_broadcast(1, 2, port, 5);
}

// Each case dies with the message naming the rank, all within their timeouts.
static void test_lost_ranks(void) {
    time_t t0 = time(NULL);
    EXPECT_DIES(die_tcp_nobody_connects, NULL, "-pi tcp: rank 0: rank 1 did not connect", "within 1 s");
    EXPECT_DIES(die_tcp_one_missing, NULL, "-pi tcp: rank 0: rank 2 did not connect", "within 2 s", "a rank died");
    EXPECT_DIES(die_tcp_client_vanishes, NULL, "-pi tcp: rank 0: rank 1 did not connect", "within 2 s");
    EXPECT_DIES(die_tcp_server_silent, NULL, "-pi tcp: rank 1", "accepted but sent no id within 1 s");
    EXPECT_DIES(die_tcp_server_closes, NULL, "-pi tcp: rank 1", "sent no id before closing the connection");
    const long took = (long)(time(NULL) - t0);
    CHECK(took <= 12, "the five lost-rank cases took %ld s (timeouts 1, 2, 2, 1 s and an immediate close)", took);
}

// Fork nranks processes that each run the broadcast; every child checks it received rank 0's blob
// and exits 0 on success. Returns the number of children that failed.
static int run_group(RendezvousMethod method, int nranks, const char* server, const char* folder) {
    unsigned char blob0[128];
    for (int i = 0; i < 128; i++) blob0[i] = (unsigned char)(i * 37 + 11);
    pid_t pids[8];
    fflush(NULL);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm(30);
            ProcessGroup g;
            rendezvous_init(&g, method, nranks, r, -1, server, folder, 20);
            unsigned char blob[128];
            if (r == 0) memcpy(blob, blob0, sizeof(blob));
            else memset(blob, 0, sizeof(blob));
            if (r != 0) usleep(20000 * r);  // arrive at different times
            rendezvous_broadcast(&g, blob, sizeof(blob));
            _exit(memcmp(blob, blob0, sizeof(blob)) == 0 ? 0 : 1);
        }
    }
    int failed = 0;
    for (int r = 0; r < nranks; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return failed;
}

static void test_broadcasts(void) {
    char server[64];
    snprintf(server, sizeof(server), "127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
    CHECK(run_group(RDV_TCP, 3, server, NULL) == 0, "tcp broadcast to 3 ranks");
    const char* dir = tmp_path("rdv");
    mkdir(dir, 0755);
    CHECK(run_group(RDV_FS, 3, NULL, dir) == 0, "fs broadcast to 3 ranks");
    char idfile[600];
    snprintf(idfile, sizeof(idfile), "%s/llmc_rendezvous_id.bin", dir);
    CHECK(!test_file_exists(idfile), "fs: the id file is removed after the rendezvous");
    CHECK(run_group(RDV_FS, 2, NULL, dir) == 0, "fs: a second run in the same folder");
    EXPECT_DIES(die_bad_method, NULL, "-pi carrier-pigeon", "expected auto, mpi, tcp, fs or none");
    EXPECT_DIES(die_no_rank, NULL, "-pi tcp", "rank is unknown");
    EXPECT_DIES(die_rank_range, NULL, "-pr 2", "below the number of processes 2");
    EXPECT_DIES(die_fs_no_folder, NULL, "-pi fs", "-pf DIR");
    EXPECT_DIES(die_bad_server, NULL, "-ps localhost", "HOST:PORT");
    EXPECT_DIES(die_tcp_timeout, NULL, "-pi tcp: rank 1", "no rank 0 at 127.0.0.1:1");
    const char* empty = tmp_path("rdv_empty");
    mkdir(empty, 0755);
    EXPECT_DIES(die_fs_timeout, (void*)empty, "-pi fs: rank 1", "no id file");
}

// ---- sharded state files

static void test_state_shards(void) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.rank = 1; s.nranks = 2; s.step = 7; s.has_master = 1; s.floatx_bytes = 2; s.B = 4; s.T = 64;
    s.num_parameters = 1000; s.zero_stage = 1; s.state_elems = 500;
    s.seed = 0x1234567890ull; s.loss_scale = 1.0f;
    snprintf(s.numeric_config, sizeof(s.numeric_config), "precision=BF16 ranks=2 zero=1");
    float m[500], v[500], w[500];
    for (int i = 0; i < 500; i++) { m[i] = i * 0.5f; v[i] = i * 0.25f; w[i] = -i * 1.0f; }
    const char* path = tmp_path("state_00000007_rank1.bin");
    train_state_write(path, &s, m, v, w);
    TrainState r;
    float *rm, *rv, *rw;
    train_state_read(path, 1000, &r, &rm, &rv, &rw);
    CHECK(r.zero_stage == 1 && r.state_elems == 500 && r.rank == 1 && r.nranks == 2, "sharded header round trip");
    CHECK(memcmp(rm, m, sizeof(m)) == 0 && memcmp(rv, v, sizeof(v)) == 0 && memcmp(rw, w, sizeof(w)) == 0, "arrays");
    free(rm); free(rv); free(rw);
    // an unsharded file (state_elems 0 in the writer) reads back as num_parameters
    s.zero_stage = 0; s.state_elems = 0; s.num_parameters = 500; s.rank = 0; s.nranks = 1;
    const char* path2 = tmp_path("state_00000007.bin");
    train_state_write(path2, &s, m, v, w);
    train_state_read(path2, 500, &r, &rm, &rv, &rw);
    CHECK(r.state_elems == 500 && r.zero_stage == 0, "unsharded state_elems = num_parameters");
    free(rm); free(rv); free(rw);
}

static void die_truncated_state(void* ctx) {
    TrainState r;
    float *a, *b, *c;
    train_state_read((const char*)ctx, 1000, &r, &a, &b, &c);
}

static void test_state_damage(void) {
    const char* src = tmp_path("state_00000007_rank1.bin");
    const char* dst = tmp_path("state_truncated.bin");
    FILE* f = fopen(src, "rb");
    FILE* g = fopen(dst, "wb");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fwrite(buf, 1, n, g);  // header + part of m
    fclose(f);
    fclose(g);
    EXPECT_DIES(die_truncated_state, (void*)dst, "state_truncated.bin", "header implies");
}

int main(void) {
    test_zero_plan("d12", 1);
    test_zero_plan("d12", 2);
    test_zero_plan("d12", 4);
    test_zero_plan("d12", 8);
    test_zero_plan("d4,c96,h2", 3);
    test_zero_refuses();
    test_discovery();
    test_broadcasts();
    test_lost_ranks();
    test_state_shards();
    test_state_damage();
    rmdir(tmp_path("rdv"));
    rmdir(tmp_path("rdv_empty"));
    return test_summary();
}
