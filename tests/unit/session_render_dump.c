/* session_render_dump: writes the sample sessions for session_template_check.py: DIR/NAME.json
 * (session_save) and DIR/NAME.txt (chat_render's text of the same conversation, with the
 * session's thinking setting and the generation prompt), so that the checkpoint's own
 * chat_template.jinja, rendered by jinja2 on the exported messages, can be compared with ours. */
#include <stdio.h>
#include <stdlib.h>

#include "app/chat/session.h"
#include "engine/text/chat.h"
#include "tests/unit/session_samples.h"

static int dump(const session *s, const char *dir, const char *name)
{
    char path[4096];
    kimi_err err = {0};
    chat_render_options opt = {.thinking = s->settings.thinking, .add_generation_prompt = 1};
    chat_rendering r = {0};
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (session_save(s, path, &err) || chat_render(NULL, &s->conv, &opt, &r, &err)) {
        fprintf(stderr, "session_render_dump: %s\n", err.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(r.text, 1, r.text_len, f) != r.text_len;
    if (f && fclose(f))
        bad = 1;
    if (bad)
        fprintf(stderr, "session_render_dump: cannot write %s\n", path);
    chat_rendering_free(&r);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: session_render_dump DIR\n");
        return 2;
    }
    int failed = 0;
    session s;
    rich_session(&s);
    failed |= dump(&s, argv[1], "rich");
    s.settings.thinking = 0;
    failed |= dump(&s, argv[1], "rich_thinking_off");
    session_free(&s);
    for (int shape = 0; shape < SAMPLE_SHAPES; shape++) {
        char name[32];
        snprintf(name, sizeof name, "shape%d", shape);
        sample_shape(&s, shape);
        failed |= dump(&s, argv[1], name);
        session_free(&s);
    }
    session_init(&s);
    failed |= dump(&s, argv[1], "empty");
    session_free(&s);
    return failed;
}
