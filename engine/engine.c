/* engine: placeholder until its issue lands. */
