/* signal_pipe: the handler, the pipe and its reader. */
#include "ui/signal_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

static int pipe_fds[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    char byte = (char)sig;
    ssize_t ignored = write(pipe_fds[1], &byte, 1);
    (void)ignored;
    errno = saved;
}

int signal_pipe_install(const int *signals, int n, int restart)
{
    if (pipe_fds[0] < 0 && pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK))
        return -1;
    struct sigaction sa = {.sa_handler = on_signal, .sa_flags = restart ? SA_RESTART : 0};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < n; i++)
        sigaction(signals[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int signal_pipe_fd(void) { return pipe_fds[0]; }

int signal_pipe_take(void)
{
    char byte;
    return read(pipe_fds[0], &byte, 1) == 1 ? byte : 0;
}
