/* core/version.c: sl_version() is CMake's project(VERSION) and the numbers agree with it;
 * sl_version_string() is the version, plus " (git COMMIT)" when there is a commit. */
#include "sluice/version.h"
#include "test.h"

/* "X.Y.Z" from the line `project(sluice VERSION X.Y.Z ...)` of the top CMakeLists.txt */
static int project_version(char *out, size_t cap) {
    FILE *f = fopen(SL_TEST_SRC "/CMakeLists.txt", "r");
    if (!f) return -1;
    char line[512];
    int found = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "project(sluice VERSION %63[0-9.]", out) == 1 && strlen(out) < cap) {
            found = 0;
            break;
        }
    fclose(f);
    return found;
}

TEST(test_version_matches_cmake) {
    char want[64];
    ASSERT_EQ(project_version(want, sizeof want), 0);
    ASSERT_STREQ(sl_version(), want);
    int ma = -1, mi = -1, pa = -1;
    sl_version_numbers(&ma, &mi, &pa);
    char joined[64];
    snprintf(joined, sizeof joined, "%d.%d.%d", ma, mi, pa);
    ASSERT_STREQ(joined, want);
    sl_version_numbers(NULL, NULL, NULL); /* any pointer may be NULL */
}

TEST(test_version_string) {
    const char *git = sl_version_git();
    ASSERT(git != NULL);
    char want[256];
    if (*git) snprintf(want, sizeof want, "%s (git %s)", sl_version(), git);
    else snprintf(want, sizeof want, "%s", sl_version());
    ASSERT_STREQ(sl_version_string(), want);
    /* one word from `git describe --always --dirty`: hex, maybe a tag, maybe "-dirty" */
    ASSERT(strpbrk(git, " \t\n\"") == NULL);
}

int main(void) {
    RUN(test_version_matches_cmake);
    RUN(test_version_string);
    TEST_MAIN_END();
}
