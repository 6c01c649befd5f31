/*
train_gpt2.cu - GPT-2 training on an NVIDIA GPU: command line -> config -> model -> training loop.

The model (llmc/model/model.cuh) computes what the CPU reference train_gpt2.c specifies; the numeric mode
(storage precision, later SF16 boundaries and FP8/TCFP-12 GEMMs) is fixed at compile time by
llmc/core/precision.h and printed at start-up and into every log and checkpoint.

Checkpoints (-n N, and at the end with -o): model_<step>.bin (the parameters exactly as trained:
bf16 version 5 in the BF16 build, fp32 version 3 otherwise) and state_<step>.bin (AdamW moments,
master weights, data-loader position, loss scale). -y 1 resumes from the newest pair in -o and
continues bit-exactly: the losses printed are those an uninterrupted run prints.

Several GPUs (llmc/dist/multi_gpu.cuh): `mpirun -np N ./train_gpt2cu ...`, or N processes started any
other way with -pi tcp|fs (llmc/dist/rendezvous.h). -b is the micro-batch of one GPU; -d counts the
tokens of one optimizer step over all GPUs. Rank 0 prints, logs, samples and writes model files;
every rank writes its own state_<step>_rank<r>.bin (its data-loader position, and with -z 1 its
shard of the optimizer state); resuming needs the same number of ranks and is bit-exact.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmc/core/utils.h"
#include "llmc/core/cli.h"
#include "llmc/train/train_config.h"
#include "llmc/train/train_setup.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/gpt2_init.h"
#include "llmc/model/checkpoint.h"
#include "llmc/train/train_state.h"
#include "llmc/data/dataloader.h"
#include "llmc/data/tokenizer.h"
#include "llmc/train/schedulers.h"
#include "llmc/obs/logger.h"
#include "llmc/core/rand.h"
#include "llmc/train/mfu.h"
#include "llmc/train/recompute_plan.h"
#include "llmc/dist/rendezvous.h"
#include "llmc/train/multi_gpu_options.h"
#include "llmc/model/model.cuh"
#include "llmc/modes/mode.cuh"
#include "llmc/train/train_checkpoint.cuh"
#include "llmc/train/lowp_diagnose.cuh"
#include "llmc/data/hellaswag.h"
#include "llmc/train/outlier_detector.h"
#include "llmc/train/checkpoint_retention.h"
#include "llmc/obs/gpu_monitor.cuh"

// The numeric configuration of this build and run, one line (goes into logs and state files).
static void numeric_config_string(char* out, size_t n, const GPT2* m, int tf32) {
    char dp[96] = "";
    if (multi_gpu_active(m->mg))
        snprintf(dp, sizeof(dp), " ranks=%d zero=%d grad_wire=%s", m->mg->pg.nranks, m->mg->zero_stage,
                 m->mg->wire_fp32 ? "fp32" : PRECISION_MODE_NAME);
    snprintf(out, n, "precision=%s boundaries=%s gemm=%s attention=%s master_weights=%d recompute=%d gelu_fusion=%d%s%s",
             PRECISION_MODE_NAME, BOUNDARY_MODE_NAME, gemm_backend_name(&m->gemm), attention_backend_tag(),
             m->master_weights != NULL, m->recompute,
             m->gelu_fusion, tf32 ? " tf32=1" : "", dp);
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

// Options of the CUDA trainer beyond the shared TrainConfig and the subsystems' own tables.
struct GpuTrainOptions {
    int resume, recompute, master_weights, gelu_fusion, tf32, profile, diagnose, tensor_stats, log_gpu, gemm_tune;
};

#define GPU_TRAIN_NUM_FLAGS 10

static int gpu_train_flags(GpuTrainOptions* o, CliFlag* flags) {
    *o = GpuTrainOptions{0, RECOMPUTE_AUTO, 1, 1, 0, 0, 0, 0, 0, 1};
    const CliFlag f[GPU_TRAIN_NUM_FLAGS] = {
        {"-y", CLI_INT, &o->resume, "1 = resume from the newest checkpoint in -o", 0, 1, NULL},
        {"-r", CLI_INT, &o->recompute, "recompute in backward: 0 none, 1 GELU, 2 GELU + LayerNorm, -1 = the least that fits in GPU memory", 0, 2, "-1"},
        {"-w", CLI_INT, &o->master_weights, "1 = keep fp32 master weights for AdamW", 0, 1, NULL},
        {"-ge", CLI_INT, &o->gelu_fusion, "1 = fuse GELU into the fc GEMM epilogue", 0, 1, NULL},
        {"-gt", CLI_INT, &o->gemm_tune, "1 = each GEMM's first call times cuBLASLt's candidate algorithms and keeps the fastest whose output bits equal its first answer's; 0 = its first answer", 0, 1, NULL},
        {"-f", CLI_INT, &o->tf32, "1 = allow TF32 tensor cores for FP32 GEMMs (FP32 build)", 0, 1, NULL},
        {"-prof", CLI_INT, &o->profile, "1 = print the step time by kernel family at the end", 0, 1, NULL},
        {"--diagnose", CLI_INT, &o->diagnose, "1 = per linear layer the SNR (dB) of FP8 / TCFP-12 weights and outputs vs BF16 on the first train batch, then exit", 0, 1, NULL},
        {"--tensor-stats", CLI_INT, &o->tensor_stats, "every N steps (and step 1) per-layer stats of activations, weights, grads -> <-o>/tensor_stats.csv (0 = off)", 0, INT_MAX, NULL},
        {"-lg", CLI_INT, &o->log_gpu, "every N steps print and log GPU memory, SM / memory clocks and temperature (0 or -1 = off)", 0, INT_MAX, "-1"},
    };
    for (int i = 0; i < GPU_TRAIN_NUM_FLAGS; i++) flags[i] = f[i];
    return GPU_TRAIN_NUM_FLAGS;
}

// Dies naming the flag on a value this build cannot honour or a bad combination (no CUDA call; the
// ranges of single flags are in the flag table, llmc/core/cli.h).
static void gpu_train_validate(const GpuTrainOptions* o, const TrainConfig* tc) {
    if (!kStorageBF16 && o->diagnose)
        die("--diagnose 1: needs BF16 storage (the default build, FP8=1, TCFP12=1 or SF16); this build is %s", PRECISION_MODE_NAME);
    if (!kStorageFP32 && o->tf32) die("-f 1: TF32 applies to the FP32 build only (this build is %s)", PRECISION_MODE_NAME);
    if (o->resume && !tc->out_dir) die("-y 1: needs -o, the folder holding the checkpoints to resume from");
    if (o->tensor_stats > 0 && !tc->out_dir) die("--tensor-stats %d: needs -o, the folder tensor_stats.csv is written to", o->tensor_stats);
}

// Everything one training run holds, from the command line to the last step.
struct Trainer {
    TrainConfig tc;
    GpuTrainOptions opt;
    MultiGpuOptions mgo;
    Mode mode;            // the build's mode module: its flags, and its hooks (llmc/modes/mode_defaults.cuh)
    ProcessGroup pg;
    MultiGpu mg;
    GPT2 model;
    TrainSetup setup;
    KernelProfiler* profiler;
    EvalSet eval;         // -h 1: the HellaSwag examples (read and checked by trainer_parse)
    OutlierState outlier; // -sl / -sg windows and skipped updates (saved in the state files)
    GpuMonitor gpumon;    // -lg
    TensorStats tstats;  // --tensor-stats (rank 0 only)
    Logger logger;
    cudaDeviceProp prop;
    char numeric[512];   // the numeric configuration line (logs; state files keep its first 255 characters)
    int start_step;      // 0, or the step resumed from
    float peak_tflops;   // of this GPU in this precision (MFU), 0 if unknown
};

// Parse and validate the command line into t (no CUDA call: bad flags fail on any machine).
static void trainer_parse(Trainer* t, int argc, char** argv) {
    TrainConfig& tc = t->tc;
    tc.train_pattern = "data/tinyshakespeare/tiny_shakespeare_train.bin";
    tc.val_pattern = "data/tinyshakespeare/tiny_shakespeare_val.bin";
    tc.tokenizer_path = "data/gpt2_tokenizer.bin";
    tc.model_spec = "d12";
    tc.lr_schedule = "cosine";
    tc.B = 4; tc.T = 1024; tc.total_batch_size = -1; tc.warmup = 0; tc.max_steps = -1;
    tc.val_every = 20; tc.val_max_batches = 20; tc.sample_every = 20; tc.gen_tokens = 64;
    tc.seed = 1337; tc.lr = 3e-4f; tc.final_lr_frac = 1.0f; tc.weight_decay = 0.0f; tc.grad_clip = 1.0f;
    CliFlag flags[TRAIN_CONFIG_NUM_FLAGS + GPU_TRAIN_NUM_FLAGS + MULTI_GPU_NUM_FLAGS + Mode::kMaxFlags];
    int n = train_config_flags(&tc, flags);
    n += gpu_train_flags(&t->opt, flags + n);
    n += multi_gpu_flags(&t->mgo, flags + n);
    n += t->mode.flags(flags + n);
    cli_parse(argc, argv, flags, n, TRAIN_DOC);
    train_config_validate(&tc);
    gpu_train_validate(&t->opt, &tc);
    multi_gpu_options_validate(&t->mgo);
    t->mode.validate();
    GPT2Config spec;
    train_config_check_files(&tc, &spec, &t->eval);  // every file the flags name, before data and GPU
    t->mode.check_model(spec, tc.B, tc.T);
}

// The NCCL watchdog's hook (llmc/dist/multi_gpu.cuh; it may run on the watchdog thread): the newest
// complete checkpoint in -o that -y 1 would resume from, as its model file, or "none".
static void trainer_last_checkpoint(void* ctx, char* out, size_t n) {
    const Trainer* t = (const Trainer*)ctx;
    const int step = t->tc.out_dir ? ckpt_find_latest(t->tc.out_dir, t->pg.nranks, 1) : -1;
    if (step < 0) snprintf(out, n, "none");
    else snprintf(out, n, "%s/model_%08d.bin", t->tc.out_dir, step);
}

// Every rank waits until all have arrived (a no-op on one GPU; a rank that never arrives ends the
// run through the NCCL watchdog, -pw).
static void trainer_barrier(Trainer* t) {
    float x = 0.0f;
    multi_gpu_allreduce_host(&t->mg, &x, 1, 0, t->model.stream);
}

// Print the start-up table, the numeric configuration and the memory plan.
static void trainer_print_config(Trainer* t) {
    const TrainConfig& tc = t->tc;
    const GPT2& m = t->model;
    const GPT2Config& config = m.config;
    const size_t n = m.num_parameters;
    const double mib = 1024.0 * 1024.0;
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    print_config_rule();
    print_config_row("device", "%s", t->prop.name);
    print_config_row("precision, GEMM", "%s, %s", PRECISION_MODE_NAME, gemm_backend_name(&m.gemm));
    print_config_row("GEMM algorithms", "%s", m.gemm.autotune ? "measured at first call, bit-identical to the heuristic's (-gt 1)"
                                                              : "cuBLASLt heuristic's first answer (-gt 0)");
    print_config_row("attention", "%s", attention_backend_name());
    print_config_row("storage boundaries", "%s", BOUNDARY_MODE_NAME);
    print_config_row("master weights, recompute", "%d, %d", m.master_weights != NULL, t->opt.recompute);
    print_config_row("model", "%s", tc.model_spec);
    print_config_row("L, C, NH, maxT", "%d, %d, %d, %d", config.num_layers, config.channels, config.num_heads, config.max_seq_len);
    print_config_row("V, Vp", "%d, %d", config.vocab_size, config.padded_vocab_size);
    print_config_row("parameters", "%zu", n);
    print_config_row("B, T, grad accum", "%d, %d, %d", tc.B, tc.T, tc.grad_accum_steps);
    print_config_row("GPUs, ZeRO, grad wire", "%d (%s), %d, %s", t->pg.nranks, rendezvous_method_name(t->pg.method), t->mgo.zero_stage,
                     t->mgo.wire_fp32 || sizeof(floatX) == 4 ? "fp32" : PRECISION_MODE_NAME);
    print_config_row("tokens per step", "%d", tc.total_batch_size);
    print_config_row("steps, lr, schedule", "%d, %g, %s", tc.max_steps, tc.lr, tc.lr_schedule);
    print_config_row("warmup, final lr frac", "%d, %g", tc.warmup, tc.final_lr_frac);
    print_config_row("weight decay, grad clip", "%g, %g", tc.weight_decay, tc.grad_clip);
    print_config_row("train / val tokens", "%zu / %zu", t->setup.train.num_tokens, t->setup.have_val ? t->setup.val.num_tokens : 0);
    print_config_rule();
    printf("numeric config: %s\n", t->numeric);
    t->mode.print_config(&m);
    char scales[96] = "";  // what the TensorCast attention casts keep (group scales, P^ codes) and the backward's dS workspace (gpt2_allocate_attention_buffers), if any
    if (m.att_scales) snprintf(scales, sizeof(scales), ", attention kept %.0f", (double)m.att_scales_layer * config.num_layers / mib);
    if (m.att_ds) snprintf(scales + strlen(scales), sizeof(scales) - strlen(scales), ", attention dS %.0f", (double)m.att_ds_bytes / mib);
    printf("memory plan (MiB): params %.0f, grads %.0f, AdamW m+v %.0f, master %.0f, activations %.0f%s; device %.0f free of %.0f\n",
           n * sizeof(floatX) / mib, n * sizeof(floatX) / mib, 2.0 * n * sizeof(float) / mib,
           m.master_weights ? n * sizeof(float) / mib : 0.0, m.acts_bytes / mib, scales, free_b / mib, total_b / mib);
}

// -y 1: the step of the newest checkpoint every rank has (host_params replaced by its model file),
// or 0 to start from scratch.
static int trainer_find_resume_step(Trainer* t, const GPT2Config* config, float** host_params) {
    const char* out_dir = t->tc.out_dir;
    ensure_output_dir(out_dir);
    const int latest = find_latest_checkpoint(out_dir, t->pg.rank, t->pg.nranks);
    float agree[2] = {(float)latest, (float)-latest};  // every rank must resume the same step
    multi_gpu_allreduce_host(&t->mg, agree, 2, 1, t->model.stream);
    if (agree[0] != -agree[1]) die("-y 1: the ranks' newest checkpoints in %s differ (steps %d .. %d)", out_dir, (int)-agree[1], (int)agree[0]);
    if (latest < 0) {
        printf("-y 1: no checkpoint in %s, starting from scratch\n", out_dir);
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/model_%08d.bin", out_dir, latest);
    GPT2Config ck;
    free(*host_params);
    *host_params = checkpoint_read_model(path, &ck);
    if (memcmp(&ck, config, sizeof(ck)) != 0) die("%s: model shape differs from -e %s", path, t->tc.model_spec);
    return latest;
}

// --tensor-stats N: rank 0 records into <-o>/tensor_stats.csv (appended when resuming). Several GPUs:
// rank 0's activations (its micro-batch) and weights; its gradients are the all-reduced ones AdamW
// reads with -z 0. -z 1 leaves rank 0 only its shard of each reduced gradient: rejected.
static void trainer_tensor_stats_setup(Trainer* t) {
    if (t->opt.tensor_stats <= 0) return;
    if (t->pg.nranks > 1 && t->mgo.zero_stage == 1)
        die("--tensor-stats: not with -z 1 on %d GPUs (each rank holds only its shard of the reduced gradients); use -z 0", t->pg.nranks);
    if (t->pg.rank != 0) return;
    ensure_output_dir(t->tc.out_dir);
    tensor_stats_init(&t->tstats, t->opt.tensor_stats, t->tc.out_dir, t->start_step > 0);
    gpt2_attach_tensor_stats(&t->model, &t->tstats);
    printf("tensor stats: %d tensors on steps 1, %d, %d, ... -> %s\n", t->tstats.num_segments, t->opt.tensor_stats,
           2 * t->opt.tensor_stats, t->tstats.csv_path);
}

// -r -1: the recompute level from the free device memory (llmc/train/recompute_plan.h), the same on every
// rank (the highest any rank needs); printed with the numbers it came from. -r 0..2 is kept as given.
static void trainer_choose_recompute(Trainer* t, const GPT2Config* config) {
    if (t->opt.recompute != RECOMPUTE_AUTO) return;
    size_t acts[RECOMPUTE_LEVELS], free_b, total_b;
    for (int r = 0; r < RECOMPUTE_LEVELS; r++) acts[r] = gpt2_activation_bytes(config, t->tc.B, t->tc.T, r);
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const bool free_recompute = gemm_keeps_inputs(&t->model.gemm);  // FP8 / TCFP-12 never recompute (recompute_plan.h)
    float level = (float)recompute_auto_level(acts, free_b, total_b, free_recompute ? RECOMPUTE_LEVELS - 1 : 0);
    multi_gpu_allreduce_host(&t->mg, &level, 1, 1, t->model.stream);
    t->opt.recompute = (int)level;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    printf("recompute (-r -1): level %d%s: activations %.1f / %.1f / %.1f GiB at levels 0 / 1 / 2, %.1f GiB free of %.1f, "
           "%.1f GiB kept in reserve\n", t->opt.recompute,
           free_recompute ? " (the GEMM backend keeps its own inputs: nothing is recomputed)" : "", acts[0] / gib, acts[1] / gib,
           acts[2] / gib, free_b / gib, total_b / gib, recompute_reserve_bytes(total_b) / gib);
}

// Processes and GPU, model, data, resume; prints the configuration. After it the model is ready to train.
static void trainer_setup(Trainer* t) {
    TrainConfig& tc = t->tc;
    multi_gpu_rendezvous(&t->pg, &t->mgo);  // before any other CUDA call
    if (t->pg.rank != 0 && !freopen("/dev/null", "w", stdout)) die("rank %d: cannot silence stdout", t->pg.rank);  // rank 0 speaks
    train_config_set_ranks(&tc, t->pg.nranks);

    GPT2Config config;
    float* host_params = NULL;
    if (train_config_spec_is_checkpoint(tc.model_spec)) {
        host_params = checkpoint_read_model(tc.model_spec, &config);
    } else {
        gpt2_config_from_descriptor(&config, tc.model_spec);
        host_params = (float*)malloc_check(gpt2_num_parameters(&config) * sizeof(float));
        gpt2_init_params(host_params, &config, (uint64_t)tc.seed);
    }
    if (tc.T > config.max_seq_len) die("-t: T=%d exceeds the model's maxT=%d", tc.T, config.max_seq_len);
    const MultiGpuWatch watch = {t->mgo.watchdog_s, trainer_last_checkpoint, t};  // -pw: the NCCL watchdog
    multi_gpu_init(&t->mg, &t->pg, &config, t->mgo.zero_stage, t->mgo.wire_fp32, &watch);
    int device = 0;
    cudaCheck(cudaGetDevice(&device));
    cudaCheck(cudaGetDeviceProperties(&t->prop, device));
    GPT2* m = &t->model;
    gpt2_allocate_parameters(m, &config, t->opt.master_weights);
    gpt2_attach_multi_gpu(m, &t->mg);
    t->mode.attach_parameters(m);
    m->seed = (unsigned long long)tc.seed * 0x9E3779B97F4A7C15ull + 1;
    gemm_set_tf32(&m->gemm, t->opt.tf32);
    m->gemm.autotune = t->opt.gemm_tune;
    trainer_choose_recompute(t, &config);
    gpt2_allocate_activations(m, tc.B, tc.T, t->opt.recompute, t->opt.gelu_fusion);
    t->mode.attach_activations(m);
    t->profiler = (KernelProfiler*)malloc_check(sizeof(KernelProfiler));
    prof_init(t->profiler, t->opt.profile);
    m->prof = t->profiler;

    train_setup_init(&t->setup, &tc, config.vocab_size, t->pg.rank, t->pg.nranks);
    if (tc.out_dir) {  // finish a checkpoint deletion (-nk) a crash interrupted, before anyone looks for a checkpoint
        if (t->pg.rank == 0) {
            ensure_output_dir(tc.out_dir);
            ckpt_recover(tc.out_dir);
        }
        trainer_barrier(t);
    }
    outlier_state_init(&t->outlier);
    gpu_monitor_init(&t->gpumon, t->opt.log_gpu);
    t->start_step = t->opt.resume ? trainer_find_resume_step(t, &config, &host_params) : 0;
    gpt2_set_parameters(m, host_params);
    free(host_params);
    if (t->start_step > 0) load_state(tc.out_dir, t->start_step, m, t->mode, &t->setup.train, &t->outlier);

    trainer_tensor_stats_setup(t);
    numeric_config_string(t->numeric, sizeof(t->numeric), m, t->opt.tf32);
    const size_t len = strlen(t->numeric);
    t->mode.describe(m, t->numeric + len, sizeof(t->numeric) - len);
    t->peak_tflops = device_peak_tflops(t->prop.name, t->opt.tf32 ? "TF32" : PRECISION_MODE_NAME);
    trainer_print_config(t);
}

// Mean validation loss over -m batches of every rank; printed and logged.
static void trainer_validate(Trainer* t, int step) {
    DataLoader* val = &t->setup.val;
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < t->tc.val_max_batches; i++) {
        dataloader_next_batch(val);
        sum += gpt2_evaluate(&t->model, val->inputs, val->targets, t->tc.B, t->tc.T);
    }
    float val_loss = (float)(sum / t->tc.val_max_batches);
    multi_gpu_allreduce_host(&t->mg, &val_loss, 1, 0, t->model.stream);  // mean over the ranks' batches
    val_loss /= t->pg.nranks;
    printf("step %5d | val loss %.6f\n", step, val_loss);
    logger_log_val(&t->logger, step, val_loss);
}

// The forward of the HellaSwag evaluation (llmc/data/hellaswag.h): per-position losses of a B x T batch.
static const float* trainer_eval_forward(void* ctx, const int* inputs, const int* targets) {
    Trainer* t = (Trainer*)ctx;
    gpt2_evaluate(&t->model, inputs, targets, t->tc.B, t->tc.T);  // leaves the losses in losses_host
    return t->model.losses_host;
}

// -h 1: HellaSwag accuracy over all examples (each rank its share, llm.c's split); printed and logged.
static void trainer_hellaswag(Trainer* t, int step) {
    float correct = (float)evalset_correct(&t->eval, t->tc.B, t->tc.T, t->pg.rank, t->pg.nranks, trainer_eval_forward, t);
    multi_gpu_allreduce_host(&t->mg, &correct, 1, 0, t->model.stream);  // exact: counts < 2^24
    const float acc = correct / t->eval.num_examples;
    printf("step %5d | hellaswag acc %d/%d = %.4f\n", step, (int)correct, t->eval.num_examples, acc);
    logger_log_eval(&t->logger, step, acc);
}

// One optimizer step (step is 0-based; the printed and logged step is step + 1). Returns its seconds.
static double trainer_step(Trainer* t, int step) {
    const TrainConfig& tc = t->tc;
    GPT2* m = &t->model;
    const int nranks = t->pg.nranks;
    double t0 = wall_seconds();
    t->profiler->n = 0;  // drop what evaluation and sampling recorded
    if (step == t->start_step + 3) prof_reset(t->profiler);  // the first 3 steps are warm-up
    gpt2_zero_grad(m);
    tensor_stats_begin_step(m->tstats, step + 1);  // --tensor-stats: whether this step records
    t->mode.step_begin(m, step, t->start_step, true);
    double loss_sum = 0.0;
    for (int micro = 0; micro < tc.grad_accum_steps; micro++) {
        if (!tc.overfit_single_batch || (step == t->start_step && micro == 0)) dataloader_next_batch(&t->setup.train);
        m->reduce_grads = micro == tc.grad_accum_steps - 1;  // reduce across ranks during the last backward
        tensor_stats_set_acts(m->tstats, micro == 0);      // activations of the first micro-batch
        loss_sum += gpt2_forward_backward(m, t->setup.train.inputs, t->setup.train.targets, tc.B, tc.T,
                                          1.0f / ((float)tc.grad_accum_steps * nranks));
    }
    gpt2_grads_ready(m);  // --tensor-stats: gradients and weights, before the update
    float loss = (float)(loss_sum / tc.grad_accum_steps);
    multi_gpu_allreduce_host(&t->mg, &loss, 1, 0, m->stream);  // mean over the ranks
    loss /= nranks;
    if (!isfinite(loss)) {
        tensor_stats_end_step(m->tstats);  // a recording step writes the statistics of the diverged step first
        die("step %d: train loss is %f; stopping before the update (checkpoints written so far are intact)", step + 1, loss);
    }
    float step_lr = get_learning_rate(&t->setup.sched, step);
    const float norm = gpt2_grad_norm(m);
    // -sl / -sg: a loss or gradient-norm spike skips the update (no parameter, moment, AdamW step count
    // or loss-scale change; the batch is consumed). Loss and norm are the same on every rank, and so is
    // the decision: the ranks agree on the largest code anyway.
    double zloss, zgrad;
    int skip = outlier_step(&t->outlier, loss, norm, tc.skip_loss_z, tc.skip_grad_z, &zloss, &zgrad);
    if ((tc.skip_loss_z > 0.0f || tc.skip_grad_z > 0.0f) && multi_gpu_active(&t->mg)) {
        float code = (float)skip;
        multi_gpu_allreduce_host(&t->mg, &code, 1, 1, m->stream);  // max
        skip = (int)code;
    }
    UpdateResult u = {norm, 0};
    char note[64] = "", log_note[64] = "";
    if (skip) {
        t->outlier.skipped_updates++;
        snprintf(note, sizeof(note), " | skipped (%s z=%.2f)", skip == 1 ? "loss" : "grad", skip == 1 ? zloss : zgrad);
        snprintf(log_note, sizeof(log_note), "skipped:%s_z=%.2f", skip == 1 ? "loss" : "grad", skip == 1 ? zloss : zgrad);
    } else {
        u = gpt2_apply_update(m, norm, step_lr, 0.9f, 0.95f, 1e-8f, tc.weight_decay, tc.grad_clip,
                              step + 1 - t->outlier.skipped_updates);
        if (u.skipped) snprintf(note, sizeof(note), " | skipped (overflow)");
    }
    cudaCheck(cudaStreamSynchronize(m->stream));
    double dt = wall_seconds() - t0;
    prof_collect(t->profiler, m->stream);
    const double flops = gpt2_flops_per_token(m->num_parameters, m->config.num_layers, m->config.channels, tc.T) * tc.total_batch_size;
    const double mfu = t->peak_tflops > 0 ? flops / dt / (t->peak_tflops * 1e12 * nranks) * 100.0 : -1.0;
    char mfu_str[32];
    if (mfu >= 0) snprintf(mfu_str, sizeof(mfu_str), "%.1f%%", mfu);
    else snprintf(mfu_str, sizeof(mfu_str), "n/a");
    printf("step %5d/%d | loss %.6f | norm %.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU %s%s\n", step + 1, tc.max_steps,
           loss, u.grad_norm, step_lr, dt * 1e3, tc.total_batch_size / dt, mfu_str, note);
    if (u.skipped) printf("  FP16 loss scale lowered to %g\n", m->loss_scale);  // (only FP16's loss scaling skips updates)
    logger_log_train_note(&t->logger, step + 1, loss, step_lr, u.grad_norm, skip ? log_note : NULL);
    t->mode.step_end(m, step, t->start_step, &t->logger, &t->setup.train, t->pg.rank);
    if (t->pg.rank == 0) gpu_monitor_step(&t->gpumon, step + 1, &t->logger);  // -lg
    tensor_stats_end_step(m->tstats);  // CSV rows and the summary line on recording steps
    if (step == t->start_step) {
        char summary[256];
        gemm_compute_summary(&m->gemm, summary, sizeof(summary));
        printf("%s\n", summary);
    }
    return dt;
}

// The median of n step times (sorted in place) with its tok/s and MFU.
static void trainer_print_median(const Trainer* t, double* seconds, int n) {
    if (n <= 0) return;
    double sum = 0.0;  // the mean too: it includes the occasional slower step (statistics, evaluation-free)
    for (int i = 0; i < n; i++) sum += seconds[i];
    qsort(seconds, n, sizeof(double), [](const void* a, const void* b) {
        double x = *(const double*)a, y = *(const double*)b;
        return (x > y) - (x < y);
    });
    const double median = seconds[n / 2];
    const GPT2& m = t->model;
    const double flops = gpt2_flops_per_token(m.num_parameters, m.config.num_layers, m.config.channels, t->tc.T) * t->tc.total_batch_size;
    const double mfu = t->peak_tflops > 0 ? flops / median / (t->peak_tflops * 1e12 * t->pg.nranks) * 100.0 : -1.0;
    printf("median step %.2f ms, %.0f tok/s, MFU %.1f%% over %d steps after 3 warm-up steps\n", median * 1e3,
           t->tc.total_batch_size / median, mfu, n);
    printf("mean step %.2f ms over the same steps\n", sum / n * 1e3);
}

// Validation, samples and checkpoints at their intervals around the optimizer steps; the median step.
static void trainer_loop(Trainer* t) {
    const TrainConfig& tc = t->tc;
    GPT2* m = &t->model;
    if (tc.out_dir) ensure_output_dir(tc.out_dir);
    logger_init(&t->logger, t->pg.rank == 0 ? tc.out_dir : NULL, t->start_step > 0);
    char line[1024];
    snprintf(line, sizeof(line), "train_gpt2cu %s model=%s L=%d C=%d NH=%d B=%d T=%d accum=%d gpus=%d lr=%g device=%s",
             t->numeric, tc.model_spec, m->config.num_layers, m->config.channels, m->config.num_heads, tc.B, tc.T,
             tc.grad_accum_steps, t->pg.nranks, tc.lr, t->prop.name);
    logger_comment(&t->logger, line);

    double* step_seconds = (double*)calloc_check((size_t)tc.max_steps + 1, sizeof(double));
    int timed_steps = 0;
    for (int step = t->start_step; step <= tc.max_steps; step++) {
        const int last = step == tc.max_steps;
        t->mode.step_begin(m, step, t->start_step, false);  // (TensorCast: the seeds of this step's casts, evaluation too)
        if (t->setup.have_val && (step % tc.val_every == 0 || last)) trainer_validate(t, step);
        if (tc.hellaswag && ((tc.val_every > 0 && step > 0 && step % tc.val_every == 0) || last)) trainer_hellaswag(t, step);
        if (t->pg.rank == 0 && tc.sample_every > 0 && step > 0 && (step % tc.sample_every == 0 || last))
            sample_and_print(m, &t->setup.tokenizer, t->setup.have_tokenizer, tc.gen_tokens, step, tc.seed);
        if (tc.out_dir && step > t->start_step && ((tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0) || (last && tc.checkpoint_every >= 0))) {
            save_checkpoint(tc.out_dir, step, m, t->mode, &t->setup.train, t->numeric, &t->outlier);
            if (tc.checkpoints_keep > 0) {  // -nk / -nm, once every rank has written this checkpoint
                trainer_barrier(t);
                ckpt_apply_retention(tc.out_dir, step, tc.checkpoints_keep, tc.major_every, t->pg.rank, t->pg.nranks, 1);
            }
        }
        if (last) break;
        const double dt = trainer_step(t, step);
        if (step > t->start_step + 2) step_seconds[timed_steps++] = dt;  // the first 3 steps are warm-up
    }
    trainer_print_median(t, step_seconds, timed_steps);
    gemm_lowp_report(&m->gemm, stdout);
    gemm_tune_report(&m->gemm, stdout);
    free(step_seconds);
    prof_print(t->profiler);
    size_t free_b, total_b;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    printf("device memory in use at the end: %.0f MiB\n", (total_b - free_b) / (1024.0 * 1024.0));
    logger_free(&t->logger);
}

static void trainer_teardown(Trainer* t) {
    if (t->tc.hellaswag) evalset_free(&t->eval);
    gpu_monitor_free(&t->gpumon);
    tensor_stats_free(&t->tstats);
    prof_free(t->profiler);
    free(t->profiler);
    train_setup_free(&t->setup);
    gpt2_free(&t->model);
    multi_gpu_free(&t->mg);
    rendezvous_finish(&t->pg);
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    static Trainer t;  // zero-initialized
    trainer_parse(&t, argc, argv);
    trainer_setup(&t);
    if (t.opt.diagnose) lowp_diagnose_run(&t.model, &t.setup.train, t.tc.out_dir, t.pg.rank == 0);  // llmc/train/lowp_diagnose.cuh: a table, no training
    else trainer_loop(&t);
    trainer_teardown(&t);
    return 0;
}
