/*
 * slurmgpu_spank.c - launch-time guard for slurmgpu's tensor-parallel policy.
 *
 * The job_submit filter never sees job steps (`srun` inside salloc/sbatch),
 * so this SPANK plugin runs the *same* policy Lua in slurmstepd, once per
 * task, just before the task execs.  It knows what the controller cannot:
 * the step's real argv and environment, its node count, and the tasks and
 * GPUs on this node.  All detection rules live in the Lua policy file; this
 * file only gathers facts, runs the Lua safely and acts on the verdict.
 *
 * plugstack.conf (one line; docs/admin-spank.md):
 *   required /usr/lib/x86_64-linux-gnu/slurm-wlm/slurmgpu_spank.so
 *            policy=/etc/slurm/slurmgpu_spank.lua mode=enforce on_error=allow
 *
 * Arguments (all optional except policy):
 *   policy=PATH       Lua file rendered by `slurmgpu admin render-filter --kind spank`
 *   mode=enforce|warn|off
 *                     enforce: fail the task on a rejection; warn: print the
 *                     message and run; off: do nothing (kill switch)
 *   on_error=allow|deny
 *                     what to do when the plugin itself fails (missing or broken
 *                     policy, Lua error, budget exceeded): allow (default) logs
 *                     and lets the task run; deny fails the task
 *   timeout_ms=N      wall-clock budget for one policy call (default 2000)
 *   memory_mb=N       memory cap for the Lua state (default 64)
 *
 * Why slurm_spank_task_init (and not user_init): per spank(7) a non-zero
 * return from task_init fails the step without draining the node, in srun,
 * salloc and sbatch alike, and its slurm_error() text reaches the user's
 * terminal.  A failing user_init does not fail the job, and in a batch job
 * it drains the node.
 *
 * The batch step: judged only where the policy file sets the global
 * slurmgpu_spank_batch (policy.script_check batch-step: job_submit left the
 * script to this plugin); then the script is read from the batch task's
 * argv[0] (slurmd's copy) into step.script, with step.batch set.
 *
 * Contract with the Lua file (contrib/lua/spank_adapter.lua): running it
 * defines a global function
 *   slurmgpu_spank_check(step, opts) -> action, message, log_line
 * where action is "allow", "warn" or "reject", message is the user-facing text
 * (one line per line) and log_line goes to the node's slurmd log.  Each task
 * gets a fresh Lua state, capped in memory and time; loading the ~5,300-line
 * rendered file and evaluating costs about 4 ms (bench/spank_bench.py), so
 * nothing is cached across tasks.
 */
#include <pwd.h>
#include <stdint.h> /* Slurm 22.05's spank.h uses uint32_t without including it */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <slurm/spank.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

SPANK_PLUGIN(slurmgpu, 1);

#ifndef SLURM_BATCH_SCRIPT
#define SLURM_BATCH_SCRIPT (0xfffffffb)
#endif
#ifndef SLURM_EXTERN_CONT
#define SLURM_EXTERN_CONT (0xfffffffc)
#endif

#define TAG "slurmgpu"
#define ENTRY "slurmgpu_spank_check"
/* What reaches Lua: the kernel already bounds argv+environ (ARG_MAX, 128 kB per string) */
#define MAX_ARGV_BYTES (4 * 1024 * 1024) /* all of argv together; beyond: argv_truncated */
#define MAX_VALUE_BYTES (128 * 1024)     /* one environment value */
/* The batch script read at the batch step: slurmctld's default max_script_size (4 MB) */
#define MAX_SCRIPT_BYTES (4 * 1024 * 1024)
#define BATCH_GLOBAL "slurmgpu_spank_batch"

enum mode { MODE_ENFORCE, MODE_WARN, MODE_OFF };

struct config {
    const char *policy;
    enum mode mode;
    int deny_on_error;
    long timeout_ms;
    size_t memory_bytes;
};

/* Budget shared by the allocator and the instruction hook of one Lua state. */
struct budget {
    size_t used;
    size_t limit;
    struct timespec deadline;
};

static const char *mode_name(enum mode m)
{
    return m == MODE_WARN ? "warn" : m == MODE_OFF ? "off" : "enforce";
}

/*
 * Parse plugstack.conf arguments.  A bad one is a config error, but parsing
 * goes on so that mode= and on_error= still take effect.
 */
static int parse_config(int ac, char **av, struct config *cfg, char *err, size_t errlen)
{
    int i, bad = 0;
    cfg->policy = NULL;
    cfg->mode = MODE_ENFORCE;
    cfg->deny_on_error = 0;
    cfg->timeout_ms = 2000;
    cfg->memory_bytes = (size_t)64 << 20;
    for (i = 0; i < ac; i++) {
        const char *a = av[i];
        char *end = NULL;
        long v;
        if (strncmp(a, "policy=", 7) == 0 && a[7]) {
            cfg->policy = a + 7;
        } else if (strcmp(a, "mode=enforce") == 0) {
            cfg->mode = MODE_ENFORCE;
        } else if (strcmp(a, "mode=warn") == 0) {
            cfg->mode = MODE_WARN;
        } else if (strcmp(a, "mode=off") == 0) {
            cfg->mode = MODE_OFF;
        } else if (strcmp(a, "on_error=allow") == 0) {
            cfg->deny_on_error = 0;
        } else if (strcmp(a, "on_error=deny") == 0) {
            cfg->deny_on_error = 1;
        } else if (strncmp(a, "timeout_ms=", 11) == 0 &&
                   (v = strtol(a + 11, &end, 10)) > 0 && a[11] && !*end && v <= 600000) {
            cfg->timeout_ms = v;
        } else if (strncmp(a, "memory_mb=", 10) == 0 &&
                   (v = strtol(a + 10, &end, 10)) > 0 && a[10] && !*end && v <= 4096) {
            cfg->memory_bytes = (size_t)v << 20;
        } else if (!bad++) {
            snprintf(err, errlen, "bad plugin argument '%s' in plugstack.conf (known: policy=PATH "
                     "mode=enforce|warn|off on_error=allow|deny timeout_ms=1..600000 "
                     "memory_mb=1..4096)", a);
        }
    }
    if (!cfg->policy && !bad++)
        snprintf(err, errlen, "no policy=PATH argument in plugstack.conf");
    return bad ? -1 : 0;
}

static void *budget_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct budget *b = ud;
    if (nsize == 0) {
        b->used -= osize;
        free(ptr);
        return NULL;
    }
    if (nsize > osize && b->used + (nsize - osize) > b->limit)
        return NULL; /* Lua raises "not enough memory" */
    ptr = realloc(ptr, nsize);
    if (ptr)
        b->used = b->used - osize + nsize;
    return ptr;
}

static struct budget *hook_budget; /* one Lua state per process at a time */

static void budget_hook(lua_State *L, lua_Debug *ar)
{
    struct timespec now;
    (void)ar;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (hook_budget && (now.tv_sec > hook_budget->deadline.tv_sec ||
                        (now.tv_sec == hook_budget->deadline.tv_sec &&
                         now.tv_nsec > hook_budget->deadline.tv_nsec)))
        luaL_error(L, "policy call exceeded its time budget");
}

static void set_int(lua_State *L, const char *key, lua_Number v)
{
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

static void push_bounded(lua_State *L, const char *s, size_t max)
{
    size_t n = strlen(s);
    lua_pushlstring(L, s, n > max ? max : n);
}

/*
 * The batch script (the batch task's argv[0], slurmd's copy of it, readable by the job's user,
 * as this task runs) into step.script, at most MAX_SCRIPT_BYTES (step.script_truncated past
 * that).  An unreadable script is an error: the policy cannot judge what it cannot read.
 */
static void push_script(lua_State *L, const char *path)
{
    FILE *f;
    luaL_Buffer b;
    size_t total = 0, n;
    char chunk[65536];

    if (!path || !(f = fopen(path, "rb")))
        luaL_error(L, "cannot read the batch script %s", path ? path : "(no argv[0])");
    luaL_buffinit(L, &b);
    while (total < MAX_SCRIPT_BYTES &&
           (n = fread(chunk, 1, sizeof(chunk) < MAX_SCRIPT_BYTES - total ? sizeof(chunk)
                                                                         : MAX_SCRIPT_BYTES - total, f)) > 0) {
        luaL_addlstring(&b, chunk, n);
        total += n;
    }
    if (ferror(f)) {
        fclose(f);
        luaL_error(L, "cannot read the batch script %s", path);
    }
    n = total >= MAX_SCRIPT_BYTES ? fread(chunk, 1, 1, f) : 0;
    fclose(f);
    luaL_pushresult(&b);
    lua_setfield(L, -2, "script");
    if (n > 0) {
        lua_pushboolean(L, 1);
        lua_setfield(L, -2, "script_truncated");
    }
    set_int(L, "script_max", MAX_SCRIPT_BYTES);
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "batch");
}

/* Build the `step` table: the facts slurmstepd has about this task. */
static void push_step(lua_State *L, spank_t sp, int batch)
{
    int argc = 0, i;
    char **argv = NULL, **env = NULL;
    uint32_t u = 0;
    int ti = 0;

    lua_newtable(L);

    lua_newtable(L);
    if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argv) {
        size_t left = MAX_ARGV_BYTES;
        for (i = 0; i < argc && argv[i]; i++) {
            size_t n = strlen(argv[i]);
            push_bounded(L, argv[i], left);
            lua_rawseti(L, -2, i + 1);
            if (n >= left) {
                lua_pushboolean(L, 1);
                lua_setfield(L, -3, "argv_truncated");
                break;
            }
            left -= n + 1;
        }
    }
    lua_setfield(L, -2, "argv");
    if (batch)
        push_script(L, argc > 0 && argv ? argv[0] : NULL);

    lua_newtable(L);
    if (spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS && env) {
        for (i = 0; env[i]; i++) {
            const char *eq = strchr(env[i], '=');
            if (!eq || eq == env[i])
                continue;
            lua_pushlstring(L, env[i], (size_t)(eq - env[i]));
            push_bounded(L, eq + 1, MAX_VALUE_BYTES);
            lua_rawset(L, -3);
        }
    }
    lua_setfield(L, -2, "env");

#define ITEM_U32(item, key) \
    if (spank_get_item(sp, item, &u) == ESPANK_SUCCESS) set_int(L, key, u)
    ITEM_U32(S_JOB_NNODES, "nnodes");
    ITEM_U32(S_JOB_NODEID, "node_id");
    ITEM_U32(S_JOB_LOCAL_TASK_COUNT, "local_tasks");
    ITEM_U32(S_JOB_TOTAL_TASK_COUNT, "total_tasks");
    ITEM_U32(S_JOB_ID, "job_id");
    ITEM_U32(S_JOB_STEPID, "step_id");
    ITEM_U32(S_TASK_GLOBAL_ID, "global_task_id");
#undef ITEM_U32
    if (spank_get_item(sp, S_TASK_ID, &ti) == ESPANK_SUCCESS)
        set_int(L, "task_id", ti);
    {
        uid_t uid;
        if (spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS) {
            /* the user as slurmstepd knows it (from the credential), never the task's
             * environment, which the srun client controls */
            struct passwd pw, *res = NULL;
            char buf[4096];
            set_int(L, "uid", uid);
            if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name) {
                lua_pushstring(L, res->pw_name);
                lua_setfield(L, -2, "user");
            }
        }
    }
}

/* What one policy call needs and returns; passed through lua_cpcall. */
struct call {
    spank_t sp;
    const struct config *cfg;
    int batch; /* the batch step: called only where the policy asks for it (BATCH_GLOBAL) */
    char *action, *message, *log_line; /* malloc'd on success */
};

static char *dup_field(lua_State *L, int idx)
{
    const char *s = lua_isstring(L, idx) ? lua_tostring(L, idx) : "";
    char *d = strdup(s);
    if (!d)
        luaL_error(L, "out of memory");
    return d;
}

/* Runs inside lua_cpcall, so every Lua error (even in openlibs) is caught. */
static int protected_call(lua_State *L)
{
    struct call *c = lua_touserdata(L, 1);
    const char *a;

    lua_settop(L, 0);
    luaL_openlibs(L);
    if (luaL_loadfile(L, c->cfg->policy) != 0)
        return lua_error(L);
    lua_call(L, 0, 0);
    lua_getglobal(L, ENTRY);
    if (!lua_isfunction(L, -1))
        return luaL_error(L, "%s does not define %s()", c->cfg->policy, ENTRY);
    if (c->batch) {
        lua_getglobal(L, BATCH_GLOBAL);
        if (!lua_toboolean(L, -1)) { /* job_submit judged the script at submission */
            c->action = strdup("allow");
            c->message = strdup("");
            c->log_line = strdup("");
            if (!c->action || !c->message || !c->log_line)
                return luaL_error(L, "out of memory");
            return 0;
        }
        lua_pop(L, 1);
    }
    push_step(L, c->sp, c->batch);
    lua_newtable(L);
    lua_pushstring(L, mode_name(c->cfg->mode));
    lua_setfield(L, -2, "mode");
    lua_call(L, 2, 3);
    a = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (!a || (strcmp(a, "allow") && strcmp(a, "warn") && strcmp(a, "reject")))
        return luaL_error(L, "%s() returned %s, want \"allow\", \"warn\" or \"reject\"",
                          ENTRY, a ? a : lua_typename(L, lua_type(L, 1)));
    c->action = dup_field(L, 1);
    c->message = dup_field(L, 2);
    c->log_line = dup_field(L, 3);
    return 0;
}

/*
 * Load the policy file and call its entry under a memory cap and a time
 * budget.  Returns 0 with c->action etc. set, or -1 with err filled in.
 */
static int run_policy(struct call *c, char *err, size_t errlen)
{
    struct budget b;
    lua_State *L;
    int rc;

    memset(&b, 0, sizeof(b));
    b.limit = c->cfg->memory_bytes;
    clock_gettime(CLOCK_MONOTONIC, &b.deadline);
    b.deadline.tv_sec += c->cfg->timeout_ms / 1000;
    b.deadline.tv_nsec += (c->cfg->timeout_ms % 1000) * 1000000L;
    if (b.deadline.tv_nsec >= 1000000000L) {
        b.deadline.tv_sec++;
        b.deadline.tv_nsec -= 1000000000L;
    }
    L = lua_newstate(budget_alloc, &b);
    if (!L) {
        snprintf(err, errlen, "cannot create a Lua state");
        return -1;
    }
    hook_budget = &b;
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 10000);
    rc = lua_cpcall(L, protected_call, c);
    if (rc != 0) {
        snprintf(err, errlen, "policy %s: %s", c->cfg->policy,
                 lua_isstring(L, -1) ? lua_tostring(L, -1) : "error without a message");
        free(c->action);
        free(c->message);
        free(c->log_line);
        c->action = c->message = c->log_line = NULL;
    }
    lua_close(L);
    hook_budget = NULL;
    return rc ? -1 : 0;
}

/* Print each line of the message so the user sees it as srun's error lines. */
static void tell_user(const char *prefix, const char *message)
{
    const char *p = message;
    while (*p) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        if (n > 0) {
            if (prefix)
                slurm_error("%s%.*s", prefix, n, p);
            else
                slurm_spank_log("%.*s", n, p);
        }
        if (!nl)
            break;
        p = nl + 1;
    }
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    struct config cfg;
    struct call c;
    char err[1024] = "";
    uint32_t job_id = 0, step_id = 0, gtask = 0;
    int task = 0, rc = 0;

    if (!spank_remote(sp))
        return 0;
    spank_get_item(sp, S_JOB_ID, &job_id);
    spank_get_item(sp, S_JOB_STEPID, &step_id);
    spank_get_item(sp, S_TASK_GLOBAL_ID, &gtask);
    spank_get_item(sp, S_TASK_ID, &task);
    /* The extern step runs no user command.  The batch script is judged here only where the
     * site leaves it to this plugin (policy.script_check batch-step, which the policy file
     * says); elsewhere job_submit judged it at submission. */
    if (step_id == SLURM_EXTERN_CONT)
        return 0;

    if (parse_config(ac, av, &cfg, err, sizeof(err)) != 0 && cfg.mode != MODE_OFF)
        goto internal_error;
    if (cfg.mode == MODE_OFF)
        return 0;
    memset(&c, 0, sizeof(c));
    c.sp = sp;
    c.cfg = &cfg;
    c.batch = step_id == SLURM_BATCH_SCRIPT;
    if (run_policy(&c, err, sizeof(err)) != 0)
        goto internal_error;

    if (strcmp(c.action, "reject") == 0 && cfg.mode == MODE_ENFORCE) {
        /* every task fails; the first task on each node tells the user why */
        if (task == 0) {
            tell_user("", c.message);
            slurm_info("%s", c.log_line);
        }
        slurm_info(TAG ": job %u step %u task %u refused at launch", job_id, step_id, gtask);
        rc = -1;
    } else if (strcmp(c.action, "allow") != 0) {
        /* mode=warn, or the policy itself only warns: say it once per step and run */
        if (gtask == 0) {
            tell_user(NULL, c.message);
            slurm_info("%s (mode=%s: allowed)", c.log_line, mode_name(cfg.mode));
        }
    } else if (gtask == 0 && c.log_line[0]) {
        slurm_debug("%s", c.log_line); /* SlurmdDebug=debug shows every verdict */
    }
    free(c.action);
    free(c.message);
    free(c.log_line);
    return rc;

internal_error:
    if (!cfg.deny_on_error) {
        slurm_info(TAG ": internal error, task allowed (on_error=allow): job %u step %u task %u: %s",
                   job_id, step_id, gtask, err);
        return 0;
    }
    if (task == 0)
        slurm_error(TAG ": internal error, task refused (on_error=deny): job %u step %u: %s",
                    job_id, step_id, err);
    return -1;
}
