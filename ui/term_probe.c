/* term_probe: cursor position reports after sample clusters, read in raw mode with a timeout. */
#include "ui/term_probe.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "engine/base/monotonic.h"

#define THUMBS_TONE "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD"              /* 👍🏽: 2 joined, 4 apart */
#define HEART_VS16 "\xE2\x9D\xA4\xEF\xB8\x8F"                       /* ❤️: 2 widened, 1 not */
#define ZWJ_PAIR "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"     /* 👨‍👩: 2 joined, 4 apart */

void term_probe_decide(int thumbs_col, int heart_col, int pair_col, text_terminal *t)
{
    *t = (text_terminal){
        .splits_modifiers = thumbs_col - 1 > 2,
        .narrow_vs16 = heart_col - 1 < 2,
        .splits_zwj = pair_col - 1 > 2,
    };
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k <= 0)
            return -1;
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

int term_probe_clusters(int in_fd, int out_fd, int timeout_ms, text_terminal *t)
{
    struct termios saved, raw;
    if (tcgetattr(in_fd, &saved))
        return -1;
    raw = saved;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(in_fd, TCSANOW, &raw))
        return -1;
    static const char ask[] = "\r" THUMBS_TONE "\033[6n\r" HEART_VS16 "\033[6n\r" ZWJ_PAIR "\033[6n\r\033[K";
    int cols[3], got = 0;
    if (write_all(out_fd, ask, sizeof ask - 1) == 0) {
        char buf[256];
        size_t len = 0;
        double deadline = monotonic_seconds() + timeout_ms / 1000.0;
        while (got < 3) {
            long left = (long)((deadline - monotonic_seconds()) * 1000.0);
            struct pollfd p = {.fd = in_fd, .events = POLLIN};
            if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                break;
            ssize_t k = read(in_fd, buf + len, sizeof buf - 1 - len);
            if (k <= 0)
                break;
            len += (size_t)k;
            buf[len] = 0;
            /* take every complete reply ESC [ row ; col R, drop what came before it */
            char *r;
            while (got < 3 && (r = strchr(buf, 'R'))) {
                char *esc = r;
                while (esc > buf && *esc != '\033')
                    esc--;
                int row, col;
                if (*esc == '\033' && sscanf(esc, "\033[%d;%dR", &row, &col) == 2)
                    cols[got++] = col;
                size_t used = (size_t)(r + 1 - buf);
                memmove(buf, r + 1, len - used + 1);
                len -= used;
            }
            if (len == sizeof buf - 1)
                len = 0, buf[0] = 0;
        }
    }
    tcsetattr(in_fd, TCSANOW, &saved);
    if (got < 3)
        return -1;
    term_probe_decide(cols[0], cols[1], cols[2], t);
    return 0;
}
