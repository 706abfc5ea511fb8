/* sluice-train: train the model of a config file on its pipelines — sluice/job.h's
 * sl_job_run over the config and the environment (a plain run, a ring replica, a ps worker
 * or ps task), with the tool's options applied, its signal handlers (tools/tool_train.c)
 * and its report. The usage text (tools/tool_train.c) says what each option does. The last
 * line on stdout is "test accuracy 0.XXXX" (the final evaluation).
 * Exit status: 0 ok, 1 the config, the data, the model or a write failed (message with
 * file:line:col, or file and byte offset), 2 wrong usage (tools/tool.h), 128 + the signal
 * that stopped a run (130 SIGINT, 143 SIGTERM). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sluice/config.h"
#include "sluice/job.h"
#include "sluice/log.h"
#include "tool.h"
#include "tool_train.h"

extern char **environ;

static const char *PROG = "sluice-train";

/* The config file with the --set overrides and --backend applied; 0 or the exit status. */
static int load_config(const char *path, const char **sets, int nsets, const char *backend, sl_cfg **cfg) {
    if (sl_cfg_parse_file(path, cfg)) return sl__fail(PROG);
    for (int i = 0; i < nsets; i++)
        if (sl_cfg_set(*cfg, sets[i])) {
            fprintf(stderr, "%s: --set: %s\n", PROG, sl_errmsg());
            return SL__EXIT_USAGE;
        }
    char set[64];
    snprintf(set, sizeof set, "train.backend=%s", backend ? backend : "");
    if (backend && sl_cfg_set(*cfg, set)) return sl__fail(PROG);
    return 0;
}

int main(int argc, char **argv) {
    sl__tool_start();
    if (sl__tool_version(PROG, argc, argv)) return sl__tool_exit(PROG, SL__EXIT_OK);
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    /* the arguments as given, for the resume hint: parsing below compacts argv in place */
    char **given = calloc((size_t)argc + 1, sizeof *given);
    if (!sets || !given) {
        free(sets);
        free(given);
        return sl__tool_exit(PROG, sl__failf(PROG, "out of memory"));
    }
    memcpy(given, argv, (size_t)argc * sizeof *given);
    int nsets = 0, nargs = 0, npos = 0;
    int rc = sl__take_repeated(PROG, "set", argc - 1, argv + 1, sets, &nsets, &nargs);
    if (rc >= 0) {
        free(sets);
        free(given);
        return sl__tool_exit(PROG, rc);
    }
    bool quiet = false, summary = false;
    long long device = -1;
    const char *backend = NULL, *timeout = NULL, *retry = NULL;
    sl__train_hold hold = {-1, NULL};
    sl_job_opts jo = sl_job_opts_default();
    sl__opt opts[] = {
        {"resume", 0, SL__OPT_FLAG, &jo.resume, 0, 0},       {"overwrite", 0, SL__OPT_FLAG, &jo.overwrite, 0, 0},
        {"quiet", 'q', SL__OPT_FLAG, &quiet, 0, 0},          {"run-dir", 0, SL__OPT_STR, &jo.run_dir, 0, 0},
        {"backend", 0, SL__OPT_STR, &backend, 0, 0},         {"device", 0, SL__OPT_INT, &device, 0, 65535},
        {"timeout", 0, SL__OPT_STR, &timeout, 0, 0},         {"retry", 0, SL__OPT_STR, &retry, 0, 0},
        {"hash-log", 0, SL__OPT_STR, &jo.hash_log, 0, 0},    {"summary", 0, SL__OPT_FLAG, &summary, 0, 0},
        {"hold-after", 0, SL__OPT_INT, &hold.after, 1, INT64_MAX}, {"hold-until", 0, SL__OPT_STR, &hold.file, 0, 0},
        {NULL, 0, 0, NULL, 0, 0},
    };
    sl_cfg *cfg = NULL;
    switch (sl__args_parse(PROG, opts, nargs, argv + 1, &npos)) {
    case SL__ARGS_HELP: fputs(SL__TRAIN_USAGE, stdout); rc = SL__EXIT_OK; goto done;
    case SL__ARGS_ERROR: rc = SL__EXIT_USAGE; goto done;
    case SL__ARGS_OK: break;
    }
    if (npos != 1)
        rc = sl__usage_error(PROG, npos == 0 ? "missing CONFIG" : "one CONFIG file, got %d arguments", npos);
    else if (backend && strcmp(backend, "cpu") != 0 && strcmp(backend, "cuda") != 0 && strcmp(backend, "auto") != 0)
        rc = sl__usage_error(PROG, "--backend must be cpu, cuda or auto, not '%s'", backend);
    else if ((timeout && (rc = sl__train_seconds(PROG, "timeout", timeout, &jo.timeout_s))) ||
             (retry && (rc = sl__train_seconds(PROG, "retry", retry, &jo.retry_s))))
        ;
    else if (jo.resume && jo.overwrite)
        rc = sl__usage_error(PROG, "--resume continues the run in the folder, --overwrite replaces it: give one");
    else if (jo.run_dir && !*jo.run_dir)
        rc = sl__usage_error(PROG, "--run-dir needs a folder name");
    else if ((hold.after > 0) != (hold.file != NULL) || (hold.file && !*hold.file))
        rc = sl__usage_error(PROG, "--hold-after EPOCH and --hold-until FILE go together");
    else
        rc = load_config(argv[1], sets, nsets, backend, &cfg);
    if (rc) goto done;
    if (summary) {
        rc = sl__train_summary(PROG, cfg);
        goto done;
    }
    jo.device = (int)device;
    jo.envp = (const char *const *)environ; /* the cluster, the job id, the local rank */
    const char *gemm = getenv("SLUICE_CPU_GEMM"); /* the CPU backend's GEMM (sluice/model.h sl_cpu_gemm) */
    if (gemm && *gemm && sl_cpu_gemm_parse(gemm, &jo.cpu_gemm)) {
        SL_WARN("SLUICE_CPU_GEMM=%s is none of auto, blas, avx512: auto", gemm);
        sl_err_clear();
    }
    jo.console = quiet ? NULL : stdout;
    jo.progress = !quiet && isatty(STDOUT_FILENO);
    const char *term = getenv("TERM"); /* a terminal that takes no escape sequences */
    jo.plain_progress = !term || !*term || strcmp(term, "dumb") == 0;
    sl__train_hold_install(&hold, &jo);
    jo.stop = &sl__train_stop;
    jo.ps_stop = &sl__ps_stop;
    jo.on_role = sl__train_on_role;
    sl_job_result r;
    if (sl_job_run(cfg, &jo, &r)) {
        rc = sl__fail(PROG);
    } else if (r.summary.stopped || (r.ps_task && sl__ps_signal)) {
        rc = sl__train_report_stop(PROG, &r, argc, given);
    } else {
        if (quiet && !r.ps_task && r.summary.eval_accuracy >= 0) printf("test accuracy %.4f\n", r.summary.eval_accuracy);
        if (!quiet && r.is_chief && !r.ps_task) sl__train_report_done(PROG, &r, argv[1]);
        rc = SL__EXIT_OK;
    }
done:
    sl_cfg_free(cfg);
    free(sets);
    free(given);
    return sl__tool_exit(PROG, rc);
}
