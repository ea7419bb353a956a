/* comm_shrink.c - the survivors' new NCCL communicator after a rank dies,
 * built two ways, alternated in one run (bench/mgpu):
 *   - "new-id": ncclCommAbort on the old communicator, a fresh unique ID from
 *     the new rank 0 handed to the others (here through this program's
 *     parent, as the head's rendezvous hands it in troupe), ncclCommInitRank
 *     of the survivors - what troupe-train's dp.elastic does today;
 *   - "shrink": ncclCommShrink of the old communicator without the dead rank
 *     (NCCL >= 2.27, NCCL_SHRINK_ABORT: the old one may hold a failed peer).
 * Each is timed from the survivors' start of the rebuild to the end of the
 * first all-reduce on the new communicator (the slowest survivor counts);
 * the detection of the death and the head's new membership are not part of
 * it (troupe-train's `elastic:` log lines and tests/gpu/runtime/
 * train_elastic.sh measure those).
 *
 *   troupe-bench-comm-shrink [--ranks N] [--reps R] [--json FILE]
 *
 * One process per rank on GPU `rank` (forked by this program, which itself
 * never touches CUDA: a CUDA context does not survive fork); the last rank
 * _exit()s without destroying its communicator, the way a killed rank
 * leaves it. Prints a table; --json writes one object. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 16
#define MAX_REPS 64
#define WARM_FLOATS (1u << 20)

enum { NEW_ID, SHRINK, N_METHODS };
static const char *const method_name[N_METHODS] = {"new-id", "shrink"};

typedef struct child {
    pid_t pid;
    int to[2], from[2]; /* parent -> child, child -> parent */
} child;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int put(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return -1;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int get(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

#define CHECK_NCCL(call)                                                                                     \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess) {                                                                             \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #call, ncclGetErrorString(r_));                      \
            _exit(2);                                                                                        \
        }                                                                                                    \
    } while (0)
#define CHECK_CUDA(call)                                                                                     \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_));                      \
            _exit(2);                                                                                        \
        }                                                                                                    \
    } while (0)

/* take_id: rank 0 makes a unique ID and gives it to the parent, which hands
 * it to every rank (rank 0 included, so all read it the same way). */
static void take_id(int rank, const child *me, ncclUniqueId *id)
{
    if (rank == 0) {
        CHECK_NCCL(ncclGetUniqueId(id));
        if (put(me->from[1], id, sizeof(*id)) != 0) {
            _exit(3);
        }
    }
    if (get(me->to[0], id, sizeof(*id)) != 0) {
        _exit(3);
    }
}

static void allreduce_once(int rank, ncclComm_t comm, float *buf, cudaStream_t s)
{
    CHECK_NCCL(ncclAllReduce(buf, buf, WARM_FLOATS, ncclFloat, ncclSum, comm, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
}

/* rank_main: one rank of one round. The parent's byte 'x' tells the last
 * rank to die; 'g' tells a survivor to rebuild. */
static void rank_main(int rank, int n, int method, const child *me)
{
    ncclUniqueId id;
    ncclComm_t comm, fresh;
    cudaStream_t s;
    float *buf;
    char cmd;
    double t0, t1;

    CHECK_CUDA(cudaSetDevice(rank));
    CHECK_CUDA(cudaStreamCreate(&s));
    CHECK_CUDA(cudaMalloc((void **)&buf, WARM_FLOATS * sizeof(float)));
    CHECK_CUDA(cudaMemset(buf, 0, WARM_FLOATS * sizeof(float)));
    take_id(rank, me, &id);
    CHECK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    allreduce_once(rank, comm, buf, s);
    cmd = 'r';
    if (put(me->from[1], &cmd, 1) != 0 || get(me->to[0], &cmd, 1) != 0) {
        _exit(3);
    }
    if (cmd == 'x') {
        _exit(0); /* as a killed rank: nothing destroyed */
    }
    t0 = now_ms();
    if (method == SHRINK) {
        int gone = n - 1;
        CHECK_NCCL(ncclCommShrink(comm, &gone, 1, &fresh, NULL, NCCL_SHRINK_ABORT));
    } else {
        CHECK_NCCL(ncclCommAbort(comm));
        take_id(rank, me, &id);
        CHECK_NCCL(ncclCommInitRank(&fresh, n - 1, id, rank));
    }
    allreduce_once(rank, fresh, buf, s);
    t1 = now_ms();
    double ms = t1 - t0;
    if (put(me->from[1], &ms, sizeof(ms)) != 0) {
        _exit(3);
    }
    ncclCommDestroy(fresh);
    if (method == SHRINK) {
        ncclCommAbort(comm);
    }
    _exit(0);
}

/* relay_id: rank 0's ID to every rank in [0, n). */
static int relay_id(child *c, int n)
{
    ncclUniqueId id;
    if (get(c[0].from[0], &id, sizeof(id)) != 0) {
        return -1;
    }
    for (int r = 0; r < n; r++) {
        if (put(c[r].to[1], &id, sizeof(id)) != 0) {
            return -1;
        }
    }
    return 0;
}

/* round: one death and one rebuild by METHOD; the slowest survivor's ms,
 * or -1 (what went wrong is on stderr). */
static double round_of(int n, int method)
{
    child c[MAX_RANKS];
    double worst = -1;
    int ok = 1;
    char cmd;

    memset(c, 0, sizeof(c));
    for (int r = 0; r < n; r++) {
        if (pipe(c[r].to) != 0 || pipe(c[r].from) != 0) {
            perror("pipe");
            return -1;
        }
        if ((c[r].pid = fork()) == 0) {
            rank_main(r, n, method, &c[r]);
        }
    }
    ok = relay_id(c, n) == 0;
    for (int r = 0; ok && r < n; r++) {
        ok = get(c[r].from[0], &cmd, 1) == 0 && cmd == 'r';
    }
    if (ok) {
        cmd = 'x';
        ok = put(c[n - 1].to[1], &cmd, 1) == 0 && waitpid(c[n - 1].pid, NULL, 0) == c[n - 1].pid;
        c[n - 1].pid = 0;
    }
    for (int r = 0; ok && r < n - 1; r++) {
        cmd = 'g';
        ok = put(c[r].to[1], &cmd, 1) == 0;
    }
    if (ok && method == NEW_ID) {
        ok = relay_id(c, n - 1) == 0;
    }
    for (int r = 0; ok && r < n - 1; r++) {
        double ms;
        ok = get(c[r].from[0], &ms, sizeof(ms)) == 0;
        worst = ok && ms > worst ? ms : worst;
    }
    for (int r = 0; r < n; r++) {
        if (c[r].pid > 0) {
            if (!ok) {
                kill(c[r].pid, SIGKILL);
            }
            waitpid(c[r].pid, NULL, 0);
        }
        close(c[r].to[0]);
        close(c[r].to[1]);
        close(c[r].from[0]);
        close(c[r].from[1]);
    }
    return ok ? worst : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int n = 2, reps = 5;
    const char *json = NULL;
    double ms[N_METHODS][MAX_REPS];
    int got[N_METHODS] = {0, 0};

    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        if (i + 1 >= argc) {
            fprintf(stderr, "troupe-bench-comm-shrink: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--ranks") == 0) {
            n = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--reps") == 0) {
            reps = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--json") == 0) {
            json = argv[i + 1];
        } else {
            fprintf(stderr, "usage: troupe-bench-comm-shrink [--ranks N] [--reps R] [--json FILE]\n");
            return 2;
        }
    }
    if (n < 2 || n > MAX_RANKS || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "troupe-bench-comm-shrink: --ranks 2..%d, --reps 1..%d\n", MAX_RANKS, MAX_REPS);
        return 2;
    }
    for (int k = 0; k < reps; k++) {
        for (int m = 0; m < N_METHODS; m++) { /* alternated: a noisy moment hits both */
            double t = round_of(n, (k + m) % N_METHODS);
            int which = (k + m) % N_METHODS;
            if (t < 0) {
                fprintf(stderr, "troupe-bench-comm-shrink: round %d of %s failed\n", k, method_name[which]);
                return 1;
            }
            ms[which][got[which]++] = t;
        }
    }
    printf("%d ranks on %d GPUs, rank %d dies; the survivors' new communicator and its first all-reduce "
           "(%u floats), slowest survivor, %d rounds each\n",
           n, n, n - 1, WARM_FLOATS, reps);
    printf("%-8s %10s %10s %10s\n", "method", "median_ms", "min_ms", "max_ms");
    FILE *f = json != NULL ? fopen(json, "w") : NULL;
    if (f != NULL) {
        fprintf(f, "{\"bench\":\"comm_shrink\",\"ranks\":%d,\"rounds\":%d,\"methods\":{", n, reps);
    }
    for (int m = 0; m < N_METHODS; m++) {
        qsort(ms[m], (size_t)got[m], sizeof(double), cmp_double);
        double med = ms[m][got[m] / 2];
        printf("%-8s %10.1f %10.1f %10.1f\n", method_name[m], med, ms[m][0], ms[m][got[m] - 1]);
        if (f != NULL) {
            fprintf(f, "%s\"%s\":{\"median_ms\":%.2f,\"min_ms\":%.2f,\"max_ms\":%.2f}", m ? "," : "",
                    method_name[m], med, ms[m][0], ms[m][got[m] - 1]);
        }
    }
    printf("new-id / shrink (median): %.2fx\n", ms[NEW_ID][got[NEW_ID] / 2] / ms[SHRINK][got[SHRINK] / 2]);
    if (f != NULL) {
        fprintf(f, "}}\n");
        fclose(f);
    }
    return 0;
}
