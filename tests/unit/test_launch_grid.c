/* test_launch_grid: the K split of one-token GEMVs (kernels/cuda/launch_grid.h) on the SM counts
 * of the three architectures (sm_90 132, sm_100 148, sm_120 188) at the decode shapes of
 * Kimi-K2.5 at TP 8, and over every block count below two per SM: at least the two-per-SM fill
 * where max_split allows it, never more than max_split, never less even than that fill, and
 * within 10% of even wherever a split up to max_split reaches it. */
#include "kernels/cuda/launch_grid.h"
#include "tests/unit/check.h"

/* The old rule: enough parts for two blocks per SM, capped. */
static int two_per_sm(int blocks, int sm_count, int max_split)
{
    if (max_split <= 1 || blocks >= 2 * sm_count)
        return 1;
    int split = (2 * sm_count + blocks - 1) / blocks;
    return split > max_split ? max_split : split;
}

int main(void)
{
    /* the router (384 rows of 7168 BF16: 48 blocks of 8 rows, K at most 896 / 64 = 14 parts) */
    CHECK_INT(launch_grid_split(48, 188, 14), 11);
    CHECK(launch_grid_balance(48L * 11, 188) >= 0.9);
    CHECK(launch_grid_balance(48L * two_per_sm(48, 188, 14), 188) < 0.7);
    CHECK_INT(launch_grid_split(48, 132, 14), 8);
    /* q_a + kv_a (1536 + 576 rows: 264 blocks): fills sm_90 unsplit, two parts on sm_120 */
    CHECK_INT(launch_grid_split(264, 132, 14), 1);
    CHECK_INT(launch_grid_split(264, 188, 14), 2);
    /* q_b (1536 rows of 1536: 192 blocks, at most 3 parts) */
    CHECK_INT(launch_grid_split(192, 188, 3), 3);
    CHECK_INT(launch_grid_split(192, 132, 3), 2);
    /* nothing to split */
    CHECK_INT(launch_grid_split(10, 188, 1), 1);
    CHECK_INT(launch_grid_split(0, 188, 16), 1);
    CHECK_INT(launch_grid_split(10, 0, 16), 1);

    int sms[] = {132, 148, 188}, maxes[] = {2, 3, 8, 14, 16};
    int bad_range = 0, bad_fill = 0, bad_even = 0;
    for (int s = 0; s < 3; s++)
        for (int m = 0; m < 5; m++)
            for (int blocks = 1; blocks < 2 * sms[s]; blocks++) {
                int sm = sms[s], max = maxes[m], split = launch_grid_split(blocks, sm, max);
                int fill = two_per_sm(blocks, sm, max);
                bad_range += split < 1 || split > max;
                bad_fill += split < fill;
                int reachable = 0;
                for (int k = fill; k <= max; k++)
                    reachable |= launch_grid_balance((long)blocks * k, sm) >= 0.9;
                double got = launch_grid_balance((long)blocks * split, sm);
                bad_even += reachable ? got < 0.9 : got < launch_grid_balance((long)blocks * fill, sm);
            }
    CHECK_MSG(bad_range == 0, "%d splits outside [1, max]", bad_range);
    CHECK_MSG(bad_fill == 0, "%d splits below two blocks per SM", bad_fill);
    CHECK_MSG(bad_even == 0, "%d splits less even than reachable", bad_even);
    return check_finish();
}
