/* runtime: the CUDA runtime of the CPU emulation. Kernels run block by block on a pool of
 * worker threads; inside a block each CUDA thread is a fiber that runs until it reaches a
 * barrier or a warp collective, in the order the schedule picks (KIMI_EMU_SCHEDULE=forward,
 * reverse or random with KIMI_EMU_SEED), with dynamic shared memory filled with 0xFF bytes (NaN)
 * at each block start. Streams are queues, each run by its own thread in order; a capture
 * records the work by value into a graph that a launch replays. Device memory is host memory
 * (one address space). Architecture: KIMI_EMU_ARCH=90 (default), 100 or 120; devices:
 * KIMI_EMU_DEVICES (default 8), each of KIMI_EMU_MEMORY_MIB (default the architecture's);
 * KIMI_EMU_LEGACY_STREAM=refuse fails all work for a legacy stream; KIMI_EMU_PEER=0: no two
 * devices can access each other's memory (cudaDeviceCanAccessPeer answers 0), as on boxes whose
 * PCIe topology forbids it (peer access is otherwise enabled per ordered pair, as the real
 * runtime does; one address space, so a kernel may touch a peer's memory either way);
 * KIMI_EMU_KERNEL_FAULT=DEVICE:NAME:K: a device fault at a kernel's K-th run (kernel_faults). */
#include "emu.h"
#include "fiber.h"

#include <cuda_runtime.h>

#include <cuemu.h>

#include <signal.h>
#include <string.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace emu {

void fatal(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "cuemu: ");
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
    fflush(stderr);
    abort();
}

/* ---- configuration ---- */

enum schedule_kind { SCHEDULE_FORWARD, SCHEDULE_REVERSE, SCHEDULE_RANDOM };

struct arch_info {
    int major, minor, sms;
    size_t optin_shared, total_memory;
    const char *name;
};

struct config {
    int devices = 8, workers = 2;
    schedule_kind schedule = SCHEDULE_FORWARD;
    unsigned long long seed = 1;
    size_t stack_bytes = 256 * 1024;
    arch_info arch{9, 0, 132, 227 * 1024, (size_t)141 << 30, "cuemu H200 (sm_90)"};
};

static const config &cfg()
{
    static config c = [] {
        config k;
        if (const char *d = getenv("KIMI_EMU_DEVICES"))
            k.devices = atoi(d);
        if (const char *w = getenv("KIMI_EMU_WORKERS"))
            k.workers = std::max(1, atoi(w));
        if (const char *s = getenv("KIMI_EMU_SCHEDULE")) {
            std::string v = s;
            if (v == "reverse")
                k.schedule = SCHEDULE_REVERSE;
            else if (v == "random")
                k.schedule = SCHEDULE_RANDOM;
            else if (v != "forward")
                fatal("KIMI_EMU_SCHEDULE=%s: must be forward, reverse or random", s);
        }
        if (const char *s = getenv("KIMI_EMU_SEED"))
            k.seed = strtoull(s, nullptr, 10);
        size_t memory_mib = 0;
        if (const char *m = getenv("KIMI_EMU_MEMORY_MIB"))
            memory_mib = strtoull(m, nullptr, 10);
        if (const char *a = getenv("KIMI_EMU_ARCH")) {
            int arch = atoi(a);
            if (arch == 100)
                k.arch = {10, 0, 148, 227 * 1024, (size_t)180 << 30, "cuemu B200 (sm_100)"};
            else if (arch == 120)
                k.arch = {12, 0, 188, 99 * 1024, (size_t)96 << 30, "cuemu RTX PRO 6000 (sm_120)"};
            else if (arch != 90)
                fatal("KIMI_EMU_ARCH=%s: must be 90, 100 or 120", a);
        }
        if (memory_mib)
            k.arch.total_memory = memory_mib << 20;
        return k;
    }();
    return c;
}

/* ---- errors ---- */

static __thread cudaError_t last_error = cudaSuccess;
static __thread int current_device = 0;

static cudaError_t result(cudaError_t e)
{
    if (e != cudaSuccess && e != cudaErrorNotReady)
        last_error = e;
    return e;
}

/* ---- fibers and blocks ---- */

enum fiber_state { FIBER_RUNNABLE, FIBER_BARRIER, FIBER_WARP, FIBER_DONE };

struct fiber {
    void *sp;
    char *stack;
    uint3 index;
    int tid;
    fiber_state state;
    const char *file;
    int line;
    /* a pending collective */
    int kind, arg, width, is_signed, pred;
    unsigned mask;
    uint64_t value, out;
};

struct worker {
    std::vector<char *> stacks;
    std::vector<fiber> fibers;
    std::vector<int> order;
    size_t position = 0;        /* in order: the fiber running now (this round) */
    std::vector<unsigned char> shared;
    size_t shared_bytes = 0;
    void *scheduler_sp = nullptr;
    fiber *current = nullptr;
    const std::function<void()> *body = nullptr;
    std::mt19937_64 rng;
};
static __thread worker *this_worker;

/* The round's next runnable fiber after the running one (in the schedule's order), made the
 * running one; null when the round is over. Within a round only a fiber itself changes its
 * state, so this is the fiber the scheduler's loop would resume next. */
static fiber *next_runnable(worker *w)
{
    for (size_t i = w->position + 1; i < w->order.size(); i++) {
        fiber *f = &w->fibers[w->order[i]];
        if (f->state == FIBER_RUNNABLE) {
            w->position = i;
            w->current = f;
            threadIdx = f->index;
            return f;
        }
    }
    w->current = nullptr;
    return nullptr;
}

/* Leaves the running fiber f (its state set) for the round's next runnable fiber, directly: a
 * switch through the scheduler would cost two switches a fiber, both returning where the
 * return predictor does not expect (fibers of one block mostly wait at the same call site, so
 * a direct switch returns where it was called from); the scheduler is resumed when the round
 * is over. */
static void leave_fiber(worker *w, fiber *f)
{
    fiber *next = next_runnable(w);
    emu_fiber_switch(&f->sp, next ? next->sp : w->scheduler_sp);
}

static void fiber_main()
{
    worker *w = this_worker;
    (*w->body)();
    w->current->state = FIBER_DONE;
    leave_fiber(w, w->current);
    fatal("a finished fiber was resumed");
}

static worker *worker_get()
{
    if (!this_worker)
        this_worker = new worker;  /* one per OS thread, kept for the thread's life */
    return this_worker;
}

static char *stack_get(worker *w, size_t i)
{
    size_t page = 4096, bytes = cfg().stack_bytes;
    while (w->stacks.size() <= i) {
        char *s = (char *)mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                               -1, 0);
        if (s == MAP_FAILED)
            fatal("cannot map a fiber stack");
        mprotect(s, page, PROT_NONE);    /* a guard page: a stack overflow faults */
        w->stacks.push_back(s + page);
    }
    return w->stacks[i];
}

static void yield_fiber()
{
    worker *w = this_worker;
    if (!w || !w->current)
        fatal("a barrier or warp collective outside a kernel");
    leave_fiber(w, w->current);
}

int syncthreads(const char *file, int line, int kind, int pred)
{
    fiber *f = this_worker ? this_worker->current : nullptr;
    if (!f)
        fatal("__syncthreads outside a kernel (%s:%d)", file, line);
    f->state = FIBER_BARRIER;
    f->file = file;
    f->line = line;
    f->kind = kind;
    f->pred = pred;
    yield_fiber();
    return (int)f->out;
}

uint64_t warp_collective(const char *file, int line, int kind, unsigned mask, uint64_t value, int arg, int width,
                         int is_signed)
{
    fiber *f = this_worker ? this_worker->current : nullptr;
    if (!f)
        fatal("warp collective outside a kernel (%s:%d)", file, line);
    int lane = f->tid % 32;
    if (!(mask >> lane & 1u))
        fatal("%s:%d: thread %d (lane %d) calls a warp collective with mask 0x%08x, which does not name it", file,
              line, f->tid, lane, mask);
    if (kind <= WARP_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
        fatal("%s:%d: shuffle width %d: must be a power of two up to 32", file, line, width);
    f->state = FIBER_WARP;
    f->file = file;
    f->line = line;
    f->kind = kind;
    f->mask = mask;
    f->value = value;
    f->arg = arg;
    f->width = width;
    f->is_signed = is_signed;
    yield_fiber();
    return f->out;
}

void *dynamic_shared()
{
    if (!this_worker || !this_worker->current)
        fatal("dynamic shared memory outside a kernel");
    return this_worker->shared.data();
}

unsigned active_mask()
{
    worker *w = this_worker;
    fiber *f = w->current;
    int base = f->tid / 32 * 32;
    unsigned m = 0;
    for (int i = 0; i < 32 && base + i < (int)w->fibers.size(); i++)
        if (w->fibers[base + i].state != FIBER_DONE)
            m |= 1u << i;
    return m;
}

static const char *kind_name(int kind)
{
    static const char *names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__syncwarp", "__match_any_sync", "__reduce_add_sync",
                                  "__reduce_min_sync", "__reduce_max_sync", "__reduce_and_sync",
                                  "__reduce_or_sync", "__reduce_xor_sync"};
    return kind >= 0 && kind < (int)(sizeof names / sizeof *names) ? names[kind] : "?";
}

/* The lane a shuffle reads (PTX rules), or -1 for "its own value". */
static int shuffle_source(int kind, int lane, int arg, int width)
{
    int segment = lane & ~(width - 1), src;
    switch (kind) {
    case WARP_SHFL:
        return segment + (arg & (width - 1));
    case WARP_SHFL_UP:
        src = lane - arg;
        return src < segment ? -1 : src;
    case WARP_SHFL_DOWN:
        src = lane + arg;
        return src >= segment + width ? -1 : src;
    default:
        src = lane ^ arg;
        return src >= segment + width || src < segment ? -1 : src;
    }
}

/* Completes the collectives of one warp whose lanes have all arrived; returns whether any did. */
static bool resolve_warp(worker *w, const char *kernel, int base, int lanes)
{
    fiber *f = &w->fibers[base];
    bool progressed = false;
    for (int i = 0; i < lanes; i++) {
        if (f[i].state != FIBER_WARP)
            continue;
        unsigned mask = f[i].mask;
        bool ready = true;
        for (int j = 0; j < 32; j++) {
            if (!(mask >> j & 1u))
                continue;
            if (j >= lanes)
                fatal("%s: %s:%d: mask 0x%08x names lane %d, which does not exist (block of %d threads)", kernel,
                      f[i].file, f[i].line, mask, j, (int)w->fibers.size());
            if (f[j].state == FIBER_DONE)
                fatal("%s: %s:%d: thread %d waits in %s (mask 0x%08x) for lane %d, which has exited", kernel,
                      f[i].file, f[i].line, base + i, kind_name(f[i].kind), mask, j);
            if (f[j].state != FIBER_WARP) {
                ready = false;
                break;
            }
            if (f[j].mask != mask || f[j].kind != f[i].kind)
                fatal("%s: lanes of warp %d disagree: thread %d at %s:%d (%s, mask 0x%08x), thread %d at %s:%d (%s, "
                      "mask 0x%08x)", kernel, base / 32, base + i, f[i].file, f[i].line, kind_name(f[i].kind), mask,
                      base + j, f[j].file, f[j].line, kind_name(f[j].kind), f[j].mask);
        }
        if (!ready)
            continue;
        int kind = f[i].kind;
        uint64_t ballot = 0, reduced = 0;
        for (int j = 0; j < 32; j++) {
            if (!(mask >> j & 1u))
                continue;
            if (kind == WARP_BALLOT && f[j].value)
                ballot |= 1ull << j;
        }
        if (kind >= WARP_REDUCE_ADD) {
            bool first = true;
            for (int j = 0; j < 32; j++) {
                if (!(mask >> j & 1u))
                    continue;
                uint64_t v = f[j].value;
                if (first) {
                    reduced = v;
                    first = false;
                    continue;
                }
                switch (kind) {
                case WARP_REDUCE_ADD: reduced += v; break;
                case WARP_REDUCE_AND: reduced &= v; break;
                case WARP_REDUCE_OR: reduced |= v; break;
                case WARP_REDUCE_XOR: reduced ^= v; break;
                case WARP_REDUCE_MIN:
                    reduced = f[j].is_signed ? (uint64_t)std::min((int64_t)reduced, (int64_t)v) : std::min(reduced, v);
                    break;
                default:
                    reduced = f[j].is_signed ? (uint64_t)std::max((int64_t)reduced, (int64_t)v) : std::max(reduced, v);
                    break;
                }
            }
        }
        for (int j = 0; j < 32; j++) {
            if (!(mask >> j & 1u))
                continue;
            fiber &l = f[j];
            if (kind <= WARP_SHFL_XOR) {
                int src = shuffle_source(kind, j, l.arg, l.width);
                if (src < 0) {
                    l.out = l.value;
                } else if (!(mask >> src & 1u)) {
                    fatal("%s: %s:%d: %s: lane %d reads lane %d, not in the mask 0x%08x", kernel, l.file, l.line,
                          kind_name(kind), j, src, mask);
                } else {
                    l.out = f[src].value;
                }
            } else if (kind == WARP_BALLOT) {
                l.out = ballot;
            } else if (kind == WARP_MATCH_ANY) {
                uint64_t m = 0;
                for (int k = 0; k < 32; k++)
                    if ((mask >> k & 1u) && f[k].value == l.value)
                        m |= 1ull << k;
                l.out = m;
            } else {
                l.out = reduced;
            }
        }
        for (int j = 0; j < 32; j++)
            if (mask >> j & 1u)
                f[j].state = FIBER_RUNNABLE;
        progressed = true;
    }
    return progressed;
}

static void report_deadlock(worker *w, const char *kernel)
{
    std::string text;
    char line[256];
    int shown = 0;
    for (fiber &f : w->fibers) {
        if (f.state == FIBER_DONE || shown >= 16)
            continue;
        snprintf(line, sizeof line, "\n  thread %d waits in %s at %s:%d", f.tid,
                 f.state == FIBER_BARRIER ? "__syncthreads" : kind_name(f.kind), f.file, f.line);
        text += line;
        shown++;
    }
    fatal("%s: block (%u,%u,%u) deadlocks:%s", kernel, blockIdx.x, blockIdx.y, blockIdx.z, text.c_str());
}

static void run_block(worker *w, const launch_desc &d, const std::function<void()> &body, uint3 block)
{
    blockIdx = block;
    blockDim = {d.block.x, d.block.y, d.block.z};
    gridDim = {d.grid.x, d.grid.y, d.grid.z};
    int n = (int)(d.block.x * d.block.y * d.block.z);
    if (w->shared.size() < d.shared)
        w->shared.resize(d.shared);
    memset(w->shared.data(), 0xFF, d.shared);   /* NaN bytes: a read before the write shows */
    w->fibers.resize(n);
    w->body = &body;
    const schedule_kind schedule = cfg().schedule;
    const size_t stack_bytes = cfg().stack_bytes;
    uint3 index = {0, 0, 0};    /* thread t's, counted up rather than divided out */
    for (int t = 0; t < n; t++) {
        fiber &f = w->fibers[t];    /* the fields a collective or barrier sets are set there */
        f.tid = t;
        f.index = index;
        if (++index.x == d.block.x) {
            index.x = 0;
            if (++index.y == d.block.y) {
                index.y = 0;
                index.z++;
            }
        }
        f.stack = stack_get(w, t);
        f.sp = emu_fiber_prepare(f.stack, stack_bytes, fiber_main);
        f.state = FIBER_RUNNABLE;
    }
    w->order.resize(n);
    for (int t = 0; t < n; t++)
        w->order[t] = schedule == SCHEDULE_REVERSE ? n - 1 - t : t;
    for (;;) {
        if (schedule == SCHEDULE_RANDOM) {   /* each round a new permutation of 0..n-1 */
            for (int t = 0; t < n; t++)
                w->order[t] = t;
            std::shuffle(w->order.begin(), w->order.end(), w->rng);
        }
        w->position = (size_t)-1;   /* before the first: next_runnable starts at 0 */
        if (fiber *first = next_runnable(w))
            emu_fiber_switch(&w->scheduler_sp, first->sp);    /* back when the round's last fiber leaves */
        bool progressed = false;
        for (int base = 0; base < n; base += 32)
            progressed |= resolve_warp(w, d.name, base, std::min(32, n - base));
        if (progressed)
            continue;
        fiber *first = nullptr;
        bool all_at_barrier = true;
        int count = 0, live = 0;
        for (fiber &f : w->fibers) {
            if (f.state == FIBER_DONE)
                continue;
            live++;
            if (f.state != FIBER_BARRIER) {
                all_at_barrier = false;
                continue;
            }
            if (!first)
                first = &f;
            else if (f.line != first->line || strcmp(f.file, first->file))
                fatal("%s: divergent __syncthreads in block (%u,%u,%u): thread %d waits at %s:%d, thread %d at %s:%d",
                      d.name, blockIdx.x, blockIdx.y, blockIdx.z, first->tid, first->file, first->line, f.tid, f.file,
                      f.line);
            count += f.pred;
        }
        if (!live)
            break;
        if (!all_at_barrier || !first)
            report_deadlock(w, d.name);
        for (fiber &f : w->fibers) {
            if (f.state != FIBER_BARRIER)
                continue;
            f.out = f.kind == BARRIER_COUNT ? count : f.kind == BARRIER_AND ? count == live : f.kind == BARRIER_OR ? count > 0 : 0;
            f.state = FIBER_RUNNABLE;
        }
    }
}

/* ---- the block pool ---- */

struct census_row;
static thread_local census_row *census_current;     /* the kernel this thread runs blocks of */

struct grid_job {
    launch_desc d;
    census_row *census;
    const std::function<void()> *body;
    std::vector<uint3> blocks;
    std::atomic<size_t> next{0}, done{0};
    std::atomic<int> helpers{0};
};

struct pool {
    std::mutex lock;
    std::condition_variable wake;
    std::deque<std::shared_ptr<grid_job>> jobs;
    std::vector<std::thread> threads;
};
static pool &block_pool()
{
    static pool *p = [] {
        pool *q = new pool;
        for (int i = 1; i < cfg().workers; i++)
            q->threads.emplace_back([q] {
                for (;;) {
                    std::shared_ptr<grid_job> job;
                    {
                        std::unique_lock<std::mutex> hold(q->lock);
                        q->wake.wait(hold, [q] { return !q->jobs.empty(); });
                        job = q->jobs.front();
                        if (job->next.load() >= job->blocks.size()) {
                            q->jobs.pop_front();
                            continue;
                        }
                    }
                    job->helpers++;
                    worker *w = worker_get();
                    census_current = job->census;
                    for (size_t b; (b = job->next.fetch_add(1)) < job->blocks.size(); job->done++)
                        run_block(w, job->d, *job->body, job->blocks[b]);
                    census_current = nullptr;
                    job->helpers--;
                }
            });
        for (std::thread &t : q->threads)
            t.detach();
        return q;
    }();
    return *p;
}

static std::atomic<unsigned long long> launch_counter{0};

/* cudaMalloc keeps kCanary bytes of 0xA5 after each allocation: a kernel that writes past the
 * end of a buffer is named when it ends (a GPU would corrupt the neighbour silently). */
constexpr size_t kCanary = 64;
/* Device allocations own whole pages (the census protects them page by page). */
static size_t allocation_bytes(size_t asked)
{
    return (asked + kCanary + 4095) & ~(size_t)4095;
}
static std::mutex memory_lock;
static std::map<uintptr_t, std::pair<size_t, int>> allocations;   /* device pointer -> bytes asked, device */

static void check_canaries(const launch_desc &d)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    for (auto &a : allocations) {
        const unsigned char *tail = (const unsigned char *)a.first + a.second.first;
        for (size_t i = 0; i < kCanary; i++)
            if (tail[i] != 0xA5)
                fatal("%s (launched at %s:%d) wrote past the end of a device buffer of %zu bytes (byte %zu after it)",
                      d.name, d.file, d.line, a.second.first, i);
    }
}

static void run_grid(const launch_desc &d, const std::function<void()> &body)
{
    auto job = std::make_shared<grid_job>();
    job->d = d;
    job->census = census_current;
    job->body = &body;
    for (unsigned z = 0; z < d.grid.z; z++)
        for (unsigned y = 0; y < d.grid.y; y++)
            for (unsigned x = 0; x < d.grid.x; x++)
                job->blocks.push_back({x, y, z});
    unsigned long long launch = launch_counter++;
    worker *w = worker_get();
    w->rng.seed(cfg().seed * 0x9E3779B97F4A7C15ull + launch);
    if (cfg().schedule == SCHEDULE_REVERSE)
        std::reverse(job->blocks.begin(), job->blocks.end());
    else if (cfg().schedule == SCHEDULE_RANDOM)
        std::shuffle(job->blocks.begin(), job->blocks.end(), w->rng);
    if (cfg().workers > 1 && job->blocks.size() > 1) {
        pool &p = block_pool();
        std::lock_guard<std::mutex> hold(p.lock);
        p.jobs.push_back(job);
        p.wake.notify_all();
    }
    for (size_t b; (b = job->next.fetch_add(1)) < job->blocks.size(); job->done++)
        run_block(w, d, body, job->blocks[b]);
    while (job->done.load() < job->blocks.size() || job->helpers.load() > 0)
        std::this_thread::yield();
    census_current = nullptr;   /* the canaries are the emulator's reads, not the kernel's */
    check_canaries(d);
    census_current = job->census;
}

/* ---- streams ---- */

struct graph_rec {
    std::vector<std::shared_ptr<work>> nodes;
};

} // namespace emu

struct CUgraph_st : emu::graph_rec {};
struct CUgraphExec_st {
    std::vector<std::shared_ptr<emu::work>> nodes;
    int device = 0;
    size_t charged = 0;         /* device memory it holds (emu::charge) */
};

struct CUstream_st {
    int device = 0;
    unsigned flags = 0;
    std::mutex lock;
    std::condition_variable changed;
    std::deque<emu::work> queue;
    unsigned long long enqueued = 0, finished = 0;
    std::thread runner;
    bool stopping = false;
    bool legacy = false;        /* a device's legacy (NULL) stream */
    /* capture */
    CUgraph_st *capture = nullptr;
    cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
    bool capture_invalid = false;
    std::thread::id capture_thread;

    void run()
    {
        std::unique_lock<std::mutex> hold(lock);
        for (;;) {
            changed.wait(hold, [this] { return stopping || !queue.empty(); });
            if (queue.empty())
                return;
            emu::work w = std::move(queue.front());
            queue.pop_front();
            hold.unlock();
            emu::execute(w, 0);
            hold.lock();
            finished++;
            changed.notify_all();
        }
    }
    void wait_for(unsigned long long mark)
    {
        std::unique_lock<std::mutex> hold(lock);
        changed.wait(hold, [&] { return finished >= mark; });
    }
};

struct CUevent_st {
    CUstream_st *stream = nullptr;     /* the stream of the last record; nullptr once it is destroyed */
    unsigned long long mark = 0;
    bool recorded = false, timing = true;
    std::atomic<double> at{0.0};
};

/* Every event, so that a destroyed stream is forgotten by the events recorded on it: CUDA lets
 * an event outlive its stream (destroyed, queried, waited for), its work done by then. */
static std::mutex events_lock;
static std::vector<CUevent_st *> live_events;

namespace emu {

static std::atomic<int> active_captures{0};     /* global or thread-local mode, any thread */
/* captures of any mode by device: a kernel attribute set while one of the device's streams
 * captures is refused (cudaFuncSetAttribute), as a setting that belongs at open, not in a step */
static std::atomic<int> device_captures[64];

static CUstream_st *legacy_stream(int device)
{
    static std::vector<CUstream_st *> streams = [] {
        std::vector<CUstream_st *> v;
        for (int i = 0; i < cfg().devices; i++) {
            v.push_back(new CUstream_st);
            v.back()->device = i;
            v.back()->legacy = true;
        }
        return v;
    }();
    return streams[device];
}

static CUstream_st *resolve(cudaStream_t s)
{
    return s ? s : legacy_stream(current_device);
}

cudaStream_t stream_on(cudaStream_t stream, int device)
{
    return stream ? stream : legacy_stream(device);
}

bool capturing(cudaStream_t stream)
{
    CUstream_st *s = resolve(stream);
    std::lock_guard<std::mutex> hold(s->lock);
    return s->capture != nullptr;
}

/* ---- the census (include/cuemu.h) ---- */

struct census_row {
    unsigned long long launches = 0;
    std::atomic<unsigned long long> bytes_read{0};
};
struct device_census {
    cuemu_device_census counts{};
    std::map<std::string, census_row> kernels;
};
/* The device memory whose reads are counted: page-aligned ranges, sorted, fixed while the
 * census is on (the fault handler reads them without a lock). */
struct census_range {
    uintptr_t begin, end;
    int device;
    bool live;      /* false once freed */
};
static std::atomic<bool> census_on{false};
static std::mutex census_lock;
static std::vector<device_census> census_devices;
static std::vector<census_range> census_ranges;
static struct sigaction census_previous_action;
constexpr uintptr_t kPage = 4096;

static const census_range *census_range_of(uintptr_t address)
{
    size_t lo = 0, hi = census_ranges.size();
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (census_ranges[mid].end <= address)
            lo = mid + 1;
        else if (census_ranges[mid].begin > address)
            hi = mid;
        else
            return census_ranges[mid].live ? &census_ranges[mid] : nullptr;
    }
    return nullptr;
}

/* A first access to a protected page of device memory: counted when a kernel loads it, then the
 * page is open for the rest of the launch. Any other fault goes to the previous handler. */
static void census_fault(int signal, siginfo_t *info, void *context)
{
    uintptr_t address = (uintptr_t)info->si_addr;
    if (!census_on.load() || !census_range_of(address)) {
        sigaction(SIGSEGV, &census_previous_action, nullptr);
        return;     /* the access faults again, now with the previous action */
    }
    (void)signal;
    bool write = ((ucontext_t *)context)->uc_mcontext.gregs[REG_ERR] & 2;
    mprotect((void *)(address & ~(kPage - 1)), kPage, PROT_READ | PROT_WRITE);
    if (census_row *row = census_current)
        if (!write)
            row->bytes_read += kPage;
}

/* Sets the access of device's counted memory (every device's: -1). Call with census_lock held. */
static void census_protect(int device, int access)
{
    for (const census_range &r : census_ranges)
        if (r.live && (device < 0 || r.device == device))
            mprotect((void *)r.begin, r.end - r.begin, access);
}

/* cudaFree of counted memory: open it before the allocator touches it, and never protect it again. */
static void census_forget(uintptr_t begin)
{
    std::lock_guard<std::mutex> hold(census_lock);
    for (census_range &r : census_ranges)
        if (r.begin == begin && r.live) {
            if (census_on.load())
                mprotect((void *)r.begin, r.end - r.begin, PROT_READ | PROT_WRITE);
            r.live = false;
        }
}

/* KIMI_EMU_KERNEL_FAULT=DEVICE:NAME:K: the K-th run (1-based) of kernel NAME on DEVICE faults, as
 * a device that hits an illegal address or falls off the bus: it does not run, nothing more runs
 * on that device, and every query or synchronisation of its streams reports
 * cudaErrorLaunchFailure from then on (a sticky error; the process keeps its other devices). */
static std::atomic<int> device_faults[64];

static bool kernel_faults(const work &w)
{
    struct hook {
        int device = -1;
        std::string name;
        unsigned long long at = 0;
        std::atomic<unsigned long long> runs{0};
    };
    static hook *h = [] {
        hook *k = new hook;
        if (const char *v = getenv("KIMI_EMU_KERNEL_FAULT")) {
            std::string s = v;
            size_t a = s.find(':'), b = s.rfind(':');
            if (a == std::string::npos || b == a)
                fatal("KIMI_EMU_KERNEL_FAULT=%s: must be DEVICE:NAME:K", v);
            k->device = atoi(s.substr(0, a).c_str());
            k->name = s.substr(a + 1, b - a - 1);
            k->at = strtoull(s.substr(b + 1).c_str(), nullptr, 10);
        }
        return k;
    }();
    if (w.kind != WORK_KERNEL || w.device != h->device || w.what != h->name)
        return false;
    return ++h->runs == h->at;
}

void execute(const work &w, int replayed)
{
    if (device_faults[w.device].load())
        return;     /* the device's context is lost: nothing runs on it */
    if (kernel_faults(w)) {
        fprintf(stderr, "cuemu: KIMI_EMU_KERNEL_FAULT: %s faults on device %d\n", w.what.c_str(), w.device);
        device_faults[w.device].store(cudaErrorLaunchFailure);
        return;
    }
    if (!census_on.load()) {
        w.run();
        return;
    }
    census_row *row = nullptr;
    {
        std::lock_guard<std::mutex> hold(census_lock);
        cuemu_device_census &c = census_devices[w.device].counts;
        switch (w.kind) {
        case WORK_KERNEL:
            c.launches++;
            row = &census_devices[w.device].kernels[w.what];
            row->launches++;
            break;
        case WORK_COPY: case WORK_MEMSET: c.copies++; c.copy_bytes += w.bytes; break;
        case WORK_COLLECTIVE: c.collectives++; c.collective_bytes += w.bytes; break;
        default: break;
        }
        c.graph_nodes += replayed;
        if (row)
            census_protect(w.device, PROT_NONE);
    }
    if (!row) {
        w.run();
        return;
    }
    census_current = row;
    w.run();
    census_current = nullptr;
}

/* KIMI_EMU_LEGACY_STREAM=refuse: work for a legacy stream fails (cudaErrorNotPermitted, said on
 * stderr), for code whose every copy must be ordered on its own streams (the backend's ranks:
 * the legacy stream does not wait for their non-blocking streams). */
static bool legacy_refused()
{
    static const bool refused = [] {
        const char *v = getenv("KIMI_EMU_LEGACY_STREAM");
        if (v && strcmp(v, "refuse"))
            fatal("KIMI_EMU_LEGACY_STREAM=%s: must be refuse", v);
        return v != nullptr;
    }();
    return refused;
}

cudaError_t enqueue(cudaStream_t stream, work w)
{
    CUstream_st *s = resolve(stream);
    if (s->legacy && legacy_refused()) {
        fprintf(stderr, "cuemu: %s on the legacy stream of device %d (KIMI_EMU_LEGACY_STREAM=refuse)\n",
                w.what.c_str(), s->device);
        return cudaErrorNotPermitted;
    }
    std::lock_guard<std::mutex> hold(s->lock);
    if (s->capture) {
        if (s->capture_invalid)
            return cudaErrorStreamCaptureInvalidated;
        if (s->capture_mode != cudaStreamCaptureModeRelaxed && s->capture_thread != std::this_thread::get_id()
            && s->capture_mode == cudaStreamCaptureModeThreadLocal)
            return cudaErrorStreamCaptureWrongThread;
        w.device = s->device;
        s->capture->nodes.push_back(std::make_shared<work>(std::move(w)));
        return cudaSuccess;
    }
    w.device = s->device;
    if (!s->runner.joinable())
        s->runner = std::thread([s] { s->run(); });
    s->queue.push_back(std::move(w));
    s->enqueued++;
    s->changed.notify_all();
    return cudaSuccess;
}

static unsigned long long stream_mark(CUstream_st *s)
{
    std::lock_guard<std::mutex> hold(s->lock);
    return s->enqueued;
}

/* A capture that meets an illegal call is invalidated; the call returns the real error. */
static cudaError_t invalidate_if_capturing(CUstream_st *s)
{
    std::lock_guard<std::mutex> hold(s->lock);
    if (!s->capture)
        return cudaSuccess;
    s->capture_invalid = true;
    return cudaErrorStreamCaptureUnsupported;
}

/* ---- launches ---- */

static std::mutex attributes_lock;
static std::map<const void *, int> max_dynamic_shared;

void submit(const launch_desc &d, std::function<void()> body)
{
    unsigned threads = d.block.x * d.block.y * d.block.z;
    if (!threads || threads > 1024 || d.block.z > 64 || !d.grid.x || !d.grid.y || !d.grid.z || d.grid.y > 65535
        || d.grid.z > 65535) {
        result(cudaErrorInvalidConfiguration);
        return;
    }
    size_t limit = 48 * 1024;
    {
        std::lock_guard<std::mutex> hold(attributes_lock);
        auto it = max_dynamic_shared.find(d.func);
        if (it != max_dynamic_shared.end())
            limit = (size_t)it->second;
    }
    if (d.shared > limit) {
        result(cudaErrorInvalidValue);
        return;
    }
    work w;
    w.kind = WORK_KERNEL;
    w.what = d.name;
    w.bytes = 0;
    w.run = [d, body = std::move(body)] { run_grid(d, body); };
    cudaError_t e = enqueue(d.stream, std::move(w));
    if (e)
        result(e);
}

} // namespace emu

using namespace emu;

/* ---- the C API ---- */

extern "C" {

static std::vector<size_t> used_bytes(64);

cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return result(cudaErrorInvalidValue);
    *count = cfg().devices;
    return cfg().devices > 0 ? cudaSuccess : result(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    if (device < 0 || device >= cfg().devices)
        return result(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return result(cudaErrorInvalidValue);
    if (device < 0 || device >= cfg().devices)
        return result(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    const arch_info &a = cfg().arch;
    snprintf(prop->name, sizeof prop->name, "%s", a.name);
    prop->totalGlobalMem = a.total_memory;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = a.optin_shared;
    prop->sharedMemPerMultiprocessor = a.optin_shared + 1024;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 0x7FFFFFFF;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->major = a.major;
    prop->minor = a.minor;
    prop->multiProcessorCount = a.sms;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e)
        return e;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    default: return result(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    if (!func)
        return result(cudaErrorInvalidValue);
    if (device_captures[current_device].load() > 0) {
        fprintf(stderr, "cuemu: cudaFuncSetAttribute while a stream of device %d captures: set kernel attributes "
                        "once, before any capture\n", current_device);
        return result(cudaErrorStreamCaptureUnsupported);
    }
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > cfg().arch.optin_shared)
            return result(cudaErrorInvalidValue);
        std::lock_guard<std::mutex> hold(attributes_lock);
        max_dynamic_shared[func] = value;
    }
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return last_error;
}

const char *cudaGetErrorName(cudaError_t error)
{
    switch (error) {
#define NAME(x) case x: return #x;
    NAME(cudaSuccess) NAME(cudaErrorInvalidValue) NAME(cudaErrorMemoryAllocation) NAME(cudaErrorInitializationError)
    NAME(cudaErrorInvalidConfiguration) NAME(cudaErrorInvalidMemcpyDirection) NAME(cudaErrorNoDevice)
    NAME(cudaErrorPeerAccessUnsupported)
    NAME(cudaErrorInvalidDevice) NAME(cudaErrorInvalidResourceHandle) NAME(cudaErrorIllegalState)
    NAME(cudaErrorNotReady) NAME(cudaErrorIllegalAddress) NAME(cudaErrorLaunchOutOfResources)
    NAME(cudaErrorPeerAccessAlreadyEnabled)
    NAME(cudaErrorLaunchFailure) NAME(cudaErrorNotPermitted) NAME(cudaErrorNotSupported) NAME(cudaErrorStreamCaptureUnsupported)
    NAME(cudaErrorStreamCaptureInvalidated) NAME(cudaErrorStreamCaptureMerge) NAME(cudaErrorStreamCaptureUnmatched)
    NAME(cudaErrorStreamCaptureUnjoined) NAME(cudaErrorStreamCaptureIsolation) NAME(cudaErrorStreamCaptureImplicit)
    NAME(cudaErrorCapturedEvent) NAME(cudaErrorStreamCaptureWrongThread) NAME(cudaErrorUnknown)
#undef NAME
    }
    return "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t error)
{
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorPeerAccessUnsupported: return "peer access is not supported between these two devices";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit:
        return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread:
        return "attempt to terminate a thread-local capture sequence from another thread";
    default: return cudaGetErrorName(error);
    }
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    *total_bytes = cfg().arch.total_memory;
    *free_bytes = cfg().arch.total_memory - used_bytes[current_device];
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    if (!ptr)
        return result(cudaErrorInvalidValue);
    if (active_captures.load() > 0)   /* unsafe while a global or thread-local capture runs */
        return result(cudaErrorStreamCaptureUnsupported);
    size_t asked = size ? size : 1, bytes = allocation_bytes(asked);
    std::lock_guard<std::mutex> hold(memory_lock);
    if (used_bytes[current_device] + bytes > cfg().arch.total_memory)
        return result(cudaErrorMemoryAllocation);
    void *p = aligned_alloc(kPage, bytes);
    if (!p)
        return result(cudaErrorMemoryAllocation);
    if (bytes <= ((size_t)64 << 20))
        memset(p, 0xFF, asked);     /* cudaMalloc does not clear: NaN bytes make a missed write show */
    memset((char *)p + asked, 0xA5, kCanary);
    allocations[(uintptr_t)p] = {asked, current_device};
    used_bytes[current_device] += bytes;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (!ptr)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> hold(memory_lock);
        auto it = allocations.find((uintptr_t)ptr);
        if (it == allocations.end())
            return result(cudaErrorInvalidValue);
        used_bytes[it->second.second] -= allocation_bytes(it->second.first);
        allocations.erase(it);
    }
    census_forget((uintptr_t)ptr);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    *ptr = aligned_alloc(256, ((size ? size : 1) + 255) & ~(size_t)255);
    return *ptr ? cudaSuccess : result(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    if (flags & ~0xFu)
        return result(cudaErrorInvalidValue);
    return cudaMallocHost(ptr, size);
}

cudaError_t cudaFreeHost(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **device_ptr, void *host_ptr, unsigned int flags)
{
    if (!device_ptr || !host_ptr || flags)
        return result(cudaErrorInvalidValue);
    *device_ptr = host_ptr;     /* one address space */
    return cudaSuccess;
}

static bool peers_possible()
{
    const char *peer = getenv("KIMI_EMU_PEER");
    return !(peer && !strcmp(peer, "0"));
}

cudaError_t cudaDeviceCanAccessPeer(int *can_access, int device, int peer_device)
{
    if (!can_access)
        return result(cudaErrorInvalidValue);
    if (device < 0 || device >= cfg().devices || peer_device < 0 || peer_device >= cfg().devices)
        return result(cudaErrorInvalidDevice);
    *can_access = device != peer_device && peers_possible();
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags)
{
    static std::mutex lock;
    static std::set<std::pair<int, int>> enabled;   /* (device, peer) */
    if (flags)
        return result(cudaErrorInvalidValue);
    if (peer_device < 0 || peer_device >= cfg().devices)
        return result(cudaErrorInvalidDevice);
    if (peer_device == current_device || !peers_possible())
        return result(cudaErrorPeerAccessUnsupported);
    std::lock_guard<std::mutex> hold(lock);
    if (!enabled.insert({current_device, peer_device}).second)
        return result(cudaErrorPeerAccessAlreadyEnabled);
    return cudaSuccess;
}

static cudaError_t copy_async(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if ((unsigned)kind > cudaMemcpyDefault)
        return result(cudaErrorInvalidMemcpyDirection);
    if (!count)
        return cudaSuccess;
    if (!dst || !src)
        return result(cudaErrorInvalidValue);
    work w;
    w.kind = WORK_COPY;
    w.what = "memcpy";
    w.bytes = count;
    w.run = [dst, src, count] { memmove(dst, src, count); };
    return result(enqueue(stream, std::move(w)));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy_async(dst, src, count, kind, stream);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if (active_captures.load() > 0)
        return result(cudaErrorStreamCaptureImplicit);
    cudaError_t e = copy_async(dst, src, count, kind, nullptr);
    return e ? e : cudaStreamSynchronize(nullptr);
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    if (!count)
        return cudaSuccess;
    if (!ptr)
        return result(cudaErrorInvalidValue);
    work w;
    w.kind = WORK_MEMSET;
    w.what = "memset";
    w.bytes = count;
    w.run = [ptr, value, count] { memset(ptr, value, count); };
    return result(enqueue(stream, std::move(w)));
}

cudaError_t cudaMemset(void *ptr, int value, size_t count)
{
    if (active_captures.load() > 0)
        return result(cudaErrorStreamCaptureImplicit);
    cudaError_t e = cudaMemsetAsync(ptr, value, count, nullptr);
    return e ? e : cudaStreamSynchronize(nullptr);
}

static std::mutex streams_lock;
static std::vector<CUstream_st *> live_streams;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    if (!stream || flags > 1)
        return result(cudaErrorInvalidValue);
    CUstream_st *s = new CUstream_st;
    s->device = current_device;
    s->flags = flags;
    {
        std::lock_guard<std::mutex> hold(streams_lock);
        live_streams.push_back(s);
    }
    *stream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (!stream)
        return result(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> hold(stream->lock);
        stream->stopping = true;
        stream->changed.notify_all();
    }
    if (stream->runner.joinable())
        stream->runner.join();
    {
        std::lock_guard<std::mutex> hold(streams_lock);
        live_streams.erase(std::find(live_streams.begin(), live_streams.end(), stream));
    }  /* the queued work finishes first, as on the device */
    {
        std::lock_guard<std::mutex> hold(events_lock);
        for (CUevent_st *e : live_events)
            if (e->stream == stream)
                e->stream = nullptr;
    }
    if (stream->capture)
        device_captures[stream->device]--;
    delete stream->capture;
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    CUstream_st *s = resolve(stream);
    if (cudaError_t e = invalidate_if_capturing(s))
        return result(e);
    s->wait_for(stream_mark(s));
    if (int fault = device_faults[s->device].load())
        return result((cudaError_t)fault);
    return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    CUstream_st *s = resolve(stream);
    if (cudaError_t e = invalidate_if_capturing(s))
        return result(e);
    if (int fault = device_faults[s->device].load())
        return result((cudaError_t)fault);
    std::lock_guard<std::mutex> hold(s->lock);
    return s->finished >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void)
{
    if (active_captures.load() > 0)
        return result(cudaErrorStreamCaptureUnsupported);
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> hold(streams_lock);
        all = live_streams;
    }
    all.push_back(legacy_stream(current_device));
    for (CUstream_st *s : all)
        if (s->device == current_device)
            s->wait_for(stream_mark(s));
    return cudaSuccess;
}

cudaError_t cudaDeviceReset(void)
{
    return cudaDeviceSynchronize();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    if (!event || flags > 7)
        return result(cudaErrorInvalidValue);
    *event = new CUevent_st;
    (*event)->timing = !(flags & cudaEventDisableTiming);
    std::lock_guard<std::mutex> hold(events_lock);
    live_events.push_back(*event);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (!event)
        return result(cudaErrorInvalidResourceHandle);
    if (event->stream)
        event->stream->wait_for(event->mark);   /* the mark still refers to the event */
    {
        std::lock_guard<std::mutex> hold(events_lock);
        live_events.erase(std::find(live_events.begin(), live_events.end(), event));
    }
    delete event;
    return cudaSuccess;
}

static double now_ms()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    if (!event)
        return result(cudaErrorInvalidResourceHandle);
    CUstream_st *s = resolve(stream);
    if (capturing(stream))
        return cudaSuccess;     /* a captured record orders nothing across graphs here */
    work w;
    w.kind = WORK_EVENT;
    w.what = "event";
    w.bytes = 0;
    w.run = [event] { event->at = now_ms(); };
    cudaError_t e = enqueue(s, std::move(w));
    if (e)
        return result(e);
    event->stream = s;
    event->mark = stream_mark(s);
    event->recorded = true;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (!event)
        return result(cudaErrorInvalidResourceHandle);
    if (event->stream)
        event->stream->wait_for(event->mark);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (!event)
        return result(cudaErrorInvalidResourceHandle);
    if (!event->stream)
        return cudaSuccess;
    std::lock_guard<std::mutex> hold(event->stream->lock);
    return event->stream->finished >= event->mark ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms || !start || !end)
        return result(cudaErrorInvalidValue);
    if (!start->timing || !end->timing || !start->recorded || !end->recorded)
        return result(cudaErrorInvalidResourceHandle);
    if (cudaEventQuery(start) == cudaErrorNotReady || cudaEventQuery(end) == cudaErrorNotReady)
        return cudaErrorNotReady;
    *ms = (float)(end->at.load() - start->at.load());
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    if (!event || flags)
        return result(cudaErrorInvalidValue);
    CUstream_st *on = event->stream;
    unsigned long long mark = event->mark;
    if (!on)
        return cudaSuccess;
    work w;
    w.kind = WORK_WAIT;
    w.what = "wait event";
    w.bytes = 0;
    w.run = [on, mark] { on->wait_for(mark); };
    return result(enqueue(stream, std::move(w)));
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    if (!stream)
        return result(cudaErrorStreamCaptureUnsupported);   /* the legacy stream cannot capture */
    if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
        return result(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> hold(stream->lock);
    if (stream->capture)
        return result(cudaErrorIllegalState);
    stream->capture = new CUgraph_st;
    stream->capture_mode = mode;
    stream->capture_invalid = false;
    stream->capture_thread = std::this_thread::get_id();
    if (mode != cudaStreamCaptureModeRelaxed)
        active_captures++;
    device_captures[stream->device]++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph)
{
    if (!stream || !graph)
        return result(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> hold(stream->lock);
    if (!stream->capture)
        return result(cudaErrorIllegalState);
    if (stream->capture_mode != cudaStreamCaptureModeRelaxed && stream->capture_thread != std::this_thread::get_id())
        return result(cudaErrorStreamCaptureWrongThread);
    CUgraph_st *g = stream->capture;
    stream->capture = nullptr;
    if (stream->capture_mode != cudaStreamCaptureModeRelaxed)
        active_captures--;
    device_captures[stream->device]--;
    if (stream->capture_invalid) {
        delete g;
        *graph = nullptr;
        return result(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status)
{
    CUstream_st *s = resolve(stream);
    std::lock_guard<std::mutex> hold(s->lock);
    *status = !s->capture ? cudaStreamCaptureStatusNone
                          : s->capture_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags)
{
    if (!exec || !graph || flags)
        return result(cudaErrorInvalidValue);
    /* a model of what an instantiated graph holds on the device, so that a memory plan that
     * leaves no room for its graphs fails here as on a device: 64 KiB and 1 KiB per node */
    size_t bytes = ((size_t)64 << 10) + graph->nodes.size() * ((size_t)1 << 10);
    if (!charge(current_device, (long long)bytes))
        return result(cudaErrorMemoryAllocation);
    *exec = new CUgraphExec_st;
    (*exec)->nodes = graph->nodes;
    (*exec)->device = current_device;
    (*exec)->charged = bytes;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream)
{
    if (!exec)
        return result(cudaErrorInvalidResourceHandle);
    auto nodes = exec->nodes;   /* the replay holds the nodes even if the exec is destroyed */
    CUstream_st *s = resolve(stream);
    work w;
    w.kind = WORK_HOST;
    w.what = "graph";
    w.bytes = 0;
    w.device = s->device;
    w.run = [nodes, device = s->device] {
        if (census_on.load()) {
            std::lock_guard<std::mutex> hold(census_lock);
            census_devices[device].counts.graph_launches++;
        }
        for (auto &n : nodes)
            execute(*n, 1);
    };
    std::lock_guard<std::mutex> hold(s->lock);
    if (s->capture)
        return result(cudaErrorNotSupported);
    if (!s->runner.joinable())
        s->runner = std::thread([s] { s->run(); });
    s->queue.push_back(std::move(w));
    s->enqueued++;
    s->changed.notify_all();
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    if (!graph)
        return result(cudaErrorInvalidValue);
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    if (!exec)
        return result(cudaErrorInvalidValue);
    charge(exec->device, -(long long)exec->charged);
    delete exec;
    return cudaSuccess;
}

int cuemu_census_begin(void)
{
    std::lock_guard<std::mutex> hold(census_lock);
    if (census_on.load())
        return -1;
    census_devices.clear();
    census_devices.resize(cfg().devices);
    census_ranges.clear();
    {
        std::lock_guard<std::mutex> hold_memory(memory_lock);
        for (auto &a : allocations)
            census_ranges.push_back({a.first, a.first + allocation_bytes(a.second.first), a.second.second, true});
    }
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = census_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &census_previous_action);
    census_on = true;
    return 0;
}

int cuemu_census_read(int device, cuemu_device_census *out, cuemu_kernel_census *kernels, int max_kernels)
{
    std::lock_guard<std::mutex> hold(census_lock);
    if (device < 0 || device >= (int)census_devices.size())
        return -1;
    const device_census &d = census_devices[device];
    *out = d.counts;
    out->bytes_read = 0;
    int n = 0;
    for (auto &k : d.kernels) {
        out->bytes_read += k.second.bytes_read.load();
        if (n < max_kernels) {
            snprintf(kernels[n].name, sizeof kernels[n].name, "%s", k.first.c_str());
            kernels[n].launches = k.second.launches;
            kernels[n].bytes_read = k.second.bytes_read.load();
        }
        n++;
    }
    return n;
}

void cuemu_census_end(void)
{
    std::lock_guard<std::mutex> hold(census_lock);
    if (!census_on.load())
        return;
    census_protect(-1, PROT_READ | PROT_WRITE);
    census_on = false;
    sigaction(SIGSEGV, &census_previous_action, nullptr);
}

} /* extern "C" */

namespace emu {

bool charge(int device, long long bytes)
{
    std::lock_guard<std::mutex> hold(memory_lock);
    if (bytes > 0 && used_bytes[device] + (size_t)bytes > cfg().arch.total_memory)
        return false;
    used_bytes[device] += (size_t)bytes;    /* a release wraps back */
    return true;
}

} // namespace emu
