/* nccl: NCCL of the CPU emulation. A clique is the ranks of one communicator set; each rank's
 * collectives run on its stream's thread, in order, and the k-th collective of every rank meet:
 * the last to arrive computes the result (sums in rank order) for all of them. Send/recv meet
 * per pair of ranks in order. Group calls are enqueued at ncclGroupEnd with the sends posted
 * before any receive waits; a send copies its buffer when it runs and completes at once (NCCL
 * progresses a group's sends and receives together, so two ranks that send each other in one
 * group, the exchanges of decode context parallelism, must not wait on each other). Lazy
 * connection setup as recent NCCL does it: the connections a call needs are made at its first
 * use, which must not be inside a stream capture (ncclInvalidUsage, said on stderr): the
 * collectives' (all-reduce, all-gather) at a communicator's first collective, and a
 * point-to-point connection per peer at the first send to or receive from it (an all-reduce
 * connects no peer for ncclSend/ncclRecv). A connection holds device memory until the
 * communicator is destroyed or aborted, as NCCL's buffers do, in cudaMemGetInfo's count: a
 * model of NCCL_BUFFSIZE (4 MiB) per channel and direction over two channels, 16 MiB for the
 * collectives and 8 MiB per peer. Fault hook:
 * KIMI_EMU_NCCL_FAIL=RANK:K fails rank RANK's K-th collective (1-based): its communicator
 * reports ncclSystemError asynchronously and the collective waits, as a lost peer leaves it,
 * until ncclCommAbort. */
#include "emu.h"

#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <condition_variable>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace {

struct arrival {
    const void *send;
    void *recv;
};

struct clique {
    int ranks;
    std::mutex lock;
    std::condition_variable changed;
    std::map<unsigned long long, std::vector<arrival>> rounds;  /* collective index -> arrivals */
    std::map<unsigned long long, int> arrived, released;
    /* point to point: (from, to) -> the bytes of the posted sends, in order */
    std::map<std::pair<int, int>, std::vector<std::vector<char>>> sends;
    std::map<std::pair<int, int>, size_t> sends_taken;
    int joined = 0;
};

} // namespace

struct ncclComm {
    std::shared_ptr<clique> group;
    int rank, device;
    bool collectives_connected = false;
    std::set<int> peers_connected;                  /* point to point */
    size_t connection_bytes = 0;                    /* device memory the connections hold */
    std::atomic<bool> aborted{false};
    std::atomic<int> async_error{ncclSuccess};
    unsigned long long executed = 0;                /* collectives run so far (the stream thread's) */
    unsigned long long rounds = 0;                  /* of them, those that meet every rank (not send/recv,
                                                       which a root calls once per peer) */
    std::map<int, unsigned long long> sent_to, received_from;
};

namespace {

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

int fail_rank = -1;
unsigned long long fail_at = 0;
std::once_flag fail_parsed;

void parse_fault()
{
    const char *f = getenv("KIMI_EMU_NCCL_FAIL");
    if (f && sscanf(f, "%d:%llu", &fail_rank, &fail_at) != 2)
        emu::fatal("KIMI_EMU_NCCL_FAIL=%s: must be RANK:K", f);
}

/* The fault hook: true when this collective is the one to fail. */
bool faulted(ncclComm *c)
{
    std::call_once(fail_parsed, parse_fault);
    return c->rank == fail_rank && c->executed == fail_at;
}

void wait_aborted(ncclComm *c, std::unique_lock<std::mutex> &hold)
{
    c->group->changed.wait(hold, [c] { return c->aborted.load(); });
}

/* Runs on the rank's stream: meets the other ranks' collective of the same index; the last to
 * arrive runs combine over all arrivals. */
void meet(ncclComm *c, arrival mine, const std::function<void(std::vector<arrival> &)> &combine)
{
    clique &g = *c->group;
    std::unique_lock<std::mutex> hold(g.lock);
    ++c->executed;
    unsigned long long index = ++c->rounds;
    if (faulted(c)) {
        c->async_error = ncclSystemError;
        wait_aborted(c, hold);
        return;
    }
    std::vector<arrival> &slot = g.rounds[index];
    slot.resize(g.ranks);
    slot[c->rank] = mine;
    if (++g.arrived[index] == g.ranks) {
        combine(slot);
        g.released[index] = 1;
        g.changed.notify_all();
    } else {
        g.changed.wait(hold, [&] { return g.released.count(index) || c->aborted.load(); });
    }
    if (g.released.count(index) && ++g.released[index] == g.ranks + 1) {
        g.rounds.erase(index);
        g.arrived.erase(index);
        g.released.erase(index);
    }
}

struct pending {
    ncclComm *comm;
    cudaStream_t stream;
    emu::work w;
    bool is_send;
};
thread_local int group_depth = 0;
thread_local std::vector<pending> grouped;

/* peer: the other rank of a send or receive, -1 for a collective. */
ncclResult_t submit(ncclComm *c, cudaStream_t stream, emu::work w, bool is_send, int peer)
{
    if (!c || c->aborted)
        return ncclInvalidArgument;
    stream = emu::stream_on(stream, c->device);
    bool connected = peer < 0 ? c->collectives_connected : c->peers_connected.count(peer) > 0;
    if (emu::capturing(stream)) {
        if (!connected) {
            if (peer < 0)
                fprintf(stderr, "cuemu: NCCL: rank %d's first collective (%s) is inside a stream capture: NCCL "
                                "connects lazily and cannot do so while capturing; run one collective before "
                                "capturing\n", c->rank, w.what.c_str());
            else
                fprintf(stderr, "cuemu: NCCL: rank %d's first %s with rank %d is inside a stream capture: NCCL "
                                "connects each peer lazily and cannot do so while capturing; exchange with every "
                                "peer before capturing\n", c->rank, w.what.c_str(), peer);
            return ncclInvalidUsage;
        }
    } else if (!connected) {
        size_t bytes = (size_t)(peer < 0 ? 16 : 8) << 20;
        if (!emu::charge(c->device, (long long)bytes))
            return ncclUnhandledCudaError;  /* NCCL's cudaMalloc of its buffers failed */
        c->connection_bytes += bytes;
        if (peer < 0)
            c->collectives_connected = true;
        else
            c->peers_connected.insert(peer);
    }
    if (group_depth > 0) {
        grouped.push_back({c, stream, std::move(w), is_send});
        return ncclSuccess;
    }
    return emu::enqueue(stream, std::move(w)) ? ncclUnhandledCudaError : ncclSuccess;
}

} // namespace

namespace {

template <class T> void reduce_into(std::vector<arrival> &all, size_t count, ncclRedOp_t op)
{
    std::vector<T> out(count);
    for (size_t i = 0; i < count; i++) {
        T v = ((const T *)all[0].send)[i];
        for (size_t r = 1; r < all.size(); r++) {
            T x = ((const T *)all[r].send)[i];
            v = op == ncclSum ? (T)(v + x) : op == ncclProd ? (T)(v * x) : op == ncclMax ? (v > x ? v : x)
                                                                                         : (v < x ? v : x);
        }
        out[i] = v;
    }
    for (arrival &a : all)
        memcpy(a.recv, out.data(), count * sizeof(T));
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

static std::mutex ids_lock;
static std::map<unsigned long long, std::shared_ptr<clique>> by_id;
static unsigned long long next_id = 1;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    std::lock_guard<std::mutex> hold(ids_lock);
    memset(id, 0, sizeof *id);
    unsigned long long v = next_id++;
    memcpy(id->internal, &v, sizeof v);
    by_id[v] = nullptr;
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    unsigned long long key;
    memcpy(&key, id.internal, sizeof key);
    std::shared_ptr<clique> g;
    {
        std::lock_guard<std::mutex> hold(ids_lock);
        auto it = by_id.find(key);
        if (it == by_id.end())
            return ncclInvalidArgument;
        if (!it->second) {
            it->second = std::make_shared<clique>();
            it->second->ranks = nranks;
        }
        g = it->second;
    }
    if (g->ranks != nranks)
        return ncclInvalidArgument;
    ncclComm *c = new ncclComm;
    c->group = g;
    c->rank = rank;
    cudaGetDevice(&c->device);
    std::unique_lock<std::mutex> hold(g->lock);
    g->joined++;
    g->changed.notify_all();
    g->changed.wait(hold, [&] { return g->joined >= nranks; });   /* InitRank returns once all ranks joined */
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (!comms || ndev < 1)
        return ncclInvalidArgument;
    int devices = 0;
    cudaGetDeviceCount(&devices);
    for (int i = 0; i < ndev; i++) {
        int d = devlist ? devlist[i] : i;
        if (d < 0 || d >= devices)
            return ncclInvalidArgument;
        for (int j = 0; j < i; j++)
            if (devlist && devlist[j] == d)
                return ncclInvalidUsage;    /* duplicate GPU */
    }
    auto g = std::make_shared<clique>();
    g->ranks = ndev;
    g->joined = ndev;
    for (int i = 0; i < ndev; i++) {
        comms[i] = new ncclComm;
        comms[i]->group = g;
        comms[i]->rank = i;
        comms[i]->device = devlist ? devlist[i] : i;
    }
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    emu::charge(comm->device, -(long long)comm->connection_bytes);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    {
        std::lock_guard<std::mutex> hold(comm->group->lock);
        comm->aborted = true;
        comm->group->changed.notify_all();
    }
    emu::charge(comm->device, -(long long)comm->connection_bytes);
    comm->connection_bytes = 0;
    /* the collectives it releases still hold the communicator until their stream runs them */
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error)
{
    if (!comm || !async_error)
        return ncclInvalidArgument;
    *async_error = (ncclResult_t)comm->async_error.load();
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    *count = comm->group->ranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream)
{
    if (!sendbuff || !recvbuff || (datatype != ncclFloat32 && datatype != ncclFloat64 && datatype != ncclInt32))
        return ncclInvalidArgument;
    emu::work w;
    w.kind = emu::WORK_COLLECTIVE;
    w.what = "ncclAllReduce";
    w.bytes = count * type_size(datatype);
    w.run = [=] {
        meet(comm, {sendbuff, recvbuff}, [=](std::vector<arrival> &all) {
            if (datatype == ncclFloat32)
                reduce_into<float>(all, count, op);
            else if (datatype == ncclFloat64)
                reduce_into<double>(all, count, op);
            else
                reduce_into<int>(all, count, op);
        });
    };
    return submit(comm, stream, std::move(w), false, -1);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream)
{
    if (!sendbuff || !recvbuff)
        return ncclInvalidArgument;
    size_t bytes = sendcount * type_size(datatype);
    emu::work w;
    w.kind = emu::WORK_COLLECTIVE;
    w.what = "ncclAllGather";
    w.bytes = bytes * comm->group->ranks;
    w.run = [=] {
        meet(comm, {sendbuff, recvbuff}, [=](std::vector<arrival> &all) {
            std::vector<char> out(bytes * all.size());
            for (size_t r = 0; r < all.size(); r++)
                memcpy(out.data() + r * bytes, all[r].send, bytes);
            for (arrival &a : all)
                memcpy(a.recv, out.data(), out.size());
        });
    };
    return submit(comm, stream, std::move(w), false, -1);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    if (!comm || peer < 0 || peer >= comm->group->ranks || (!sendbuff && count))
        return ncclInvalidArgument;
    size_t bytes = count * type_size(datatype);
    emu::work w;
    w.kind = emu::WORK_COLLECTIVE;
    w.what = "ncclSend";
    w.bytes = bytes;
    w.run = [=] {
        clique &g = *comm->group;
        std::unique_lock<std::mutex> hold(g.lock);
        ++comm->executed;
        if (faulted(comm)) {
            comm->async_error = ncclSystemError;
            wait_aborted(comm, hold);
            return;
        }
        if (comm->aborted.load())   /* an aborted communicator posts nothing a peer could match */
            return;
        auto key = std::make_pair(comm->rank, peer);
        const char *from = static_cast<const char *>(sendbuff);
        g.sends[key].emplace_back(from, from + bytes);
        g.changed.notify_all();
    };
    return submit(comm, stream, std::move(w), true, peer);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream)
{
    if (!comm || peer < 0 || peer >= comm->group->ranks || (!recvbuff && count))
        return ncclInvalidArgument;
    size_t bytes = count * type_size(datatype);
    emu::work w;
    w.kind = emu::WORK_COLLECTIVE;
    w.what = "ncclRecv";
    w.bytes = bytes;
    w.run = [=] {
        clique &g = *comm->group;
        std::unique_lock<std::mutex> hold(g.lock);
        ++comm->executed;
        if (faulted(comm)) {
            comm->async_error = ncclSystemError;
            wait_aborted(comm, hold);
            return;
        }
        auto key = std::make_pair(peer, comm->rank);
        size_t index = g.sends_taken[key];
        g.changed.wait(hold, [&] { return g.sends[key].size() > index || comm->aborted.load(); });
        if (comm->aborted.load() || g.sends[key].size() <= index)
            return;
        std::vector<char> posted;
        posted.swap(g.sends[key][index]);
        if (posted.size() != bytes)
            emu::fatal("ncclRecv of %zu bytes on rank %d from rank %d, which sent %zu", bytes, comm->rank, peer,
                       posted.size());
        memcpy(recvbuff, posted.data(), bytes);
        g.sends_taken[key] = index + 1;
        g.changed.notify_all();
    };
    return submit(comm, stream, std::move(w), false, peer);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0)
        return ncclInvalidUsage;
    if (--group_depth > 0)
        return ncclSuccess;
    std::vector<pending> ops;
    ops.swap(grouped);
    /* sends first: a rank that both sends and receives in one group must not wait on a receive
     * before its own sends are posted. Each stream keeps the order of its own calls otherwise. */
    std::stable_partition(ops.begin(), ops.end(), [](const pending &p) { return p.is_send; });
    ncclResult_t status = ncclSuccess;
    for (pending &p : ops)
        if (emu::enqueue(p.stream, std::move(p.w)))
            status = ncclUnhandledCudaError;
    return status;
}

} /* extern "C" */
