/* backend_cpu: placeholder until its issue lands. */
