/* parse: placeholder until its issue lands. */
