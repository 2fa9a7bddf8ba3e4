/* safetensors: placeholder until its issue lands. */
