/* pipeline/ops/shard.c: the shards of a range are disjoint and cover it, each its
 * cardinality long; an index past num is refused. */
#include "sluice/pipeline.h"
#include "helper_iter.h"
#include "test.h"

TEST(test_shard_disjoint_covering) {
    sl_dataset *r;
    ASSERT_OK(sl_ds_range(0, 103, 1, &r));
    int seen[103] = {0};
    for (int idx = 0; idx < 4; idx++) {
        sl_dataset *s;
        int64_t v[103];
        ASSERT_OK(sl_ds_shard(r, 4, idx, &s));
        int n = sl_test_values(s, NULL, v, 103);
        ASSERT_EQ(n, sl_dataset_cardinality(s));
        ASSERT_EQ(n, idx < 3 ? 26 : 25);
        for (int i = 0; i < n; i++) {
            ASSERT_EQ(v[i] % 4, idx);
            seen[v[i]]++;
        }
        sl_dataset_unref(s);
    }
    for (int i = 0; i < 103; i++) ASSERT_EQ(seen[i], 1);
    sl_dataset *bad;
    ASSERT_EQ(sl_ds_shard(r, 4, 4, &bad), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "shard: index 4 must be in 0..3 (num 4)");
    sl_dataset_unref(r);
}

int main(void) {
    RUN(test_shard_disjoint_covering);
    TEST_MAIN_END();
}
