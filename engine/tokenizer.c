/* tokenizer: placeholder until its issue lands. */
