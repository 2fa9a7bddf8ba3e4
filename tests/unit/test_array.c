/* test_array: the growable text builder, strbuf_printf past its stack buffer included. */
#include <stdlib.h>
#include <string.h>

#include "engine/base/array.h"
#include "tests/unit/check.h"

int main(void)
{
    strbuf b = {0};
    char long_text[1000];
    memset(long_text, 'a', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    strbuf_printf(&b, "<%s>%d", long_text, 42);
    CHECK_INT((int)b.len, 1003);
    CHECK(b.data && b.data[0] == '<' && !strcmp(b.data + 1000, ">42"));
    strbuf_add(&b, "\0z", 2);
    CHECK_INT((int)b.len, 1005);
    CHECK(b.data[1003] == 0 && b.data[1004] == 'z' && b.data[1005] == 0);
    char *taken = strbuf_take(&b);
    CHECK(taken != NULL);
    free(taken);
    return check_finish();
}
