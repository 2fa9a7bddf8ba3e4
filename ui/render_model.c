/* render_model: blocks with per-width layout caches, fold state by epochs (so global changes
 * are O(1)), an anchor-based scroll position (block, row) and frames hashed row by row. */
#include "ui/render_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/base/array.h"
#include "ui/markdown.h"
#include "ui/search.h"
#include "ui/search_marks.h"
#include "ui/styled_lines.h"
#include "ui/text_width.h"
#include "ui/theme.h"

/* The search marks of a text's lines, kept while the search and the layout stay the same (the
 * lines before the layout's checkpoint), or the block too (those after it, which a streamed
 * token re-lays out): a frame costs a lookup per row, not a search. */
typedef struct {
    unsigned gen, epoch;   /* valid for this search generation and layout epoch */
    uint32_t version;      /* lines from tail on are valid for this block version only */
    size_t tail;
    int32_t *first;        /* [cap] a line's first mark in marks; -1: not looked for yet */
    uint32_t *count;       /* [cap] its marks */
    size_t cap;
    search_mark *marks;    /* [n] */
    size_t n, cap_marks;
} line_marks;

/* One text laid out at one width, resumable after appends. */
typedef struct {
    styled_lines lines;
    md_checkpoint cp;
    int width;         /* 0: never laid out */
    size_t laid_len;   /* text bytes covered by lines */
    unsigned epoch;    /* bumped when the layout starts afresh (lines before cp.n_lines are
                          otherwise never rewritten) */
    line_marks marks;
} text_cache;

enum { SHOW_HIDDEN, SHOW_COLLAPSED, SHOW_EXPANDED };

/* A run of a block's rows taken from lines[from .. from + n). */
typedef struct {
    const styled_lines *src;
    uint32_t from, n;
    int boxed;          /* inside the tool box: side borders added */
    int lead;           /* the rows are shifted right two columns, the first one after "→ " */
} segment;

enum { MAX_SEGMENTS = 6 };

typedef struct {
    rm_block_kind kind;
    strbuf text;            /* message text; a tool call's arguments */
    strbuf result;          /* a tool call's result */
    char *name, *call_id, *state_label;
    rm_tool_state tool_state;
    double seconds;         /* reasoning or tool duration, < 0 unknown */
    int tokens;             /* reasoning tokens, < 0 unknown */
    int live;
    int turn_start;         /* first block of an assistant turn: "kimi" goes on it */
    int gap;                /* a blank row above (a user message after others) */
    int fold_show;          /* SHOW_* set by toggle_fold, valid while fold_epoch matches */
    unsigned fold_epoch;
    uint32_t version;       /* bumped by every change */

    text_cache body;        /* the text (args: as shown) */
    text_cache res;         /* tool result */
    strbuf shown_args;      /* a tool call's arguments as laid out (pretty or raw) */
    styled_lines deco;      /* generated rows: gap, headers, box borders, hints */

    segment seg[MAX_SEGMENTS];
    int n_seg;
    int rows;
    int key_width, key_show; /* the layout above is for this width, show state ... */
    uint32_t key_version;    /* ... and version; key_width 0: none yet */
} block;

typedef struct {
    rm_span *spans;
    size_t n_spans, cap_spans;
    rm_row *rows;
    size_t *start;          /* [height + 1] first span of each row while a frame is built */
    uint64_t *hash;         /* [height] of the previous frame */
    int height;             /* of rows/hash; 0 before the first frame */
    rm_frame frame;
    int last_block;         /* the last block shown, -1 when rows were left empty */
    int repaint;            /* the next frame marks every row changed */
} frame_store;

struct render_model {
    block **blocks;
    int n_blocks;
    size_t cap_blocks;
    int *users;             /* indexes of user blocks, ascending */
    int n_users;
    size_t cap_users;
    int width, height;
    rm_reasoning_mode reasoning_mode;
    unsigned reasoning_epoch;
    int tools_expanded;
    unsigned tools_epoch;
    int top_block, top_row; /* the anchor: the first visible row, when not following */
    int following;
    int new_below;
    int focused;
    int dirty;
    frame_store f;
    strbuf scratch;

    /* search highlighting (render_model_set_search) */
    strbuf hl_text;         /* the query as given; empty: off */
    search_query hl_query;
    int hl_current_text, hl_current_ordinal;
    unsigned hl_gen;        /* bumped by every change of the above */
    search_marks hl_marks;
    struct {
        unsigned gen;       /* the current match located for this generation, ... */
        int block, width;   /* ... block, width ... */
        unsigned epoch;     /* ... and layout epoch; gen 0: never */
        uint32_t version;   /* the block's version when last looked at: while it changes the
                               match is looked for again unless it is on lines that cannot */
        int found;
        uint32_t from, to;  /* bytes of its lines' text */
        size_t last_line;   /* the line its end is on */
        size_t counted_lines; /* lines that cannot change, searched: ... */
        int counted;        /* ... the matches on them, all before the current one */
    } hl_cur;
};

static const char gutter_marker[] = "▌";

render_model *render_model_new(void)
{
    render_model *rm = calloc(1, sizeof *rm);
    if (!rm)
        return NULL;
    rm->width = 80;
    rm->height = 24;
    rm->following = 1;
    rm->focused = -1;
    rm->dirty = 1;
    rm->reasoning_epoch = rm->tools_epoch = 1;
    rm->f.last_block = -1;
    rm->hl_current_text = -1;
    return rm;
}

static void text_cache_free(text_cache *c)
{
    styled_lines_free(&c->lines);
    free(c->marks.first);
    free(c->marks.count);
    free(c->marks.marks);
}

static void block_free(block *b)
{
    free(b->text.data);
    free(b->result.data);
    free(b->name);
    free(b->call_id);
    free(b->state_label);
    text_cache_free(&b->body);
    text_cache_free(&b->res);
    free(b->shown_args.data);
    styled_lines_free(&b->deco);
    free(b);
}

void render_model_free(render_model *rm)
{
    if (!rm)
        return;
    for (int i = 0; i < rm->n_blocks; i++)
        block_free(rm->blocks[i]);
    free(rm->blocks);
    free(rm->users);
    free(rm->f.spans);
    free(rm->f.rows);
    free(rm->f.start);
    free(rm->f.hash);
    free(rm->scratch.data);
    free(rm->hl_text.data);
    search_query_free(&rm->hl_query);
    search_marks_free(&rm->hl_marks);
    free(rm);
}

static int gutter(const render_model *rm)
{
    return rm->width >= RM_GUTTER_MIN ? RM_GUTTER : RM_GUTTER_NARROW;
}

static int content_width(const render_model *rm)
{
    int w = rm->width - gutter(rm);
    return w < 1 ? 1 : w;
}

static int box_inner_width(const render_model *rm)
{
    int w = content_width(rm) - 4;
    return w < 1 ? 1 : w;
}

void render_model_set_size(render_model *rm, int width, int height)
{
    width = width < 1 ? 1 : width > 4000 ? 4000 : width;
    height = height < 1 ? 1 : height > 4000 ? 4000 : height;
    if (width != rm->width || height != rm->height)
        rm->dirty = 1;
    rm->width = width;
    rm->height = height;
}

static int is_assistant(rm_block_kind k)
{
    return k == RM_REASONING || k == RM_ANSWER || k == RM_TOOL;
}

/* Something in block b changed: relayout it lazily, and flag "↓ new" when it is below what the
 * user is looking at. */
static void touched(render_model *rm, int b)
{
    rm->blocks[b]->version++;
    rm->dirty = 1;
    if (!rm->following && b >= rm->f.last_block && rm->f.last_block >= 0)
        rm->new_below = 1;
}

/* A one-line label from outside (tool name, call id, state) in its displayable form: the model
 * names tools, and an escape sequence in a name must not reach the terminal. */
static char *displayable_copy(const char *s)
{
    strbuf b = {0};
    text_displayable(&b, s, strlen(s));
    return strbuf_take(&b);
}

static int nomem(kimi_err *err)
{
    return kimi_fail(err, KIMI_ERR_NOMEM, "render model: out of memory");
}

int render_model_append(render_model *rm, rm_block_kind kind, const char *text, size_t len,
                        kimi_err *err)
{
    if (array_reserve(&rm->blocks, &rm->cap_blocks, (size_t)rm->n_blocks + 1, sizeof *rm->blocks) ||
        (kind == RM_USER &&
         array_reserve(&rm->users, &rm->cap_users, (size_t)rm->n_users + 1, sizeof *rm->users)))
        return nomem(err), -1;
    block *b = calloc(1, sizeof *b);
    if (!b)
        return nomem(err), -1;
    b->kind = kind;
    b->seconds = -1;
    b->tokens = -1;
    b->live = is_assistant(kind);
    const block *prev = rm->n_blocks ? rm->blocks[rm->n_blocks - 1] : NULL;
    b->turn_start = is_assistant(kind) && !(prev && is_assistant(prev->kind));
    b->gap = kind == RM_USER && prev;
    strbuf_add(&b->text, text, len);
    if (b->text.failed) {
        block_free(b);
        return nomem(err), -1;
    }
    int index = rm->n_blocks++;
    rm->blocks[index] = b;
    if (kind == RM_USER)
        rm->users[rm->n_users++] = index;
    touched(rm, index);
    return index;
}

int render_model_append_tool(render_model *rm, const char *name, const char *call_id,
                             kimi_err *err)
{
    int b = render_model_append(rm, RM_TOOL, "", 0, err);
    if (b < 0)
        return -1;
    block *bl = rm->blocks[b];
    bl->name = displayable_copy(name ? name : "");
    bl->call_id = displayable_copy(call_id ? call_id : "");
    if (!bl->name || !bl->call_id) {
        render_model_truncate(rm, b);
        return nomem(err), -1;
    }
    return b;
}

static block *get(const render_model *rm, int b)
{
    return b >= 0 && b < rm->n_blocks ? rm->blocks[b] : NULL;
}

int render_model_append_text(render_model *rm, int b, const char *text, size_t len,
                             kimi_err *err)
{
    block *bl = get(rm, b);
    if (!bl || !len)
        return 0;
    strbuf_add(&bl->text, text, len);
    if (bl->text.failed) {
        bl->text.failed = 0; /* the text is as it was before this call */
        return nomem(err);
    }
    touched(rm, b);
    return 0;
}

void render_model_finish(render_model *rm, int b)
{
    block *bl = get(rm, b);
    if (bl && bl->live) {
        bl->live = 0;
        touched(rm, b);
    }
}

void render_model_set_reasoning_stats(render_model *rm, int b, int tokens, double seconds)
{
    block *bl = get(rm, b);
    if (!bl)
        return;
    bl->tokens = tokens;
    bl->seconds = seconds;
    touched(rm, b);
}

int render_model_set_tool_state(render_model *rm, int b, rm_tool_state state, const char *label,
                                double seconds, kimi_err *err)
{
    block *bl = get(rm, b);
    if (!bl)
        return 0;
    char *copy = label ? displayable_copy(label) : NULL;
    if (label && !copy)
        return nomem(err);
    free(bl->state_label);
    bl->state_label = copy;
    bl->tool_state = state;
    bl->seconds = seconds;
    touched(rm, b);
    return 0;
}

int render_model_set_tool_result(render_model *rm, int b, const char *text, size_t len,
                                 kimi_err *err)
{
    block *bl = get(rm, b);
    if (!bl)
        return 0;
    bl->result.len = 0;
    strbuf_add(&bl->result, text, len);
    bl->res.width = 0; /* replaced, not appended: lay it out afresh */
    touched(rm, b);
    if (bl->result.failed) {
        bl->result.failed = 0;
        return nomem(err);
    }
    return 0;
}

void render_model_truncate(render_model *rm, int n)
{
    if (n < 0)
        n = 0;
    if (n >= rm->n_blocks)
        return;
    for (int i = n; i < rm->n_blocks; i++)
        block_free(rm->blocks[i]);
    rm->n_blocks = n;
    while (rm->n_users && rm->users[rm->n_users - 1] >= n)
        rm->n_users--;
    if (rm->focused >= n)
        rm->focused = -1;
    if (rm->top_block >= n) {
        rm->following = 1;
        rm->new_below = 0;
    }
    if (rm->f.last_block >= n)
        rm->f.last_block = n - 1;
    rm->dirty = 1;
}

int render_model_block_count(const render_model *rm)
{
    return rm->n_blocks;
}

rm_block_kind render_model_block_kind(const render_model *rm, int b)
{
    const block *bl = get(rm, b);
    return bl ? bl->kind : RM_NOTE;
}

const char *render_model_block_text(const render_model *rm, int b, size_t *len)
{
    const block *bl = get(rm, b);
    *len = bl ? bl->text.len : 0;
    return bl && bl->text.data ? bl->text.data : "";
}

const char *render_model_tool_result(const render_model *rm, int b, size_t *len)
{
    const block *bl = get(rm, b);
    *len = bl ? bl->result.len : 0;
    return bl && bl->result.data ? bl->result.data : "";
}

/* ---- fold state ---- */

static int show_state(const render_model *rm, const block *b)
{
    if (b->kind == RM_REASONING) {
        if (b->fold_epoch == rm->reasoning_epoch)
            return b->fold_show;
        return rm->reasoning_mode == RM_REASONING_EXPANDED ? SHOW_EXPANDED
               : rm->reasoning_mode == RM_REASONING_HIDDEN ? SHOW_HIDDEN
                                                           : SHOW_COLLAPSED;
    }
    if (b->kind == RM_TOOL) {
        if (b->fold_epoch == rm->tools_epoch)
            return b->fold_show;
        return rm->tools_expanded ? SHOW_EXPANDED : SHOW_COLLAPSED;
    }
    return SHOW_EXPANDED;
}

void render_model_toggle_fold(render_model *rm, int b)
{
    block *bl = get(rm, b);
    if (!bl || (bl->kind != RM_REASONING && bl->kind != RM_TOOL))
        return;
    bl->fold_show = show_state(rm, bl) == SHOW_EXPANDED ? SHOW_COLLAPSED : SHOW_EXPANDED;
    bl->fold_epoch = bl->kind == RM_REASONING ? rm->reasoning_epoch : rm->tools_epoch;
    rm->dirty = 1;
}

int render_model_is_folded(render_model *rm, int b)
{
    block *bl = get(rm, b);
    if (!bl || (bl->kind != RM_REASONING && bl->kind != RM_TOOL))
        return 0;
    if (bl->kind == RM_TOOL && show_state(rm, bl) != SHOW_EXPANDED) {
        render_model_block_rows(rm, b);
        return bl->res.lines.n_lines > RM_FOLDED_RESULT_ROWS;
    }
    return show_state(rm, bl) != SHOW_EXPANDED;
}

void render_model_set_reasoning_mode(render_model *rm, rm_reasoning_mode mode)
{
    rm->reasoning_mode = mode;
    rm->reasoning_epoch++;
    rm->dirty = 1;
}

rm_reasoning_mode render_model_reasoning_mode(const render_model *rm)
{
    return rm->reasoning_mode;
}

rm_reasoning_mode render_model_toggle_all_reasoning(render_model *rm)
{
    render_model_set_reasoning_mode(rm, rm->reasoning_mode == RM_REASONING_EXPANDED
                                            ? RM_REASONING_COLLAPSED
                                            : RM_REASONING_EXPANDED);
    return rm->reasoning_mode;
}

void render_model_set_tools_expanded(render_model *rm, int expanded)
{
    rm->tools_expanded = expanded != 0;
    rm->tools_epoch++;
    rm->dirty = 1;
}

/* ---- layout of one block ---- */

static void cache_layout(text_cache *c, const strbuf *text, int width, int element, int flags)
{
    if (c->width != width) {
        md_checkpoint_init(&c->cp);
        c->epoch++;
        c->width = width;
        c->laid_len = (size_t)-1;
    }
    if (c->laid_len == text->len)
        return;
    md_options o = {.width = width, .element = element, .flags = flags};
    md_layout(&c->lines, text->data ? text->data : "", text->len, &o, &c->cp);
    c->laid_len = text->len;
}

static void add_text(styled_lines *l, int *col, const char *s, int element, int attrs)
{
    size_t len = strlen(s);
    int w = text_width(s, len);
    styled_lines_add(l, *col, s, len, w, element, attrs);
    *col += w;
}

static void add_repeat(styled_lines *l, int *col, const char *s, int count, int element)
{
    for (int i = 0; i < count; i++)
        add_text(l, col, s, element, 0);
}

static void format_seconds(char *buf, size_t cap, double s)
{
    if (s < 60)
        snprintf(buf, cap, "%.1f s", s);
    else
        snprintf(buf, cap, "%dm %02ds", (int)(s / 60), (int)s % 60);
}

/* The reasoning header line into b->deco: the fields that fit whole, the last dropped first
 * (a narrow window shows "▸ thought for 0.2 s", not "▸ thought for 0.2 s · 3"). */
static void reasoning_header(block *b, int show, int width)
{
    char fields[3][48], secs[32] = "";
    int n_fields = 0;
    if (b->seconds >= 0)
        format_seconds(secs, sizeof secs, b->seconds);
    if (b->live) {
        snprintf(fields[n_fields++], sizeof fields[0], "thinking");
        if (b->tokens >= 0)
            snprintf(fields[n_fields++], sizeof fields[0], " · %d tokens", b->tokens);
        if (*secs)
            snprintf(fields[n_fields++], sizeof fields[0], " · %s", secs);
    } else {
        snprintf(fields[n_fields++], sizeof fields[0], "%s thought", show == SHOW_EXPANDED ? "▾" : "▸");
        if (*secs)
            snprintf(fields[n_fields++], sizeof fields[0], " for %s", secs);
        if (b->tokens >= 0)
            snprintf(fields[n_fields++], sizeof fields[0], " · %d tokens", b->tokens);
    }
    char line[160];
    for (; n_fields > 1; n_fields--) {
        line[0] = 0;
        for (int i = 0; i < n_fields; i++)
            strcat(line, fields[i]);
        if (text_width(line, strlen(line)) <= width)
            break;
    }
    if (n_fields == 1)
        snprintf(line, sizeof line, "%s", fields[0]);
    int w;
    size_t len = text_fit(line, strlen(line), width, &w);
    styled_lines_add(&b->deco, 0, line, len, w, THEME_REASONING_HEADER, 0);
    styled_lines_end_line(&b->deco);
}

static const char *tool_state_word(rm_tool_state s)
{
    switch (s) {
    case RM_TOOL_WAITING: return "waiting for approval";
    case RM_TOOL_RUNNING: return "running";
    case RM_TOOL_DONE: return "done";
    case RM_TOOL_FAILED: return "failed";
    case RM_TOOL_DENIED: return "denied";
    }
    return "";
}

static int tool_state_element(rm_tool_state s)
{
    switch (s) {
    case RM_TOOL_WAITING: return THEME_TOOL_WAITING;
    case RM_TOOL_RUNNING: return THEME_TOOL_RUNNING;
    case RM_TOOL_DONE: return THEME_TOOL_OK;
    case RM_TOOL_FAILED: return THEME_TOOL_FAILED;
    case RM_TOOL_DENIED: return THEME_TOOL_DENIED;
    }
    return THEME_TOOL_BORDER;
}

/* Add s cut to at most *room columns. */
static void add_cut(styled_lines *l, int *col, int *room, const char *s, int element, int attrs)
{
    int w;
    size_t len = text_fit(s, strlen(s), *room < 0 ? 0 : *room, &w);
    styled_lines_add(l, *col, s, len, w, element, attrs);
    *col += w;
    *room -= w;
}

/* "┌ name  id ─ done 0.3 s ───┐" in width columns. */
static void tool_top(block *b, int width)
{
    styled_lines *l = &b->deco;
    char state[96], secs[32] = "";
    /* a denied call never ran: a duration would be the time the prompt waited */
    if (b->seconds >= 0 && b->tool_state != RM_TOOL_DENIED)
        format_seconds(secs, sizeof secs, b->seconds);
    snprintf(state, sizeof state, "%s%s%s", b->state_label ? b->state_label : tool_state_word(b->tool_state),
             *secs ? " " : "", secs);
    int col = 0, room = width - 2; /* the corners */
    add_text(l, &col, "┌", THEME_TOOL_BORDER, 0);
    /* the state is kept whole where it can be; name and id share what is left */
    int state_w = text_width(state, strlen(state)) + 4;
    int name_room = room - state_w;
    add_cut(l, &col, &name_room, " ", THEME_TOOL_BORDER, 0);
    /* a tool block made by render_model_append() has neither */
    const char *name = b->name ? b->name : "", *call_id = b->call_id ? b->call_id : "";
    add_cut(l, &col, &name_room, name, THEME_TOOL_NAME, 0);
    if (*call_id && name_room > 4) {
        add_cut(l, &col, &name_room, "  ", THEME_TOOL_BORDER, 0);
        add_cut(l, &col, &name_room, call_id, THEME_TOOL_ID, 0);
    }
    room = width - 1 - col;
    add_cut(l, &col, &room, " ─ ", THEME_TOOL_BORDER, 0);
    add_cut(l, &col, &room, state, tool_state_element(b->tool_state), 0);
    add_cut(l, &col, &room, " ", THEME_TOOL_BORDER, 0);
    add_repeat(l, &col, "─", width - 1 - col, THEME_TOOL_BORDER);
    add_text(l, &col, "┐", THEME_TOOL_BORDER, 0);
    styled_lines_end_line(l);
}

static void tool_bottom(block *b, int width)
{
    int col = 0;
    add_text(&b->deco, &col, "└", THEME_TOOL_BORDER, 0);
    add_repeat(&b->deco, &col, "─", width - 2, THEME_TOOL_BORDER);
    add_text(&b->deco, &col, "┘", THEME_TOOL_BORDER, 0);
    styled_lines_end_line(&b->deco);
}

/* The arguments as shown: pretty JSON once they parse (on one line when that fits), raw while
 * they stream. */
static void shown_args(render_model *rm, block *b, int width)
{
    const char *raw = b->text.data ? b->text.data : "";
    size_t n = b->text.len;
    strbuf *out = &rm->scratch;
    out->len = 0;
    out->failed = 0;
    size_t end = n;
    while (end && strchr(" \n\r\t", raw[end - 1]))
        end--;
    json_t *root = NULL;
    if (end && (raw[end - 1] == '}' || raw[end - 1] == ']'))
        root = json_loadb(raw, n, JSON_DECODE_ANY, NULL);
    char *pretty = NULL;
    if (root) {
        /* 15 digits: 0.1 shows as the model wrote it, not as 0.10000000000000001 */
        size_t flags = JSON_ENCODE_ANY | JSON_REAL_PRECISION(15);
        pretty = json_dumps(root, flags);
        if (pretty && text_width(pretty, strlen(pretty)) > width) {
            free(pretty);
            pretty = json_dumps(root, flags | JSON_INDENT(2));
        }
        json_decref(root);
    }
    if (pretty)
        strbuf_str(out, pretty);
    else
        strbuf_add(out, raw, n);
    free(pretty);
    /* Appended raw text keeps the layout's checkpoint; anything else starts afresh. */
    strbuf *prev = &b->shown_args;
    if (out->failed || prev->len > out->len || (prev->len && memcmp(prev->data, out->data, prev->len)))
        b->body.width = 0;
    prev->len = 0;
    prev->failed = 0;
    strbuf_add(prev, out->data ? out->data : "", out->len);
}

static void add_segment(block *b, const styled_lines *src, size_t from, size_t n, int boxed)
{
    if (!n || b->n_seg >= MAX_SEGMENTS)
        return;
    b->seg[b->n_seg++] = (segment){src, (uint32_t)from, (uint32_t)n, boxed, 0};
    b->rows += (int)n;
}

static void ensure_layout(render_model *rm, block *b)
{
    int show = show_state(rm, b);
    if (b->key_width == rm->width && b->key_show == show && b->key_version == b->version)
        return;
    int cw = content_width(rm);
    styled_lines_clear(&b->deco);
    b->n_seg = 0;
    b->rows = 0;
    size_t deco = 0; /* next deco line to hand out */
    if (b->gap) {
        styled_lines_end_line(&b->deco);
        add_segment(b, &b->deco, deco++, 1, 0);
    }
    switch (b->kind) {
    case RM_USER:
    case RM_NOTE:
    case RM_ERROR:
    case RM_ANSWER: {
        int element = b->kind == RM_USER ? THEME_USER_TEXT
                      : b->kind == RM_NOTE ? THEME_NOTE
                      : b->kind == RM_ERROR ? THEME_ERROR
                                            : THEME_TEXT;
        cache_layout(&b->body, &b->text, cw, element, b->kind == RM_ANSWER ? 0 : MD_PLAIN);
        add_segment(b, &b->body.lines, 0, b->body.lines.n_lines, 0);
        break;
    }
    case RM_REASONING: {
        if (show == SHOW_HIDDEN && !b->live)
            break;
        reasoning_header(b, show, cw);
        add_segment(b, &b->deco, deco++, 1, 0);
        if (show == SHOW_HIDDEN || (show == SHOW_COLLAPSED && !b->live))
            break;
        cache_layout(&b->body, &b->text, cw, THEME_REASONING, MD_PLAIN);
        size_t n = b->body.lines.n_lines, from = 0;
        if (show == SHOW_COLLAPSED && n > RM_LIVE_REASONING_ROWS)
            from = n - RM_LIVE_REASONING_ROWS;
        add_segment(b, &b->body.lines, from, n - from, 0);
        break;
    }
    case RM_TOOL: {
        int inner = box_inner_width(rm);
        tool_top(b, cw);
        add_segment(b, &b->deco, deco++, 1, 0);
        shown_args(rm, b, inner);
        cache_layout(&b->body, &b->shown_args, inner, THEME_TOOL_ARGS, MD_PLAIN);
        add_segment(b, &b->body.lines, 0, b->body.lines.n_lines, 1);
        cache_layout(&b->res, &b->result, inner > 3 ? inner - 2 : 1, THEME_TOOL_RESULT, MD_PLAIN);
        size_t n = b->res.lines.n_lines, shown = n;
        if (show != SHOW_EXPANDED && n > RM_FOLDED_RESULT_ROWS)
            shown = RM_FOLDED_RESULT_ROWS;
        add_segment(b, &b->res.lines, 0, shown, 1);
        if (shown && inner > 3)
            b->seg[b->n_seg - 1].lead = 1;
        if (shown < n) {
            /* inside the box's borders: "… +12 lines", "… +12" or "…", whichever fits */
            char hint[48];
            snprintf(hint, sizeof hint, "… +%zu line%s", n - shown, n - shown == 1 ? "" : "s");
            if (text_width(hint, strlen(hint)) > inner)
                snprintf(hint, sizeof hint, "… +%zu", n - shown);
            if (text_width(hint, strlen(hint)) > inner)
                snprintf(hint, sizeof hint, "…");
            int col = 0;
            add_text(&b->deco, &col, hint, THEME_FOLD_HINT, 0);
            styled_lines_end_line(&b->deco);
            add_segment(b, &b->deco, deco++, 1, 1);
        }
        tool_bottom(b, cw);
        add_segment(b, &b->deco, deco++, 1, 0);
        break;
    }
    }
    b->key_width = rm->width;
    b->key_show = show;
    b->key_version = b->version;
}

int render_model_block_rows(render_model *rm, int b)
{
    block *bl = get(rm, b);
    if (!bl)
        return 0;
    ensure_layout(rm, bl);
    return bl->rows;
}

long render_model_total_rows(render_model *rm)
{
    long total = 0;
    for (int b = 0; b < rm->n_blocks; b++)
        total += render_model_block_rows(rm, b);
    return total;
}

/* ---- scrolling ---- */

static int rows_of(render_model *rm, int b)
{
    return render_model_block_rows(rm, b);
}

/* The anchor that shows the last rows: walks back over one screen of rows. */
static void bottom_anchor(render_model *rm, int *top_block, int *top_row)
{
    int need = rm->height;
    for (int b = rm->n_blocks - 1; b >= 0; b--) {
        int r = rows_of(rm, b);
        if (r >= need) {
            *top_block = b;
            *top_row = r - need;
            return;
        }
        need -= r;
    }
    *top_block = 0;
    *top_row = 0;
}

/* Whether the rows from the anchor to the end fit on the screen (walks at most a screen). */
static int at_bottom(render_model *rm)
{
    int left = rm->height;
    int r = rm->top_row;
    for (int b = rm->top_block; b < rm->n_blocks; b++, r = 0) {
        left -= rows_of(rm, b) - r;
        if (left < 0)
            return 0;
    }
    return 1;
}

long render_model_rows_below(render_model *rm)
{
    if (rm->following)
        return 0;
    long below = -(long)rm->top_row - rm->height;
    for (int b = rm->top_block; b < rm->n_blocks; b++)
        below += rows_of(rm, b);
    return below > 0 ? below : 0;
}

static void follow(render_model *rm)
{
    rm->following = 1;
    rm->new_below = 0;
    rm->dirty = 1;
}

/* Leave following: pin the anchor where the bottom view is now. */
static void unfollow(render_model *rm)
{
    if (rm->following)
        bottom_anchor(rm, &rm->top_block, &rm->top_row);
    rm->following = 0;
}

/* Keep the anchor on an existing row; at the end of the content, follow again. */
static void settle(render_model *rm)
{
    if (rm->following)
        return;
    if (rm->top_block >= rm->n_blocks) {
        follow(rm);
        return;
    }
    /* the anchor's block shrank (folded): stay on its last row */
    int rows = rows_of(rm, rm->top_block);
    if (rm->top_row >= rows)
        rm->top_row = rows > 0 ? rows - 1 : 0;
    if (rm->top_row < 0)
        rm->top_row = 0;
    if (at_bottom(rm))
        follow(rm);
}

void render_model_scroll(render_model *rm, int rows)
{
    if (!rows || !rm->n_blocks)
        return;
    unfollow(rm);
    rm->dirty = 1;
    if (rows < 0) {
        int r = rm->top_row + rows, b = rm->top_block;
        while (r < 0 && b > 0) {
            b--;
            r += rows_of(rm, b);
        }
        rm->top_block = b;
        rm->top_row = r < 0 ? 0 : r;
    } else {
        int r = rm->top_row + rows, b = rm->top_block;
        while (b < rm->n_blocks && r >= rows_of(rm, b)) {
            r -= rows_of(rm, b);
            b++;
        }
        rm->top_block = b;
        rm->top_row = r;
    }
    settle(rm);
}

void render_model_scroll_page(render_model *rm, int pages)
{
    int page = rm->height > 1 ? rm->height - 1 : 1;
    render_model_scroll(rm, pages * page);
}

void render_model_scroll_to_top(render_model *rm)
{
    if (!rm->n_blocks)
        return;
    rm->following = 0;
    rm->top_block = rm->top_row = 0;
    rm->dirty = 1;
    settle(rm);
}

void render_model_scroll_to_bottom(render_model *rm)
{
    follow(rm);
}

int render_model_jump_user(render_model *rm, int dir)
{
    unfollow(rm);
    int lo = 0, hi = rm->n_users; /* first user block > top_block */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (rm->users[mid] <= rm->top_block)
            lo = mid + 1;
        else
            hi = mid;
    }
    int target = -1;
    if (dir > 0) {
        if (lo < rm->n_users)
            target = rm->users[lo];
    } else {
        int i = lo - 1; /* the last user block <= top_block */
        int first_row = i >= 0 ? rm->blocks[rm->users[i]]->gap : 0;
        if (i >= 0 && rm->users[i] == rm->top_block && rm->top_row <= first_row)
            i--;
        if (i >= 0)
            target = rm->users[i];
    }
    if (target < 0) {
        settle(rm);
        return -1;
    }
    rm->top_block = target;
    rm->top_row = rm->blocks[target]->gap;
    rm->dirty = 1;
    settle(rm);
    return target;
}

/* ---- focus ---- */

void render_model_focus(render_model *rm, int b)
{
    if (b < -1 || b >= rm->n_blocks)
        b = -1;
    if (b != rm->focused)
        rm->dirty = 1;
    rm->focused = b;
    if (b < 0)
        return;
    /* scroll it into view when its first row is not on the screen */
    int top_block = rm->top_block, top_row = rm->top_row;
    if (rm->following)
        bottom_anchor(rm, &top_block, &top_row);
    int first = rm->blocks[b]->gap;
    int visible = 0;
    if (b > top_block || (b == top_block && first >= top_row)) {
        int left = rm->height, r = top_row;
        for (int k = top_block; k < b && left > 0; k++, r = 0)
            left -= rows_of(rm, k) - r;
        visible = left > first;
    }
    if (!visible) {
        unfollow(rm);
        rm->top_block = b;
        rm->top_row = first;
        settle(rm);
    }
}

int render_model_focus_move(render_model *rm, int dir)
{
    int step = dir < 0 ? -1 : 1, b = rm->focused;
    if (b < 0) {
        /* none yet: Up takes the lowest block on the screen, Down the highest */
        int top_block = rm->top_block, top_row = rm->top_row;
        if (rm->following)
            bottom_anchor(rm, &top_block, &top_row);
        int last = top_block, left = rm->height - (rows_of(rm, top_block) - top_row);
        while (left > 0 && last + 1 < rm->n_blocks)
            left -= rows_of(rm, ++last);
        b = (step < 0 ? last : top_block) - step;
    }
    for (int k = b + step; k >= 0 && k < rm->n_blocks; k += step)
        if (rows_of(rm, k) > rm->blocks[k]->gap) {
            render_model_focus(rm, k);
            return k;
        }
    return rm->focused;
}

int render_model_focused(const render_model *rm)
{
    return rm->focused;
}

int render_model_dirty(const render_model *rm)
{
    return rm->dirty;
}

void render_model_repaint(render_model *rm)
{
    rm->f.repaint = 1;
    rm->dirty = 1;
}

/* ---- search highlighting ---- */

int render_model_set_search(render_model *rm, const char *query, size_t len, int current_text,
                            int current_ordinal, kimi_err *err)
{
    if (!len)
        current_text = -1;
    if (current_text < 0)
        current_ordinal = 0;
    int same_query = len == rm->hl_text.len && (!len || !memcmp(query, rm->hl_text.data, len));
    if (same_query && current_text == rm->hl_current_text && current_ordinal == rm->hl_current_ordinal)
        return 0;
    if (!same_query) {
        search_query q;
        int rc = search_query_init(&q, query, len, err);
        if (rc)
            return rc;
        rm->hl_text.len = 0;
        rm->hl_text.failed = 0;
        strbuf_add(&rm->hl_text, query, len);
        if (rm->hl_text.failed) {
            search_query_free(&q);
            rm->hl_text.len = 0;
            search_query_free(&rm->hl_query);
            rm->dirty = 1;
            return nomem(err);
        }
        search_query_free(&rm->hl_query);
        rm->hl_query = q;
    }
    rm->hl_current_text = current_text;
    rm->hl_current_ordinal = current_ordinal;
    if (!++rm->hl_gen)
        rm->hl_gen = 1;
    rm->dirty = 1;
    return 0;
}

/* The current match, when it is in `region` (0 the text, 1 a tool's result) of block b: *from,
 * *to in the text's lines. Located once per change of the search, the block (unless the match
 * is on lines an append cannot change) or the width. */
static int current_match(render_model *rm, int b, int region, uint32_t *from, uint32_t *to)
{
    if (rm->hl_current_text != 2 * b + region)
        return 0;
    block *bl = rm->blocks[b];
    text_cache *c = region ? &bl->res : &bl->body;
    int stable = rm->hl_cur.found && rm->hl_cur.epoch == c->epoch && rm->hl_cur.last_line < c->cp.n_lines;
    if (rm->hl_cur.gen != rm->hl_gen || rm->hl_cur.block != b || rm->hl_cur.width != rm->width ||
        rm->hl_cur.epoch != c->epoch) {
        rm->hl_cur.gen = rm->hl_gen;
        rm->hl_cur.block = b;
        rm->hl_cur.width = rm->width;
        rm->hl_cur.epoch = c->epoch;
        rm->hl_cur.counted_lines = 0;
        rm->hl_cur.counted = 0;
        stable = 0;
    } else if (rm->hl_cur.version == bl->version) {
        stable = 1;
    }
    if (!stable) {
        /* a streamed text: the lines that cannot change any more are counted once */
        size_t done = c->cp.n_lines;
        if (done > rm->hl_cur.counted_lines) {
            int more = search_marks_count(&rm->hl_marks, &c->lines, &rm->hl_query, rm->hl_cur.counted_lines, done);
            if (more >= 0 && rm->hl_cur.counted + more <= rm->hl_current_ordinal) {
                rm->hl_cur.counted += more;
                rm->hl_cur.counted_lines = done;
            }
        }
        rm->hl_cur.found = !search_marks_nth(&rm->hl_marks, &c->lines, &rm->hl_query, rm->hl_cur.counted_lines,
                                             rm->hl_current_ordinal - rm->hl_cur.counted, &rm->hl_cur.from,
                                             &rm->hl_cur.to, &rm->hl_cur.last_line);
    }
    rm->hl_cur.version = bl->version;
    *from = rm->hl_cur.from;
    *to = rm->hl_cur.to;
    return rm->hl_cur.found;
}

/* The search marks of line i of c (block version `version`), cached. NULL with *n 0 when none. */
static const search_mark *marks_of_line(render_model *rm, text_cache *c, uint32_t version, size_t i, size_t *n)
{
    line_marks *lm = &c->marks;
    /* marks of lines dropped from the cache stay in marks: start over once they dominate it */
    if (lm->gen != rm->hl_gen || lm->epoch != c->epoch || lm->n > 4096 + 64 * lm->cap) {
        lm->gen = rm->hl_gen;
        lm->epoch = c->epoch;
        lm->n = 0;
        lm->version = version;
        lm->tail = 0;
        for (size_t k = 0; k < lm->cap; k++)
            lm->first[k] = -1;
    }
    if (lm->version != version) {
        for (size_t k = lm->tail; k < lm->cap; k++)
            lm->first[k] = -1;
        lm->version = version;
    }
    lm->tail = c->cp.n_lines;
    if (i < lm->cap && lm->first[i] >= 0) {
        *n = lm->count[i];
        return lm->marks + lm->first[i];
    }
    *n = (size_t)search_marks_line(&rm->hl_marks, &c->lines, i, &rm->hl_query);
    const search_mark *found = rm->hl_marks.marks;
    if (lm->n + *n > INT32_MAX)
        return found;
    if (i >= lm->cap) {
        size_t cap = lm->cap ? lm->cap : 64;
        while (cap <= i)
            cap *= 2;
        int32_t *first = realloc(lm->first, sizeof *first * cap);
        if (first)
            lm->first = first;
        uint32_t *count = realloc(lm->count, sizeof *count * cap);
        if (count)
            lm->count = count;
        if (!first || !count)
            return found;
        for (size_t k = lm->cap; k < cap; k++)
            lm->first[k] = -1;
        lm->cap = cap;
    }
    if (*n && array_reserve(&lm->marks, &lm->cap_marks, lm->n + *n, sizeof *lm->marks))
        return found;
    if (*n)
        memcpy(lm->marks + lm->n, found, sizeof *found * *n);
    lm->first[i] = (int32_t)lm->n;
    lm->count[i] = (uint32_t)*n;
    lm->n += *n;
    return lm->marks + lm->first[i];
}

/* ---- frames ---- */

static int shows_assistant_label(render_model *rm, int b)
{
    if (!is_assistant(rm->blocks[b]->kind))
        return 0;
    for (int k = b;; k--) {
        if (rm->blocks[k]->turn_start)
            return 1;
        /* the label moves down past blocks that show nothing (hidden reasoning) */
        if (k == 0 || !is_assistant(rm->blocks[k - 1]->kind) || rows_of(rm, k - 1) > 0)
            return 0;
    }
}

static void span_add(render_model *rm, const char *s, size_t len, int col, int width, int element,
                     int attrs)
{
    frame_store *f = &rm->f;
    if (!len || col >= rm->width)
        return;
    if (array_reserve(&f->spans, &f->cap_spans, f->n_spans + 1, sizeof *f->spans))
        return; /* out of memory: the row is painted short */
    f->spans[f->n_spans++] = (rm_span){
        .s = s,
        .len = (uint32_t)len,
        .col = (uint16_t)col,
        .width = (uint16_t)width,
        .element = (uint8_t)element,
        .attrs = (uint8_t)attrs,
    };
}

static void span_text(render_model *rm, const char *s, int col, int element)
{
    size_t len = strlen(s);
    span_add(rm, s, len, col, text_width(s, len), element, 0);
}

/* The spans of line i of block b's text (region 0) or tool result (1) from column x, with the
 * search's matches on it as their own spans in THEME_SEARCH_MATCH / THEME_SEARCH_CURRENT (the
 * run's markdown attributes kept). */
static void line_spans_marked(render_model *rm, int b, int region, size_t i, int x)
{
    block *bl = rm->blocks[b];
    text_cache *c = region ? &bl->res : &bl->body;
    const styled_lines *src = &c->lines;
    uint32_t cur_from = 0, cur_to = 0;
    if (!current_match(rm, b, region, &cur_from, &cur_to))
        cur_from = cur_to = 0;
    size_t n_marks;
    const search_mark *marks = marks_of_line(rm, c, bl->version, i, &n_marks);
    const styled_line *line = &src->lines[i];
    size_t k = 0;
    for (uint32_t ri = 0; ri < line->n_runs; ri++) {
        const styled_run *run = &src->runs[line->first_run + ri];
        uint32_t at = run->off, end = run->off + run->len;
        int col = run->col; /* a mark lies inside one run: its columns split the run */
        while (k < n_marks && marks[k].from < end) {
            const search_mark *mk = &marks[k++];
            if (mk->from > at)
                span_add(rm, src->text + at, mk->from - at, x + col, mk->col_from - col, run->element, run->attrs);
            int current = mk->from < cur_to && mk->to > cur_from;
            span_add(rm, src->text + mk->from, mk->to - mk->from, x + mk->col_from, mk->col_to - mk->col_from,
                     current ? THEME_SEARCH_CURRENT : THEME_SEARCH_MATCH, run->attrs);
            at = mk->to;
            col = mk->col_to;
        }
        if (at < end)
            span_add(rm, src->text + at, end - at, x + col, run->col + run->width - col, run->element, run->attrs);
    }
}

/* The spans of row r of block b. */
static void row_spans(render_model *rm, int b, int r)
{
    block *bl = rm->blocks[b];
    int g = gutter(rm), row = r;
    const segment *seg = NULL;
    for (int i = 0; i < bl->n_seg; i++) {
        if (r < (int)bl->seg[i].n) {
            seg = &bl->seg[i];
            break;
        }
        r -= (int)bl->seg[i].n;
    }
    if (!seg)
        return;
    const styled_lines *src = seg->src;
    const styled_line *line = &src->lines[seg->from + (uint32_t)r];
    int gap_row = bl->gap && row == 0;
    if (rm->focused == b && !gap_row)
        span_text(rm, gutter_marker, 0, THEME_SELECTION);
    if (g == RM_GUTTER && row == bl->gap) {
        if (bl->kind == RM_USER)
            span_text(rm, "you", 2, THEME_USER_LABEL);
        else if (shows_assistant_label(rm, b))
            span_text(rm, "kimi", 2, THEME_ASSISTANT_LABEL);
    }
    int x = g;
    if (seg->boxed) {
        span_text(rm, "│", g, THEME_TOOL_BORDER);
        x = g + 2;
    }
    if (seg->lead) {
        if (r == 0)
            span_text(rm, "→", x, THEME_TOOL_BORDER);
        x += 2;
    }
    int region = src == &bl->body.lines ? 0 : src == &bl->res.lines ? 1 : -1;
    if (rm->hl_text.len && region >= 0) {
        line_spans_marked(rm, b, region, seg->from + (uint32_t)r, x);
    } else {
        for (uint32_t i = 0; i < line->n_runs; i++) {
            const styled_run *run = &src->runs[line->first_run + i];
            span_add(rm, src->text + run->off, run->len, x + run->col, run->width, run->element,
                     run->attrs);
        }
    }
    if (seg->boxed)
        span_text(rm, "│", rm->width - 1, THEME_TOOL_BORDER);
}

/* Eight bytes a step (a byte a step was most of a frame's time: a multiply's latency per byte),
 * the tail with its length; for spotting changed rows, not for security. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t word;
    for (; n >= 8; s += 8, n -= 8) {
        memcpy(&word, s, 8);
        h = (h ^ word) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
    }
    word = (uint64_t)n << 56;
    memcpy(&word, s, n);    /* n < 8: the length byte stays */
    h = (h ^ word) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

static uint64_t hash_row(const rm_span *spans, int n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        uint32_t meta[4] = {spans[i].len, spans[i].col, spans[i].width,
                            (uint32_t)spans[i].element << 8 | spans[i].attrs};
        h = hash_bytes(h, meta, sizeof meta);
        h = hash_bytes(h, spans[i].s, spans[i].len);
    }
    return h;
}

const rm_frame *render_model_frame(render_model *rm)
{
    frame_store *f = &rm->f;
    int h = rm->height;
    if (f->height != h) {
        rm_row *rows = realloc(f->rows, sizeof *rows * (size_t)h);
        if (rows)
            f->rows = rows;
        size_t *start = realloc(f->start, sizeof *start * ((size_t)h + 1));
        if (start)
            f->start = start;
        uint64_t *hash = realloc(f->hash, sizeof *hash * (size_t)h);
        if (hash)
            f->hash = hash;
        if (!rows || !start || !hash) {
            f->height = 0;
            f->frame = (rm_frame){.rows = f->rows, .n_rows = 0};
            return &f->frame;
        }
        f->height = h;
        f->repaint = 1;
        rm->dirty = 1;
    }
    if (!rm->dirty) {
        for (int i = 0; i < h; i++)
            f->rows[i].changed = 0;
        f->frame.any_changed = 0;
        return &f->frame;
    }
    settle(rm);
    int b = rm->top_block, r = rm->top_row;
    if (rm->following)
        bottom_anchor(rm, &b, &r);
    f->n_spans = 0;
    f->last_block = -1;
    for (int i = 0; i < h; i++) {
        while (b < rm->n_blocks && r >= rows_of(rm, b)) {
            b++;
            r = 0;
        }
        f->start[i] = f->n_spans;
        f->rows[i].block = b < rm->n_blocks ? b : -1;
        f->last_block = b < rm->n_blocks ? b : -1;
        if (b < rm->n_blocks)
            row_spans(rm, b, r++);
    }
    f->start[h] = f->n_spans;
    int any = 0;
    for (int i = 0; i < h; i++) {
        rm_row *row = &f->rows[i];
        row->spans = f->spans + f->start[i];
        row->n_spans = (int)(f->start[i + 1] - f->start[i]);
        uint64_t hv = hash_row(row->spans, row->n_spans);
        row->changed = f->repaint || hv != f->hash[i];
        f->hash[i] = hv;
        any |= row->changed;
    }
    f->repaint = 0;
    f->frame = (rm_frame){
        .rows = f->rows,
        .n_rows = h,
        .any_changed = any,
        .following = rm->following,
        .new_below = rm->new_below,
    };
    rm->dirty = 0;
    return &f->frame;
}

size_t render_model_row_text(const rm_row *row, char *buf, size_t cap)
{
    size_t n = 0;
    int col = 0;
    if (!cap)
        return 0;
    for (int i = 0; i < row->n_spans; i++) {
        const rm_span *s = &row->spans[i];
        while (col < s->col && n + 1 < cap) {
            buf[n++] = ' ';
            col++;
        }
        size_t len = s->len < cap - 1 - n ? s->len : cap - 1 - n;
        memcpy(buf + n, s->s, len);
        n += len;
        col += s->width;
    }
    buf[n] = 0;
    return n;
}
