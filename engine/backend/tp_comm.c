/* tp_comm: each rank publishes a pointer to its buffer; after a barrier rank r sums slice r of
 * every buffer (ranks 0..N-1 in order) into a shared result, and after a second barrier every
 * rank copies the result back. */
#include "engine/backend/tp_comm.h"

#include <stdlib.h>
#include <string.h>

#include "engine/backend/spin_barrier.h"

enum { MAX_RANKS = 8 };

struct tp_comm {
    int ranks;
    size_t max_floats;
    spin_barrier barrier;
    float *partial[MAX_RANKS];  /* each rank's buffer during an all-reduce */
    float *result;              /* [max_floats] */
    float *const *gather_out;   /* rank 0's row pointers during a gather */
    const float *sent[MAX_RANKS]; /* each rank's send buffer during a group exchange */
    tp_comm_census census[MAX_RANKS]; /* each written by its own rank only */
};

int tp_comm_open(tp_comm **out, int ranks, size_t max_floats, int spin, kimi_err *err)
{
    *out = NULL;
    if (ranks < 1 || ranks > MAX_RANKS)
        return kimi_fail(err, KIMI_ERR_USAGE, "tp %d: must be between 1 and %d", ranks, MAX_RANKS);
    tp_comm *c = calloc(1, sizeof *c);
    if (!c || (ranks > 1 && !(c->result = malloc(max_floats * sizeof *c->result)))) {
        free(c);
        return kimi_fail(err, KIMI_ERR_NOMEM, "out of memory for the all-reduce buffer (%zu floats)", max_floats);
    }
    c->ranks = ranks;
    c->max_floats = max_floats;
    spin_barrier_init(&c->barrier, ranks, spin);
    *out = c;
    return 0;
}

void tp_comm_close(tp_comm *c)
{
    if (!c)
        return;
    spin_barrier_destroy(&c->barrier);
    free(c->result);
    free(c);
}

void tp_comm_allreduce_sum(tp_comm *c, int rank, float *buf, size_t n)
{
    if (c->ranks == 1)
        return;
    c->census[rank].allreduces++;
    c->census[rank].allreduce_bytes += n * sizeof *buf;
    c->partial[rank] = buf;
    spin_barrier_wait(&c->barrier);
    size_t begin = n * (size_t)rank / (size_t)c->ranks, end = n * (size_t)(rank + 1) / (size_t)c->ranks;
    for (size_t i = begin; i < end; i++) {
        float sum = c->partial[0][i];
        for (int r = 1; r < c->ranks; r++)
            sum += c->partial[r][i];
        c->result[i] = sum;
    }
    spin_barrier_wait(&c->barrier);
    memcpy(buf, c->result, n * sizeof *buf);
    /* The next call rewrites result only after everyone has passed its first barrier. */
}

void tp_comm_gather_columns(tp_comm *c, int rank, const float *part, int rows, int part_cols,
                            int col_offset, float *const *out_rows)
{
    c->census[rank].gathers++;
    if (rank == 0)
        c->gather_out = out_rows;
    spin_barrier_wait(&c->barrier);
    for (int i = 0; i < rows; i++)
        memcpy(c->gather_out[i] + col_offset, part + (size_t)i * part_cols, (size_t)part_cols * sizeof *part);
    spin_barrier_wait(&c->barrier);
}

/* Every rank publishes its send buffer; after a barrier each copies its slots out of its
 * group's buffers; the second barrier keeps the buffers alive until all have copied. */
static void group_exchange(tp_comm *c, int rank, int group_size, const float *send, float *recv, size_t n,
                           int all_to_all)
{
    if (group_size > 1) {
        c->census[rank].group_exchanges++;
        c->census[rank].group_bytes_in += (size_t)(group_size - 1) * n * sizeof *recv;
    }
    c->sent[rank] = send;
    spin_barrier_wait(&c->barrier);
    int first = rank - rank % group_size, member = rank % group_size;
    for (int s = 0; s < group_size; s++)
        memcpy(recv + (size_t)s * n, c->sent[first + s] + (all_to_all ? (size_t)member * n : 0), n * sizeof *recv);
    spin_barrier_wait(&c->barrier);
}

void tp_comm_group_all_gather(tp_comm *c, int rank, int group_size, const float *send, float *recv, size_t n)
{
    group_exchange(c, rank, group_size, send, recv, n, 0);
}

void tp_comm_group_all_to_all(tp_comm *c, int rank, int group_size, const float *send, float *recv, size_t n)
{
    group_exchange(c, rank, group_size, send, recv, n, 1);
}

void tp_comm_take_census(tp_comm *c, int rank, tp_comm_census *out)
{
    *out = c->census[rank];
    memset(&c->census[rank], 0, sizeof c->census[rank]);
}
