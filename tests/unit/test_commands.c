/* test_commands: the slash-command grammar: every command and alias, every value check, and
 * the one-line errors that name the command and the value. */
#include <stdio.h>
#include <string.h>

#include "app/chat/commands.h"
#include "tests/unit/check.h"

static command parse_ok(const char *line)
{
    command c;
    kimi_err err = {0};
    int rc = command_parse(line, strlen(line), &c, &err);
    CHECK_MSG(rc == 0, "%s: %s", line, err.msg);
    return c;
}

static void parse_fails(const char *line, const char *fragment)
{
    command c;
    kimi_err err = {0};
    int rc = command_parse(line, strlen(line), &c, &err);
    CHECK_MSG(rc != 0 && strstr(err.msg, fragment) && !strchr(err.msg, '\n'), "%s -> rc %d, '%s' (want '%s')",
              line, rc, err.msg, fragment);
}

int main(void)
{
    CHECK_INT(parse_ok("/help").id, CMD_HELP);
    CHECK_INT(parse_ok("/exit").id, CMD_QUIT);
    CHECK_INT(parse_ok("/clear").id, CMD_NEW);
    CHECK_INT(parse_ok("/new  ").id, CMD_NEW);
    command sys = parse_ok("/system   Be terse.  ");
    CHECK(sys.text_len == 9 && !memcmp(sys.text, "Be terse.", 9));
    CHECK_INT((int)parse_ok("/system").text_len, 0);
    CHECK_INT(parse_ok("/think on").on, 1);
    CHECK_INT(parse_ok("/think off").on, 0);
    command c = parse_ok("/set temperature 0.7");
    CHECK(c.setting == SET_TEMPERATURE && c.number == 0.7);
    CHECK(parse_ok("/set temperature 0").number == 0);
    CHECK(parse_ok("/set top_p 1").number == 1);
    CHECK(parse_ok("/set top_k 40").integer == 40);
    CHECK(parse_ok("/set max_tokens 0").integer == 0);
    CHECK(parse_ok("/set seed 18446744073709551615").integer == UINT64_MAX);
    CHECK_INT(parse_ok("/tools").tools, TOOLS_LIST);
    c = parse_ok("/tools disable now");
    CHECK(c.tools == TOOLS_DISABLE && !strcmp(c.arg, "now"));
    CHECK_INT(parse_ok("/tools expanded").tools, TOOLS_EXPANDED);
    CHECK_INT(parse_ok("/tools folded").tools, TOOLS_FOLDED);
    CHECK(parse_ok("/permissions").id == CMD_PERMISSIONS && parse_ok("/permissions").tools == TOOLS_LIST);
    c = parse_ok("/permissions now always");
    CHECK(c.tools == TOOLS_ALWAYS && !strcmp(c.arg, "now"));
    CHECK(parse_ok("/permissions now ask").tools == TOOLS_ASK && parse_ok("/permissions x disabled").tools == TOOLS_DISABLE);
    parse_fails("/permissions now", "/permissions now: give ask, always or disabled");
    parse_fails("/permissions now sometimes", "give ask, always or disabled after the tool's name ('sometimes')");
    CHECK(parse_ok("/compact").id == CMD_COMPACT && !parse_ok("/compact").arg[0]);
    CHECK_STR(parse_ok("/compact keep the SQL").arg, "keep the SQL");
    c = parse_ok("/export");
    CHECK(c.format == EXPORT_MARKDOWN && !c.arg[0]);
    c = parse_ok("/export json out/chat.json");
    CHECK(c.format == EXPORT_JSON && !strcmp(c.arg, "out/chat.json"));
    c = parse_ok("/export chat.json");
    CHECK(c.format == EXPORT_JSON && !strcmp(c.arg, "chat.json"));
    c = parse_ok("/export notes.md");
    CHECK(c.format == EXPORT_MARKDOWN && !strcmp(c.arg, "notes.md"));
    CHECK(!c.force);
    c = parse_ok("/export md notes.md --force");   /* replace an existing file (issue 18) */
    CHECK(c.format == EXPORT_MARKDOWN && !strcmp(c.arg, "notes.md") && c.force);
    c = parse_ok("/export out.json  --force");
    CHECK(c.format == EXPORT_JSON && !strcmp(c.arg, "out.json") && c.force);
    c = parse_ok("/export out/my--force.md");
    CHECK(!c.force && !strcmp(c.arg, "out/my--force.md"));
    c = parse_ok("/tools ask now");
    CHECK(c.tools == TOOLS_ASK && !strcmp(c.arg, "now"));
    CHECK_STR(parse_ok("/load 2026-12-01T11-40-03").arg, "2026-12-01T11-40-03");
    CHECK_STR(parse_ok("/save keep").arg, "keep");
    CHECK_INT(parse_ok("/reasoning hidden").id, CMD_REASONING);
    CHECK_STR(parse_ok("/theme light").arg, "light");
    CHECK_INT(parse_ok("/retry").id, CMD_RETRY);
    CHECK_INT(parse_ok("/undo").id, CMD_UNDO);
    CHECK_INT(parse_ok("/edit").id, CMD_EDIT);
    CHECK_INT(parse_ok("/stats").id, CMD_STATS);
    CHECK_INT(parse_ok("/sessions").id, CMD_SESSIONS);

    parse_fails("/frobnicate", "unknown command /frobnicate");
    parse_fails("hello", "not a command");
    parse_fails("/", "unknown command /");
    parse_fails("/help me", "/help takes no argument");
    parse_fails("/think maybe", "/think maybe: on or off");
    parse_fails("/think", "/think needs an argument");
    parse_fails("/set temperature -1", "/set temperature -1: must be a number in [0, 100]");
    parse_fails("/set temperature nan", "/set temperature nan");
    parse_fails("/set temperature inf", "/set temperature inf");
    parse_fails("/set temperature 1e999", "/set temperature 1e999");
    parse_fails("/set temperature 0.5x", "/set temperature 0.5x");
    parse_fails("/set top_p 0", "/set top_p 0: must be a number in (0, 1]");
    parse_fails("/set top_p 1.01", "/set top_p 1.01");
    parse_fails("/set top_k -3", "/set top_k -3: must be a whole number");
    parse_fails("/set top_k 1.5", "/set top_k 1.5");
    parse_fails("/set seed 18446744073709551616", "/set seed 18446744073709551616");
    parse_fails("/set max_tokens 99999999999", "/set max_tokens 99999999999");
    parse_fails("/set colour 3", "/set colour: unknown setting");
    parse_fails("/set temperature", "/set temperature: give one value");
    parse_fails("/set temperature 1 2", "/set temperature: give one value");
    parse_fails("/tools enable", "/tools enable: give one tool name");
    parse_fails("/tools ask", "/tools ask: give one tool name");
    parse_fails("/tools list now", "/tools list: takes nothing after it");
    parse_fails("/tools paint", "/tools paint: unknown");
    parse_fails("/export pdf out.pdf", "/export pdf: the format is md or json");
    parse_fails("/reasoning loud", "/reasoning loud");
    parse_fails("/load", "/load needs an argument");
    /* the syntax alone, not the help line's padding and description */
    kimi_err e = {0};
    CHECK(command_parse("/theme", 6, &c, &e) == 0 && c.id == CMD_THEME && !c.arg[0]); /* lists them */
    CHECK(command_parse("/load", 5, &c, &e) != 0 && !strcmp(e.msg, "/load needs an argument: /load NAME|FILE"));
    /* a bare word is a format asked for, not a file name; a file takes a dot or a slash */
    parse_fails("/export html", "/export html: the format is md or json");
    parse_fails("/export json out.json extra", "/export out.json extra: one PATH, without spaces");
    c = parse_ok("/export ./html");
    CHECK(!strcmp(c.arg, "./html") && c.format == EXPORT_MARKDOWN);
    CHECK(parse_ok("/export t.json").format == EXPORT_JSON);
    char nul_line[] = "/system a\0b";
    command n;
    kimi_err err = {0};
    CHECK(command_parse(nul_line, sizeof nul_line - 1, &n, &err) != 0 && strstr(err.msg, "one line"));
    char long_line[5000];
    memset(long_line, 'x', sizeof long_line);
    long_line[0] = '/';
    CHECK(command_parse(long_line, sizeof long_line, &n, &err) != 0 && strstr(err.msg, "too long"));
    /* a system prompt has any length */
    memcpy(long_line, "/system ", 8);
    CHECK(command_parse(long_line, sizeof long_line, &n, &err) == 0 && n.id == CMD_SYSTEM &&
          n.text == long_line + 8 && n.text_len == sizeof long_line - 8);
    CHECK(command_parse("/systemx", 8, &n, &err) != 0 && strstr(err.msg, "unknown command /systemx"));
    CHECK(strstr(commands_help(), "/reasoning collapsed|expanded|hidden") != NULL);
    CHECK(strstr(commands_help(), "//TEXT") != NULL);
    return check_finish();
}
