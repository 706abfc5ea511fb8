/* core/config*.c: the config language's syntax, error messages, overrides. */
#include "sluice/config.h"
#include "helper_files.h"
#include "test.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static sl_cfg *parse(const char *text) {
    sl_cfg *c = NULL;
    if (sl_cfg_parse(text, strlen(text), "t.sl", &c) != SL_OK) {
        printf("  unexpected parse error: %s\n", sl_errmsg());
        return NULL;
    }
    return c;
}

/* sl_cfg_set(c, SET) fails with SL_EINVAL and the message MSG (exactly, or containing it) */
#define ASSERT_SET_FAILS(set, msg)                 \
    do {                                           \
        ASSERT_EQ(sl_cfg_set(c, set), SL_EINVAL);  \
        ASSERT_STREQ(sl_errmsg(), msg);            \
    } while (0)
#define ASSERT_SET_FAILS_WITH(set, msg)            \
    do {                                           \
        ASSERT_EQ(sl_cfg_set(c, set), SL_EINVAL);  \
        ASSERT_CONTAINS(sl_errmsg(), msg);         \
    } while (0)

/* Declares c, the config parsed from TEXT (the test fails when it does not parse), r, its
 * root statements, and n, their number. */
#define PARSE_ROOT(text)      \
    sl_cfg *c = parse(text);  \
    ASSERT(c);                \
    int n;                    \
    const sl_cfg_stmt *r = sl_cfg_root(c, &n)

TEST(test_pipeline_sketch) {
    const char *text =
        "# the README's example\n"
        "pipeline train {\n"
        "    files \"data/fashion/train-*.tfrecord\"\n"
        "    shard auto\n"
        "    interleave cycle=4 block=16 parallel=auto\n"
        "    shuffle 10000 seed=1\n"
        "    map parse_example(image: bytes, label: int64)\n"
        "        | decode_raw(image, uint8, 28x28x1) | scale(image, 1/255)  parallel=auto\n"
        "    batch 128 drop_remainder\n"
        "    prefetch auto\n"
        "}\n";
    sl_cfg *c = parse(text);
    ASSERT(c);
    int n;
    const sl_cfg_stmt *root = sl_cfg_root(c, &n);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(root[0].name, "pipeline");
    ASSERT(root[0].has_body);
    ASSERT_STREQ(sl_cfg_pos(&root[0], 0)->text, "train");
    ASSERT_EQ(root[0].nbody, 7);
    const sl_cfg_stmt *b = root[0].body;
    ASSERT_STREQ(b[0].name, "files");
    ASSERT_EQ(sl_cfg_pos(&b[0], 0)->kind, SL_CV_STRING);
    ASSERT_STREQ(sl_cfg_pos(&b[0], 0)->text, "data/fashion/train-*.tfrecord");
    ASSERT(sl_cfg_is_auto(sl_cfg_pos(&b[1], 0)));
    const sl_cfg_stmt *il = sl_cfg_find(b, root[0].nbody, "interleave");
    ASSERT(il);
    ASSERT_EQ(sl_cfg_opt(il, "cycle")->inum, 4);
    ASSERT_EQ(sl_cfg_opt(il, "block")->inum, 16);
    ASSERT(sl_cfg_is_auto(sl_cfg_opt(il, "parallel")));
    ASSERT(sl_cfg_opt(il, "nope") == NULL);
    /* the map chain: call | call | call, then an option; continued across a line */
    const sl_cfg_stmt *m = &b[4];
    ASSERT_STREQ(m->name, "map");
    ASSERT_EQ(m->nargs, 6);
    ASSERT_EQ(m->args[0].v.kind, SL_CV_CALL);
    ASSERT_STREQ(m->args[0].v.text, "parse_example");
    ASSERT_EQ(m->args[0].v.nargs, 2);
    ASSERT_STREQ(m->args[0].v.args[0].key, "image");
    ASSERT_EQ(m->args[0].v.args[0].sep, ':');
    ASSERT_STREQ(m->args[0].v.args[0].v.text, "bytes");
    ASSERT_EQ(m->args[1].v.kind, SL_CV_PIPE);
    ASSERT_STREQ(m->args[2].v.text, "decode_raw");
    const sl_cfg_value *shape = &m->args[2].v.args[2].v;
    ASSERT_EQ(shape->kind, SL_CV_SHAPE);
    ASSERT_EQ(shape->ndims, 3);
    ASSERT_EQ(shape->dims[0], 28);
    ASSERT_EQ(shape->dims[2], 1);
    const sl_cfg_value *frac = &m->args[4].v.args[1].v;
    ASSERT_EQ(frac->kind, SL_CV_NUMBER);
    ASSERT(frac->num == 1.0 / 255);
    ASSERT_EQ(frac->is_int, 0);
    ASSERT(sl_cfg_is_auto(sl_cfg_opt(m, "parallel")));
    ASSERT_EQ(sl_cfg_npos(m), 3);
    ASSERT_EQ(m->args[5].v.loc.line, 8); /* the option sits on the continuation line */
    ASSERT_EQ(sl_cfg_pos(&b[5], 0)->inum, 128);
    ASSERT_STREQ(sl_cfg_pos(&b[5], 1)->text, "drop_remainder");
    sl_cfg_free(c);
}

TEST(test_values) {
    PARSE_ROOT("x 64MiB 2GB 500ms 10% -3 1e-3 0.5 [0.485, 0.456, 0.406] \"a\\\"b\\n\" true; y 7\n");
    ASSERT_EQ(n, 2); /* ';' ends a statement */
    ASSERT_EQ(sl_cfg_pos(&r[0], 0)->inum, 67108864);
    ASSERT_STREQ(sl_cfg_pos(&r[0], 0)->unit, "MiB");
    ASSERT_EQ(sl_cfg_pos(&r[0], 1)->inum, 2000000000);
    ASSERT(sl_cfg_pos(&r[0], 2)->num == 0.5);
    ASSERT(sl_cfg_pos(&r[0], 3)->num == 0.1);
    ASSERT_EQ(sl_cfg_pos(&r[0], 4)->inum, -3);
    ASSERT(sl_cfg_pos(&r[0], 5)->num == 1e-3);
    ASSERT_EQ(sl_cfg_pos(&r[0], 5)->is_int, 0);
    const sl_cfg_value *l = sl_cfg_pos(&r[0], 7);
    ASSERT_EQ(l->kind, SL_CV_LIST);
    ASSERT_EQ(l->nargs, 3);
    ASSERT(l->args[1].v.num == 0.456);
    ASSERT_STREQ(sl_cfg_pos(&r[0], 8)->text, "a\"b\n");
    bool bv;
    ASSERT_OK(sl_cfg_bool(c, sl_cfg_pos(&r[0], 9), &bv));
    ASSERT_EQ(bv, 1);
    int64_t iv;
    ASSERT_EQ(sl_cfg_int(c, sl_cfg_pos(&r[0], 6), 0, 10, &iv), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "t.sl:1:31: expected an integer, found the number '0.5'\n"
                              "    x 64MiB 2GB 500ms 10% -3 1e-3 0.5 [0.485, 0.456, 0.406] \"a\\\"b\\n\" true; y 7\n"
                              "                                  ^~~");
    ASSERT_EQ(sl_cfg_int(c, sl_cfg_pos(&r[1], 0), 0, 5, &iv), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "7 is outside 0..5");
    ASSERT_OK(sl_cfg_int(c, sl_cfg_pos(&r[1], 0), 0, 10, &iv));
    ASSERT_EQ(iv, 7);
    sl_cfg_free(c);
}

/* Each bad input gives SL_EINVAL and exactly this message (file:line:col, the line, a caret). */
TEST(test_syntax_errors) {
    static const struct { const char *text, *msg; } cases[] = {
        {"pipeline p {\n  batch 32\n", "t.sl:1:12: this '{' is never closed\n    pipeline p {\n               ^\n---> HINT: add the missing '}'"},
        {"a 1\n}\n", "t.sl:2:1: '}' without a matching '{'\n    }\n    ^"},
        {"files \"abc\n", "t.sl:1:7: unterminated string\n    files \"abc\n          ^\n---> HINT: close the string with \" on the same line"},
        {"map f(a, b\nbatch 3\n", "t.sl:2:1: expected ',' or ')' in the call opened at line 1, column 6, found 'batch'\n    batch 3\n    ^~~~~"},
        {"map f(a, b,\n", "t.sl:2:1: expected ')' to close the call opened at line 1, column 6, found end of file\n    \n    ^"},
        {"x 3qq\n", "t.sl:1:3: unknown unit 'qq' in '3qq'\n    x 3qq\n      ^~~\n---> HINT: units are K M G T, KB MB GB TB, KiB MiB GiB TiB, B, s ms us ns min h, and %"},
        {"x = 3\n", "t.sl:1:3: unexpected '=' in statement 'x'\n    x = 3\n      ^\n---> HINT: options are written key=value, the key a plain word"},
        {"x a=\n", "t.sl:1:5: option 'a' has no value after '='\n    x a=\n        ^\n---> HINT: write a=VALUE with no space after '='"},
        {"42 x\n", "t.sl:1:1: expected a statement name, found '42'\n    42 x\n    ^~"},
        {"x @\n", "t.sl:1:3: unexpected character '@'\n    x @\n      ^"},
        {"x 1/0\n", "t.sl:1:3: division by zero in '1/0'\n    x 1/0\n      ^~~"},
        {"x \"a\\qb\"\n", "t.sl:1:5: unknown escape '\\q' in string\n    x \"a\\qb\"\n        ^~\n---> HINT: the escapes are \\\" \\\\ \\n \\t \\r"},
        {"a { b } c\n", "t.sl:1:9: expected end of line after '}', found 'c'\n    a { b } c\n            ^"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sl_cfg *c = (sl_cfg *)1;
        sl_status s = sl_cfg_parse(cases[i].text, strlen(cases[i].text), "t.sl", &c);
        ASSERT_EQ(s, SL_EINVAL);
        ASSERT(c == NULL);
        ASSERT_STREQ(sl_errmsg(), cases[i].msg);
    }
}

TEST(test_comparisons) {
    PARSE_ROOT("filter label < 5\nfilter a == 1; filter b != 2; filter c >= 3; filter d<=4\n");
    ASSERT_EQ(n, 5);
    static const char *ops[] = {"<", "==", "!=", ">=", "<="};
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(sl_cfg_npos(&r[i]), 3);
        ASSERT_EQ(sl_cfg_pos(&r[i], 1)->kind, SL_CV_IDENT);
        ASSERT_STREQ(sl_cfg_pos(&r[i], 1)->text, ops[i]);
    }
    ASSERT_STREQ(sl_cfg_pos(&r[4], 0)->text, "d");
    sl_cfg_free(c);
    ASSERT_EQ(sl_cfg_parse("x ! 3\n", 6, "t.sl", &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "t.sl:1:3: unexpected character '!'\n    x ! 3\n      ^\n---> HINT: did you mean '!='?");
}

TEST(test_nesting_limit) {
    char buf[4096];
    size_t n = 0;
    n += (size_t)sprintf(buf, "x ");
    for (int i = 0; i < 200; i++) buf[n++] = '[';
    buf[n] = 0;
    sl_cfg *c;
    ASSERT_EQ(sl_cfg_parse(buf, n, "t.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "nested deeper than 64 levels");
}

TEST(test_nested_blocks_and_suggest) {
    PARSE_ROOT("model m {\n  layer a { units 3 }\n}\ntrain {\n epochs 3\n}\n");
    ASSERT_EQ(n, 2);
    ASSERT_EQ(r[0].body[0].body[0].args[0].v.inum, 3);
    sl_cfg_err(c, r[1].body[0].loc, SL_EINVAL, "unknown option '%s'", r[1].body[0].name);
    ASSERT_STREQ(sl_errmsg(), "t.sl:5:2: unknown option 'epochs'\n     epochs 3\n     ^~~~~~");
    static const char *const ops[] = {"shuffle", "shard", "batch", "map", "prefetch"};
    ASSERT_STREQ(sl_suggest("shufle", ops, 5), "shuffle");
    ASSERT_STREQ(sl_suggest("bath", ops, 5), "batch");
    ASSERT(sl_suggest("zzzzzz", ops, 5) == NULL);
    sl_cfg_free(c);
}

TEST(test_overrides) {
    PARSE_ROOT("pipeline train {\n shuffle 100 seed=1\n batch 32\n}\npipeline test {\n batch 8\n}\ntrain {\n epochs 3\n}\n");
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.shuffle.seed=7"));
    ASSERT_EQ(sl_cfg_opt(&r[0].body[0], "seed")->inum, 7);
    ASSERT_OK(sl_cfg_set(c, "pipeline.test.batch=64"));
    ASSERT_EQ(sl_cfg_pos(&r[1].body[0], 0)->inum, 64);
    ASSERT_EQ(sl_cfg_pos(&r[0].body[1], 0)->inum, 32); /* the other pipeline untouched */
    ASSERT_OK(sl_cfg_set(c, "train.epochs=1"));
    ASSERT_EQ(sl_cfg_pos(&r[2].body[0], 0)->inum, 1);
    ASSERT_OK(sl_cfg_set(c, "train.strategy=ring")); /* new statement in the block */
    ASSERT_EQ(r[2].nbody, 2);
    ASSERT_STREQ(r[2].body[1].name, "strategy");
    ASSERT_STREQ(sl_cfg_pos(&r[2].body[1], 0)->text, "ring");
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.shuffle.buffer_ram=\"1 GiB\"")); /* new option */
    ASSERT_STREQ(sl_cfg_opt(&r[0].body[0], "buffer_ram")->text, "1 GiB");
    ASSERT_SET_FAILS("nothing.here=1", "override 'nothing.here=1': no 'nothing' statement");
    ASSERT_EQ(sl_cfg_set(c, "novalue"), SL_EINVAL);
    ASSERT_SET_FAILS_WITH("train.epochs=\"x", "unterminated string");
    ASSERT_EQ(sl_cfg_set(c, "train.epochs=1 2"), SL_EINVAL);
    ASSERT_EQ(sl_cfg_pos(&r[2].body[0], 0)->inum, 1); /* unchanged after failures */
    int64_t v;
    ASSERT_OK(sl_cfg_set(c, "train.epochs=x"));
    ASSERT_EQ(sl_cfg_int(c, sl_cfg_pos(&r[2].body[0], 0), 1, 100, &v), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "expected an integer, found a word 'x' (value given with --set)");
    sl_cfg_free(c);
}

TEST(test_parse_file) {
    sl_cfg *c;
    ASSERT_EQ(sl_cfg_parse_file("/nonexistent/x.sl", &c), SL_ENOTFOUND);
    ASSERT_STREQ(sl_errmsg(), "config '/nonexistent/x.sl': no such file");
    char path[] = "/tmp/sluice-cfg-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char *t = "a 1 # c\r\nb \"x\"\r\n";
    ASSERT_EQ(write(fd, t, strlen(t)), (long long)strlen(t));
    close(fd);
    ASSERT_OK(sl_cfg_parse_file(path, &c));
    unlink(path);
    int n;
    const sl_cfg_stmt *r = sl_cfg_root(c, &n);
    ASSERT_EQ(n, 2);
    ASSERT_STREQ(sl_cfg_pos(&r[1], 0)->text, "x");
    ASSERT_STREQ(sl_cfg_filename(c), path);
    sl_cfg_free(c);
    ASSERT_OK(sl_cfg_parse("", 0, "empty", &c)); /* an empty file is an empty config */
    ASSERT_EQ((sl_cfg_root(c, &n), n), 0);
    sl_cfg_free(c);
    sl_cfg_free(NULL);
}

/* A NUL byte anywhere is an error at its line and column; before, one inside a string cut
 * the string short ("ab") and one in a comment was skipped silently. */
TEST(test_nul_bytes) {
    sl_cfg *c = NULL;
    static const char in_string[] = "x \"ab\0cd\"\n";
    ASSERT_EQ(sl_cfg_parse(in_string, sizeof in_string - 1, "t.sl", &c), SL_EINVAL);
    ASSERT(c == NULL);
    ASSERT_STREQ(sl_errmsg(), "t.sl:1:6: NUL byte (0x00) in the config\n    x \"ab?cd\"\n         ^\n"
                              "---> HINT: a config is text: remove the NUL byte (a file saved as UTF-16, or a "
                              "binary file, has them)");
    static const char in_comment[] = "a 1\n# c\0mment\nb 2\n";
    ASSERT_EQ(sl_cfg_parse(in_comment, sizeof in_comment - 1, "t.sl", &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "t.sl:2:4: NUL byte (0x00) in the config\n    # c?mment\n       ^\n"
                              "---> HINT: a config is text: remove the NUL byte (a file saved as UTF-16, or a "
                              "binary file, has them)");
    static const char raw[] = "a 1\nb 2\n\tc\0 3\n";
    ASSERT_EQ(sl_cfg_parse(raw, sizeof raw - 1, "t.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:3:3: NUL byte (0x00) in the config\n    \tc? 3\n    \t ^\n");
    /* the same from a file, named by its path */
    char path[] = "/tmp/sluice-cfg-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, in_string, sizeof in_string - 1), (long long)sizeof in_string - 1);
    close(fd);
    ASSERT_EQ(sl_cfg_parse_file(path, &c), SL_EINVAL);
    unlink(path);
    char want[128];
    snprintf(want, sizeof want, "%s:1:6: NUL byte (0x00) in the config", path);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(c == NULL);
}

/* A key given twice is refused naming both spots; before, the last copy silently won. */
TEST(test_duplicate_options) {
    sl_cfg *c = NULL;
    const char *t = "pipeline p {\n  shuffle 10 seed=1 seed=2\n}\n";
    ASSERT_EQ(sl_cfg_parse(t, strlen(t), "p.sl", &c), SL_EINVAL);
    ASSERT(c == NULL);
    ASSERT_STREQ(sl_errmsg(), "p.sl:2:21: option 'seed' given twice (first at p.sl:2:14)\n"
                              "      shuffle 10 seed=1 seed=2\n"
                              "                        ^~~~\n"
                              "---> HINT: keep one of them: a repeated option is refused rather than one copy "
                              "silently winning");
    /* the first repeat in the file is the one reported, with the first copy of its key */
    t = "a x=1 y=2 z=3 y=4 x=5\n";
    ASSERT_EQ(sl_cfg_parse(t, strlen(t), "p.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:1:15: option 'y' given twice (first at p.sl:1:7)");
    /* keyed arguments of a call */
    t = "map normalize(image, mean=[1], std=[2],\n              mean=[3])\n";
    ASSERT_EQ(sl_cfg_parse(t, strlen(t), "p.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:2:15: argument 'mean' of 'normalize' given twice (first at p.sl:1:22)");
    t = "map parse_example(image: bytes, image: int64)\n";
    ASSERT_EQ(sl_cfg_parse(t, strlen(t), "p.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "p.sl:1:33: argument 'image' of 'parse_example' given twice (first at p.sl:1:19)");
    /* many distinct options, then one repeated (the check is not quadratic) */
    char big[40000];
    size_t n = (size_t)sprintf(big, "s");
    for (int i = 0; i < 3000; i++) n += (size_t)sprintf(big + n, " k%d=%d", i, i);
    n += (size_t)sprintf(big + n, " k1234=0\n");
    ASSERT_EQ(sl_cfg_parse(big, n, "p.sl", &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "option 'k1234' given twice (first at p.sl:1:");
    /* the same key on different statements, in different calls, and in a list are fine */
    c = parse("a seed=1\nb seed=1\nm f(x=1) | f(x=2) x=3\n");
    ASSERT(c);
    int nr;
    const sl_cfg_stmt *r = sl_cfg_root(c, &nr);
    ASSERT_EQ(sl_cfg_opt(&r[2], "x")->inum, 3);
    ASSERT_EQ(r[2].args[2].v.args[0].v.inum, 2);
    ASSERT_EQ(r[0].args[0].kloc.line, 1);
    ASSERT_EQ(r[0].args[0].kloc.col, 3);
    sl_cfg_free(c);
}

/* A --set path part that matches several statements is refused with the candidates;
 * before, it went to the first one. */
TEST(test_ambiguous_overrides) {
    PARSE_ROOT("pipeline train {\n shuffle 100 seed=1\n batch 32\n}\npipeline test {\n shuffle 10\n batch 8\n}\n");
    ASSERT_SET_FAILS("pipeline.batch=7",
                     "override 'pipeline.batch=7': pipeline.batch matches pipeline 'train' and "
                     "pipeline 'test': say pipeline.train.batch or pipeline.test.batch");
    ASSERT_SET_FAILS("pipeline.shuffle.seed=3",
                     "override 'pipeline.shuffle.seed=3': pipeline.shuffle.seed matches pipeline 'train' "
                     "and pipeline 'test': say pipeline.train.shuffle.seed or pipeline.test.shuffle.seed");
    ASSERT_SET_FAILS("pipeline=x",
                     "override 'pipeline=x': pipeline matches pipeline 'train' and pipeline 'test': "
                     "say pipeline.train or pipeline.test");
    /* nothing changed by the failures */
    ASSERT_EQ(sl_cfg_pos(&r[0].body[1], 0)->inum, 32);
    ASSERT_EQ(sl_cfg_pos(&r[1].body[1], 0)->inum, 8);
    ASSERT_EQ(sl_cfg_opt(&r[0].body[0], "seed")->inum, 1);
    ASSERT(sl_cfg_opt(&r[1].body[0], "seed") == NULL);
    ASSERT_STREQ(sl_cfg_pos(&r[0], 0)->text, "train");
    /* the unambiguous paths work, each changing exactly its value */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.batch=7"));
    ASSERT_OK(sl_cfg_set(c, "pipeline.test.shuffle.seed=5"));
    ASSERT_EQ(sl_cfg_pos(&r[0].body[1], 0)->inum, 7);
    ASSERT_EQ(sl_cfg_pos(&r[1].body[1], 0)->inum, 8);
    ASSERT_EQ(sl_cfg_opt(&r[1].body[0], "seed")->inum, 5);
    ASSERT_EQ(sl_cfg_opt(&r[0].body[0], "seed")->inum, 1);
    sl_cfg_free(c);

    /* one pipeline: the short path is unambiguous and still works */
    c = parse("pipeline train {\n batch 32\n}\ntrain {\n epochs 3\n}\n");
    ASSERT(c);
    r = sl_cfg_root(c, &n);
    ASSERT_OK(sl_cfg_set(c, "pipeline.batch=5"));
    ASSERT_EQ(sl_cfg_pos(&r[0].body[0], 0)->inum, 5);
    sl_cfg_free(c);

    /* statements that no path can tell apart are listed by place */
    c = parse("pipeline train {\n map f(x)\n map g(x)\n}\n");
    ASSERT(c);
    ASSERT_SET_FAILS("pipeline.train.map.parallel=4",
                     "override 'pipeline.train.map.parallel=4': pipeline.train.map.parallel matches map at "
                     "t.sl:2:2 and map at t.sl:3:2\n---> HINT: --set cannot tell these statements "
                     "apart: edit the file instead");
    sl_cfg_free(c);

    /* three candidates; and two blocks with the same name and first word */
    c = parse("pipeline a { batch 1 }\npipeline b { batch 2 }\npipeline c { batch 3 }\npipeline a { batch 4 }\n");
    ASSERT(c);
    ASSERT_SET_FAILS_WITH("pipeline.batch=7",
                          "pipeline.batch matches pipeline 'a' at t.sl:1:1, pipeline 'b' at t.sl:2:1, "
                          "pipeline 'c' at t.sl:3:1 and pipeline 'a' at t.sl:4:1\n");
    ASSERT_SET_FAILS_WITH("pipeline.a.batch=7",
                          "pipeline.a.batch matches pipeline 'a' at t.sl:1:1 and pipeline 'a' at t.sl:4:1\n");
    ASSERT_OK(sl_cfg_set(c, "pipeline.c.batch=7"));
    r = sl_cfg_root(c, &n);
    ASSERT_EQ(sl_cfg_pos(&r[2].body[0], 0)->inum, 7);
    ASSERT_EQ(sl_cfg_pos(&r[0].body[0], 0)->inum, 1);
    ASSERT_EQ(sl_cfg_pos(&r[3].body[0], 0)->inum, 4);
    sl_cfg_free(c);

    /* malformed paths */
    c = parse("train {\n epochs 3\n}\n");
    ASSERT(c);
    ASSERT_SET_FAILS("train..epochs=1", "override 'train..epochs=1': the path has an empty part");
    char deep[256];
    size_t k = 0;
    for (int i = 0; i < 33; i++) k += (size_t)sprintf(deep + k, "%sa", i ? "." : "");
    sprintf(deep + k, "=1");
    ASSERT_EQ(sl_cfg_set(c, deep), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "the path has more than 32 parts");
    sl_cfg_free(c);
}

/* Configs are read through sl_file_read_all: a FIFO is refused at once (before, open()
 * blocked forever waiting for a writer), /dev/zero is refused instead of read until memory
 * runs out, and so are directories and files over SL_CFG_MAX_BYTES. */
TEST(test_config_file_kinds) {
    sl_cfg *c = NULL;
    char dir[] = "/tmp/sluice-cfgk-XXXXXX", fifo[64], big[64];
    ASSERT(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo.sl", dir);
    snprintf(big, sizeof big, "%s/big.sl", dir);
    ASSERT_EQ(mkfifo(fifo, 0600), 0);
    alarm(20); /* a regression blocks in open(): fail the test instead of hanging */
    ASSERT_EQ(sl_cfg_parse_file(fifo, &c), SL_EINVAL);
    alarm(0);
    char want[160];
    snprintf(want, sizeof want, "config '%s': is a FIFO (named pipe), not a regular file", fifo);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT_EQ(sl_cfg_parse_file(dir, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "is a directory, not a regular file");
    ASSERT_EQ(sl_cfg_parse_file("/dev/zero", &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "config '/dev/zero': is a character device, not a regular file\n---> HINT: give "
                              "the path of a regular file; pipes, sockets, devices and directories are refused "
                              "so that nothing can block or read without end");
    ASSERT_EQ(sl_test_sparse_file(big, (long long)SL_CFG_MAX_BYTES + 1), 0);
    ASSERT_EQ(sl_cfg_parse_file(big, &c), SL_ERANGE);
    snprintf(want, sizeof want, "config '%s': is 16777217 bytes, more than the limit of 16777216", big);
    ASSERT_CONTAINS(sl_errmsg(), want);
    ASSERT(c == NULL);
    unlink(big);
    unlink(fifo);
    rmdir(dir);
}

/* PATH=- removes an option or a statement; failures leave the tree as it was. */
TEST(test_override_remove) {
    PARSE_ROOT("pipeline train {\n shuffle 100 seed=1\n batch 32\n}\n"
                      "train {\n epochs 15\n checkpoint every=1 keep=3\n seed 1\n}\n");
    ASSERT_OK(sl_cfg_set(c, "train.epochs=-")); /* a statement */
    ASSERT_EQ(r[1].nbody, 2);
    ASSERT_STREQ(r[1].body[0].name, "checkpoint");
    ASSERT_STREQ(r[1].body[1].name, "seed");
    ASSERT_OK(sl_cfg_set(c, "train.checkpoint.every=-")); /* an option */
    ASSERT_EQ(r[1].body[0].nargs, 1);
    ASSERT_STREQ(r[1].body[0].args[0].key, "keep");
    ASSERT_EQ(r[1].body[0].args[0].v.inum, 3);
    ASSERT(!sl_cfg_opt(&r[1].body[0], "every"));
    ASSERT_OK(sl_cfg_set(c, "train.checkpoint.steps=20")); /* then the other spelling is added */
    ASSERT_EQ(sl_cfg_opt(&r[1].body[0], "steps")->inum, 20);
    ASSERT_OK(sl_cfg_set(c, "train.steps=60"));
    ASSERT_EQ(r[1].nbody, 3);
    ASSERT_STREQ(r[1].body[2].name, "steps");
    ASSERT_EQ(sl_cfg_pos(&r[1].body[2], 0)->inum, 60);
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.shuffle.seed=-"));
    ASSERT_EQ(r[0].body[0].nargs, 1);
    ASSERT_EQ(sl_cfg_pos(&r[0].body[0], 0)->inum, 100);
    /* a whole block, named by its first word */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train=-"));
    r = sl_cfg_root(c, &n);
    ASSERT_EQ(n, 1);
    ASSERT_STREQ(r[0].name, "train");
    /* nothing to remove is an error, with a did-you-mean */
    ASSERT_SET_FAILS("train.sed=-",
                     "override 'train.sed=-': nothing named 'sed' in train to remove\n"
                     "---> HINT: did you mean 'seed'?");
    ASSERT_SET_FAILS("train.checkpoint.every=-",
                     "override 'train.checkpoint.every=-': nothing named 'every' in checkpoint to remove");
    ASSERT_SET_FAILS("model.x=-", "override 'model.x=-': no 'model' statement");
    ASSERT_EQ(r[0].nbody, 3); /* unchanged by the failures */
    /* '-' glued to something else is still a value (or a syntax error), not a removal */
    ASSERT_SET_FAILS_WITH("train.seed=-x", "unexpected character '-'");
    ASSERT_OK(sl_cfg_set(c, "train.seed=-3"));
    ASSERT_EQ(sl_cfg_pos(&r[0].body[1], 0)->inum, -3);
    ASSERT_OK(sl_cfg_set(c, "train.seed=\"-\"")); /* a string "-" when one is meant */
    ASSERT_STREQ(sl_cfg_pos(&r[0].body[1], 0)->text, "-");
    sl_cfg_free(c);
}

/* PATH=(ARGS...) replaces a statement's whole argument list (or adds the statement). */
TEST(test_override_args) {
    PARSE_ROOT("pipeline train {\n shuffle 100 seed=1\n map a(x) | b(y) parallel=4\n}\n"
                      "train {\n checkpoint every=1 keep=3\n}\n");
    ASSERT_OK(sl_cfg_set(c, "train.checkpoint=(steps=20)"));
    const sl_cfg_stmt *ck = &r[1].body[0];
    ASSERT_EQ(ck->nargs, 1);
    ASSERT_STREQ(ck->args[0].key, "steps");
    ASSERT_EQ(ck->args[0].v.inum, 20);
    ASSERT_EQ(ck->args[0].v.loc.line, 0); /* from --set, not the file */
    ASSERT_OK(sl_cfg_set(c, "train.checkpoint=(none)"));
    ASSERT_EQ(ck->nargs, 1);
    ASSERT_STREQ(sl_cfg_pos(ck, 0)->text, "none");
    ASSERT_OK(sl_cfg_set(c, "train.checkpoint=()")); /* no arguments at all */
    ASSERT_EQ(ck->nargs, 0);
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.shuffle=(50 seed=2 reshuffle=false)"));
    const sl_cfg_stmt *sh = &r[0].body[0];
    ASSERT_EQ(sh->nargs, 3);
    ASSERT_EQ(sl_cfg_pos(sh, 0)->inum, 50);
    ASSERT_EQ(sl_cfg_opt(sh, "seed")->inum, 2);
    ASSERT_STREQ(sl_cfg_opt(sh, "reshuffle")->text, "false");
    /* a chain with calls and pipes */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.map=(c(z, k: 1) | d() parallel=2)"));
    const sl_cfg_stmt *mp = &r[0].body[1];
    ASSERT_EQ(mp->nargs, 4);
    ASSERT_EQ(mp->args[0].v.kind, SL_CV_CALL);
    ASSERT_STREQ(mp->args[0].v.text, "c");
    ASSERT_EQ(mp->args[0].v.args[1].v.loc.line, 0);
    ASSERT_EQ(mp->args[1].v.kind, SL_CV_PIPE);
    ASSERT_STREQ(mp->args[2].v.text, "d");
    ASSERT_EQ(sl_cfg_opt(mp, "parallel")->inum, 2);
    /* a missing statement in a block is added with those arguments */
    ASSERT_OK(sl_cfg_set(c, "pipeline.train.batch=(16 drop_remainder)"));
    ASSERT_EQ(r[0].nbody, 3);
    ASSERT_STREQ(r[0].body[2].name, "batch");
    ASSERT_EQ(r[0].body[2].nargs, 2);
    ASSERT_STREQ(sl_cfg_pos(&r[0].body[2], 1)->text, "drop_remainder");
    /* errors: unclosed, a second statement, a repeated key, an option, leave things as they were */
    ASSERT_SET_FAILS("train.checkpoint=(steps=20",
                     "override 'train.checkpoint': --set:1:1: this '(' is never closed\n    (steps=20\n    ^\n"
                     "---> HINT: write PATH=(ARGS...), the arguments as on the statement's line, ending with ')'");
    ASSERT_SET_FAILS_WITH("train.checkpoint=(steps=20; keep=1)", "unexpected end of line in an argument list");
    ASSERT_SET_FAILS_WITH("train.checkpoint=(steps=2 steps=3)", "option 'steps' given twice");
    ASSERT_SET_FAILS("pipeline.train.shuffle.seed=(3)",
                     "override 'pipeline.train.shuffle.seed=(3)': 'seed' is an option of shuffle: it takes "
                     "one value\n---> HINT: PATH=(ARGS...) replaces a statement's arguments; an option is set "
                     "with PATH=VALUE");
    ASSERT_EQ(ck->nargs, 0);
    ASSERT_EQ(sh->nargs, 3);
    /* a block named by two parts takes (ARGS) too, but not a single value */
    ASSERT_SET_FAILS("pipeline.train=x",
                     "override 'pipeline.train=x' names a statement, not a value inside it\n"
                     "---> HINT: PATH=- removes it; PATH=(ARGS...) replaces its arguments");
    ASSERT_OK(sl_cfg_set(c, "pipeline.train=(val)"));
    ASSERT_STREQ(sl_cfg_pos(&r[0], 0)->text, "val");
    ASSERT_EQ(r[0].nbody, 3); /* the body stays */
    sl_cfg_free(c);
}

/* Integers are exact or refused: a literal past int64 is SL_ERANGE naming it (not "not an
 * integer", not wrapped), an exponent or unit that would round is computed exactly, a hex
 * literal is refused where it stands (strtod would read 0xff as 255, strtoll as 0). */
TEST(test_integer_literals) {
    PARSE_ROOT("x 9223372036854775807 -9223372036854775808 -0 9007199254740993e0 12345678901234567e2 1.5e3 "
               "9223372036854775807.0 3000ms 100% 0e99 1Ki\n"
               "y 9223372036854775808 -9223372036854775809 1e30 9.3e18 10000000000000001K 25e-1 1e-400 "
               "9223372036854775807.5\n");
    static const int64_t want[] = {INT64_MAX, INT64_MIN, 0, 9007199254740993LL, 1234567890123456700LL, 1500,
                                   INT64_MAX, 3, 1, 0, 1024};
    int64_t iv;
    ASSERT_EQ(sl_cfg_npos(&r[0]), 11);
    for (int i = 0; i < 11; i++) {
        const sl_cfg_value *v = sl_cfg_pos(&r[0], i);
        if (!v->is_int || v->inum != want[i]) printf("  x[%d] '%s': is_int %d, %lld\n", i, v->text, v->is_int, (long long)v->inum);
        ASSERT(v->is_int);
        ASSERT_EQ(v->inum, want[i]);
        ASSERT_OK(sl_cfg_int(c, v, INT64_MIN, INT64_MAX, &iv));
        ASSERT_EQ(iv, want[i]);
    }
    static const sl_status codes[] = {SL_ERANGE, SL_ERANGE, SL_ERANGE, SL_ERANGE, SL_ERANGE, SL_EINVAL, SL_EINVAL, SL_EINVAL};
    ASSERT_EQ(sl_cfg_npos(&r[1]), 8);
    for (int i = 0; i < 8; i++) {
        const sl_cfg_value *v = sl_cfg_pos(&r[1], i);
        ASSERT_EQ(v->is_int, 0);
        sl_status s = sl_cfg_int(c, v, INT64_MIN, INT64_MAX, &iv);
        if (s != codes[i]) printf("  y[%d] '%s': %s\n", i, v->text, sl_errmsg());
        ASSERT_EQ(s, codes[i]);
        char msg[96];
        if (s == SL_ERANGE) snprintf(msg, sizeof msg, "%s is outside -9223372036854775808..9223372036854775807", v->text);
        else snprintf(msg, sizeof msg, "expected an integer, found the number '%s'", v->text);
        ASSERT_CONTAINS(sl_errmsg(), msg);
    }
    ASSERT_EQ(sl_cfg_int(c, sl_cfg_pos(&r[1], 0), 0, 10, &iv), SL_ERANGE);
    ASSERT_STREQ(sl_errmsg(), "t.sl:2:3: 9223372036854775808 is outside 0..10\n"
                              "    y 9223372036854775808 -9223372036854775809 1e30 9.3e18 10000000000000001K 25e-1 "
                              "1e-400 9223372036854775807.5\n"
                              "      ^~~~~~~~~~~~~~~~~~~");
    ASSERT_EQ(sl_cfg_set(c, "x=0xff"), SL_EINVAL);
    sl_cfg_free(c);
    sl_cfg *h = NULL;
    ASSERT_EQ(sl_cfg_parse("take 0xff\n", 10, "t.sl", &h), SL_EINVAL);
    ASSERT(h == NULL);
    ASSERT_STREQ(sl_errmsg(), "t.sl:1:6: hexadecimal number '0xff': write it in decimal\n    take 0xff\n         ^~~~");
    ASSERT_EQ(sl_cfg_parse("take 0XE\n", 9, "t.sl", &h), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:1:6: hexadecimal number '0XE': write it in decimal");
}

int main(void) {
    RUN(test_pipeline_sketch);
    RUN(test_values);
    RUN(test_syntax_errors);
    RUN(test_comparisons);
    RUN(test_nesting_limit);
    RUN(test_nested_blocks_and_suggest);
    RUN(test_overrides);
    RUN(test_parse_file);
    RUN(test_nul_bytes);
    RUN(test_duplicate_options);
    RUN(test_ambiguous_overrides);
    RUN(test_config_file_kinds);
    RUN(test_override_remove);
    RUN(test_override_args);
    RUN(test_integer_literals);
    TEST_MAIN_END();
}
