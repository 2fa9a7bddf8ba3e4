/* test_ui_input: the full-screen view's line editor without curses: editing by grapheme
 * cluster, Emacs kills and yank, pasted text cleaned, layout and cursor, line moves, the
 * history file (shared with the plain REPL) and Ctrl-R search. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ui/input.h"

static const char *text(input *in) { return input_text(in, NULL); }

static void test_insert_and_clusters(void)
{
    input *in = input_new();
    const char *mixed = "a\xe4\xb8\xad" "e\xcc\x81" "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd" "b"; /* a 中 é 👍🏽 b */
    input_insert(in, mixed, strlen(mixed));
    CHECK_STR(text(in), "a中e\xcc\x81👍🏽b");
    CHECK_INT(input_cursor(in), 16);
    input_edit_apply(in, INPUT_LEFT);  /* before b */
    input_edit_apply(in, INPUT_LEFT);  /* before 👍🏽: one cluster of 8 bytes */
    CHECK_INT(input_cursor(in), 7);
    input_edit_apply(in, INPUT_LEFT);  /* before é (e + combining acute) */
    CHECK_INT(input_cursor(in), 4);
    input_edit_apply(in, INPUT_DELETE);
    CHECK_STR(text(in), "a中👍🏽b");
    input_edit_apply(in, INPUT_BACKSPACE);
    CHECK_STR(text(in), "a👍🏽b");
    CHECK_INT(input_cursor(in), 1);
    input_edit_apply(in, INPUT_RIGHT);
    CHECK_INT(input_cursor(in), 9);
    /* pasted text: CR LF and CR are newlines, tabs kept, escapes (C0 and C1) dropped, and each
       byte of bad UTF-8 U+FFFD, with what follows it kept */
    input_clear(in);
    const char pasted[] = "x\r\ny\rz\tq\033[31m\xff\xc2\x85!\xfe bad";
    input_insert(in, pasted, sizeof pasted - 1);
    CHECK_STR(text(in), "x\ny\nz\tq[31m\xEF\xBF\xBD!\xEF\xBF\xBD bad");
    /* /edit and history put text in through the same cleaning, the cursor at its end */
    input_set_text(in, pasted, sizeof pasted - 1);
    CHECK_STR(text(in), "x\ny\nz\tq[31m\xEF\xBF\xBD!\xEF\xBF\xBD bad");
    CHECK_INT(input_cursor(in), strlen("x\ny\nz\tq[31m\xEF\xBF\xBD!\xEF\xBF\xBD bad"));
    CHECK(!input_is_empty(in));
    /* the cursor put at a byte (Ctrl-O keeps its place when a paste unfolds): clamped to the
       text, and back to the start of a character it falls inside */
    input_set_text(in, "a\xe4\xb8\xad" "b", 5);
    input_set_cursor(in, 4);
    CHECK_INT(input_cursor(in), 4);
    input_set_cursor(in, 2);
    CHECK_INT(input_cursor(in), 1);
    input_set_cursor(in, 99);
    CHECK_INT(input_cursor(in), 5);
    input_clear(in);
    CHECK(input_is_empty(in));
    input_free(in);
}

/* A tab is shown to the next stop of 8 from the row's start, cut at the row's end, and the
 * cursor after it stands there. */
static void test_tabs(void)
{
    input *in = input_new();
    int cr, cc;
    input_insert(in, "ab\tc", 4);
    input_edit_apply(in, INPUT_LEFT);  /* before c: after the tab */
    input_layout(in, 80, NULL, 0, &cr, &cc);
    CHECK_INT(cc, INPUT_PROMPT_WIDTH + 8);
    input_edit_apply(in, INPUT_LEFT);  /* before the tab: one step */
    CHECK_INT(input_cursor(in), 2);
    /* a row of 10 columns: "abcdefghi" then a tab fills the one column left */
    input_set_text(in, "abcdefghi\tz", 11);
    input_row rows[4];
    int n = input_layout(in, 10 + INPUT_PROMPT_WIDTH, rows, 4, &cr, &cc);
    CHECK_INT(n, 2);
    CHECK_INT(rows[0].end, 10);  /* the tab ends the first row */
    CHECK_INT(cr, 1);
    CHECK_INT(cc, INPUT_PROMPT_WIDTH + 1);
    input_free(in);
}

static void test_kills_and_words(void)
{
    input *in = input_new();
    input_set_text(in, "hello big world\nsecond line", 27);
    input_edit_apply(in, INPUT_LINE_START);
    CHECK_INT(input_cursor(in), 16);
    input_edit_apply(in, INPUT_KILL_TO_END);
    CHECK_STR(text(in), "hello big world\n");
    input_edit_apply(in, INPUT_YANK);
    CHECK_STR(text(in), "hello big world\nsecond line");
    input_edit_apply(in, INPUT_LINE_START);
    input_edit_apply(in, INPUT_LEFT);        /* end of the first line */
    CHECK_INT(input_cursor(in), 15);
    input_edit_apply(in, INPUT_KILL_TO_END);  /* at a line end: joins the lines */
    CHECK_STR(text(in), "hello big worldsecond line");
    input_edit_apply(in, INPUT_WORD_LEFT);
    CHECK_INT(input_cursor(in), 10);
    input_edit_apply(in, INPUT_WORD_LEFT);
    CHECK_INT(input_cursor(in), 6);
    input_edit_apply(in, INPUT_WORD_RIGHT);
    CHECK_INT(input_cursor(in), 9);
    input_edit_apply(in, INPUT_KILL_WORD_BACK);
    CHECK_STR(text(in), "hello  worldsecond line");
    input_edit_apply(in, INPUT_KILL_TO_START);
    CHECK_STR(text(in), " worldsecond line");
    input_edit_apply(in, INPUT_LINE_END);
    CHECK_INT(input_cursor(in), 17);
    input_free(in);
}

static void test_layout_and_lines(void)
{
    input *in = input_new();
    input_row rows[8];
    int r, c;
    CHECK_INT(input_layout(in, 10, rows, 8, &r, &c), 1);
    CHECK_INT(r, 0);
    CHECK_INT(c, INPUT_PROMPT_WIDTH);
    /* width 10: 8 columns after the prompt; a wide character never straddles the edge */
    input_set_text(in, "abcdefg中xy\nz", 15);
    int n = input_layout(in, 10, rows, 8, &r, &c);
    CHECK_INT(n, 3);
    CHECK_INT(rows[0].start, 0);
    CHECK_INT(rows[0].end, 7);          /* "abcdefg": 中 would end at column 11 */
    CHECK_INT(rows[1].start, 7);
    CHECK_INT(rows[1].end, 12);         /* "中xy" */
    CHECK_INT(rows[2].start, 13);
    CHECK_INT(r, 2);
    CHECK_INT(c, 3);
    CHECK(input_line_up(in, 10));       /* column 3 is inside 中 (columns 2-3): before it */
    CHECK_INT(input_cursor(in), 7);
    CHECK(input_line_up(in, 10));       /* offset 7 is the start of row 1: column 2 */
    CHECK_INT(input_cursor(in), 0);
    CHECK(!input_line_up(in, 10));      /* the first row: the caller walks the history */
    CHECK(input_line_down(in, 10));
    CHECK(input_line_down(in, 10));
    CHECK(!input_line_down(in, 10));
    /* a full last row puts the cursor on a fresh row */
    input_set_text(in, "abcdefgh", 8);
    n = input_layout(in, 10, rows, 8, &r, &c);
    CHECK_INT(n, 2);
    CHECK_INT(r, 1);
    CHECK_INT(c, INPUT_PROMPT_WIDTH);
    input_free(in);
}

static int file_mode(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (int)(st.st_mode & 07777);
}

static void test_history(void)
{
    char path[] = "/tmp/test_ui_input_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *file = "first\nmulti\\\nline\nlast\n";
    CHECK_INT(write(fd, file, strlen(file)), (long long)strlen(file));
    close(fd);
    input *in = input_new();
    input_history_load(in, path);
    CHECK_INT(input_history_count(in), 3);
    input_set_text(in, "typing", 6);
    CHECK(input_history_prev(in));
    CHECK_STR(text(in), "last");
    CHECK(input_history_prev(in));
    CHECK_STR(text(in), "multi\nline");
    CHECK(input_history_prev(in));
    CHECK(!input_history_prev(in));
    CHECK_STR(text(in), "first");
    CHECK(input_history_next(in));
    CHECK(input_history_next(in));
    CHECK(input_history_next(in));
    CHECK_STR(text(in), "typing");        /* what was being typed comes back */
    CHECK(!input_history_next(in));
    CHECK_INT(chmod(path, 0644), 0);  /* a file an older kimi-chat left readable */
    input_history_add(in, "two\nlines", 9);
    input_history_add(in, "two\nlines", 9); /* the newest is not repeated */
    CHECK_INT(input_history_count(in), 4);
    CHECK_INT(file_mode(path), 0600);
    input_free(in);
    /* the file took it in the same format; a fresh editor reads it back */
    in = input_new();
    input_history_load(in, path);
    CHECK_INT(input_history_count(in), 4);
    CHECK(input_history_prev(in));
    CHECK_STR(text(in), "two\nlines");
    input_free(in);
    unlink(path);

    /* A new history file is 0600 whatever the umask (issue 18: it was 0644, the readline
       REPL's 0600, and it holds what the user typed). */
    mode_t mask = umask(022);
    in = input_new();
    input_history_load(in, path);
    input_history_add(in, "private", 7);
    input_free(in);
    umask(mask);
    CHECK_INT(file_mode(path), 0600);
    unlink(path);
}

static void test_search(void)
{
    input *in = input_new();
    input_history_load(in, NULL);
    input_history_add(in, "what time is it", 15);
    input_history_add(in, "list the garden", 15);
    input_history_add(in, "what is the time now", 20);
    input_set_text(in, "draft", 5);
    input_search_start(in);
    CHECK(input_searching(in));
    input_search_type(in, "ti", 2);
    CHECK_STR(text(in), "what is the time now");
    CHECK_INT(input_cursor(in), 12);
    input_search_type(in, "me", 2);
    CHECK_STR(input_search_query(in), "time");
    CHECK_STR(text(in), "what is the time now");
    input_search_older(in);
    CHECK_STR(text(in), "what time is it");
    input_search_older(in);
    CHECK(input_search_failed(in));         /* no older match: the last one stays */
    CHECK_STR(text(in), "what time is it");
    input_search_cancel(in);
    CHECK(!input_searching(in));
    CHECK_STR(text(in), "draft");
    input_search_start(in);
    input_search_type(in, "garden", 6);
    input_search_backspace(in);
    CHECK_STR(input_search_query(in), "garde");
    input_search_accept(in);
    CHECK(!input_searching(in));
    CHECK_STR(text(in), "list the garden");
    input_search_start(in);
    input_search_type(in, "zzz", 3);
    CHECK(input_search_failed(in));
    CHECK_STR(text(in), "list the garden");
    input_search_cancel(in);
    input_free(in);
}

int main(void)
{
    test_insert_and_clusters();
    test_tabs();
    test_kills_and_words();
    test_layout_and_lines();
    test_history();
    test_search();
    return check_finish();
}
