/*
 * harness.c - run slurmgpu_spank.c's slurm_spank_task_init() outside Slurm.
 *
 * It links the plugin's real code with a stand-in for the few SPANK calls the
 * plugin makes, so the tests can feed the policy cases through the exact C
 * entry slurmstepd uses (with the real Lua 5.1), and bench/spank_bench.py can
 * time one policy call without a cluster.
 *
 *   slurmgpu_spank_harness -p policy=FILE [-p mode=warn] [-e NAME=VALUE]...
 *       [-N nnodes] [-r node_id] [-n local_tasks] [-t total_tasks]
 *       [-i task_id] [-g global_task_id] [-j job_id] [-s step_id] [-u uid]
 *       [-E] [-R repeat] [-v] -- ARGV...
 *
 * -E adds this process's own environment; -R times that many calls and prints
 * "calls=N per_call_ms=X"; -v shows the plugin's log lines (slurm_info, slurm_debug).
 * Lines the user would see go to stderr; exit status 0: the task may run,
 * 1: the plugin failed it, 2: usage error.
 */
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

extern char **environ;
int slurm_spank_task_init(spank_t sp, int ac, char **av);

struct spank_handle {
    int argc;
    char **argv;
    char **env;
    uint32_t nnodes, node_id, local_tasks, total_tasks, global_task_id, job_id, step_id;
    int task_id;
    uid_t uid;
};

static int verbose;

int spank_remote(spank_t sp)
{
    return sp != NULL;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    va_list ap;
    spank_err_t rc = ESPANK_SUCCESS;
    va_start(ap, item);
    switch (item) {
    case S_JOB_ARGV:
        *va_arg(ap, int *) = sp->argc;
        *va_arg(ap, char ***) = sp->argv;
        break;
    case S_JOB_ENV:
        *va_arg(ap, char ***) = sp->env;
        break;
    case S_JOB_NNODES:
        *va_arg(ap, uint32_t *) = sp->nnodes;
        break;
    case S_JOB_NODEID:
        *va_arg(ap, uint32_t *) = sp->node_id;
        break;
    case S_JOB_LOCAL_TASK_COUNT:
        *va_arg(ap, uint32_t *) = sp->local_tasks;
        break;
    case S_JOB_TOTAL_TASK_COUNT:
        *va_arg(ap, uint32_t *) = sp->total_tasks;
        break;
    case S_JOB_ID:
        *va_arg(ap, uint32_t *) = sp->job_id;
        break;
    case S_JOB_STEPID:
        *va_arg(ap, uint32_t *) = sp->step_id;
        break;
    case S_TASK_GLOBAL_ID:
        *va_arg(ap, uint32_t *) = sp->global_task_id;
        break;
    case S_TASK_ID:
        *va_arg(ap, int *) = sp->task_id;
        break;
    case S_JOB_UID:
        *va_arg(ap, uid_t *) = sp->uid;
        break;
    default:
        rc = ESPANK_BAD_ARG;
    }
    va_end(ap);
    return rc;
}

static void emit(const char *prefix, const char *fmt, va_list ap)
{
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void slurm_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("error: ", fmt, ap);
    va_end(ap);
}

void slurm_spank_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("", fmt, ap);
    va_end(ap);
}

void slurm_info(const char *fmt, ...)
{
    va_list ap;
    if (!verbose)
        return;
    va_start(ap, fmt);
    emit("info: ", fmt, ap);
    va_end(ap);
}

void slurm_debug(const char *fmt, ...)
{
    va_list ap;
    if (!verbose)
        return;
    va_start(ap, fmt);
    emit("debug: ", fmt, ap);
    va_end(ap);
}

static uint32_t number(const char *s, const char *what)
{
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || v > 0xffffffffUL) {
        fprintf(stderr, "harness: %s must be a number, not '%s'\n", what, s);
        exit(2);
    }
    return (uint32_t)v;
}

int main(int argc, char **argv)
{
    struct spank_handle h;
    char **pargs = calloc((size_t)argc + 1, sizeof(char *));
    char **env = calloc((size_t)argc + 1, sizeof(char *));
    int npargs = 0, nenv = 0, own_env = 0, opt, i;
    long repeat = 0;
    int rc = 0;

    if (!pargs || !env)
        return 2;
    memset(&h, 0, sizeof(h));
    h.nnodes = h.local_tasks = h.total_tasks = 1;
    h.job_id = 1;
    h.uid = getuid();
    while ((opt = getopt(argc, argv, "p:e:EN:r:n:t:i:g:j:s:u:R:v")) != -1) {
        switch (opt) {
        case 'p': pargs[npargs++] = optarg; break;
        case 'e': env[nenv++] = optarg; break;
        case 'E': own_env = 1; break;
        case 'N': h.nnodes = number(optarg, "-N"); break;
        case 'r': h.node_id = number(optarg, "-r"); break;
        case 'n': h.local_tasks = number(optarg, "-n"); break;
        case 't': h.total_tasks = number(optarg, "-t"); break;
        case 'i': h.task_id = (int)number(optarg, "-i"); break;
        case 'g': h.global_task_id = number(optarg, "-g"); break;
        case 'j': h.job_id = number(optarg, "-j"); break;
        case 's': h.step_id = number(optarg, "-s"); break;
        case 'u': h.uid = number(optarg, "-u"); break;
        case 'R': repeat = number(optarg, "-R"); break;
        case 'v': verbose = 1; break;
        default:
            fprintf(stderr, "usage: %s -p policy=FILE [-p ARG]... [-e NAME=VALUE]... [-E] "
                    "[-N nnodes] [-r node] [-n local_tasks] [-t total_tasks] [-i task] "
                    "[-g global_task] [-j job] [-s step] [-u uid] [-R repeat] [-v] -- ARGV...\n",
                    argv[0]);
            return 2;
        }
    }
    if (own_env) {
        size_t n = 0;
        char **all;
        while (environ[n])
            n++;
        all = calloc(n + (size_t)nenv + 1, sizeof(char *));
        if (!all)
            return 2;
        for (i = 0; i < nenv; i++)
            all[i] = env[i];
        memcpy(all + nenv, environ, n * sizeof(char *));
        env = all;
    }
    h.env = env;
    h.argc = argc - optind;
    h.argv = argv + optind;

    if (repeat > 0) {
        struct timespec t0, t1;
        double ms;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (i = 0; i < repeat; i++)
            rc = slurm_spank_task_init(&h, npargs, pargs);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("calls=%ld per_call_ms=%.4f rc=%d\n", repeat, ms / (double)repeat, rc);
    } else {
        rc = slurm_spank_task_init(&h, npargs, pargs);
    }
    return rc == 0 ? 0 : 1;
}
