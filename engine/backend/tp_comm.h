/* tp_comm: the tensor-parallel communicator of the CPU backend: rank threads of one process
 * sum partial activations (all-reduce) and collect logit columns on rank 0 (gather) through
 * shared memory, and exchange slices within groups of ranks (decode context parallelism). */
#ifndef KIMI_TP_COMM_H
#define KIMI_TP_COMM_H

#include <stddef.h>

#include "engine/base/error.h"

typedef struct tp_comm tp_comm;

/* ranks threads; max_floats: the largest all-reduce; spin: see spin_barrier. */
int tp_comm_open(tp_comm **out, int ranks, size_t max_floats, int spin, kimi_err *err);
void tp_comm_close(tp_comm *c);

/* Every rank calls with its partial buf [n] (n <= max_floats); on return every rank's buf
 * holds the sum over ranks, added in rank order, so all ranks get the same bits. */
void tp_comm_allreduce_sum(tp_comm *c, int rank, float *buf, size_t n);

/* Every rank calls with its part [rows][part_cols]; row i lands in columns [col_offset,
 * col_offset + part_cols) of out_rows[i] (out_rows: rank 0's [rows] row pointers; the other
 * ranks pass NULL). Returns when every part is in place. */
void tp_comm_gather_columns(tp_comm *c, int rank, const float *part, int rows, int part_cols,
                            int col_offset, float *const *out_rows);

/* Groups of group_size consecutive ranks (group_size divides the ranks; every rank calls, each
 * with the same group_size and n). All-gather: recv [group_size][n] receives slot s = the
 * send [n] of member s of this rank's group. All-to-all: send [group_size][n] holds slot j for
 * member j, recv [group_size][n] receives slot s = what member s sent this rank. Neither may
 * alias recv with send. */
void tp_comm_group_all_gather(tp_comm *c, int rank, int group_size, const float *send, float *recv, size_t n);
void tp_comm_group_all_to_all(tp_comm *c, int rank, int group_size, const float *send, float *recv, size_t n);

/* What one rank's calls moved since the last take (a census of the collectives per step):
 * bytes are what a rank receives from the others, as a device communicator would move them. */
typedef struct {
    long allreduces;            /* tp_comm_allreduce_sum calls (with more than one rank) */
    size_t allreduce_bytes;     /* their buffers: n x 4 B each */
    long gathers;               /* tp_comm_gather_columns calls */
    long group_exchanges;       /* all-gathers and all-to-alls within groups of more than one rank */
    size_t group_bytes_in;      /* (group_size - 1) x n x 4 B each */
} tp_comm_census;

/* Rank's census since the last take, then reset; call between steps (no collective running). */
void tp_comm_take_census(tp_comm *c, int rank, tp_comm_census *out);

#endif
