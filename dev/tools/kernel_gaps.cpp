// kernel_gaps.cpp - how long the GPU sits idle between activities inside a training step.
//
// A shared library that the CUDA driver loads into any CUDA program: at cuInit the driver dlopens
// the file named by CUDA_INJECTION64_PATH and calls its InitializeInjection(). From there CUPTI's
// activity API records every kernel (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which keeps kernels
// concurrent), memcpy and memset with device timestamps; at exit the device timeline is cut into
// steps and the idle time between activities is reported. The question it answers: is launch
// overhead worth a CUDA graph (the project's rule: capture the step if the gaps are over 1% of it)?
//
// Why the injection hook and not LD_PRELOAD with a constructor: the driver calls the hook at the
// first cuInit of the process, before any kernel, whatever the program links (the trainer links
// cudart statically), and nothing has to be interposed.
//
//   make kernel-gaps
//   L=$PWD/build/tools/libkernel_gaps.so
//   CUDA_INJECTION64_PATH=$L KERNEL_GAPS_OUT=build/kernel_gaps.json build/bf16/train_gpt2cu -e d12 -b 16 -t 1024 -x 30 -v 0 -s 0
// (set it for that one command only: every CUDA process started with it loads the library)
//
// -v 0 -s 0: validation and sampling run forward passes too (each one more encoder kernel, i.e. a
// bogus "step"), so turn them off. With gradient accumulation (-d > B*T) a "step" is one micro-batch.
// The table goes to stderr at exit, first line `kernel_gaps: ...`; dev/tools/check_kernel_gaps.sh
// checks the library against a known timeline (dev/tools/gap_probe.cu).
//
// Environment:
//   KERNEL_GAPS_STEP_KERNEL  a step begins at each kernel whose name (mangled or demangled) contains
//                            this string [encoder_forward_kernel: the first kernel of gpt2_forward]
//   KERNEL_GAPS_SKIP         complete steps skipped at the start (warm-up) [3]; the last step found
//                            has no end (no next step kernel) and is never measured
//   KERNEL_GAPS_OUT          also write the results as JSON to this file; %p in it becomes the pid
//                            (one file per rank of a multi-process run)
//   KERNEL_GAPS_TOP          after each device's report, a table of the N kernels (0..10000) with the
//                            most device time in the measured steps [0: no table]. Per kernel name:
//                            ms/step (summed durations / measured steps), launches/step, us/launch
//                            (mean duration), % of the summed time of all kernels; then one line with
//                            all kernels' and all memcpys' + memsets' ms per step. Sums of durations,
//                            not the busy time: concurrent kernels both count. In the JSON: top-level
//                            "kernels" (objects with device, name, ms_per_step, launches_per_step,
//                            us_per_launch, pct, launches), each device's kernel_ms_per_step and
//                            memcpy_memset_ms_per_step (these also without a table)
//
// Definitions (all times from CUPTI's timestamps, ns, printed in us):
//   step k     = [S(k), S(k+1)), S(k) the start of the k-th step kernel on that device. Activities are
//                kernels, memcpys and memsets of any stream; host work between steps counts.
//   span       = S(k+1) - S(k)
//   busy       = length of the union of the activity intervals within the step (overlaps merged)
//   idle       = span - busy = the summed gaps; a gap is a maximal interval in which no activity runs
//   idle %     = sum of idle / sum of span over the measured steps
//   the activity counts per step and the kernel table count an activity in the step it starts in,
//   with its whole duration
// Tracing costs some host time per launch, so gaps are, if anything, overstated: compare the
// trainer's `median step` with and without the library.

#include <cupti.h>
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;  // one activity buffer: large, so few buffer hand-overs
constexpr size_t kBufferAlign = 8;         // CUPTI wants 8-byte aligned buffers (ACTIVITY_RECORD_ALIGNMENT)
constexpr size_t kPrintName = 60;          // printed names are cut to this many characters
constexpr size_t kTableName = 90;          // ... in the kernel table, after dropping template arguments
constexpr int kMaxTop = 10000;             // KERNEL_GAPS_TOP's limit (a trainer has some tens of kernels)
constexpr int kTopGaps = 10;               // largest gaps listed
constexpr const char* kDefaultStepKernel = "encoder_forward_kernel";
constexpr int kDefaultSkip = 3;

enum ActKind : uint8_t { ACT_KERNEL, ACT_MEMCPY, ACT_MEMSET };

// One device activity. start / end: CUPTI timestamps in ns; name: index into State::names.
struct Activity {
    uint64_t start, end;
    uint32_t device, name;
    uint8_t kind;
};

// Everything the CUPTI buffer callbacks collect; guarded by mu (CUPTI delivers buffers from its
// own thread as well as from the flush at exit).
struct State {
    std::mutex mu;
    std::vector<Activity> acts;
    std::vector<std::string> names;                        // as CUPTI gave them (kernels: mangled)
    std::unordered_map<const char*, uint32_t> by_pointer;  // CUPTI shares one name string per kernel
    std::unordered_map<std::string, uint32_t> by_name;
    uint64_t no_timestamp = 0;     // records with start 0 or end < start (CUPTI could not time them)
    uint64_t truncated_buffers = 0;  // buffers that ended in an incomplete record (CUPTI_ERROR_INVALID_KIND)
    uint64_t dropped = 0;          // records CUPTI dropped for lack of buffer space
    uint64_t errors = 0;           // failed CUPTI calls seen in callbacks
    bool reported = false;         // after the report, late buffers are only freed
    std::string step_kernel = kDefaultStepKernel;
    int skip = kDefaultSkip;
    int top = 0;  // KERNEL_GAPS_TOP: kernels in the table, 0 = no table
    std::string out_path;
};

// The one State, never destroyed: CUPTI's thread may still hand over a buffer while the process
// runs its exit handlers and static destructors.
State& state() {
    static State* s = new State;
    return *s;
}

// CUPTI's name of a result code (never NULL).
const char* cupti_error(CUptiResult r) {
    const char* str = nullptr;
    if (cuptiGetResultString(r, &str) != CUPTI_SUCCESS || !str) return "unknown CUPTI error";
    return str;
}

// Prints `kernel_gaps: error: <call> failed: <reason>` to stderr when r is not CUPTI_SUCCESS.
// Returns whether the call succeeded.
bool cupti_ok(CUptiResult r, const char* call) {
    if (r == CUPTI_SUCCESS) return true;
    fprintf(stderr, "kernel_gaps: error: %s failed: %s (%d)\n", call, cupti_error(r), (int)r);
    return false;
}

// Index of a name in s.names, adding it if new. Caller holds s.mu.
uint32_t intern(State& s, const char* name) {
    if (!name) name = "(unnamed)";
    auto p = s.by_pointer.find(name);
    if (p != s.by_pointer.end()) return p->second;
    auto [it, added] = s.by_name.try_emplace(name, (uint32_t)s.names.size());
    if (added) s.names.emplace_back(name);
    s.by_pointer.emplace(name, it->second);
    return it->second;
}

// A fixed label for a memcpy direction (CUpti_ActivityMemcpyKind).
const char* memcpy_label(unsigned kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy HtoD]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy DtoH]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy DtoD]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "[memcpy HtoH]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy PtoP]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "[memcpy HtoA]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "[memcpy AtoH]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "[memcpy AtoA]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "[memcpy AtoD]";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "[memcpy DtoA]";
        default: return "[memcpy]";
    }
}

// Appends one activity record to s.acts (other kinds are ignored). The struct versions are the
// ones CUDA 13's cupti_activity.h names for each kind. Caller holds s.mu.
void add_record(State& s, const CUpti_Activity* rec) {
    Activity a{};
    const char* name = nullptr;
    switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
            a.start = k->start, a.end = k->end, a.device = k->deviceId, a.kind = ACT_KERNEL;
            name = k->name;
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
            a.start = m->start, a.end = m->end, a.device = m->deviceId, a.kind = ACT_MEMCPY;
            name = memcpy_label(m->copyKind);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(rec);
            a.start = m->start, a.end = m->end, a.device = m->deviceId, a.kind = ACT_MEMCPY;
            name = memcpy_label(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
            a.start = m->start, a.end = m->end, a.device = m->deviceId, a.kind = ACT_MEMSET;
            name = "[memset]";
            break;
        }
        default:
            return;
    }
    if (a.start == 0 || a.end < a.start) {  // CUPTI: 0 = no timing (e.g. its device buffer ran out)
        s.no_timestamp++;
        return;
    }
    a.name = intern(s, name);
    s.acts.push_back(a);
}

// CUPTI asks for an empty buffer: one 8 MiB block, filled with as many records as fit. A NULL
// buffer (out of memory) makes CUPTI drop records, which the report then flags.
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
    if (!*buffer) fprintf(stderr, "kernel_gaps: error: no host memory for a %zu-byte activity buffer\n", kBufferBytes);
}

// CUPTI hands back a buffer with valid_size bytes of records: keep the activities, free it.
void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size, size_t valid_size) {
    (void)size;
    State& s = state();
    size_t dropped = 0;
    CUptiResult dr = cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped);
    std::lock_guard<std::mutex> lock(s.mu);
    if (dr == CUPTI_SUCCESS) s.dropped += dropped;
    else if (!cupti_ok(dr, "cuptiActivityGetNumDroppedRecords")) s.errors++;
    if (buffer && !s.reported) {
        CUpti_Activity* rec = nullptr;
        for (;;) {
            CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_size, &rec);
            if (r == CUPTI_SUCCESS) {
                add_record(s, rec);
                continue;
            }
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the valid records
            if (r == CUPTI_ERROR_INVALID_KIND) {            // an incomplete record ends the buffer
                s.truncated_buffers++;
                break;
            }
            cupti_ok(r, "cuptiActivityGetNextRecord");
            s.errors++;
            break;
        }
    }
    free(buffer);
}

// The demangled form of a name (itself when it is no mangled C++ name), without a leading "void ".
std::string demangle(const std::string& name) {
    int status = 0;
    char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    std::string out = status == 0 && d ? d : name;
    free(d);
    if (out.compare(0, 5, "void ") == 0) out.erase(0, 5);
    return out;
}

// name without its parameter list (the trailing "(...)").
std::string strip_params(std::string name) {
    if (!name.empty() && name.back() == ')') {
        int depth = 0;
        for (size_t i = name.size(); i-- > 0;) {
            depth += name[i] == ')' ? 1 : name[i] == '(' ? -1 : 0;
            if (depth == 0) {
                if (i > 0) name.resize(i);  // "(anonymous namespace)" alone stays
                break;
            }
        }
    }
    return name;
}

// name cut to at most n characters, the cut marked by "...".
std::string cut(const std::string& name, size_t n) {
    return name.size() <= n ? name : name.substr(0, n - 3) + "...";
}

// name for the gap table: without its parameter list, cut to kPrintName characters.
std::string short_name(const std::string& name) { return cut(strip_params(name), kPrintName); }

// The deepest nesting of <> in name; 0 when they do not pair up (an "operator<" or "->" in a
// template argument), so that no template arguments are dropped from such a name.
int template_depth(const std::string& name) {
    int depth = 0, deepest = 0;
    for (char c : name) {
        depth += c == '<' ? 1 : c == '>' ? -1 : 0;
        if (depth < 0) return 0;
        deepest = std::max(deepest, depth);
    }
    return depth == 0 ? deepest : 0;
}

// name with the template argument lists nested deeper than keep replaced by "<...>" (keep 0: all).
std::string drop_templates(const std::string& name, int keep) {
    std::string out;
    int depth = 0;
    for (char c : name) {
        if (c == '<' && ++depth > keep) {
            if (depth == keep + 1) out += "<...";
            continue;
        }
        if (c == '>' && depth-- > keep) {
            if (depth == keep) out += '>';
            continue;
        }
        if (depth <= keep) out += c;
    }
    return out;
}

// name for the kernel table: without its parameter list; a longer name than kTableName loses its
// template arguments, innermost first, until it fits (the outer ones still say what kind of kernel
// it is, e.g. cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>), and is then cut.
std::string table_name(const std::string& name) {
    const std::string full = strip_params(name);
    std::string out = full;
    for (int keep = template_depth(full) - 1; keep >= 0 && out.size() > kTableName; keep--) out = drop_templates(full, keep);
    return cut(out, kTableName);
}

// name as a JSON string literal.
std::string json_str(const std::string& name) {
    std::string out = "\"";
    for (unsigned char c : name) {
        if (c == '"' || c == '\\') out += '\\', out += (char)c;
        else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            out += esc;
        } else out += (char)c;
    }
    return out + "\"";
}

// Median of v (mean of the middle two for an even count); 0 for an empty v. Sorts a copy.
double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Gap histogram buckets, [lo, hi) in ns.
struct Bucket {
    const char* label;
    uint64_t lo, hi;
};
const Bucket kBuckets[] = {{"<1us", 0, 1000},          {"1-2us", 1000, 2000},       {"2-5us", 2000, 5000},
                           {"5-20us", 5000, 20000},    {"20-100us", 20000, 100000}, {">100us", 100000, UINT64_MAX}};
constexpr int kNumBuckets = sizeof(kBuckets) / sizeof(kBuckets[0]);

// An idle interval [start, end) ns between two activities (indices into the device's sorted list).
struct Gap {
    uint64_t start, end;
    size_t before, after;
    int step;
    uint64_t ns() const { return end - start; }
};

// One measured step: times in ns, counts of activities starting in it and of its gaps.
struct Step {
    int index;  // 0 = the first step kernel found
    uint64_t span = 0, idle = 0;
    int activities = 0, kernels = 0, gaps_ge_2us = 0, gaps_ge_20us = 0;
    uint64_t top[3] = {0, 0, 0};  // its three largest gaps
};

// One kernel of the kernel table: its launches within the measured steps, per step = / their number.
struct KernelRow {
    std::string name;  // demangled, with its parameter list
    uint64_t ns = 0, launches = 0;
    double ms_per_step = 0, launches_per_step = 0, us_per_launch = 0, pct = 0;  // pct: of kernel_ns
};

// The results of one device.
struct DeviceReport {
    uint32_t device;
    size_t activities = 0, kernels = 0, step_kernels = 0;
    std::vector<Step> steps;
    std::vector<Gap> top_gaps;  // the largest gaps of the measured steps, largest first
    uint64_t bucket_count[kNumBuckets] = {}, bucket_ns[kNumBuckets] = {};
    std::vector<std::string> names;  // demangled names of top_gaps' neighbours, as pairs (before, after)
    double median_span_us = 0, median_idle_us = 0, idle_pct = 0, median_activities = 0, median_kernels = 0;
    double median_gaps_ge_2us = 0, median_gaps_ge_20us = 0;
    uint64_t kernel_ns = 0, copy_ns = 0;  // summed durations of the measured steps' kernels, memcpys + memsets
    size_t kernel_names = 0;              // distinct kernels launched in the measured steps
    std::vector<KernelRow> top_kernels;   // the top (KERNEL_GAPS_TOP) of them by summed time, largest first
};

// Splits one device's activities (any order; sorted here) into steps at the step kernels and
// measures the measured ones (skip .. found-2). matches[i]: whether name i is a step kernel; top:
// the length of the kernel table.
DeviceReport analyze(uint32_t device, std::vector<Activity> v, const std::vector<bool>& matches,
                     const std::vector<std::string>& pretty, int skip, int top) {
    DeviceReport r;
    r.device = device;
    r.activities = v.size();
    std::sort(v.begin(), v.end(), [](const Activity& a, const Activity& b) {
        return a.start != b.start ? a.start < b.start : a.end < b.end;
    });
    // merge the intervals; every hole between two merged intervals is a gap
    std::vector<Gap> gaps;
    std::vector<size_t> step_first;  // index in v of each step kernel
    uint64_t busy_end = 0;
    size_t busy_last = 0;  // the activity that ends the current merged interval
    for (size_t i = 0; i < v.size(); i++) {
        if (v[i].kind == ACT_KERNEL) {
            r.kernels++;
            if (matches[v[i].name]) step_first.push_back(i);
        }
        if (i > 0 && v[i].start > busy_end) gaps.push_back({busy_end, v[i].start, busy_last, i, -1});
        if (i == 0 || v[i].end > busy_end) busy_end = v[i].end, busy_last = i;
    }
    r.step_kernels = step_first.size();
    // step k = [start of step kernel k, start of step kernel k+1); the last one found has no end
    size_t g = 0;
    std::vector<Gap> measured_gaps;
    // the kernel table's sums, by CUPTI's (full) name: one row per kernel, however many launches; two
    // instantiations whose printed names coincide once cut stay two rows (the JSON has the full names)
    std::vector<uint64_t> name_ns(pretty.size()), name_launches(pretty.size());
    for (size_t k = (size_t)skip; k + 1 < step_first.size(); k++) {
        const uint64_t s0 = v[step_first[k]].start, s1 = v[step_first[k + 1]].start;
        Step st;
        st.index = (int)k;
        st.span = s1 - s0;
        for (size_t i = step_first[k]; i < step_first[k + 1]; i++) {
            const uint64_t ns = v[i].end - v[i].start;
            if (v[i].kind != ACT_KERNEL) {
                r.copy_ns += ns;
                continue;
            }
            st.kernels++;
            r.kernel_ns += ns, name_ns[v[i].name] += ns, name_launches[v[i].name]++;
        }
        st.activities = (int)(step_first[k + 1] - step_first[k]);
        while (g < gaps.size() && gaps[g].start < s0) g++;
        for (; g < gaps.size() && gaps[g].start < s1; g++) {  // a gap never crosses a step start (a kernel starts there)
            Gap gap = gaps[g];
            gap.step = (int)k;
            const uint64_t ns = gap.ns();
            st.idle += ns;
            st.gaps_ge_2us += ns >= 2000;
            st.gaps_ge_20us += ns >= 20000;
            for (int b = 0; b < kNumBuckets; b++)
                if (ns >= kBuckets[b].lo && ns < kBuckets[b].hi) r.bucket_count[b]++, r.bucket_ns[b] += ns;
            for (int t = 0; t < 3; t++)
                if (ns > st.top[t]) {
                    for (int u = 2; u > t; u--) st.top[u] = st.top[u - 1];
                    st.top[t] = ns;
                    break;
                }
            measured_gaps.push_back(gap);
        }
        r.steps.push_back(st);
    }
    if (r.steps.empty()) return r;
    std::vector<double> span, idle, acts, kern, g2, g20;
    double sum_span = 0, sum_idle = 0;
    for (const Step& st : r.steps) {
        span.push_back(st.span * 1e-3), idle.push_back(st.idle * 1e-3);
        acts.push_back(st.activities), kern.push_back(st.kernels);
        g2.push_back(st.gaps_ge_2us), g20.push_back(st.gaps_ge_20us);
        sum_span += st.span, sum_idle += st.idle;
    }
    r.median_span_us = median(span), r.median_idle_us = median(idle);
    r.idle_pct = sum_span > 0 ? 100.0 * sum_idle / sum_span : 0.0;
    r.median_activities = median(acts), r.median_kernels = median(kern);
    r.median_gaps_ge_2us = median(g2), r.median_gaps_ge_20us = median(g20);
    std::vector<KernelRow> rows;
    for (size_t n = 0; n < name_launches.size(); n++)
        if (name_launches[n]) {
            KernelRow row;
            row.name = pretty[n], row.ns = name_ns[n], row.launches = name_launches[n];
            row.ms_per_step = row.ns * 1e-6 / r.steps.size();
            row.launches_per_step = (double)row.launches / r.steps.size();
            row.us_per_launch = row.ns * 1e-3 / row.launches;
            row.pct = r.kernel_ns ? 100.0 * row.ns / r.kernel_ns : 0.0;
            rows.push_back(row);
        }
    r.kernel_names = rows.size();
    const size_t nrows = std::min(rows.size(), (size_t)top);
    std::partial_sort(rows.begin(), rows.begin() + nrows, rows.end(),
                      [](const KernelRow& a, const KernelRow& b) { return a.ns != b.ns ? a.ns > b.ns : a.name < b.name; });
    rows.resize(nrows);
    r.top_kernels = std::move(rows);
    const size_t ntop = std::min(measured_gaps.size(), (size_t)kTopGaps);
    std::partial_sort(measured_gaps.begin(), measured_gaps.begin() + ntop, measured_gaps.end(),
                      [](const Gap& a, const Gap& b) { return a.ns() != b.ns() ? a.ns() > b.ns() : a.start < b.start; });
    r.top_gaps.assign(measured_gaps.begin(), measured_gaps.begin() + ntop);
    for (const Gap& gap : r.top_gaps) {
        r.names.push_back(pretty[v[gap.before].name]);
        r.names.push_back(pretty[v[gap.after].name]);
    }
    return r;
}

// The table for one device, to stderr.
void print_report(const State& s, const DeviceReport& r) {
    const size_t found = r.step_kernels;
    fprintf(stderr, "kernel_gaps: device %u: %zu steps measured (step kernel \"%s\" found %zu times; %d skipped, the last has no end)\n",
            r.device, r.steps.size(), s.step_kernel.c_str(), found, s.skip);
    if (r.steps.empty()) return;
    fprintf(stderr, "  per step, median: span %.1f us, idle %.1f us, %.0f activities (%.0f kernels), %.0f gaps >= 2 us, %.0f gaps >= 20 us\n",
            r.median_span_us, r.median_idle_us, r.median_activities, r.median_kernels, r.median_gaps_ge_2us, r.median_gaps_ge_20us);
    fprintf(stderr, "  idle = %.2f%% of the step (summed over steps %d..%d): %s\n", r.idle_pct, r.steps.front().index,
            r.steps.back().index,
            r.idle_pct > 1.0 ? "over 1%: capture the step in a CUDA graph" : "at most 1%: launch overhead does not matter");
    const double nsteps = (double)r.steps.size();
    fprintf(stderr, "  gaps     %10s %12s %12s\n", "count", "total us", "us/step");
    for (int b = 0; b < kNumBuckets; b++)
        fprintf(stderr, "  %-8s %10" PRIu64 " %12.1f %12.2f\n", kBuckets[b].label, r.bucket_count[b], r.bucket_ns[b] * 1e-3,
                r.bucket_ns[b] * 1e-3 / nsteps);
    fprintf(stderr, "  largest gaps: %10s %5s  before -> after\n", "us", "step");
    for (size_t i = 0; i < r.top_gaps.size(); i++)
        fprintf(stderr, "  %24.1f %5d  %s -> %s\n", r.top_gaps[i].ns() * 1e-3, r.top_gaps[i].step, short_name(r.names[2 * i]).c_str(),
                short_name(r.names[2 * i + 1]).c_str());
    if (s.top <= 0) return;
    // the kernel table: where the step's device time goes (the name last, as its length varies)
    fprintf(stderr, "kernel_gaps: device %u: top %zu of %zu kernels by device time in steps %d..%d (per step: / %zu steps)\n",
            r.device, r.top_kernels.size(), r.kernel_names, r.steps.front().index, r.steps.back().index, r.steps.size());
    fprintf(stderr, "  %10s %14s %11s %10s  %s\n", "ms/step", "launches/step", "us/launch", "% kernels", "name");
    for (const KernelRow& k : r.top_kernels)
        fprintf(stderr, "  %10.3f %14.2f %11.2f %9.1f%%  %s\n", k.ms_per_step, k.launches_per_step, k.us_per_launch, k.pct,
                table_name(k.name).c_str());
    fprintf(stderr, "  all kernels: %.3f ms per step, memcpy/memset: %.3f ms per step\n", r.kernel_ns * 1e-6 / nsteps,
            r.copy_ns * 1e-6 / nsteps);
}

// The results as JSON (the numbers of the tables plus each measured step). Returns false on an I/O error.
bool write_json(const State& s, const std::vector<DeviceReport>& reps, const char* path) {
    FILE* f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kernel_gaps: error: cannot open KERNEL_GAPS_OUT %s: %s\n", path, strerror(errno));
        return false;
    }
    fprintf(f, "{\n  \"step_kernel\": %s,\n  \"skip\": %d,\n  \"kernels_top\": %d,\n  \"dropped_records\": %" PRIu64 ",\n",
            json_str(s.step_kernel).c_str(), s.skip, s.top, s.dropped);
    fprintf(f, "  \"records_without_timestamps\": %" PRIu64 ",\n  \"truncated_buffers\": %" PRIu64 ",\n  \"cupti_errors\": %" PRIu64 ",\n",
            s.no_timestamp, s.truncated_buffers, s.errors);
    fprintf(f, "  \"devices\": [");
    for (size_t d = 0; d < reps.size(); d++) {
        const DeviceReport& r = reps[d];
        fprintf(f, "%s\n    {\n      \"device\": %u,\n      \"activities\": %zu,\n      \"kernels\": %zu,\n", d ? "," : "", r.device,
                r.activities, r.kernels);
        fprintf(f, "      \"step_kernels_found\": %zu,\n      \"steps_measured\": %zu,\n", r.step_kernels, r.steps.size());
        fprintf(f, "      \"median_span_us\": %.3f,\n      \"median_idle_us\": %.3f,\n      \"idle_pct\": %.4f,\n", r.median_span_us,
                r.median_idle_us, r.idle_pct);
        fprintf(f, "      \"median_activities_per_step\": %.1f,\n      \"median_kernels_per_step\": %.1f,\n", r.median_activities,
                r.median_kernels);
        fprintf(f, "      \"median_gaps_ge_2us\": %.1f,\n      \"median_gaps_ge_20us\": %.1f,\n", r.median_gaps_ge_2us,
                r.median_gaps_ge_20us);
        const double nsteps = r.steps.empty() ? 1.0 : (double)r.steps.size();  // no steps: both sums are 0
        fprintf(f, "      \"kernel_ms_per_step\": %.6f,\n      \"memcpy_memset_ms_per_step\": %.6f,\n      \"kernel_names\": %zu,\n",
                r.kernel_ns * 1e-6 / nsteps, r.copy_ns * 1e-6 / nsteps, r.kernel_names);
        fprintf(f, "      \"histogram\": [");
        for (int b = 0; b < kNumBuckets; b++)
            fprintf(f, "%s\n        {\"bucket\": \"%s\", \"lo_us\": %.0f, \"hi_us\": %s, \"count\": %" PRIu64 ", \"total_us\": %.3f}",
                    b ? "," : "", kBuckets[b].label, kBuckets[b].lo * 1e-3,
                    kBuckets[b].hi == UINT64_MAX ? "null" : std::to_string(kBuckets[b].hi / 1000).c_str(), r.bucket_count[b],
                    r.bucket_ns[b] * 1e-3);
        fprintf(f, "\n      ],\n      \"largest_gaps\": [");
        for (size_t i = 0; i < r.top_gaps.size(); i++)
            fprintf(f, "%s\n        {\"us\": %.3f, \"step\": %d, \"before\": %s, \"after\": %s}", i ? "," : "", r.top_gaps[i].ns() * 1e-3,
                    r.top_gaps[i].step, json_str(r.names[2 * i]).c_str(), json_str(r.names[2 * i + 1]).c_str());
        fprintf(f, "\n      ],\n      \"steps\": [");
        for (size_t i = 0; i < r.steps.size(); i++) {
            const Step& st = r.steps[i];
            fprintf(f,
                    "%s\n        {\"step\": %d, \"span_us\": %.3f, \"busy_us\": %.3f, \"idle_us\": %.3f, \"activities\": %d, "
                    "\"kernels\": %d, \"gaps_ge_2us\": %d, \"gaps_ge_20us\": %d, \"top_gaps_us\": [%.3f, %.3f, %.3f]}",
                    i ? "," : "", st.index, st.span * 1e-3, (st.span - st.idle) * 1e-3, st.idle * 1e-3, st.activities, st.kernels,
                    st.gaps_ge_2us, st.gaps_ge_20us, st.top[0] * 1e-3, st.top[1] * 1e-3, st.top[2] * 1e-3);
        }
        fprintf(f, "\n      ]\n    }");
    }
    // the kernel tables of all devices in one list: a device's "kernels" is already its kernel count
    fprintf(f, "\n  ],\n  \"kernels\": [");
    bool first = true;
    for (const DeviceReport& r : reps)
        for (const KernelRow& k : r.top_kernels) {
            fprintf(f,
                    "%s\n    {\"device\": %u, \"name\": %s, \"ms_per_step\": %.6f, \"launches_per_step\": %.4f, \"us_per_launch\": %.3f, "
                    "\"pct\": %.3f, \"launches\": %" PRIu64 "}",
                    first ? "" : ",", r.device, json_str(k.name).c_str(), k.ms_per_step, k.launches_per_step, k.us_per_launch, k.pct,
                    k.launches);
            first = false;
        }
    fprintf(f, "\n  ]\n}\n");
    const bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        fprintf(stderr, "kernel_gaps: error: writing KERNEL_GAPS_OUT %s failed\n", path);
        return false;
    }
    fprintf(stderr, "kernel_gaps: wrote %s\n", path);
    return true;
}

// KERNEL_GAPS_OUT with every %p replaced by the process id.
std::string expand_pid(const std::string& path) {
    std::string out;
    for (size_t i = 0; i < path.size(); i++) {
        if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') out += std::to_string((long)getpid()), i++;
        else out += path[i];
    }
    return out;
}

// atexit handler: flush CUPTI (forced: also buffers with unfinished records), then analyze each
// device and print / write the results. Errors are printed; it never exits the process itself.
void report_at_exit() {
    State& s = state();
    cupti_ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)");
    size_t dropped = 0;
    const bool dropped_ok = cupti_ok(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), "cuptiActivityGetNumDroppedRecords");
    std::lock_guard<std::mutex> lock(s.mu);
    s.reported = true;
    if (dropped_ok) s.dropped += dropped;
    if (s.dropped)
        fprintf(stderr, "kernel_gaps: error: CUPTI dropped %" PRIu64 " activity records: the timeline has holes and the gaps are wrong\n",
                s.dropped);
    if (s.errors) fprintf(stderr, "kernel_gaps: error: %" PRIu64 " CUPTI calls failed while reading buffers (above)\n", s.errors);
    if (s.no_timestamp)
        fprintf(stderr, "kernel_gaps: note: %" PRIu64 " records without timestamps were left out (unfinished at exit, or CUPTI lacked device memory)\n",
                s.no_timestamp);
    if (s.truncated_buffers)
        fprintf(stderr, "kernel_gaps: note: %" PRIu64 " buffers ended in an incomplete record (normal for the last one at exit)\n",
                s.truncated_buffers);
    // names: demangled once; step-kernel match on the mangled or the demangled form
    std::vector<std::string> pretty(s.names.size());
    std::vector<bool> matches(s.names.size());
    for (size_t i = 0; i < s.names.size(); i++) {
        pretty[i] = demangle(s.names[i]);
        matches[i] = s.names[i].find(s.step_kernel) != std::string::npos || pretty[i].find(s.step_kernel) != std::string::npos;
    }
    std::map<uint32_t, std::vector<Activity>> by_device;
    for (const Activity& a : s.acts) by_device[a.device].push_back(a);
    if (by_device.empty()) {
        fprintf(stderr, "kernel_gaps: error: no GPU activity was recorded (did the program run a kernel? is CUPTI working?)\n");
        return;
    }
    std::vector<DeviceReport> reps;
    bool any_steps = false;
    for (auto& [device, acts] : by_device) {
        reps.push_back(analyze(device, std::move(acts), matches, pretty, s.skip, s.top));
        print_report(s, reps.back());
        any_steps = any_steps || !reps.back().steps.empty();
    }
    if (!any_steps) {  // help choose KERNEL_GAPS_STEP_KERNEL: the most frequent kernels
        std::vector<size_t> count(s.names.size());
        for (const Activity& a : s.acts)
            if (a.kind == ACT_KERNEL) count[a.name]++;
        std::vector<size_t> order(s.names.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return count[a] > count[b]; });
        fprintf(stderr, "kernel_gaps: error: fewer than %d + 2 step kernels \"%s\" on every device (KERNEL_GAPS_STEP_KERNEL, "
                        "KERNEL_GAPS_SKIP); the most frequent kernels:\n", s.skip, s.step_kernel.c_str());
        for (size_t i = 0; i < order.size() && i < 10 && count[order[i]] > 0; i++)
            fprintf(stderr, "  %8zu  %s\n", count[order[i]], short_name(pretty[order[i]]).c_str());
    }
    if (!s.out_path.empty()) write_json(s, reps, expand_pid(s.out_path).c_str());
}

}  // namespace

// Called by the CUDA driver at cuInit when this library is CUDA_INJECTION64_PATH. Reads the
// environment, starts CUPTI activity recording and registers the report for exit. Returns 1 when
// recording runs, 0 (after an error line) when it could not be started; the program runs either way.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    static bool initialized = false;  // the driver calls it once per process; a second call is a no-op
    if (initialized) return 1;
    initialized = true;
    State& s = state();
    if (const char* e = getenv("KERNEL_GAPS_STEP_KERNEL"); e && *e) s.step_kernel = e;
    if (const char* e = getenv("KERNEL_GAPS_SKIP"); e && *e) {
        char* end = nullptr;
        errno = 0;
        const long v = strtol(e, &end, 10);
        if (errno || *end || v < 0 || v > 1000000)
            fprintf(stderr, "kernel_gaps: error: KERNEL_GAPS_SKIP=%s is not a count 0..1000000: using %d\n", e, kDefaultSkip);
        else s.skip = (int)v;
    }
    if (const char* e = getenv("KERNEL_GAPS_TOP"); e && *e) {
        char* end = nullptr;
        errno = 0;
        const long v = strtol(e, &end, 10);
        if (errno || *end || v < 0 || v > kMaxTop)
            fprintf(stderr, "kernel_gaps: error: KERNEL_GAPS_TOP=%s is not a count 0..%d: no kernel table\n", e, kMaxTop);
        else s.top = (int)v;
    }
    if (const char* e = getenv("KERNEL_GAPS_OUT"); e && *e) s.out_path = e;

    if (!cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks")) return 0;
    if (!cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable(CONCURRENT_KERNEL)")) return 0;
    // copies and memsets count as busy time; without them a copy would look like a gap
    bool copies = cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
    copies &= cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY2), "cuptiActivityEnable(MEMCPY2)");
    copies &= cupti_ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
    if (!copies) fprintf(stderr, "kernel_gaps: error: copies or memsets are not recorded: they will be counted as gaps\n");
    // registered after CUPTI's own set-up, so that it runs before any exit handler CUPTI registered
    if (atexit(report_at_exit) != 0) {
        fprintf(stderr, "kernel_gaps: error: atexit failed: no report at exit\n");
        return 0;
    }
    const std::string table = s.top > 0 ? ", kernel table: top " + std::to_string(s.top) : "";
    fprintf(stderr, "kernel_gaps: recording kernels, memcpys and memsets (step kernel \"%s\", skip %d%s%s%s); report at exit\n",
            s.step_kernel.c_str(), s.skip, table.c_str(), s.out_path.empty() ? "" : ", JSON to ", s.out_path.c_str());
    return 1;
}
