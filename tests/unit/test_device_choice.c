/* Which GPU a replica uses (sl_cuda_choose_device): local rank % visible GPUs, the local
 * rank from sluice-launch / Open MPI / torchrun / Slurm / TF_CONFIG, an explicit device
 * first, and a clear error naming the variable for a bad value. No GPU needed. */
#include "sluice/cluster.h"
#include "sluice/config.h"
#include "sluice/cuda.h"
#include "sluice/train.h"
#include "test.h"

static sl_device_choice pick(const char *const *envp, int explicit_device, int visible) {
    sl_device_choice c;
    sl_status s = sl_cuda_choose_device(envp, explicit_device, visible, &c);
    if (s) printf("  unexpected error: %s\n", sl_errmsg());
    return c;
}

TEST(test_default_is_gpu0) {
    sl_device_choice c = pick(NULL, -1, 4);
    ASSERT_EQ(c.device, 0);
    ASSERT_EQ(c.local_rank, 0);
    ASSERT_STREQ(c.source, "default");
    const char *env[] = {"PATH=/bin", "RANK=3", NULL}; /* a global rank is not a local one */
    c = pick(env, -1, 4);
    ASSERT_EQ(c.device, 0);
    char line[128];
    sl_cuda_choice_describe(&c, 4, line, sizeof line);
    ASSERT_STREQ(line, "GPU 0 of 4 (default)");
}

TEST(test_local_rank_modulo_visible) {
    const char *e5[] = {"SLUICE_LOCAL_RANK=5", NULL};
    sl_device_choice c = pick(e5, -1, 4);
    ASSERT_EQ(c.device, 1);
    ASSERT_EQ(c.local_rank, 5);
    ASSERT_STREQ(c.source, "SLUICE_LOCAL_RANK");
    char line[128];
    sl_cuda_choice_describe(&c, 4, line, sizeof line);
    ASSERT_STREQ(line, "GPU 1 of 4 (local rank 5 from SLUICE_LOCAL_RANK)");
    /* two replicas, one GPU: both on GPU 0 */
    const char *e1[] = {"SLUICE_LOCAL_RANK=1", NULL};
    ASSERT_EQ(pick(e1, -1, 1).device, 0);
    /* no GPU: the local rank itself (the backend then says there is none) */
    ASSERT_EQ(pick(e5, -1, 0).device, 5);
}

TEST(test_launcher_variables) {
    const char *slurm[] = {"SLURM_PROCID=9", "SLURM_LOCALID=3", NULL};
    sl_device_choice c = pick(slurm, -1, 8);
    ASSERT_EQ(c.device, 3);
    ASSERT_STREQ(c.source, "SLURM_LOCALID");
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=14", "OMPI_COMM_WORLD_LOCAL_RANK=6", NULL};
    c = pick(ompi, -1, 8);
    ASSERT_EQ(c.device, 6);
    ASSERT_STREQ(c.source, "OMPI_COMM_WORLD_LOCAL_RANK");
    const char *torch[] = {"LOCAL_RANK=2", NULL};
    ASSERT_EQ(pick(torch, -1, 8).device, 2);
    const char *hydra[] = {"PMI_RANK=5", "MPI_LOCALRANKID=1", "SLURM_LOCALID=0", NULL};
    c = pick(hydra, -1, 8);
    ASSERT_EQ(c.device, 1);
    ASSERT_STREQ(c.source, "MPI_LOCALRANKID");
    /* the most specific launcher wins: mpirun / torchrun / sluice-launch inside srun */
    const char *both[] = {"SLURM_LOCALID=0", "LOCAL_RANK=7", "OMPI_COMM_WORLD_LOCAL_RANK=2", NULL};
    c = pick(both, -1, 8);
    ASSERT_EQ(c.device, 2);
    ASSERT_STREQ(c.source, "OMPI_COMM_WORLD_LOCAL_RANK");
    const char *all[] = {"SLURM_LOCALID=0", "SLUICE_LOCAL_RANK=3", "LOCAL_RANK=1", NULL};
    ASSERT_STREQ(pick(all, -1, 8).source, "SLUICE_LOCAL_RANK");
    /* an empty variable counts as unset */
    const char *empty[] = {"SLUICE_LOCAL_RANK=", "SLURM_LOCALID=1", NULL};
    ASSERT_STREQ(pick(empty, -1, 8).source, "SLURM_LOCALID");
}

TEST(test_tf_config_same_host) {
    /* worker 2 shares host a with the chief and worker 0: local rank 2 */
    const char *env[] = {
        "TF_CONFIG={\"cluster\": {\"chief\": [\"a:1000\"], \"worker\": [\"a:1001\", \"b:1000\", \"a:1002\"],"
        " \"ps\": [\"a:2000\"]}, \"task\": {\"type\": \"worker\", \"index\": 2}}",
        NULL};
    sl_device_choice c = pick(env, -1, 4);
    ASSERT_EQ(c.local_rank, 2);
    ASSERT_EQ(c.device, 2);
    ASSERT_STREQ(c.source, "TF_CONFIG");
    const char *b[] = {"TF_CONFIG={\"cluster\": {\"chief\": [\"a:1000\"], \"worker\": [\"a:1001\", \"b:1000\"]},"
                       " \"task\": {\"type\": \"worker\", \"index\": 1}}",
                       NULL};
    ASSERT_EQ(pick(b, -1, 4).device, 0);
    /* a launcher's local rank beats TF_CONFIG (sluice-launch sets both) */
    const char *l[] = {b[0], "SLUICE_LOCAL_RANK=1", NULL};
    ASSERT_EQ(pick(l, -1, 4).device, 1);
    /* a ps task is not a ring member: default */
    const char *ps[] = {"TF_CONFIG={\"cluster\": {\"worker\": [\"a:1\"], \"ps\": [\"a:2\"]}, \"task\": {\"type\": \"ps\", \"index\": 0}}", NULL};
    ASSERT_STREQ(pick(ps, -1, 4).source, "default");
}

/* round trip: the TF_CONFIG sl_cluster_tf_config writes (as sluice-launch does) gives each
 * worker its index among the workers on its host */
TEST(test_tf_config_round_trip) {
    const char *workers[] = {"h1:29500", "h2:29500", "h1:29501", "h1:29502", "h2:29501"};
    const int want[] = {0, 0, 1, 2, 1};
    for (int i = 0; i < 5; i++) {
        char tf[1024] = "TF_CONFIG=";
        ASSERT(sl_cluster_tf_config(tf + 10, sizeof tf - 10, workers, 5, NULL, 0, "worker", i) > 0);
        const char *env[] = {tf, NULL};
        sl_device_choice c = pick(env, -1, 2);
        ASSERT_EQ(c.local_rank, want[i]);
        ASSERT_EQ(c.device, want[i] % 2);
        ASSERT_STREQ(c.source, "TF_CONFIG");
    }
}

TEST(test_explicit_device_wins) {
    const char *env[] = {"SLUICE_LOCAL_RANK=3", NULL};
    sl_device_choice c = pick(env, 1, 4);
    ASSERT_EQ(c.device, 1);
    ASSERT_EQ(c.local_rank, -1);
    ASSERT_STREQ(c.source, "device option");
    char line[128];
    sl_cuda_choice_describe(&c, 4, line, sizeof line);
    ASSERT_STREQ(line, "GPU 1 of 4 (device option)");
}

TEST(test_bad_values) {
    sl_device_choice c;
    const char *abc[] = {"SLUICE_LOCAL_RANK=abc", NULL};
    ASSERT_EQ(sl_cuda_choose_device(abc, -1, 2, &c), SL_EINVAL);
    ASSERT_EQ(c.device, -1);
    ASSERT_CONTAINS(sl_errmsg(), "SLUICE_LOCAL_RANK='abc' is not a local rank (a whole number 0..65535)");
    const char *neg[] = {"SLURM_LOCALID=-1", NULL};
    ASSERT_EQ(sl_cuda_choose_device(neg, -1, 2, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "SLURM_LOCALID='-1' is not a local rank");
    const char *trail[] = {"LOCAL_RANK=1x", NULL};
    ASSERT_EQ(sl_cuda_choose_device(trail, -1, 2, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "LOCAL_RANK='1x'");
    const char *huge[] = {"OMPI_COMM_WORLD_LOCAL_RANK=99999999999", NULL};
    ASSERT_EQ(sl_cuda_choose_device(huge, -1, 2, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "OMPI_COMM_WORLD_LOCAL_RANK=");
    ASSERT_EQ(sl_cuda_choose_device(NULL, 2, 2, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "device 2 does not exist: this process sees 2 GPUs (0..1)");
    ASSERT_EQ(sl_cuda_choose_device(NULL, -2, 2, &c), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "device -2");
    const char *tf[] = {"TF_CONFIG={\"cluster\": ", NULL};
    ASSERT_EQ(sl_cuda_choose_device(tf, -1, 2, &c), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_errmsg(), "TF_CONFIG");
}

/* the train block's `device N` (what sl_trainer hands to sl_cuda_choose_device) */
static sl_status parse_train(const char *block, sl_train_config *tc) {
    char text[512];
    snprintf(text, sizeof text,
             "pipeline p {\n  files \"x\"\n  batch 4\n}\nmodel m {\n  input 4\n  dense 2\n}\n"
             "train {\n  model m\n  data p\n%s}\n", block);
    sl_cfg *cfg = NULL;
    sl_status s = sl_cfg_parse(text, strlen(text), "t.sl", &cfg);
    if (!s) s = sl_train_config_parse(cfg, tc);
    sl_cfg_free(cfg);
    return s;
}

TEST(test_train_block_device) {
    sl_train_config tc;
    ASSERT_OK(parse_train("", &tc));
    ASSERT_EQ(tc.device, -1);
    ASSERT_OK(parse_train("  device 3\n", &tc));
    ASSERT_EQ(tc.device, 3);
    ASSERT_EQ(parse_train("  device -1\n", &tc), SL_ERANGE);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:");
    ASSERT_EQ(parse_train("  device gpu1\n", &tc), SL_EINVAL);
    ASSERT_CONTAINS(sl_errmsg(), "t.sl:");
    sl_train_opts o = sl_train_opts_default();
    ASSERT_EQ(o.device, -1);
    ASSERT(o.envp == NULL);
}

int main(void) {
    RUN(test_train_block_device);
    RUN(test_default_is_gpu0);
    RUN(test_local_rank_modulo_visible);
    RUN(test_launcher_variables);
    RUN(test_tf_config_same_host);
    RUN(test_tf_config_round_trip);
    RUN(test_explicit_device_wins);
    RUN(test_bad_values);
    TEST_MAIN_END();
}
