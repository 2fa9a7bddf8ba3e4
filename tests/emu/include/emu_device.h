/* The device side of the CPU emulation of CUDA (tests/emu): the names kernels use, mapped onto
 * the fiber runtime of tests/emu/runtime.cpp. Each CUDA thread is a fiber that runs until it
 * reaches __syncthreads or a warp collective; the runtime checks the barrier and the masks and
 * names the source line (kernels are translated with #line, so __FILE__/__LINE__ are the .cu's). */
#ifndef KIMI_EMU_DEVICE_H
#define KIMI_EMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <chrono>
#include <functional>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emu_half.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __grid_constant__
#define __launch_bounds__(...)
#define __constant__
#define __restrict__ __restrict
/* one copy per worker thread = one per running block (a block never leaves its worker) */
#define __shared__ static thread_local

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(8) int2 { int x, y; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) double2 { double x, y; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }

extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread uint3 blockDim;
extern __thread uint3 gridDim;
constexpr int warpSize = 32;

namespace emu {

enum warp_op_kind { WARP_SHFL, WARP_SHFL_UP, WARP_SHFL_DOWN, WARP_SHFL_XOR, WARP_BALLOT, WARP_SYNC, WARP_MATCH_ANY,
                    WARP_REDUCE_ADD, WARP_REDUCE_MIN, WARP_REDUCE_MAX, WARP_REDUCE_AND, WARP_REDUCE_OR,
                    WARP_REDUCE_XOR };
enum barrier_kind { BARRIER_PLAIN, BARRIER_COUNT, BARRIER_AND, BARRIER_OR };

/* Blocks the calling fiber until the block's live threads all reach a barrier; returns the
 * count/and/or of pred over them. */
int syncthreads(const char *file, int line, int kind, int pred);
/* Blocks until every lane of mask reaches a collective of the same kind and mask; returns this
 * lane's result (64 bits of a value, a ballot or a reduction). */
uint64_t warp_collective(const char *file, int line, int kind, unsigned mask, uint64_t value, int arg, int width,
                         int is_signed);
void *dynamic_shared();
unsigned active_mask();

template <class T> inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    return bits;
}
template <class T> inline T from_bits(uint64_t bits)
{
    T v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

struct launch_desc {
    const void *func;
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shared;
    struct CUstream_st *stream;
};
/* Checks the configuration (the real launch errors, kept for cudaGetLastError) and enqueues
 * body, run by every thread of every block. */
void submit(const launch_desc &d, std::function<void()> body);

template <class... P> struct launcher {
    void (*kernel)(P...);
    launch_desc d;
    template <class... A> void operator()(A &&...args) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        /* the arguments by value, as the launch copies them (a graph replays these copies) */
        std::tuple<std::decay_t<P>...> copy(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
        auto k = kernel;
        submit(d, [k, copy] { std::apply(k, copy); });
    }
};
template <class... P>
launcher<P...> make_launcher(void (*kernel)(P...), const char *name, const char *file, int line, dim3 grid, dim3 block,
                             size_t shared = 0, struct CUstream_st *stream = nullptr)
{
    return launcher<P...>{kernel, {(const void *)kernel, name, file, line, grid, block, shared, stream}};
}
template <class T> T *dynamic_shared_as() { return static_cast<T *>(dynamic_shared()); }

} // namespace emu

#define __syncthreads() ((void)emu::syncthreads(__FILE__, __LINE__, emu::BARRIER_PLAIN, 1))
#define __syncthreads_count(p) emu::syncthreads(__FILE__, __LINE__, emu::BARRIER_COUNT, (p) != 0)
#define __syncthreads_and(p) emu::syncthreads(__FILE__, __LINE__, emu::BARRIER_AND, (p) != 0)
#define __syncthreads_or(p) emu::syncthreads(__FILE__, __LINE__, emu::BARRIER_OR, (p) != 0)

namespace emu {
template <class T> inline T shfl(const char *f, int l, int kind, unsigned mask, T v, int arg, int width = 32)
{
    return from_bits<T>(warp_collective(f, l, kind, mask, to_bits(v), arg, width, 0));
}
template <class T> inline T reduce(const char *f, int l, int kind, unsigned mask, T v)
{
    return (T)warp_collective(f, l, kind, mask, (uint64_t)(int64_t)v, 0, 32, std::is_signed<T>::value);
}
} // namespace emu
#define __shfl_sync(mask, ...) emu::shfl(__FILE__, __LINE__, emu::WARP_SHFL, mask, __VA_ARGS__)
#define __shfl_up_sync(mask, ...) emu::shfl(__FILE__, __LINE__, emu::WARP_SHFL_UP, mask, __VA_ARGS__)
#define __shfl_down_sync(mask, ...) emu::shfl(__FILE__, __LINE__, emu::WARP_SHFL_DOWN, mask, __VA_ARGS__)
#define __shfl_xor_sync(mask, ...) emu::shfl(__FILE__, __LINE__, emu::WARP_SHFL_XOR, mask, __VA_ARGS__)
#define __ballot_sync(mask, p) \
    ((unsigned)emu::warp_collective(__FILE__, __LINE__, emu::WARP_BALLOT, mask, (p) != 0, 0, 32, 0))
#define __any_sync(mask, p) (__ballot_sync(mask, p) != 0u)
#define __all_sync(mask, p) (__ballot_sync(mask, p) == (unsigned)(mask))
#define __syncwarp(...) ((void)emu::warp_collective(__FILE__, __LINE__, emu::WARP_SYNC, (__VA_ARGS__ + 0) ? (__VA_ARGS__ + 0) : 0xFFFFFFFFu, 0, 0, 32, 0))
#define __match_any_sync(mask, v) \
    ((unsigned)emu::warp_collective(__FILE__, __LINE__, emu::WARP_MATCH_ANY, mask, emu::to_bits(v), 0, 32, 0))
#define __reduce_add_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_ADD, mask, v)
#define __reduce_min_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_MIN, mask, v)
#define __reduce_max_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_MAX, mask, v)
#define __reduce_and_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_AND, mask, v)
#define __reduce_or_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_OR, mask, v)
#define __reduce_xor_sync(mask, v) emu::reduce(__FILE__, __LINE__, emu::WARP_REDUCE_XOR, mask, v)
inline unsigned __activemask() { return emu::active_mask(); }

/* fences: real threads on x86 with sequentially consistent atomics */
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

/* A spin that waits for another device's kernel (another stream's thread) gives up the CPU: with
 * a few cores shared by many threads, a busy spin would starve the thread it waits for. */
inline void __nanosleep(unsigned ns) { std::this_thread::sleep_for(std::chrono::nanoseconds(ns)); }

template <class T> inline T __ldg(const T *p) { return *p; }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldca(const T *p) { return *p; }
template <class T> inline T __ldcs(const T *p) { return *p; }
template <class T> inline T __ldlu(const T *p) { return *p; }
template <class T> inline void __stcg(T *p, T v) { *p = v; }
template <class T> inline void __stcs(T *p, T v) { *p = v; }
template <class T> inline void __stwt(T *p, T v) { *p = v; }

inline float __uint_as_float(unsigned u) { return emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return (unsigned)emu::to_bits(f); }
inline float __int_as_float(int i) { return emu::from_bits<float>((uint32_t)i); }
inline int __float_as_int(float f) { return (int)(uint32_t)emu::to_bits(f); }
inline double __longlong_as_double(long long v) { return emu::from_bits<double>((uint64_t)v); }
inline long long __double_as_longlong(double d) { return (long long)emu::to_bits(d); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v ? __builtin_clz((unsigned)v) : 32; }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline unsigned __brev(unsigned v)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        r |= ((v >> i) & 1u) << (31 - i);
    return r;
}
inline float __saturatef(float v) { return v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v; }
inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }

/* CUDA's integer min/max overloads (device code calls them unqualified) */
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

/* atomics: real atomics on the shared address space */
template <class T> inline T __emu_atomic_add(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline int atomicAdd(int *p, int v) { return __emu_atomic_add(p, v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __emu_atomic_add(p, v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return __emu_atomic_add(p, v); }
inline float atomicAdd(float *p, float v)
{
    float old = *p, next;
    do {
        next = old + v;
    } while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
inline double atomicAdd(double *p, double v)
{
    double old = *p, next;
    do {
        next = old + v;
    } while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
inline __half atomicAdd(__half *p, __half v)
{
    unsigned short old = __atomic_load_n(&p->__x, __ATOMIC_SEQ_CST), next;
    do {
        next = __float2half((float)__ushort_as_half(old) + (float)v).__x;
    } while (!__atomic_compare_exchange_n(&p->__x, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return __ushort_as_half(old);
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16 *p, __nv_bfloat16 v)
{
    unsigned short old = __atomic_load_n(&p->__x, __ATOMIC_SEQ_CST), next;
    do {
        next = __float2bfloat16((float)__ushort_as_bfloat16(old) + (float)v).__x;
    } while (!__atomic_compare_exchange_n(&p->__x, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return __ushort_as_bfloat16(old);
}
template <class T> inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicExch(T *p, T v)
{
    T old;
    __atomic_exchange(p, &v, &old, __ATOMIC_SEQ_CST);
    return old;
}
template <class T> inline T atomicCAS(T *p, T compare, T v)
{
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return compare;
}
template <class T> inline T atomicMin(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
template <class T> inline T atomicMax(T *p, T v)
{
    T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    return old;
}
template <class T> inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
template <class T> inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicInc(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST), next;
    do {
        next = old >= limit ? 0u : old + 1u;
    } while (!__atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}
inline unsigned atomicDec(unsigned *p, unsigned limit)
{
    unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST), next;
    do {
        next = (old == 0u || old > limit) ? limit : old - 1u;
    } while (!__atomic_compare_exchange_n(p, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}

/* the C++ overload of the runtime (a kernel's address, not a void pointer) */
template <class T> inline cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value)
{
    return cudaFuncSetAttribute((const void *)entry, attr, value);
}

#endif
