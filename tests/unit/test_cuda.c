/* The CUDA build switch and device discovery: built without nvcc the library says
 * SL_EUNSUPPORTED; built with it, a machine without a GPU has zero devices (not an error)
 * and the GPU checks are skipped. */
#include "sluice/cuda.h"
#include "test.h"

TEST(test_cuda_devices) {
    int n = -1;
    char name[256];
    sl_status s = sl_cuda_devices(&n, name, sizeof name);
    if (!sl_cuda_built()) {
        ASSERT_EQ(s, SL_EUNSUPPORTED);
        ASSERT_EQ(n, 0);
        ASSERT_STREQ(name, "");
        SKIP("built without CUDA");
    }
    ASSERT_OK(s);
    ASSERT(n >= 0);
    if (n == 0) {
        ASSERT_STREQ(name, "");
        SKIP("no GPU");
    }
    ASSERT(name[0] != 0);
    printf("  %d CUDA device(s), first: %s\n", n, name);
}

int main(void) {
    RUN(test_cuda_devices);
    TEST_MAIN_END();
}
