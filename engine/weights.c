/* weights: placeholder until its issue lands. */
