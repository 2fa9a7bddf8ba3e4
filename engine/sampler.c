/* sampler: placeholder until its issue lands. */
