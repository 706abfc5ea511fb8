/* dist/cluster.c and dist/json.c: cluster resolution from each source (arguments, config
 * block, TF_CONFIG, Slurm, Open MPI, nothing), the order between them, consistency errors,
 * the TF_CONFIG writer, and the strict JSON reader's errors with byte offsets. */
#include "sluice/cluster.h"
#include "test.h"

static sl_status from_env(const char *const *env, sl_cluster *c) { return sl_cluster_resolve(NULL, NULL, env, c); }

TEST(test_single) {
    sl_cluster c;
    ASSERT_OK(sl_cluster_resolve(NULL, NULL, NULL, &c));
    ASSERT_EQ(c.world, 1);
    ASSERT_EQ(c.rank, 0);
    ASSERT_EQ(c.ntasks, 1);
    ASSERT_STREQ(c.tasks[0].addr, "127.0.0.1:29500");
    ASSERT_STREQ(c.members_source, "single");
    sl_cluster_free(&c);
    sl_cluster_free(NULL);
}

TEST(test_tf_config) {
    const char *env[] = {"HOME=/root",
        "TF_CONFIG={\"cluster\": {\"chief\": [\"c0:2222\"], \"worker\": [\"w0:2222\", \"w1:2222\"], "
        "\"ps\": [\"p0:2222\"], \"evaluator\": [\"e0:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}",
        NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.ntasks, 5);
    ASSERT_EQ(c.world, 3);
    ASSERT_EQ(c.rank, 2); /* chief 0, worker 0 -> 1, worker 1 -> 2 */
    ASSERT_EQ(c.nps, 1);
    ASSERT_EQ(c.tasks[c.self].type, SL_TASK_WORKER);
    ASSERT_EQ(c.tasks[c.self].index, 1);
    ASSERT_STREQ(c.tasks[c.self].addr, "w1:2222");
    ASSERT_EQ(c.tasks[3].ring_rank, -1);
    ASSERT_STREQ(c.members_source, "TF_CONFIG");
    ASSERT_STREQ(c.task_source, "TF_CONFIG");
    const char **ra, **pa;
    ASSERT_OK(sl_cluster_ring_addrs(&c, &ra));
    ASSERT_STREQ(ra[0], "c0:2222");
    ASSERT_STREQ(ra[2], "w1:2222");
    ASSERT_OK(sl_cluster_ps_addrs(&c, &pa));
    ASSERT_STREQ(pa[0], "p0:2222");
    sl_cluster_free(&c);

    const char *ps[] = {"TF_CONFIG={\"cluster\":{\"worker\":[\"a:1\"],\"ps\":[\"b:2\",\"c:3\"]},\"task\":{\"type\":\"ps\",\"index\":1}}", NULL};
    ASSERT_OK(from_env(ps, &c));
    ASSERT_EQ(c.rank, -1);
    ASSERT_STREQ(c.tasks[c.self].addr, "c:3");
    sl_cluster_free(&c);
}

static void expect_env_err(const char *tfc, const char *msg) {
    char buf[1024];
    snprintf(buf, sizeof buf, "TF_CONFIG=%s", tfc);
    const char *env[] = {buf, NULL};
    sl_cluster c;
    sl_status s = from_env(env, &c);
    if (s == SL_OK) { FAILF("accepted %s", tfc); sl_cluster_free(&c); return; }
    if (strcmp(sl_errmsg(), msg) != 0) FAILF("for %s:\n    got      \"%s\"\n    expected \"%s\"", tfc, sl_errmsg(), msg);
    if (c.tasks != NULL || c.ntasks != 0) FAILF("out not zeroed");
}

TEST(test_tf_config_errors) {
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 3}}",
                   "inconsistent cluster: the task is worker 3 (from TF_CONFIG) but TF_CONFIG lists 1 worker task");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"boss\"}}",
                   "TF_CONFIG: byte 50: unknown task type \"boss\"");
    expect_env_err("{\"cluster\": {\"workers\": [\"a:1\"]}}",
                   "TF_CONFIG: byte 24: unknown job \"workers\" in cluster (chief, worker, ps, evaluator)");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\", 7]}}",
                   "TF_CONFIG: byte 31: cluster.worker[1] must be a \"host:port\" string");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\",]}}", "TF_CONFIG: byte 30: expected a value, found ']'");
    expect_env_err("{\"cluster\": {\"worker\": [\"a\"]}}", "TF_CONFIG: byte 24: address \"a\" is not host:port");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:0\"]}}",
                   "TF_CONFIG: byte 24: address \"a:0\": port must be a number in 1..65535");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\", \"a:1\"]}, \"task\": {\"type\": \"worker\"}}",
                   "TF_CONFIG: address a:1 is given to both worker 0 and worker 1");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": -1}}",
                   "TF_CONFIG: byte 69: task index must be a non-negative integer");
    expect_env_err("{\"cluster\": {\"chief\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"chief\"}}",
                   "TF_CONFIG: 2 chiefs listed; a cluster has at most one");
    expect_env_err("{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": {\"type\": \"ps\"}}",
                   "TF_CONFIG: the cluster lists no chief and no worker");
    /* an empty member list is an error naming TF_CONFIG, never a single replica */
    expect_env_err("{\"cluster\": {\"worker\": []}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
                   "TF_CONFIG: the cluster lists no chief and no worker");
    expect_env_err("{\"cluster\": {}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
                   "TF_CONFIG: the cluster lists no chief and no worker");
    expect_env_err("{\"cluster\": {\"chief\": [\"a:1\"], \"worker\": []}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
                   "inconsistent cluster: the task is worker 0 (from TF_CONFIG) but TF_CONFIG lists 0 worker tasks");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\"], \"ps\": [\"b:2\", \"a:1\"]}, \"task\": {\"type\": \"ps\"}}",
                   "TF_CONFIG: address a:1 is given to both worker 0 and ps 1");
    expect_env_err("[1]", "TF_CONFIG: byte 0: expected an object");
    expect_env_err("{\"cluster\": {}, \"tsk\": 1}", "TF_CONFIG: byte 23: unknown key \"tsk\"");
    expect_env_err("{\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}}",
                   "TF_CONFIG lists 2 ring members but nothing says which one this process is\n"
                   "---> HINT: set the task: --rank, `task worker N` in the cluster block, TF_CONFIG's task, or run "
                   "under sluice-launch / srun / mpirun");
}

static void expect_json_err(const char *text, const char *msg) {
    sl_json *j;
    sl_status s = sl_json_parse(text, strlen(text), "J", &j);
    if (s != SL_ECORRUPT) { FAILF("%s: status %d", text, s); sl_json_free(j); return; }
    if (j) FAILF("out not NULL");
    if (strcmp(sl_errmsg(), msg) != 0) FAILF("for %s:\n    got      \"%s\"\n    expected \"%s\"", text, sl_errmsg(), msg);
}

TEST(test_json) {
    sl_json *j;
    const char *t = " {\"a\": [1, -2.5e1, true, false, null, \"x\\u00e9\\ud83d\\ude00\\n\"], \"b\": {}} ";
    ASSERT_OK(sl_json_parse(t, strlen(t), "J", &j));
    ASSERT_EQ(j->kind, SL_JSON_OBJECT);
    ASSERT_EQ(j->len, 2);
    const sl_json *a = sl_json_get(j, "a");
    ASSERT(a && a->kind == SL_JSON_ARRAY && a->len == 6);
    ASSERT(a->items[0].num == 1 && a->items[1].num == -25);
    ASSERT_EQ(a->items[2].b, 1);
    ASSERT_EQ(a->items[3].kind, SL_JSON_BOOL);
    ASSERT_EQ(a->items[4].kind, SL_JSON_NULL);
    ASSERT_STREQ(a->items[5].str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    ASSERT_EQ(a->items[5].offset, 38);
    ASSERT_EQ(sl_json_get(j, "b")->len, 0);
    ASSERT(sl_json_get(j, "c") == NULL);
    sl_json_free(j);
    expect_json_err("", "J: byte 0: expected a value, found the end of the input");
    expect_json_err("{\"a\":1,\"a\":2}", "J: byte 7: duplicate key \"a\"");
    expect_json_err("{\"a\" 1}", "J: byte 5: expected ':' after a key, found '1'");
    expect_json_err("[1 2]", "J: byte 3: expected ',' or ']', found '2'");
    expect_json_err("{a:1}", "J: byte 1: expected a \"key\", found 'a'");
    expect_json_err("\"abc", "J: byte 0: unterminated string");
    expect_json_err("\"a\x01\"", "J: byte 2: control character 0x01 in a string (escape it)");
    expect_json_err("\"\\q\"", "J: byte 1: bad escape \\q");
    expect_json_err("\"\\ud800x\"", "J: byte 1: high surrogate \\ud800 without a low surrogate");
    expect_json_err("\"\\u0000\"", "J: byte 1: \\u0000 is not allowed in a string");
    expect_json_err("\"\xc3\x28\"", "J: byte 1: invalid UTF-8 in a string");
    expect_json_err("01", "J: byte 0: number with a leading zero");
    expect_json_err("1.", "J: byte 2: a digit expected after '.'");
    expect_json_err("-", "J: byte 1: a digit expected in a number");
    expect_json_err("1e999", "J: byte 0: number out of range");
    expect_json_err("tru", "J: byte 0: expected a value, found 't'");
    expect_json_err("[1] x", "J: byte 4: unexpected 'x' after the value");
    char deep[200];
    memset(deep, '[', 70);
    deep[70] = 0;
    expect_json_err(deep, "J: byte 64: nesting deeper than 64 levels");
}

static sl_status cfg_resolve(const char *text, const sl_cluster_args *args, const char *const *env, sl_cluster *c) {
    sl_cfg *cfg;
    sl_status s = sl_cfg_parse(text, strlen(text), "c.sl", &cfg);
    if (s) return s;
    s = sl_cluster_resolve(args, cfg, env, c);
    sl_cfg_free(cfg);
    return s;
}

TEST(test_config_block) {
    sl_cluster c;
    const char *text = "cluster {\n  worker \"h1:5000\" \"h2:5000\"\n  ps \"h3:6000\"\n  task worker 1\n  timeout 45s\n}\n";
    ASSERT_OK(cfg_resolve(text, NULL, NULL, &c));
    ASSERT_EQ(c.world, 2);
    ASSERT_EQ(c.rank, 1);
    ASSERT_EQ(c.nps, 1);
    ASSERT(c.timeout_s == 45);
    ASSERT_STREQ(c.members_source, "config");
    ASSERT_STREQ(c.tasks[c.self].addr, "h2:5000");
    sl_cluster_free(&c);
    /* the task from TF_CONFIG when the block has none; the block's members win */
    const char *env[] = {"TF_CONFIG={\"cluster\": {\"worker\": [\"x:1\", \"y:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}", NULL};
    ASSERT_OK(cfg_resolve("cluster {\n  worker \"h1:5000\" \"h2:5000\"\n}\n", NULL, env, &c));
    ASSERT_EQ(c.rank, 0);
    ASSERT_STREQ(c.tasks[c.self].addr, "h1:5000");
    ASSERT_STREQ(c.members_source, "config");
    ASSERT_STREQ(c.task_source, "TF_CONFIG");
    sl_cluster_free(&c);
    /* explicit arguments beat everything */
    sl_cluster_args a = {.peers = "127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", .rank = 2, .has_rank = 1};
    ASSERT_OK(cfg_resolve("cluster {\n  worker \"h1:5000\" \"h2:5000\"\n}\n", &a, env, &c));
    ASSERT_EQ(c.world, 3);
    ASSERT_EQ(c.rank, 2);
    ASSERT_STREQ(c.tasks[c.self].addr, "127.0.0.1:7002");
    ASSERT_STREQ(c.members_source, "args");
    sl_cluster_free(&c);
    /* errors point into the config */
    ASSERT_EQ(cfg_resolve("cluster {\n  wroker \"h1:5000\"\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:2:3: unknown statement 'wroker' in the cluster block");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: did you mean 'worker'?");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1\"\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:2:10: address \"h1\" is not host:port");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker h1\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:2:10: an address must be a \"host:port\" string");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"a:1\"\n  task wrker 0\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:8: unknown task type 'wrker'");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: did you mean 'worker'?");
}

TEST(test_slurm) {
    const char *env[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_STEP_NODELIST=gpu[07-08]",
                         "SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLUICE_PORT_BASE=31000", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.world, 4);
    ASSERT_EQ(c.rank, 3);
    ASSERT_STREQ(c.tasks[0].addr, "gpu07:31000");
    ASSERT_STREQ(c.tasks[1].addr, "gpu07:31001");
    ASSERT_STREQ(c.tasks[2].addr, "gpu08:31000");
    ASSERT_STREQ(c.tasks[3].addr, "gpu08:31001");
    ASSERT_STREQ(c.members_source, "slurm");
    sl_cluster_free(&c);
    const char *env2[] = {"SLURM_PROCID=1", "SLURM_NTASKS=3", "SLURM_JOB_NODELIST=a1,b[1,3]", NULL};
    ASSERT_OK(from_env(env2, &c));
    ASSERT_STREQ(c.tasks[0].addr, "a1:29500");
    ASSERT_STREQ(c.tasks[1].addr, "b1:29500");
    ASSERT_STREQ(c.tasks[2].addr, "b3:29500");
    sl_cluster_free(&c);
    const char *bad[] = {"SLURM_PROCID=4", "SLURM_NTASKS=4", NULL};
    ASSERT_EQ(from_env(bad, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "slurm: SLURM_PROCID=4 is not below SLURM_NTASKS=4");
    const char *bad2[] = {"SLURM_PROCID=0", "SLURM_NTASKS=3", "SLURM_STEP_NODELIST=n[1-2]",
                          "SLURM_STEP_TASKS_PER_NODE=2", NULL};
    ASSERT_EQ(from_env(bad2, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "slurm: the tasks per node add up to 2 but SLURM_NTASKS=3");
    const char *bad3[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_NODELIST=n[1-", NULL};
    ASSERT_EQ(from_env(bad3, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "slurm: unclosed '[' in node list \"n[1-\"");
    /* a config listing 2 workers under a launcher that started 4 tasks */
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"a:1\" \"b:1\"\n}\n", NULL, env, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "inconsistent cluster: config lists 2 ring members (chief + workers) but slurm says 4 tasks\n"
                              "---> HINT: make the member list and the launcher agree (or drop one of them)");
}

TEST(test_openmpi) {
    const char *env[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=3", "OMPI_COMM_WORLD_LOCAL_SIZE=3", NULL};
    sl_cluster c;
    ASSERT_OK(from_env(env, &c));
    ASSERT_EQ(c.world, 3);
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.tasks[2].addr, "127.0.0.1:29502");
    ASSERT_STREQ(c.members_source, "openmpi");
    sl_cluster_free(&c);
    const char *multi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    ASSERT_EQ(from_env(multi, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "openmpi: 4 tasks but no addresses for them\n"
                              "---> HINT: list the workers in a cluster { worker \"host:port\" ... } block, or pass --peers");
    const char *bad[] = {"OMPI_COMM_WORLD_RANK=x", "OMPI_COMM_WORLD_SIZE=4", NULL};
    ASSERT_EQ(from_env(bad, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "openmpi: OMPI_COMM_WORLD_RANK=\"x\" is not a rank");
    /* Slurm comes before Open MPI */
    const char *both[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                          "SLURM_PROCID=1", "SLURM_NTASKS=2", NULL};
    ASSERT_OK(from_env(both, &c));
    ASSERT_EQ(c.rank, 1);
    ASSERT_STREQ(c.task_source, "slurm");
    sl_cluster_free(&c);
}

TEST(test_args_errors) {
    sl_cluster c;
    sl_cluster_args a = {.peers = "a:1,,b:2", .rank = 0, .has_rank = 1};
    ASSERT_EQ(sl_cluster_resolve(&a, NULL, NULL, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "args: empty or overlong entry in \"a:1,,b:2\"");
    sl_cluster_args b = {.peers = "a:1,b:2", .rank = 2, .has_rank = 1};
    ASSERT_EQ(sl_cluster_resolve(&b, NULL, NULL, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "inconsistent cluster: the task is worker 2 (from args) but args lists 2 worker tasks");
    sl_cluster_args d = {.peers = "a:1,b:2", .task_type = "cheif"};
    ASSERT_EQ(sl_cluster_resolve(&d, NULL, NULL, &c), SL_EINVAL);
    ASSERT_STREQ(sl_errmsg(), "args: unknown task type \"cheif\" (chief, worker, ps, evaluator)");
}

TEST(test_tf_config_writer) {
    const char *w[] = {"127.0.0.1:29500", "127.0.0.1:29501"}, *p[] = {"127.0.0.1:29600"};
    char buf[512];
    int n = sl_cluster_tf_config(buf, sizeof buf, w, 2, p, 1, "ps", 0);
    ASSERT_STREQ(buf, "{\"cluster\": {\"worker\": [\"127.0.0.1:29500\", \"127.0.0.1:29501\"], \"ps\": "
                      "[\"127.0.0.1:29600\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}");
    ASSERT_EQ(n, (int)strlen(buf));
    char small[10];
    ASSERT_EQ(sl_cluster_tf_config(small, sizeof small, w, 2, p, 1, "ps", 0), n);
    ASSERT_EQ(strlen(small), 9);
    ASSERT_EQ(sl_cluster_tf_config(buf, sizeof buf, w, 2, NULL, 0, "boss", 0), -1);
    /* addresses are escaped as JSON strings (core's escaper), also when cut short */
    const char *odd[] = {"a\"b\\c\x01"};
    n = sl_cluster_tf_config(buf, sizeof buf, odd, 1, NULL, 0, "worker", 0);
    ASSERT_STREQ(buf, "{\"cluster\": {\"worker\": [\"a\\\"b\\\\c\\u0001\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}");
    ASSERT_EQ(n, (int)strlen(buf));
    char cut[30];
    ASSERT_EQ(sl_cluster_tf_config(cut, sizeof cut, odd, 1, NULL, 0, "worker", 0), n);
    ASSERT_EQ(strlen(cut), 29);
    ASSERT(memcmp(cut, buf, 29) == 0);
    /* and it reads back */
    char env[600];
    snprintf(env, sizeof env, "TF_CONFIG=%s", buf);
    sl_cluster_tf_config(buf, sizeof buf, w, 2, NULL, 0, "worker", 1);
    snprintf(env, sizeof env, "TF_CONFIG=%s", buf);
    const char *e[] = {env, NULL};
    sl_cluster c;
    ASSERT_OK(from_env(e, &c));
    ASSERT_EQ(c.rank, 1);
    ASSERT_EQ(c.world, 2);
    sl_cluster_free(&c);
}

/* The curve statement: {task} expansion per task type, no statement, and every error with
 * its caret position. */
TEST(test_curve_statement) {
    sl_cluster c;
    const char *blk = "cluster {\n  chief \"h0:1\"\n  worker \"h1:1\" \"h2:1\"\n  ps \"h3:1\" \"h4:1\"\n"
                      "  evaluator \"h5:1\"\n"
                      "  curve server=\"keys/server.key\" client=\"keys/{task}.key\" allow=keys/allowed\n}\n";
    static const struct { const char *type; int index; const char *client; } cases[] = {
        {"chief", 0, "keys/chief0.key"},   {"worker", 0, "keys/worker0.key"}, {"worker", 1, "keys/worker1.key"},
        {"ps", 1, "keys/ps1.key"},         {"evaluator", 0, "keys/evaluator0.key"},
    };
    for (int i = 0; i < 5; i++) {
        sl_cluster_args a = {.task_type = cases[i].type, .task_index = cases[i].index};
        ASSERT_OK(cfg_resolve(blk, &a, NULL, &c));
        ASSERT_STREQ(c.curve_server, "keys/server.key");
        ASSERT_STREQ(c.curve_client, cases[i].client);
        ASSERT_STREQ(c.curve_allow, "keys/allowed");
        sl_cluster_free(&c);
    }
    /* the task from the environment, several {task} in one path, option order free */
    const char *env[] = {"TF_CONFIG={\"task\": {\"type\": \"worker\", \"index\": 1}}", NULL};
    ASSERT_OK(cfg_resolve("cluster {\n  worker \"h1:1\" \"h2:1\"\n"
                          "  curve allow=\"a\" client=\"k/{task}/{task}.key\" server=\"s\"\n}\n",
                          NULL, env, &c));
    ASSERT_STREQ(c.curve_client, "k/worker1/worker1.key");
    ASSERT_STREQ(c.curve_server, "s");
    ASSERT_STREQ(c.curve_allow, "a");
    sl_cluster_free(&c);
    /* without a curve statement: empty paths, and sl_cluster_curve says so */
    ASSERT_OK(cfg_resolve("cluster {\n  worker \"h1:1\"\n}\n", NULL, NULL, &c));
    ASSERT_STREQ(c.curve_server, "");
    ASSERT_STREQ(c.curve_client, "");
    ASSERT_STREQ(c.curve_allow, "");
    sl_tp_curve k;
    memset(&k, 0x55, sizeof k);
    ASSERT_EQ(sl_cluster_curve(&c, &k), SL_ENOTFOUND);
    ASSERT_STREQ(sl_errmsg(), "cluster: no curve statement in the cluster block");
    ASSERT(k.allow == NULL);
    ASSERT_EQ(k.nallow, 0);
    sl_cluster_free(&c);
    /* errors */
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"s\" client=\"c\"\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:3: 'curve' needs allow= (the allow-list file)\n");
    ASSERT_CONTAINS(sl_errmsg(), "  curve server=\"s\" client=\"c\"\n      ^~~~~\n");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: write curve server=\"server.key\" client=\"{task}.key\" allow=\"allowed\"");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:3: 'curve' needs server= (the server keypair file)");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"s\" clinet=\"c\" allow=\"a\"\n}\n", NULL, NULL, &c),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:27: unknown option 'clinet=' of 'curve' (server=, client=, allow=)");
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: did you mean 'client='?");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve \"s\" client=\"c\" allow=\"a\"\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:9: 'curve' takes only the options server=, client= and allow=");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"s\" client=\"c\" allow=\"a\" server=\"t\"\n}\n", NULL,
                          NULL, &c), SL_EINVAL);
    /* the parser refuses a repeated option before the cluster block is read */
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:41: option 'server' given twice (first at c.sl:3:9)");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"\" client=\"c\" allow=\"a\"\n}\n", NULL, NULL, &c),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:16: 'curve' server= is an empty path");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"s\" client=\"k/{rank}.key\" allow=\"a\"\n}\n", NULL,
                          NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:27: unknown placeholder '{rank}' in client= (only {task} is expanded)");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=\"s\" client=\"c\" allow=5\n}\n", NULL, NULL, &c),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:3:37: expected a word or a string, found a number '5'");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  curve server=s client=c allow=a\n  curve server=s client=c allow=a\n}\n",
                          NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "c.sl:4:3: a second 'curve' statement (the first is on line 3)");
    ASSERT_EQ(cfg_resolve("cluster {\n  worker \"h1:1\"\n  crve server=s\n}\n", NULL, NULL, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "---> HINT: did you mean 'curve'?");
    ASSERT_EQ(c.tasks, NULL);
}

TEST(test_job_id) {
    sl_cluster c0, c1, d;
    const char *w0[] = {"TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\"}}", NULL};
    const char *w1[] = {"TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\", \"b:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 1}}",
                        NULL};
    const char *other[] = {"TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\", \"b:2\"]}, \"task\": {\"type\": \"worker\"}}", NULL};
    ASSERT_OK(from_env(w0, &c0));
    ASSERT_OK(from_env(w1, &c1));
    ASSERT_OK(from_env(other, &d));
    /* every task of one spec derives the same id; another spec another one */
    ASSERT(c0.job_id != 0);
    ASSERT_U64(c0.job_id, c1.job_id);
    ASSERT(d.job_id != c0.job_id);
    ASSERT_STREQ(c0.job_source, "cluster spec");
    sl_cluster_free(&c0);
    sl_cluster_free(&c1);
    sl_cluster_free(&d);
    const char *given[] = {w0[0], "SLUICE_JOB_ID=00C0ffee12345678", NULL};
    ASSERT_OK(from_env(given, &c0));
    ASSERT_U64(c0.job_id, 0x00c0ffee12345678ull);
    ASSERT_STREQ(c0.job_source, "SLUICE_JOB_ID");
    sl_cluster_free(&c0);
    const char *bad[] = {"xyz", "0", "00000000", "123456789abcdef01", "", "12 4"};
    for (int i = 0; i < 6; i++) {
        char e[64];
        snprintf(e, sizeof e, "SLUICE_JOB_ID=%s", bad[i]);
        const char *env[] = {w0[0], e, NULL};
        ASSERT_EQ(from_env(env, &c0), SL_EINVAL);
        char want[128];
        snprintf(want, sizeof want, "SLUICE_JOB_ID: \"%s\" is not a job id (1 to 16 hex digits, not all zero)", bad[i]);
        ASSERT_CONTAINS(sl_errmsg(), want);
        ASSERT_EQ(c0.tasks, NULL);
    }
}

int main(void) {
    RUN(test_single);
    RUN(test_tf_config);
    RUN(test_tf_config_errors);
    RUN(test_json);
    RUN(test_config_block);
    RUN(test_slurm);
    RUN(test_openmpi);
    RUN(test_args_errors);
    RUN(test_tf_config_writer);
    RUN(test_curve_statement);
    RUN(test_job_id);
    TEST_MAIN_END();
}
