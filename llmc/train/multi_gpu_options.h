// multi_gpu_options.h - the multi-GPU command-line options of the CUDA trainer (rendezvous, ZeRO stage,
// gradient wire precision, the NCCL watchdog's timeout): their flag table, their checks, and the rendezvous they name
// (llmc/dist/rendezvous.h; the data-parallel machinery itself is llmc/dist/multi_gpu.cuh, which knows no CLI).
#pragma once

#include <string.h>
#include <sys/stat.h>

#include "llmc/core/cli.h"
#include "llmc/core/precision.h"
#include "llmc/dist/rendezvous.h"

// The multi-GPU command-line options (rendezvous, ZeRO stage, gradient wire precision), declared with
// their flag table here so that the trainer's main only appends the table.
struct MultiGpuOptions {
    int zero_stage;           // -z: 0 replicated optimizer, 1 ZeRO-1
    const char* grad_wire;    // -gw: "" (storage type), "fp32", or the storage type's name
    const char* method;       // -pi: auto | mpi | tcp | fs | none
    int nranks, rank, local;  // -pn, -pr, -pl (-1: from the launcher)
    const char* server;       // -ps: HOST:PORT of rank 0 (tcp)
    const char* folder;       // -pf: shared folder (fs)
    int timeout_s;            // -pt
    int watchdog_s;           // -pw: seconds without progress of the other ranks before the run ends (0: never)
    int wire_fp32;            // derived by multi_gpu_options_validate
};

#define MULTI_GPU_NUM_FLAGS 10

// -pw's default: long enough for what one rank may do while the others wait for it (the first step's
// cuBLASLt autotuning and any PTX compilation, rank 0 alone writing the model file or sampling),
// short enough that a dead rank frees the other GPUs of a job within minutes.
#define MULTI_GPU_WATCHDOG_DEFAULT_S 300

// Defaults, then the flag table (targets are o's fields) written into flags; returns the count.
static inline int multi_gpu_flags(MultiGpuOptions* o, CliFlag* flags) {
    *o = MultiGpuOptions{0, "", "auto", -1, -1, -1, "127.0.0.1:29500", "", 120, MULTI_GPU_WATCHDOG_DEFAULT_S, 0};
    static char wire_choices[16];  // fp32 or this build's storage type, lower case
    snprintf(wire_choices, sizeof(wire_choices), "fp32|%s", PRECISION_MODE_NAME);
    for (char* c = wire_choices; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    const CliFlag f[MULTI_GPU_NUM_FLAGS] = {
        {"-z", CLI_INT, &o->zero_stage, "ZeRO stage: 0 replicated optimizer, 1 optimizer state sharded over the GPUs", 0, 1, NULL},
        {"-gw", CLI_STRING, &o->grad_wire, "gradient all-reduce precision: fp32 or the storage type (default)", 0, 0, wire_choices},
        {"-pi", CLI_STRING, &o->method, "multi-GPU rendezvous", 0, 0, "auto|mpi|tcp|fs|none"},
        {"-pn", CLI_INT, &o->nranks, "number of processes (tcp/fs; -1: from mpirun/srun)", 1, 65536, "-1"},
        {"-pr", CLI_INT, &o->rank, "rank of this process (tcp/fs; -1: from mpirun/srun)", 0, 65535, "-1"},
        {"-pl", CLI_INT, &o->local, "local rank = GPU index of this process (-1: from the launcher, else -pr)", 0, 65535, "-1"},
        {"-ps", CLI_STRING, &o->server, "tcp rendezvous: HOST:PORT of rank 0", 0, 0, NULL},
        {"-pf", CLI_STRING, &o->folder, "fs rendezvous: an existing folder all processes share", 0, 0, NULL},
        {"-pt", CLI_INT, &o->timeout_s, "rendezvous timeout in seconds", 1, 86400, NULL},
        {"-pw", CLI_INT, &o->watchdog_s, "NCCL watchdog: end the run after this many seconds without progress of the other ranks (0 = never)", 0, 86400, NULL},
    };
    for (int i = 0; i < MULTI_GPU_NUM_FLAGS; i++) flags[i] = f[i];
    return MULTI_GPU_NUM_FLAGS;
}

// Check what the flag table cannot (dies naming the flag; no CUDA call) and derive wire_fp32.
static inline void multi_gpu_options_validate(MultiGpuOptions* o) {
    o->wire_fp32 = strcmp(o->grad_wire, "fp32") == 0;  // (the table admits fp32 or the storage type)
    if (o->nranks > 0 && o->rank >= o->nranks) die("-pr %d: rank must be below the number of processes -pn %d", o->rank, o->nranks);
    char host[256];
    int port;
    rdv_parse_server_(o->server, host, sizeof(host), &port);  // -ps HOST:PORT
    struct stat st;
    if (*o->folder && (stat(o->folder, &st) != 0 || !S_ISDIR(st.st_mode))) die("-pf %s: not an existing folder", o->folder);
}

// Join the processes of this run (before any CUDA call): the rendezvous the options name.
static inline void multi_gpu_rendezvous(ProcessGroup* pg, const MultiGpuOptions* o) {
    rendezvous_init(pg, rendezvous_method_from_name(o->method, o->nranks, o->folder), o->nranks, o->rank, o->local, o->server,
                    o->folder, o->timeout_s);
}
