/*
train_gpt2.cu - GPT-2 training on an NVIDIA GPU: command line -> config -> model -> training loop.

The model (llmc/model.cuh) computes what the CPU reference train_gpt2.c specifies; the numeric mode
(storage precision, later SF16 boundaries and FP8/TCFP-12 GEMMs) is fixed at compile time by
llmc/precision.h and printed at start-up and into every log and checkpoint.

Checkpoints (-n N, and at the end with -o): model_<step>.bin (the parameters exactly as trained:
bf16 version 5 in the BF16 build, fp32 version 3 otherwise) and state_<step>.bin (AdamW moments,
master weights, data-loader position, loss scale). -y 1 resumes from the newest pair in -o and
continues bit-exactly: the losses printed are those an uninterrupted run prints.

Several GPUs (llmc/multi_gpu.cuh): `mpirun -np N ./train_gpt2cu ...`, or N processes started any
other way with -pi tcp|fs (llmc/rendezvous.h). -b is the micro-batch of one GPU; -d counts the
tokens of one optimizer step over all GPUs. Rank 0 prints, logs, samples and writes model files;
every rank writes its own state_<step>_rank<r>.bin (its data-loader position, and with -z 1 its
shard of the optimizer state); resuming needs the same number of ranks and is bit-exact.
*/
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "llmc/utils.h"
#include "llmc/cli.h"
#include "llmc/train_config.h"
#include "llmc/train_setup.h"
#include "llmc/gpt2_config.h"
#include "llmc/gpt2_init.h"
#include "llmc/checkpoint.h"
#include "llmc/train_state.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/schedulers.h"
#include "llmc/logger.h"
#include "llmc/rand.h"
#include "llmc/mfu.h"
#include "llmc/rendezvous.h"
#include "llmc/model.cuh"
#include "llmc/lowp_diagnose.cuh"

// The numeric configuration of this build and run, one line (goes into logs and state files).
static void numeric_config_string(char* out, size_t n, const GPT2* m, int tf32) {
    char dp[96] = "";
    if (multi_gpu_active(m->mg))
        snprintf(dp, sizeof(dp), " ranks=%d zero=%d grad_wire=%s", m->mg->pg.nranks, m->mg->zero_stage,
                 m->mg->wire_fp32 ? "fp32" : PRECISION_MODE_NAME);
    snprintf(out, n, "precision=%s boundaries=%s gemm=%s master_weights=%d recompute=%d gelu_fusion=%d%s%s",
             PRECISION_MODE_NAME, BOUNDARY_MODE_NAME, gemm_backend_name(&m->gemm), m->master_weights != NULL, m->recompute,
             m->gelu_fusion, tf32 ? " tf32=1" : "", dp);
}

// The state file of `rank`: <kind>_<step>.bin for a single process, <kind>_<step>_rank<r>.bin otherwise
// (kind "state": optimizer and loader state; "lowp": the FP8 / TCFP-12 GEMM state).
static void state_path(char* out, size_t n, const char* dir, int step, int rank, int nranks, const char* kind = "state") {
    if (nranks == 1) snprintf(out, n, "%s/%s_%08d.bin", dir, kind, step);
    else snprintf(out, n, "%s/%s_%08d_rank%d.bin", dir, kind, step, rank);
}

#if defined(ENABLE_Q115)
// SF16 saturation statistics on the current train batch: per boundary site, the fraction of values
// clipped at +-1 and of non-zero values flushed to 0 (printed, and logged as `s:<step> q115:<site>:...`).
static void print_boundary_stats(GPT2* m, Logger* lg, const DataLoader* loader, int step) {
    unsigned long long counts[NUM_BOUNDARY_SITES][3];
    gpt2_boundary_stats(m, loader->inputs, loader->targets, m->B, m->T, counts);
    printf("q115 stats at step %d (one forward on the current batch):\n", step);
    for (int i = 0; i < NUM_BOUNDARY_SITES; i++) {
        if (counts[i][0] == 0) continue;
        double clip = (double)counts[i][1] / counts[i][0], flush = (double)counts[i][2] / counts[i][0];
        printf("  %-14s %12llu values  clipped %.4e  flushed %.4e\n", BOUNDARY_SITE_NAMES[i], counts[i][0], clip, flush);
        if (lg->f) fprintf(lg->f, "s:%d q115:%s clip:%.6e flush:%.6e\n", step, BOUNDARY_SITE_NAMES[i], clip, flush);
    }
    if (lg->f) fflush(lg->f);
}
#endif

// Write model_<step>.bin: the parameters as trained (floatX), widened, which is exact in every build.
static void save_model_file(const char* dir, int step, const GPT2* m) {
    char path[4096];
    const size_t n = m->num_parameters;
    floatX* px = (floatX*)malloc_check(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(px, m->params_memory, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float* params = (float*)malloc_check(n * sizeof(float));
    for (size_t i = 0; i < n; i++) params[i] = (float)px[i];
    free(px);
    snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
#if defined(ENABLE_BF16)
    const int version = CHECKPOINT_VERSION_BF16;  // the bf16 bits exactly
#else
    const int version = CHECKPOINT_VERSION_FP32;  // fp16 and fp32 values are exact in fp32
#endif
    checkpoint_write_model(path, &m->config, params, version);
    free(params);
}

// Write model_<step>.bin (rank 0) and this rank's state file into dir.
static void save_checkpoint(const char* dir, int step, GPT2* m, const DataLoader* loader, const char* numeric_config) {
    char path[4096];
    cudaCheck(cudaStreamSynchronize(m->stream));
    const int rank = m->mg ? m->mg->pg.rank : 0, nranks = m->mg ? m->mg->pg.nranks : 1;
    const size_t n = m->num_parameters;
    if (rank == 0) save_model_file(dir, step, m);

    TrainState s;
    memset(&s, 0, sizeof(s));
    s.rank = rank; s.nranks = nranks; s.step = step; s.has_master = m->master_weights != NULL;
    s.floatx_bytes = (int)sizeof(floatX); s.B = m->B; s.T = m->T;
    s.num_parameters = n;
    s.zero_stage = m->mg ? m->mg->zero_stage : 0;
    s.state_elems = m->state_elems;
    s.loader = dataloader_get_state(loader);
    s.seed = m->seed;
    s.loss_scale = m->loss_scale;
    s.good_steps = m->good_steps;
    snprintf(s.numeric_config, sizeof(s.numeric_config), "%s", numeric_config);
    const size_t ns = m->state_elems;
    float* mh = (float*)malloc_check(ns * sizeof(float));
    float* vh = (float*)malloc_check(ns * sizeof(float));
    float* wh = s.has_master ? (float*)malloc_check(ns * sizeof(float)) : NULL;
    cudaCheck(cudaMemcpy(mh, m->m_memory, ns * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(vh, m->v_memory, ns * sizeof(float), cudaMemcpyDeviceToHost));
    if (wh) cudaCheck(cudaMemcpy(wh, m->master_weights, ns * sizeof(float), cudaMemcpyDeviceToHost));
    state_path(path, sizeof(path), dir, step, rank, nranks);
    train_state_write(path, &s, mh, vh, wh);
    free(mh); free(vh); free(wh);
    printf("wrote %s/model_%08d.bin and %s\n", dir, step, path);
#if GEMM_LOWP
    if (m->gemm.lowp) {  // error-feedback buffers, amax histories, current weight codes
        state_path(path, sizeof(path), dir, step, rank, nranks, "lowp");
        gemm_lowp_state_write(&m->gemm, path);
        printf("wrote %s\n", path);
    }
#endif
}

// Newest step in dir that has both model_<step>.bin and this rank's state file, or -1.
static int find_latest_checkpoint(const char* dir, int rank, int nranks) {
    DIR* d = opendir(dir);
    if (!d) return -1;
    int best = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step = -1, consumed = 0;
        if (sscanf(e->d_name, "state_%8d%n", &step, &consumed) == 1 && step > best) {
            char path[4096], mine[4096];
            struct stat st;
            state_path(mine, sizeof(mine), dir, step, rank, nranks);
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (strcmp(path, mine) != 0) continue;
            snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, step);
            if (stat(path, &st) == 0) best = step;
        }
    }
    closedir(d);
    return best;
}

// Restore optimizer state, master weights, loader position and loss scale from state_<step>.bin.
static void load_state(const char* dir, int step, GPT2* m, DataLoader* loader) {
    char path[4096];
    const int rank = m->mg ? m->mg->pg.rank : 0, nranks = m->mg ? m->mg->pg.nranks : 1;
    const int zero = m->mg ? m->mg->zero_stage : 0;
    state_path(path, sizeof(path), dir, step, rank, nranks);
    TrainState s;
    float *mh, *vh, *wh;
    train_state_read(path, m->num_parameters, &s, &mh, &vh, &wh);
    if (s.floatx_bytes != (int)sizeof(floatX)) die("%s: written by a build with %d-byte floatX, this build has %d", path, s.floatx_bytes, (int)sizeof(floatX));
    if (s.B != m->B || s.T != m->T) die("%s: written with B=%d T=%d; resume with the same -b and -t for an exact continuation", path, s.B, s.T);
    if (s.nranks != nranks || s.rank != rank)
        die("%s: written by rank %d of %d; this run is rank %d of %d (resume with the same number of processes)", path, s.rank,
            s.nranks, rank, nranks);
    if (s.zero_stage != zero || s.state_elems != m->state_elems)
        die("%s: written with ZeRO stage %d (%zu state elements); this run has -z %d (%zu)", path, s.zero_stage, s.state_elems,
            zero, m->state_elems);
    size_t n = m->state_elems;
    cudaCheck(cudaMemcpy(m->m_memory, mh, n * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v_memory, vh, n * sizeof(float), cudaMemcpyHostToDevice));
    if (m->master_weights) {
        if (!wh) die("%s: has no master weights but this run keeps them (-w 1); resume with -w 0", path);
        cudaCheck(cudaMemcpy(m->master_weights, wh, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    dataloader_set_state(loader, s.loader);
    m->seed = s.seed;
    m->loss_scale = s.loss_scale;
    m->good_steps = s.good_steps;
    free(mh); free(vh); free(wh);
    printf("resumed from %s (step %d): %s\n", path, step, s.numeric_config);
#if GEMM_LOWP
    if (m->gemm.lowp) {
        state_path(path, sizeof(path), dir, step, rank, nranks, "lowp");
        struct stat st;
        if (stat(path, &st) != 0)
            die("%s: missing: resuming a %s run needs the low-precision GEMM state written with the checkpoint", path, GEMM_LOWP_MODE_NAME);
        gemm_lowp_state_read(&m->gemm, path, m->num_parameters);
        printf("resumed %s\n", path);
    }
#endif
}

// Sample gen_tokens tokens after <|endoftext|> (temperature 1, seeded by the step so that resumed
// runs sample the same text) and print them through the tokenizer.
static void sample_and_print(GPT2* m, const Tokenizer* tok, int have_tok, int gen_tokens, int step, int seed) {
    int T = m->T < gen_tokens + 1 ? m->T : gen_tokens + 1;
    const int V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    int* seq = (int*)calloc_check(T, sizeof(int));
    seq[0] = have_tok ? tok->eot_token : 50256;
    float* probs = (float*)malloc_check(Vp * sizeof(float));
    floatX* logits = (floatX*)malloc_check(Vp * sizeof(floatX));
    Rng rng;
    rng_init(&rng, (uint64_t)seed * 1000003ull + (uint64_t)step);
    printf("generating:\n---\n");
    for (int t = 1; t < T; t++) {
        // the forward runs on the whole (1, T) window; the causal mask makes positions >= t irrelevant
        gpt2_upload_batch(m, seq, NULL, 1, T);
        gpt2_forward(m, 1, T);
        cudaCheck(cudaMemcpyAsync(logits, m->acts.output + (size_t)(t - 1) * Vp, Vp * sizeof(floatX), cudaMemcpyDeviceToHost, m->stream));
        cudaCheck(cudaStreamSynchronize(m->stream));
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) maxv = fmaxf(maxv, (float)logits[i]);
        double sum = 0.0;
        for (int i = 0; i < V; i++) { probs[i] = expf((float)logits[i] - maxv); sum += probs[i]; }
        for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
        seq[t] = sample_from_probs(probs, V, rng_uniform(&rng));
        if (have_tok) safe_print_token(tokenizer_decode(tok, seq[t]));
        else printf("%d ", seq[t]);
        fflush(stdout);
    }
    printf("\n---\n");
    free(seq); free(probs); free(logits);
}

static const char* TRAIN_DOC =
    "GPT-2 trainer on an NVIDIA GPU (build: " PRECISION_MODE_NAME "). Trains from scratch\n"
    "(-e dN[,cC][,hNH][,tMAXT]) or from a checkpoint (-e file.bin) on llm.c token shards.";

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    TrainConfig tc = {};
    tc.train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    tc.val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    tc.tokenizer_path = "data/gpt2_tokenizer.bin";
    tc.model_spec = "d12";
    tc.lr_schedule = "cosine";
    tc.B = 4; tc.T = 1024; tc.total_batch_size = -1; tc.warmup = 0; tc.max_steps = -1;
    tc.val_every = 20; tc.val_max_batches = 20; tc.sample_every = 20; tc.gen_tokens = 64;
    tc.seed = 1337; tc.lr = 3e-4f; tc.final_lr_frac = 1.0f; tc.weight_decay = 0.0f; tc.grad_clip = 1.0f;
    int resume = 0, recompute = 1, master_weights = 1, zero_stage = 0, gelu_fusion = 1, tf32 = 0, profile = 0;
    int q115_stats = 0, diagnose = 0;
    const char* pi_method = "auto";
    const char* pi_server = "127.0.0.1:29500";
    const char* pi_folder = "";
    const char* grad_wire = "";
    int pi_nranks = -1, pi_rank = -1, pi_local = -1, pi_timeout = 120;
#if GEMM_LOWP
    LowpOptions lowp = {};
    int lowp_fallback = 0;
#endif
    CliFlag flags[TRAIN_CONFIG_NUM_FLAGS + 32];
    int nflags = train_config_flags(&tc, flags);
    flags[nflags++] = {"-y", CLI_INT, &resume, "1 = resume from the newest checkpoint in -o"};
    flags[nflags++] = {"-r", CLI_INT, &recompute, "recompute in backward: 0 none, 1 GELU, 2 GELU + LayerNorm"};
    flags[nflags++] = {"-w", CLI_INT, &master_weights, "1 = keep fp32 master weights for AdamW"};
    flags[nflags++] = {"-z", CLI_INT, &zero_stage, "ZeRO stage: 0 replicated optimizer, 1 optimizer state sharded over the GPUs"};
    flags[nflags++] = {"-gw", CLI_STRING, &grad_wire, "gradient all-reduce precision: fp32 or the storage type (bf16/fp16; default)"};
    flags[nflags++] = {"-pi", CLI_STRING, &pi_method, "multi-GPU rendezvous: auto | mpi | tcp | fs | none"};
    flags[nflags++] = {"-pn", CLI_INT, &pi_nranks, "number of processes (tcp/fs; default: from mpirun/srun)"};
    flags[nflags++] = {"-pr", CLI_INT, &pi_rank, "rank of this process (tcp/fs; default: from mpirun/srun)"};
    flags[nflags++] = {"-pl", CLI_INT, &pi_local, "local rank = GPU index of this process (default: from the launcher, else -pr)"};
    flags[nflags++] = {"-ps", CLI_STRING, &pi_server, "tcp rendezvous: HOST:PORT of rank 0"};
    flags[nflags++] = {"-pf", CLI_STRING, &pi_folder, "fs rendezvous: a folder all processes share"};
    flags[nflags++] = {"-pt", CLI_INT, &pi_timeout, "rendezvous timeout in seconds"};
#if GEMM_LOWP
    flags[nflags++] = {"--fp8-delayed", CLI_INT, &lowp.delayed, "FP8 scales from the max amax of the last N uses (delayed scaling); 0 = current"};
    flags[nflags++] = {"--fp8-fast-accum", CLI_INT, &lowp.fast_accum, "1 = cuBLASLt fast accumulation in the FP8 GEMMs"};
    flags[nflags++] = {"--fp8-hp-wgrad", CLI_INT, &lowp.hp_wgrad, "1 = weight gradients in BF16 instead of FP8"};
    flags[nflags++] = {"--fp8-warmup", CLI_INT, &lowp.warmup, "optimizer steps with BF16 GEMMs before FP8 starts"};
    flags[nflags++] = {"--fp8-lm-head", CLI_INT, &lowp.lm_head, "1 = the LM head in FP8 too"};
    flags[nflags++] = {"--fp8-fallback", CLI_INT, &lowp_fallback, "1 = on a GPU without FP8 tensor cores run BF16 GEMMs instead of failing"};
#endif
#if GEMM_LOWP_TCFP12
    flags[nflags++] = {"--tcfp-block", CLI_INT, &lowp.block, "TCFP-12 scales: 0 per tensor; 32, 64, 128 = bxb weight tiles, 1xb activation blocks (32, 64: slow chunked GEMMs)"};
    flags[nflags++] = {"--tcfp-ef", CLI_INT, &lowp.error_feedback, "1 = error feedback of the weight split across steps"};
    flags[nflags++] = {"--tcfp-srr", CLI_INT, &lowp.srr, "1 = stochastic rounding of the residual W_lo (instead of error feedback)"};
    flags[nflags++] = {"--tcfp-abd", CLI_INT, &lowp.abd, "1 = asymmetric backward: dgrad with W_hi only"};
#endif
    flags[nflags++] = {"-ge", CLI_INT, &gelu_fusion, "1 = fuse GELU into the fc GEMM epilogue"};
    flags[nflags++] = {"-f", CLI_INT, &tf32, "1 = allow TF32 tensor cores for FP32 GEMMs (FP32 build)"};
    flags[nflags++] = {"-prof", CLI_INT, &profile, "1 = print the step time by kernel family at the end"};
    flags[nflags++] = {"--q115-stats", CLI_INT, &q115_stats, "SF16 build: every N steps print per boundary the fraction clipped at +-1 / flushed to 0 (0 = off)"};
    flags[nflags++] = {"--diagnose", CLI_INT, &diagnose, "1 = per linear layer the SNR (dB) of FP8 / TCFP-12 weights and outputs vs BF16 on the first train batch, then exit"};
    cli_parse(argc, argv, flags, nflags, TRAIN_DOC);
    train_config_validate(&tc);
    if (recompute < 0 || recompute > 2) die("-r: expected 0, 1 or 2, got %d", recompute);
    if (master_weights != 0 && master_weights != 1) die("-w: expected 0 or 1, got %d", master_weights);
    if (zero_stage != 0 && zero_stage != 1) die("-z: ZeRO stage %d is not supported (0 or 1)", zero_stage);
    int wire_fp32 = 0;
    if (*grad_wire) {
        char native[8];
        snprintf(native, sizeof(native), "%s", PRECISION_MODE_NAME);
        for (char* c = native; *c; c++) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
        if (strcmp(grad_wire, "fp32") == 0) wire_fp32 = 1;
        else if (strcmp(grad_wire, native) != 0) die("-gw %s: expected fp32 or %s (this build's storage type)", grad_wire, native);
    }
    if (pi_timeout <= 0) die("-pt: must be positive, got %d", pi_timeout);
    if (gelu_fusion != 0 && gelu_fusion != 1) die("-ge: expected 0 or 1, got %d", gelu_fusion);
    if (tf32 != 0 && tf32 != 1) die("-f: expected 0 or 1, got %d", tf32);
    if (profile != 0 && profile != 1) die("-prof: expected 0 or 1, got %d", profile);
    if (q115_stats < 0) die("--q115-stats: must be >= 0, got %d", q115_stats);
    if (diagnose != 0 && diagnose != 1) die("--diagnose: expected 0 or 1, got %d", diagnose);
#if !defined(ENABLE_BF16)
    if (diagnose) die("--diagnose 1: needs BF16 storage (the default build, FP8=1, TCFP12=1 or SF16); this build is %s", PRECISION_MODE_NAME);
#endif
#if !defined(ENABLE_Q115)
    if (q115_stats) die("--q115-stats: needs the SF16 build (make ENABLE_Q115=1); this build is %s", PRECISION_MODE_NAME);
#endif
#if !defined(ENABLE_FP32)
    if (tf32) die("-f 1: TF32 applies to the FP32 build only (this build is %s)", PRECISION_MODE_NAME);
#endif
    if (resume && !tc.out_dir) die("-y 1: needs -o, the folder holding the checkpoints to resume from");
    // ---- processes and GPU (before any other CUDA call)
    ProcessGroup pg;
    rendezvous_init(&pg, rendezvous_method_from_name(pi_method, pi_nranks, pi_folder), pi_nranks, pi_rank, pi_local, pi_server,
                    pi_folder, pi_timeout);
    const int rank = pg.rank, nranks = pg.nranks;
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) die("rank %d: cannot silence stdout", rank);  // rank 0 speaks
    train_config_set_ranks(&tc, nranks);
    const int B = tc.B, T = tc.T, total_batch_size = tc.total_batch_size, grad_accum_steps = tc.grad_accum_steps;
    const char* out_dir = tc.out_dir;

    // ---- model
    GPT2Config config;
    float* host_params = NULL;
    if (train_config_spec_is_checkpoint(tc.model_spec)) {
        host_params = checkpoint_read_model(tc.model_spec, &config);
    } else {
        gpt2_config_from_descriptor(&config, tc.model_spec);
        host_params = (float*)malloc_check(gpt2_num_parameters(&config) * sizeof(float));
        gpt2_init_params(host_params, &config, (uint64_t)tc.seed);
    }
    if (T > config.max_seq_len) die("-t: T=%d exceeds the model's maxT=%d", T, config.max_seq_len);
    MultiGpu mg;
    multi_gpu_init(&mg, &pg, &config, zero_stage, wire_fp32);
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    GPT2 model;
    gpt2_allocate_parameters(&model, &config, master_weights);
    gpt2_attach_multi_gpu(&model, &mg);
#if GEMM_LOWP
    gpt2_attach_lowp(&model, &lowp, lowp_fallback);
#endif
    model.seed = (unsigned long long)tc.seed * 0x9E3779B97F4A7C15ull + 1;
    gemm_set_tf32(&model.gemm, tf32);
    gpt2_allocate_activations(&model, B, T, recompute, gelu_fusion);
    KernelProfiler* profiler = (KernelProfiler*)malloc_check(sizeof(KernelProfiler));
    prof_init(profiler, profile);
    model.prof = profiler;

    // ---- data
    TrainSetup setup;
    train_setup_init(&setup, &tc, config.vocab_size, rank, nranks);
    const int have_val = setup.have_val, have_tok = setup.have_tokenizer;

    // ---- resume or start
    int start_step = 0;
    if (resume) {
        ensure_output_dir(out_dir);
        int latest = find_latest_checkpoint(out_dir, rank, nranks);
        float agree[2] = {(float)latest, (float)-latest};  // every rank must resume the same step
        multi_gpu_allreduce_host(&mg, agree, 2, 1, model.stream);
        if (agree[0] != -agree[1]) die("-y 1: the ranks' newest checkpoints in %s differ (steps %d .. %d)", out_dir, (int)-agree[1], (int)agree[0]);
        if (latest < 0) {
            printf("-y 1: no checkpoint in %s, starting from scratch\n", out_dir);
        } else {
            char path[4096];
            snprintf(path, sizeof(path), "%s/model_%08d.bin", out_dir, latest);
            GPT2Config ck;
            free(host_params);
            host_params = checkpoint_read_model(path, &ck);
            if (memcmp(&ck, &config, sizeof(ck)) != 0) die("%s: model shape differs from -e %s", path, tc.model_spec);
            start_step = latest;
        }
    }
    gpt2_set_parameters(&model, host_params);
    free(host_params);
    if (start_step > 0) load_state(out_dir, start_step, &model, &setup.train);

    char numeric[256];
    numeric_config_string(numeric, sizeof(numeric), &model, tf32);
    size_t n = model.num_parameters;
    double mib = 1024.0 * 1024.0;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const char* peak_prec = tf32 ? "TF32" : PRECISION_MODE_NAME;
    float peak = device_peak_tflops(prop.name, peak_prec);
    print_config_rule();
    print_config_row("device", "%s", prop.name);
    print_config_row("precision, GEMM", "%s, %s", PRECISION_MODE_NAME, gemm_backend_name(&model.gemm));
    print_config_row("storage boundaries", "%s", BOUNDARY_MODE_NAME);
    print_config_row("master weights, recompute", "%d, %d", model.master_weights != NULL, recompute);
    print_config_row("model", "%s", tc.model_spec);
    print_config_row("L, C, NH, maxT", "%d, %d, %d, %d", config.num_layers, config.channels, config.num_heads, config.max_seq_len);
    print_config_row("V, Vp", "%d, %d", config.vocab_size, config.padded_vocab_size);
    print_config_row("parameters", "%zu", n);
    print_config_row("B, T, grad accum", "%d, %d, %d", B, T, grad_accum_steps);
    print_config_row("GPUs, ZeRO, grad wire", "%d (%s), %d, %s", nranks, rendezvous_method_name(pg.method), zero_stage,
                     wire_fp32 || sizeof(floatX) == 4 ? "fp32" : PRECISION_MODE_NAME);
    print_config_row("tokens per step", "%d", total_batch_size);
    print_config_row("steps, lr, schedule", "%d, %g, %s", tc.max_steps, tc.lr, tc.lr_schedule);
    print_config_row("warmup, final lr frac", "%d, %g", tc.warmup, tc.final_lr_frac);
    print_config_row("weight decay, grad clip", "%g, %g", tc.weight_decay, tc.grad_clip);
    print_config_row("train / val tokens", "%zu / %zu", setup.train.num_tokens, have_val ? setup.val.num_tokens : 0);
    print_config_rule();
    printf("numeric config: %s\n", numeric);
#if GEMM_LOWP
    char lowp_desc[256];
    gemm_lowp_describe(&model.gemm, lowp_desc, sizeof(lowp_desc));
    printf("%s options: %s\n", GEMM_LOWP_MODE_NAME, lowp_desc);
#endif
    printf("memory plan (MiB): params %.0f, grads %.0f, AdamW m+v %.0f, master %.0f, activations %.0f; device %.0f free of %.0f\n",
           n * sizeof(floatX) / mib, n * sizeof(floatX) / mib, 2.0 * n * sizeof(float) / mib,
           model.master_weights ? n * sizeof(float) / mib : 0.0, model.acts_bytes / mib, free_b / mib, total_b / mib);
    if (diagnose) {  // llmc/lowp_diagnose.cuh: one forward on the next train batch, a table, no training
        lowp_diagnose_run(&model, &setup.train, out_dir, rank == 0);
        prof_free(profiler); free(profiler);
        train_setup_free(&setup); gpt2_free(&model); multi_gpu_free(&mg); rendezvous_finish(&pg);
        return 0;
    }

    Logger logger;
    if (out_dir) ensure_output_dir(out_dir);
    logger_init(&logger, rank == 0 ? out_dir : NULL, start_step > 0);
    char line[1024];
    snprintf(line, sizeof(line), "train_gpt2cu %s model=%s L=%d C=%d NH=%d B=%d T=%d accum=%d gpus=%d lr=%g device=%s",
             numeric, tc.model_spec, config.num_layers, config.channels, config.num_heads, B, T, grad_accum_steps, nranks, tc.lr,
             prop.name);
    logger_comment(&logger, line);

    double flops_per_step = gpt2_flops_per_token(n, config.num_layers, config.channels, T) * total_batch_size;
    double* step_seconds = (double*)calloc_check((size_t)tc.max_steps + 1, sizeof(double));
    int timed_steps = 0;
    for (int step = start_step; step <= tc.max_steps; step++) {
        int last = step == tc.max_steps;
        if (have_val && (step % tc.val_every == 0 || last)) {
            dataloader_reset(&setup.val);
            double sum = 0.0;
            for (int i = 0; i < tc.val_max_batches; i++) {
                dataloader_next_batch(&setup.val);
                sum += gpt2_evaluate(&model, setup.val.inputs, setup.val.targets, B, T);
            }
            float val_loss = (float)(sum / tc.val_max_batches);
            multi_gpu_allreduce_host(&mg, &val_loss, 1, 0, model.stream);  // mean over the ranks' batches
            val_loss /= nranks;
            printf("step %5d | val loss %.6f\n", step, val_loss);
            logger_log_val(&logger, step, val_loss);
        }
        if (rank == 0 && tc.sample_every > 0 && step > 0 && (step % tc.sample_every == 0 || last))
            sample_and_print(&model, &setup.tokenizer, have_tok, tc.gen_tokens, step, tc.seed);
        if (out_dir && step > start_step && ((tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0) || last))
            save_checkpoint(out_dir, step, &model, &setup.train, numeric);
        if (last) break;

        double t0 = wall_seconds();
        profiler->n = 0;  // drop what evaluation and sampling recorded
        if (step == start_step + 3) prof_reset(profiler);  // the first 3 steps are warm-up
        gpt2_zero_grad(&model);
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum_steps; micro++) {
            if (!tc.overfit_single_batch || (step == start_step && micro == 0)) dataloader_next_batch(&setup.train);
            model.reduce_grads = micro == grad_accum_steps - 1;  // reduce across ranks during the last backward
            loss_sum += gpt2_forward_backward(&model, setup.train.inputs, setup.train.targets, B, T,
                                              1.0f / ((float)grad_accum_steps * nranks));
        }
        float loss = (float)(loss_sum / grad_accum_steps);
        multi_gpu_allreduce_host(&mg, &loss, 1, 0, model.stream);  // mean over the ranks
        loss /= nranks;
        if (!isfinite(loss))
            die("step %d: train loss is %f; stopping before the update (checkpoints written so far are intact)", step + 1, loss);
        float step_lr = get_learning_rate(&setup.sched, step);
        UpdateResult u = gpt2_update(&model, step_lr, 0.9f, 0.95f, 1e-8f, tc.weight_decay, tc.grad_clip, step + 1);
        cudaCheck(cudaStreamSynchronize(model.stream));
        double dt = wall_seconds() - t0;
        prof_collect(profiler, model.stream);
        if (step > start_step + 2) step_seconds[timed_steps++] = dt;  // the first 3 steps are warm-up
        double tok_s = total_batch_size / dt;
        double mfu = peak > 0 ? flops_per_step / dt / (peak * 1e12 * nranks) * 100.0 : -1.0;
        char mfu_str[32];
        if (mfu >= 0) snprintf(mfu_str, sizeof(mfu_str), "%.1f%%", mfu);
        else snprintf(mfu_str, sizeof(mfu_str), "n/a");
        printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU %s%s\n", step + 1, tc.max_steps,
               loss, u.grad_norm, step_lr, dt * 1e3, tok_s, mfu_str, u.skipped ? " | skipped (overflow)" : "");
#if defined(ENABLE_FP16)
        if (u.skipped) printf("  FP16 loss scale lowered to %g\n", model.loss_scale);
#endif
        logger_log_train(&logger, step + 1, loss, step_lr, u.grad_norm);
#if defined(ENABLE_Q115)
        if (rank == 0 && q115_stats > 0 && ((step + 1) % q115_stats == 0 || step == start_step))
            print_boundary_stats(&model, &logger, &setup.train, step + 1);
#endif
        if (step == start_step) {
            char summary[256];
            gemm_compute_summary(&model.gemm, summary, sizeof(summary));
            printf("%s\n", summary);
        }
    }
    if (timed_steps > 0) {
        qsort(step_seconds, timed_steps, sizeof(double), [](const void* a, const void* b) {
            double x = *(const double*)a, y = *(const double*)b;
            return (x > y) - (x < y);
        });
        double median = step_seconds[timed_steps / 2];
        double mfu = peak > 0 ? flops_per_step / median / (peak * 1e12 * nranks) * 100.0 : -1.0;
        printf("median step %.2f ms, %.0f tok/s, MFU %.1f%% over %d steps after 3 warm-up steps\n", median * 1e3,
               total_batch_size / median, mfu, timed_steps);
    }
    free(step_seconds);
    prof_print(profiler);
    prof_free(profiler);
    free(profiler);
    size_t peak_used = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    peak_used = total_b - free_b;
    printf("device memory in use at the end: %.0f MiB\n", peak_used / mib);

    logger_free(&logger);
    train_setup_free(&setup);
    gpt2_free(&model);
    multi_gpu_free(&mg);
    rendezvous_finish(&pg);
    return 0;
}
