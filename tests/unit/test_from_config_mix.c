/* pipeline/from_config_mix.c: `sample` and `choose` statements mixing other pipelines of
 * the file give exactly the elements the C API gives (the seed, its default, stop_on_empty,
 * the environment the named pipelines are built with); a runtime error names the
 * statement's op; every refusal (unknown name, the pipeline itself, a cycle, weights,
 * a missing by=) exactly, at FILE:LINE:COL. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/from_config.h"
#include "sluice/pipeline.h"
#include "sluice/util.h"
#include "helper_iter.h"
#include "test.h"

static sl_status build(const char *text, const char *name, const sl_pipeline_env *env, sl_dataset **ds) {
    sl_cfg *c = NULL;
    *ds = NULL;
    if (sl_cfg_parse(text, strlen(text), "mix.sl", &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return SL_EINTERNAL;
    }
    sl_status s = sl_pipeline_from_config(c, name, env, ds);
    sl_cfg_free(c); /* the dataset must not need the config any more */
    return s;
}

static const char *const SOURCES = "pipeline web {\n"
                                   "    range 0 5\n"
                                   "}\n"
                                   "pipeline books {\n"
                                   "    range 100 103\n"
                                   "}\n"
                                   "pipeline pick {\n"
                                   "    range 0 2\n"
                                   "    repeat\n"
                                   "}\n";

/* SOURCES then `more` */
static sl_status build_with(const char *more, const char *name, const sl_pipeline_env *env, sl_dataset **ds) {
    char text[2048];
    snprintf(text, sizeof text, "%s%s", SOURCES, more);
    return build(text, name, env, ds);
}

/* sample_from_datasets over range(0, 5) and range(100, 103) through the C API */
static int api_sample(const double *w, uint64_t seed, bool stop, uint64_t pipeline_seed, int64_t *out, int cap) {
    sl_dataset *a, *b, *mix;
    if (sl_ds_range(0, 5, 1, &a) || sl_ds_range(100, 103, 1, &b)) return -1;
    sl_dataset *ins[2] = {a, b};
    sl_status s = sl_ds_sample_from_datasets(ins, 2, w, seed, stop, &mix);
    sl_dataset_unref(b);
    sl_dataset_unref(a);
    if (s) return -1;
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = pipeline_seed;
    int n = sl_test_values(mix, &o, out, cap);
    sl_dataset_unref(mix);
    return n;
}

TEST(test_sample_statement) {
    sl_dataset *ds;
    int64_t got[64], want[64];
    ASSERT_OK(build_with("pipeline mixed {\n"
                         "    sample web books weights=[0.7, 0.3] seed=1 stop_on_empty=false\n"
                         "}\n",
                         "mixed", NULL, &ds));
    ASSERT_EQ(sl_dataset_cardinality(ds), 8);
    sl_iter_opts o = sl_iter_opts_default();
    o.seed = 4;
    ASSERT_EQ(sl_test_values(ds, &o, got, 64), 8);
    const double w[2] = {0.7, 0.3};
    ASSERT_EQ(api_sample(w, 1, false, 4, want, 64), 8);
    ASSERT_MEMEQ(got, want, 8 * sizeof got[0]);
    sl_dataset_unref(ds);
    /* no seed=: derived from env's seed and the statement's position (0), as shuffle's is;
     * no weights: equal; stop_on_empty=true: ends at the first input found empty */
    sl_pipeline_env env = sl_pipeline_env_default();
    int shorter = 0;
    for (env.seed = 70; env.seed < 90; env.seed++) {
        ASSERT_OK(build_with("pipeline mixed {\n    sample web books stop_on_empty=true\n}\n", "mixed", &env, &ds));
        ASSERT_STREQ(sl_dataset_op(ds), "sample_from_datasets");
        int n = sl_test_values(ds, &o, got, 64);
        ASSERT_EQ(n, api_sample(NULL, sl_mix2(env.seed, 1), true, 4, want, 64));
        ASSERT(n >= 3 && n <= 8);
        ASSERT_MEMEQ(got, want, (size_t)n * sizeof got[0]);
        shorter += n < 8;
        sl_dataset_unref(ds);
    }
    printf("  stop_on_empty: %d of 20 seeds ended before all 8 elements\n", shorter);
    ASSERT(shorter > 0);
}

TEST(test_choose_statement) {
    sl_dataset *ds;
    int64_t got[64];
    ASSERT_OK(build_with("pipeline mixed {\n    choose web books by=pick stop_on_empty=true\n}\n", "mixed", NULL, &ds));
    ASSERT_EQ(sl_test_values(ds, NULL, got, 64), 7);
    static const int64_t stop[] = {0, 100, 1, 101, 2, 102, 3};
    ASSERT_MEMEQ(got, stop, sizeof stop);
    sl_dataset_unref(ds);
    ASSERT_OK(build_with("pipeline mixed {\n    choose web books by=pick stop_on_empty=false\n}\n", "mixed", NULL, &ds));
    ASSERT_EQ(sl_test_values(ds, NULL, got, 64), 8);
    static const int64_t skip[] = {0, 100, 1, 101, 2, 102, 3, 4};
    ASSERT_MEMEQ(got, skip, sizeof skip);
    sl_dataset_unref(ds);
    /* the named pipelines get this one's environment: replica 1 of 2 reads web's odd half */
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = 2;
    env.shard_index = 1;
    ASSERT_OK(build("pipeline web {\n    range 0 10\n    shard\n}\n"
                    "pipeline books {\n    range 100 103\n}\n"
                    "pipeline pick {\n    range 0 2\n    repeat\n}\n"
                    "pipeline mixed {\n    choose web books by=pick\n}\n",
                    "mixed", &env, &ds));
    ASSERT_EQ(sl_test_values(ds, NULL, got, 64), 7);
    static const int64_t odd[] = {1, 100, 3, 101, 5, 102, 7};
    ASSERT_MEMEQ(got, odd, sizeof odd);
    sl_dataset_unref(ds);
    /* a choice outside the pipelines: named by the statement's op */
    ASSERT_OK(build_with("pipeline three {\n    range 0 3\n}\n"
                         "pipeline mixed {\n    choose web books by=three\n}\n",
                         "mixed", NULL, &ds));
    sl_iter *it;
    sl_element e;
    ASSERT_OK(sl_test_open(ds, &it, &e));
    ASSERT_OK(sl_test_next_drop(it));
    ASSERT_OK(sl_test_next_drop(it));
    ASSERT_EQ(sl_iter_next(it, &e), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "op 'mixed/choose': choice 2 is 2, outside 0..1 (2 inputs)\n"
                              "---> HINT: a choice is the index of an input, 0 for the first");
    ASSERT_EQ(sl_iter_next(it, &e), SL_END);
    sl_iter_close(it);
    sl_dataset_unref(ds);
}

/* Built for replica 0 of 2, what was written to stderr into log. */
static void warnings_of(const char *text, char *log, size_t cap) {
    char path[] = "/tmp/sluice-fcmix-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    sl_pipeline_env env = sl_pipeline_env_default();
    env.num_shards = 2;
    sl_dataset *ds = NULL;
    sl_status s = build(text, "mixed", &env, &ds);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    sl_dataset_unref(ds);
    ssize_t n = pread(fd, log, cap - 1, 0);
    log[n > 0 ? n : 0] = 0;
    if (s) snprintf(log, cap, "build failed: %s", sl_errmsg());
    close(fd);
    unlink(path);
}

TEST(test_unsharded_warnings_name_the_mixed_pipelines) {
    char log[2048];
    warnings_of("pipeline web {\n range 0 10\n}\npipeline books {\n range 0 10\n shard\n}\n"
                "pipeline mixed {\n sample web books\n}\n", log, sizeof log);
    ASSERT_CONTAINS(log, "pipeline 'web': read by 2 replicas, but it has no `shard` statement");
    ASSERT(!strstr(log, "pipeline 'books'"));
    ASSERT(!strstr(log, "pipeline 'mixed'"));
}

typedef struct refusal {
    const char *text; /* after SOURCES; the pipeline built is `m` */
    sl_status code;
    const char *msg;
} refusal;

TEST(test_refusals) {
    static const refusal cases[] = {
        {"pipeline m {\n sample web bookz\n}\n", SL_EINVAL,
         "mix.sl:12:13: no pipeline 'bookz' in mix.sl\n     sample web bookz\n                ^~~~~\n"
         "---> HINT: did you mean 'books'? (the pipelines are web, books, pick, m)"},
        {"pipeline m {\n choose web books by=nothing_like_it\n}\n", SL_EINVAL,
         "mix.sl:12:22: no pipeline 'nothing_like_it' in mix.sl\n     choose web books by=nothing_like_it\n"
         "                         ^~~~~~~~~~~~~~~\n"
         "---> HINT: the pipelines are web, books, pick, m"},
        {"pipeline m {\n sample web m\n}\n", SL_EINVAL,
         "mix.sl:12:13: pipeline 'm' cannot sample itself\n     sample web m\n                ^\n"
         "---> HINT: name other pipelines of the file: sample mixes what they give"},
        {"pipeline m {\n choose web books by=m\n}\n", SL_EINVAL,
         "mix.sl:12:22: pipeline 'm' cannot choose by itself\n     choose web books by=m\n"
         "                         ^\n"
         "---> HINT: name other pipelines of the file: choose mixes what they give"},
        {"pipeline m {\n sample web a\n}\npipeline a {\n sample books m\n}\n", SL_EINVAL,
         "mix.sl:12:13: pipeline 'm' would read itself through 'a': m -> a -> m\n     sample web a\n"
         "                ^\n"
         "---> HINT: a pipeline cannot read itself, directly or through the pipelines it mixes"},
        {"pipeline m {\n sample web a\n}\npipeline a {\n choose web books by=b\n}\n"
         "pipeline b {\n sample pick c\n}\npipeline c {\n sample m\n}\n", SL_EINVAL,
         "mix.sl:12:13: pipeline 'm' would read itself through 'a': m -> a -> b -> c -> m\n"
         "     sample web a\n                ^\n"
         "---> HINT: a pipeline cannot read itself, directly or through the pipelines it mixes"},
        {"pipeline m {\n sample web a\n}\npipeline a {\n sample b\n}\npipeline b {\n sample a\n}\n", SL_EINVAL,
         "mix.sl:15:9: pipeline 'a' would read itself through 'b': a -> b -> a\n     sample b\n            ^\n"
         "---> HINT: a pipeline cannot read itself, directly or through the pipelines it mixes"},
        {"pipeline m {\n sample web books weights=[1, -0.5]\n}\n", SL_EINVAL,
         "mix.sl:12:31: weight -0.5 of 'books' must be finite and >= 0\n"
         "     sample web books weights=[1, -0.5]\n                                  ^~~~\n"
         "---> HINT: weights are relative: [0.7, 0.3] and [7, 3] are the same mix"},
        {"pipeline m {\n sample web books weights=[0, 0]\n}\n", SL_EINVAL,
         "mix.sl:12:27: every weight is 0: nothing could be drawn\n"
         "     sample web books weights=[0, 0]\n                              ^\n"
         "---> HINT: give at least one pipeline a positive weight"},
        {"pipeline m {\n sample web books weights=[1]\n}\n", SL_EINVAL,
         "mix.sl:12:27: 2 pipelines but 1 weights: one weight per pipeline\n     sample web books weights=[1]\n                              ^\n"
         "---> HINT: usage: sample PIPELINE... [weights=[W, ...]] [seed=N] [stop_on_empty=BOOL]"},
        {"pipeline m {\n choose web books\n}\n", SL_EINVAL,
         "mix.sl:12:2: choose: missing by=PIPELINE (the choices)\n     choose web books\n     ^~~~~~\n"
         "---> HINT: usage: choose PIPELINE... by=PIPELINE [stop_on_empty=BOOL]"},
        {"pipeline m {\n range 0 3\n sample web books\n}\n", SL_EINVAL,
         "mix.sl:13:2: a pipeline reads one source: 'sample' here and 'range' at line 12\n"
         "     sample web books\n     ^~~~~~\n"
         "---> HINT: use one files statement with several patterns: files \"a-*.tfrecord\" \"b-*.tfrecord\""},
        {"pipeline m {\n sample web 42\n}\n", SL_EINVAL,
         "mix.sl:12:13: expected a pipeline name, found '42'\n     sample web 42\n                ^~\n"
         "---> HINT: usage: sample PIPELINE... [weights=[W, ...]] [seed=N] [stop_on_empty=BOOL]"},
        /* a mistake inside a named pipeline is reported where it is written */
        {"pipeline m {\n sample web broken\n}\npipeline broken {\n range 0 3\n batch x\n}\n", SL_EINVAL,
         "mix.sl:16:8: expected an integer, found a word 'x'\n     batch x\n           ^\n"
         "---> HINT: usage: batch N [drop_remainder] [padded] [pad=VALUE]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_dataset *ds = (sl_dataset *)1;
        sl_status s = build_with(cases[i].text, "m", NULL, &ds);
        if (s != cases[i].code || strcmp(sl_errmsg(), cases[i].msg) != 0) printf("  case %zu:\n", i);
        ASSERT_EQ(s, cases[i].code);
        ASSERT(ds == NULL);
        ASSERT_STREQ(sl_errmsg(), cases[i].msg);
    }
}

/* p0 samples p1, which samples p2, ... down to p`depth`, a range */
static sl_status build_chain(int depth, sl_dataset **ds) {
    static char text[8192];
    size_t len = 0;
    for (int i = 0; i < depth; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "pipeline p%d {\n sample p%d\n}\n", i, i + 1);
    snprintf(text + len, sizeof text - len, "pipeline p%d {\n range 0 3\n}\n", depth);
    return build(text, "p0", NULL, ds);
}

TEST(test_nesting_is_bounded) {
    sl_dataset *ds;
    int64_t got[8];
    ASSERT_OK(build_chain(32, &ds));
    ASSERT_EQ(sl_test_values(ds, NULL, got, 8), 3);
    ASSERT_EQ(got[2], 2);
    sl_dataset_unref(ds);
    ASSERT_EQ(build_chain(33, &ds), SL_EINVAL);
    ASSERT(ds == NULL);
    ASSERT_STREQ(sl_errmsg(), "mix.sl:98:9: pipeline 'p33' is nested 33 deep in pipelines that mix others\n"
                              "     sample p33\n            ^~~\n---> HINT: mix at most 32 levels deep");
}

int main(void) {
    RUN(test_sample_statement);
    RUN(test_choose_statement);
    RUN(test_unsharded_warnings_name_the_mixed_pipelines);
    RUN(test_refusals);
    RUN(test_nesting_is_bounded);
    TEST_MAIN_END();
}
