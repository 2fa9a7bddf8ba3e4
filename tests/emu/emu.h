/* emu: what the parts of the CUDA emulator share (runtime.cpp, nccl.cpp, cublaslt.cpp): the
 * stream queues (a graph capture records into the graph instead), fatal reports, and the
 * census counters. */
#ifndef KIMI_EMU_EMU_H
#define KIMI_EMU_EMU_H

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace emu {

/* One unit of device work: a kernel, a copy, a collective, an event mark. */
struct work {
    std::function<void()> run;
    std::string what;
    int kind;                   /* WORK_* */
    size_t bytes;               /* what it moves (copies, collectives) */
    int device = 0;             /* of the stream it was enqueued on (set by enqueue) */
};
enum { WORK_KERNEL, WORK_COPY, WORK_MEMSET, WORK_COLLECTIVE, WORK_EVENT, WORK_WAIT, WORK_HOST };

/* Enqueues w on stream (0: the legacy stream of the current device), or records it when the
 * stream is capturing. */
cudaError_t enqueue(cudaStream_t stream, work w);
/* stream, or the legacy stream of device when stream is 0 (NCCL runs on its communicator's
 * device whatever the calling thread's current device). */
cudaStream_t stream_on(cudaStream_t stream, int device);
/* Whether stream is capturing now (for NCCL's rule on a first collective inside a capture). */
bool capturing(cudaStream_t stream);
/* Prints "cuemu: ..." and aborts: a kernel bug the emulator found (divergent barrier, bad mask,
 * deadlock). */
[[noreturn]] void fatal(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* Device memory the runtime takes besides cudaMalloc (NCCL's buffers, instantiated graphs), in
 * cudaMemGetInfo's count: bytes > 0 takes them (false, nothing taken, when the device has not
 * that much free), bytes < 0 gives them back. */
bool charge(int device, long long bytes);

/* Runs w on the calling (stream) thread, counted in the census (include/cuemu.h) while it is on;
 * replayed: a node of a graph launch. */
void execute(const work &w, int replayed);

} // namespace emu

#endif
