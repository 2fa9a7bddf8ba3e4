/* signal_pipe: the self-pipe the front ends' poll loops read: a handler that only writes the
 * signal's number, so signals are handled in the loop, never inside the handler. */
#ifndef KIMI_UI_SIGNAL_PIPE_H
#define KIMI_UI_SIGNAL_PIPE_H

/* Route signals[0..n) to the pipe (made on the first call). restart: SA_RESTART, so that
 * blocking calls resume; without it a blocking read returns EINTR. SIGPIPE is ignored.
 * 0, or -1 when no pipe could be made. */
int signal_pipe_install(const int *signals, int n, int restart);
/* Readable (POLLIN) while a signal waits. */
int signal_pipe_fd(void);
/* The next signal caught, or 0. */
int signal_pipe_take(void);

#endif
