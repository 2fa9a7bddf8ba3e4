/* chat: placeholder until its issue lands. */
