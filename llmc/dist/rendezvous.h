/*
 * rendezvous.h - how the processes of a multi-GPU run find each other (host only, plain C).
 *
 * A run of N processes needs two things before NCCL can start: every process must know its rank
 * and N (and its rank among the processes of its machine, to pick a GPU), and rank 0's NCCL unique
 * id (128 bytes) must reach every other rank. This file does both, three ways (-pi):
 *
 *   mpi  the processes were started by mpirun and the trainer was built with MPI (USE_MPI): rank and
 *        size from MPI_COMM_WORLD, local rank from MPI_COMM_TYPE_SHARED, the id by MPI_Bcast.
 *   tcp  rank 0 listens on -ps HOST:PORT (default 127.0.0.1:29500) and sends the id to each rank
 *        that connects and names itself; the others connect, retrying until -pt seconds have passed.
 *   fs   rank 0 writes the id into the shared folder -pf DIR (temp file, then rename), the others
 *        poll for it, then leave an acknowledgement file; rank 0 removes the id file once every rank
 *        has acknowledged, so no stale id survives a successful start. A reader accepts only an id
 *        file written after its own start minus 60 s, so that a file left by a crashed run is
 *        ignored (use a fresh folder when runs follow each other within a minute).
 *
 * Rank, size and local rank for tcp and fs come from -pn / -pr (and -pl), or, when those are not
 * given, from the launcher's environment: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} (Open MPI's
 * mpirun), PMI_RANK / PMI_SIZE / MPI_LOCALRANKID (MPICH, Intel MPI), SLURM_PROCID / SLURM_NTASKS /
 * SLURM_LOCALID. So `mpirun -np 2 ./train_gpt2cu -pi fs -pf /tmp/run1` works without MPI in the
 * binary, and a single-GPU build or run never needs MPI.
 *
 * Errors (bad flags, a port that cannot be bound, a timeout, a short read) end the process with a
 * message that names the method, the rank and the cause. No wait is unbounded: a rank that dies
 * before or during the rendezvous ends the others within -pt seconds (rank 0 names the ranks that
 * never connected or acknowledged); after it, the NCCL watchdog (-pw, llmc/dist/watchdog.h) takes over.
 */
#ifndef LLMC_RENDEZVOUS_H
#define LLMC_RENDEZVOUS_H

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "llmc/core/utils.h"

#ifdef USE_MPI
#include <mpi.h>
#endif

typedef enum { RDV_NONE = 0, RDV_MPI = 1, RDV_TCP = 2, RDV_FS = 3 } RendezvousMethod;

// Who this process is. method RDV_NONE means a single process (nranks 1, rank 0).
typedef struct {
    int rank, nranks, local_rank;
    RendezvousMethod method;
    const char* server;   // tcp: "HOST:PORT"
    const char* folder;   // fs: shared folder
    int timeout_s;        // tcp/fs: how long to wait for the other ranks
    int mpi_initialized;  // 1 if this process called MPI_Init (finalized by rendezvous_finish)
} ProcessGroup;

// Integer value of the first set environment variable among names (NULL-terminated), or -1.
static inline int rdv_env_int_(const char* const* names) {
    for (int i = 0; names[i]; i++) {
        const char* v = getenv(names[i]);
        if (v && *v) {
            char* end;
            long x = strtol(v, &end, 10);
            if (*end == '\0' && x >= 0 && x < (1 << 30)) return (int)x;
            die("rendezvous: environment variable %s=%s is not a non-negative integer", names[i], v);
        }
    }
    return -1;
}

// 1 if a launcher (mpirun, srun) started this process as part of a group of more than one.
static inline int rendezvous_launcher_size(void) {
    static const char* const size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", NULL};
    return rdv_env_int_(size_vars);
}

// Parse -pi: "" or "auto" picks mpi when the binary has MPI and a launcher started it with more
// than one process, else fs when -pf was given, else tcp when -pn > 1 or a launcher size > 1,
// else none. Dies on an unknown name or on mpi in a binary without MPI.
static inline RendezvousMethod rendezvous_method_from_name(const char* name, int nranks_flag, const char* folder) {
    if (name == NULL || *name == '\0' || strcmp(name, "auto") == 0) {
        int launcher = rendezvous_launcher_size();
#ifdef USE_MPI
        if (launcher > 1) return RDV_MPI;
#endif
        if (folder && *folder && (launcher > 1 || nranks_flag > 1)) return RDV_FS;
        if (launcher > 1 || nranks_flag > 1) return RDV_TCP;
        return RDV_NONE;
    }
    if (strcmp(name, "mpi") == 0) {
#ifdef USE_MPI
        return RDV_MPI;
#else
        die("-pi mpi: this binary was built without MPI (make info; NO_USE_MPI=1 or no mpi.h); use -pi tcp or -pi fs");
#endif
    }
    if (strcmp(name, "tcp") == 0) return RDV_TCP;
    if (strcmp(name, "fs") == 0) return RDV_FS;
    if (strcmp(name, "none") == 0) return RDV_NONE;
    die("-pi %s: expected auto, mpi, tcp, fs or none", name);
    return RDV_NONE;
}

static inline const char* rendezvous_method_name(RendezvousMethod m) {
    switch (m) {
        case RDV_MPI: return "mpi";
        case RDV_TCP: return "tcp";
        case RDV_FS: return "fs";
        default: return "none";
    }
}

// Fill g: rank, nranks, local rank for the method (flags -pn/-pr/-pl when >= 0, else the launcher's
// environment). Calls MPI_Init for RDV_MPI. Dies on inconsistent values.
static inline void rendezvous_init(ProcessGroup* g, RendezvousMethod method, int nranks_flag, int rank_flag,
                                   int local_rank_flag, const char* server, const char* folder, int timeout_s) {
    memset(g, 0, sizeof(*g));
    g->method = method;
    g->server = server && *server ? server : "127.0.0.1:29500";
    g->folder = folder;
    g->timeout_s = timeout_s > 0 ? timeout_s : 120;
    if (method == RDV_NONE) {
        if (nranks_flag > 1) die("-pn %d: more than one process needs a rendezvous (-pi tcp|fs|mpi)", nranks_flag);
        g->nranks = 1;
        return;
    }
#ifdef USE_MPI
    if (method == RDV_MPI) {
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) die("-pi mpi: MPI_Init failed");
        g->mpi_initialized = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &g->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g->nranks);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &g->local_rank);
        MPI_Comm_free(&local);
        return;
    }
#endif
    static const char* const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    static const char* const local_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
    g->nranks = nranks_flag > 0 ? nranks_flag : rendezvous_launcher_size();
    g->rank = rank_flag >= 0 ? rank_flag : rdv_env_int_(rank_vars);
    if (g->nranks < 1) die("-pi %s: the number of processes is unknown: give -pn N (or start under mpirun/srun)", rendezvous_method_name(method));
    if (g->rank < 0) die("-pi %s: this process's rank is unknown: give -pr R (or start under mpirun/srun)", rendezvous_method_name(method));
    if (g->rank >= g->nranks) die("-pr %d: rank must be below the number of processes %d", g->rank, g->nranks);
    g->local_rank = local_rank_flag >= 0 ? local_rank_flag : rdv_env_int_(local_vars);
    if (g->local_rank < 0) g->local_rank = g->rank;  // one machine: the global rank
    if (method == RDV_FS && !(folder && *folder)) die("-pi fs: needs -pf DIR, a folder every process can read and write");
}

// Split "HOST:PORT" (dies naming the flag when malformed).
static inline void rdv_parse_server_(const char* server, char* host, size_t host_n, int* port) {
    const char* colon = strrchr(server, ':');
    if (!colon || colon == server || (size_t)(colon - server) >= host_n) die("-ps %s: expected HOST:PORT", server);
    memcpy(host, server, (size_t)(colon - server));
    host[colon - server] = '\0';
    char* end;
    long p = strtol(colon + 1, &end, 10);
    if (*end != '\0' || p <= 0 || p > 65535) die("-ps %s: port must be 1..65535", server);
    *port = (int)p;
}

static inline int rdv_send_all_(int fd, const void* buf, size_t n) {
    const char* p = (const char*)buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        p += k; n -= (size_t)k;
    }
    return 0;
}

static inline int rdv_recv_all_(int fd, void* buf, size_t n) {
    char* p = (char*)buf;
    while (n > 0) {
        ssize_t k = recv(fd, p, n, 0);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        p += k; n -= (size_t)k;
    }
    return 0;
}

static inline double rdv_now_(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline void rdv_sleep_ms_(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// Bound every send / recv (and connect) on fd to `seconds` (at least 1 s), so that a peer that
// stops answering cannot block the rendezvous beyond -pt.
static inline void rdv_set_timeouts_(int fd, double seconds) {
    if (seconds < 1.0) seconds = 1.0;
    struct timeval tv;
    tv.tv_sec = (time_t)seconds;
    tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

// tcp: rank 0 serves blob to nranks-1 connections; every other rank receives it. A client first
// sends {magic, its rank}, so that rank 0 can name the ranks that never came; rank 0 waits for them
// at most -pt seconds in all (poll on the listening socket: a rank that died before connecting no
// longer blocks it in accept), and each client gives up after -pt seconds too, also when rank 0
// accepted but then died or stopped answering.
static inline void rdv_tcp_broadcast_(const ProcessGroup* g, void* blob, size_t n) {
    char host[256];
    int port;
    rdv_parse_server_(g->server, host, sizeof(host), &port);
    const uint32_t magic = 0x4C4C4D43u;  // guards against talking to an unrelated server on the port
    const double t0 = rdv_now_();
    if (g->rank == 0) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("-pi tcp: rank 0: socket: %s", strerror(errno));
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in addr;
        memset(&addr, 0, sizeof(addr));
        addr.sin_family = AF_INET;
        addr.sin_port = htons((uint16_t)port);
        addr.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0) die("-pi tcp: rank 0: cannot bind port %d: %s", port, strerror(errno));
        if (listen(fd, g->nranks) != 0) die("-pi tcp: rank 0: listen: %s", strerror(errno));
        unsigned char* seen = (unsigned char*)calloc_check((size_t)g->nranks, 1);
        for (int served = 1; served < g->nranks;) {
            const double left = g->timeout_s - (rdv_now_() - t0);
            if (left <= 0) {
                char missing[160] = "";
                int shown = 0, count = 0;
                for (int r = 1; r < g->nranks; r++) {
                    if (seen[r]) continue;
                    count++;
                    if (shown < 8) {
                        size_t len = strlen(missing);
                        snprintf(missing + len, sizeof(missing) - len, "%s%d", shown ? ", " : "", r);
                        shown++;
                    }
                }
                die("-pi tcp: rank 0: rank%s %s%s did not connect to port %d within %d s (-pt; a rank died, was not started, "
                    "or cannot reach this host)", count > 1 ? "s" : "", missing, count > shown ? ", ..." : "", port, g->timeout_s);
            }
            struct pollfd pfd;
            pfd.fd = fd;
            pfd.events = POLLIN;
            pfd.revents = 0;
            const int k = poll(&pfd, 1, (int)(left * 1000.0) + 1);
            if (k < 0 && errno != EINTR) die("-pi tcp: rank 0: poll: %s", strerror(errno));
            if (k <= 0) continue;
            int c = accept(fd, NULL, NULL);
            if (c < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
                die("-pi tcp: rank 0: accept: %s", strerror(errno));
            }
            rdv_set_timeouts_(c, 5.0);  // a client sends its hello right after connecting
            uint32_t hello[2] = {0, 0};  // {magic, rank}; anything else (a port scanner, a dead client) is dropped
            if (rdv_recv_all_(c, hello, sizeof(hello)) != 0 || hello[0] != magic || hello[1] == 0 || hello[1] >= (uint32_t)g->nranks ||
                seen[hello[1]]) {
                close(c);
                continue;
            }
            if (rdv_send_all_(c, &magic, sizeof(magic)) != 0 || rdv_send_all_(c, blob, n) != 0) {  // it died meanwhile
                close(c);
                continue;
            }
            close(c);
            seen[hello[1]] = 1;
            served++;
        }
        free(seen);
        close(fd);
        return;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char port_s[16];
    snprintf(port_s, sizeof(port_s), "%d", port);
    int rc = getaddrinfo(host, port_s, &hints, &res);
    if (rc != 0) die("-ps %s: cannot resolve %s: %s", g->server, host, gai_strerror(rc));
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) die("-pi tcp: rank %d: socket: %s", g->rank, strerror(errno));
        const double left = g->timeout_s - (rdv_now_() - t0);
        rdv_set_timeouts_(fd, left < 5.0 ? left : 5.0);  // a connect to a silent host returns within 5 s
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            rdv_set_timeouts_(fd, left);
            const uint32_t hello[2] = {magic, (uint32_t)g->rank};
            uint32_t m = 0;
            errno = 0;  // (a closed connection sets none)
            if (rdv_send_all_(fd, hello, sizeof(hello)) != 0 || rdv_recv_all_(fd, &m, sizeof(m)) != 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    die("-pi tcp: rank %d: %s accepted but sent no id within %d s (-pt; rank 0 hangs, or another program is on that "
                        "port)", g->rank, g->server, g->timeout_s);
                die("-pi tcp: rank %d: %s accepted but sent no id before closing the connection (rank 0 died, or another program "
                    "is on that port)", g->rank, g->server);
            }
            if (m != magic || rdv_recv_all_(fd, blob, n) != 0)
                die("-pi tcp: rank %d: %s did not send a valid id (another program on that port?)", g->rank, g->server);
            close(fd);
            freeaddrinfo(res);
            return;
        }
        close(fd);
        if (rdv_now_() - t0 > g->timeout_s)
            die("-pi tcp: rank %d: no rank 0 at %s after %d s (-pt; rank 0 died, was not started, or cannot be reached)", g->rank,
                g->server, g->timeout_s);
        rdv_sleep_ms_(100);
    }
}

// fs: see the header comment.
static inline void rdv_fs_broadcast_(const ProcessGroup* g, void* blob, size_t n) {
    char path[4096], tmp[4200], ack[4200];
    snprintf(path, sizeof(path), "%s/llmc_rendezvous_id.bin", g->folder);
    struct stat st;
    if (stat(g->folder, &st) != 0 || !S_ISDIR(st.st_mode)) die("-pf %s: not an existing folder", g->folder);
    const time_t start = time(NULL);
    const double t0 = rdv_now_();
    if (g->rank == 0) {
        snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
        FILE* f = fopen(tmp, "wb");
        if (!f || fwrite(blob, 1, n, f) != n || fclose(f) != 0) die("-pi fs: rank 0: cannot write %s: %s", tmp, strerror(errno));
        if (rename(tmp, path) != 0) die("-pi fs: rank 0: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        for (int r = 1; r < g->nranks; r++) {
            snprintf(ack, sizeof(ack), "%s/llmc_rendezvous_ack_%d", g->folder, r);
            while (stat(ack, &st) != 0) {
                if (rdv_now_() - t0 > g->timeout_s)
                    die("-pi fs: rank 0: rank %d did not acknowledge %s within %d s (-pt; a rank died, was not started, or does not "
                        "see this folder)", r, path, g->timeout_s);
                rdv_sleep_ms_(50);
            }
            remove(ack);
        }
        remove(path);
        return;
    }
    for (;;) {
        if (stat(path, &st) == 0 && (size_t)st.st_size == n && st.st_mtime >= start - 60) {
            FILE* f = fopen(path, "rb");
            size_t got = f ? fread(blob, 1, n, f) : 0;
            if (f) fclose(f);
            if (got == n) break;
        }
        if (rdv_now_() - t0 > g->timeout_s)
            die("-pi fs: rank %d: no id file %s from rank 0 within %d s (-pt; rank 0 died, was not started, or does not see "
                "this folder)", g->rank, path, g->timeout_s);
        rdv_sleep_ms_(50);
    }
    snprintf(ack, sizeof(ack), "%s/llmc_rendezvous_ack_%d", g->folder, g->rank);
    FILE* f = fopen(ack, "wb");
    if (!f || fclose(f) != 0) die("-pi fs: rank %d: cannot write %s: %s", g->rank, ack, strerror(errno));
}

// Rank 0's n bytes of blob end up in every rank's blob (collective: every rank must call it).
static inline void rendezvous_broadcast(const ProcessGroup* g, void* blob, size_t n) {
    if (g->nranks <= 1) return;
    switch (g->method) {
#ifdef USE_MPI
        case RDV_MPI:
            if (MPI_Bcast(blob, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) die("-pi mpi: MPI_Bcast failed");
            return;
#endif
        case RDV_TCP: rdv_tcp_broadcast_(g, blob, n); return;
        case RDV_FS: rdv_fs_broadcast_(g, blob, n); return;
        default: die("rendezvous: %d processes but no method", g->nranks);
    }
}

// End of the run: MPI_Finalize where MPI_Init was called.
static inline void rendezvous_finish(ProcessGroup* g) {
#ifdef USE_MPI
    if (g->mpi_initialized) MPI_Finalize();
#endif
    g->mpi_initialized = 0;
}

#endif
