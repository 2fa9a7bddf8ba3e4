/* numeric: placeholder until its issue lands. */
