/* joblog.c - job logs at the head (joblog.h): memory under h->mu, disk on one
 * I/O thread.
 *
 * The I/O thread works through three queues kept under h->mu: files to
 * remove (deleted jobs), reads (followers behind the memory window) and jobs
 * with bytes to write. It takes one item under the lock, drops the lock for
 * the file operation, and retakes it to publish the result; every file
 * operation on job logs happens here, in queue order, so a deleted job's file
 * is removed only after its last write. A job is looked up by id again after
 * every unlocked step: it may have been deleted meanwhile.
 *
 * A failed write (a full disk) keeps the bytes in memory and is retried every
 * second; followers are still served from memory. What is held so, for all
 * jobs, is bounded by max_log_memory_bytes: past it, reports are refused and
 * their agents keep the output (tr_joblog_report). The other memory is
 * bounded per job (MEM_KEEP, the tail window) or per worker attempt with a
 * line in progress (TR_LOG_LINE_MAX). */
#include "joblog.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jobs.h"
#include "log.h"
#include "util.h"

#define LOG_CHUNK_MAX (256u * 1024u) /* bytes per GetLogs reply */
#define FLUSH_MAX (1024u * 1024u)    /* bytes per write */
#define MEM_KEEP (64u * 1024u)       /* written bytes a live job keeps for followers */
#define MARKER_RESERVE 512u          /* room kept under the bound for each marker line */
#define TAIL_MAX (1024u * 1024u)     /* largest tail window kept past the cut */
#define RETRY_MS 1000
/* A reply holds at least one whole line: the longest line kept, with its
 * "[worker] " prefix and its cut marker (a worker name is under 128 bytes). */
#define LINE_READ_MAX (TR_LOG_LINE_MAX + 512u)

enum { IO_FLUSH, IO_READ, IO_UNLINK };

typedef struct tr_logio tr_logio;

typedef struct io_item {
    uint64_t job_id; /* IO_FLUSH */
    tr_head_wait *w; /* IO_READ: owned, with the call's reference */
    char *path;      /* IO_UNLINK */
    struct io_item *next;
} io_item;

typedef struct io_queue {
    io_item *head, **tail;
} io_queue;

struct tr_logio {
    pthread_t thread;
    pthread_cond_t cv;      /* work arrived, or stop (with h->mu) */
    pthread_cond_t idle_cv; /* a read finished */
    int stop, no_reads, reading;
    int gave_up; /* a write failed after stop: what is left is not written */
    io_queue q[3];
    int64_t retry_at; /* tr_now_ms() before which no write is tried */
};

static void queue_push(io_queue *q, io_item *it)
{
    it->next = NULL;
    *q->tail = it;
    q->tail = &it->next;
}

static io_item *queue_pop(io_queue *q)
{
    io_item *it = q->head;
    if (it != NULL) {
        q->head = it->next;
        if (q->head == NULL) {
            q->tail = &q->head;
        }
    }
    return it;
}

void tr_joblog_path(const tr_head *h, uint64_t job_id, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/logs/job-%llu.log", h->cfg.state_dir, (unsigned long long)job_id);
}

static void free_mem(tr_job_log *l)
{
    free(l->mem);
    l->mem = NULL;
    l->mem_cap = 0;
}

void tr_joblog_free(tr_job_log *l)
{
    free_mem(l);
    free(l->tail);
    l->tail = NULL;
    l->tail_len = l->tail_cap = 0;
    for (size_t i = 0; i < l->n_streams; i++) {
        free(l->streams[i].part);
    }
    free(l->streams);
    l->streams = NULL;
    l->n_streams = 0;
}

/* tail_window is how many of a cut job's last bytes are kept for its end: a
 * job that fails usually says why in its last lines (a Traceback). */
static size_t tail_window(const tr_head *h)
{
    uint64_t q = (uint64_t)h->cfg.max_job_log_bytes / 4;
    return q > TAIL_MAX ? TAIL_MAX : (size_t)q;
}

/* head_limit is where the log is cut: the bound less the tail window and room
 * for the two marker lines, so the whole file stays within the bound. */
static uint64_t head_limit(const tr_head *h)
{
    return (uint64_t)h->cfg.max_job_log_bytes - tail_window(h) - 2 * MARKER_RESERVE;
}

void tr_joblog_recover(tr_head *h, tr_head_job *hj)
{
    char path[4200];
    struct stat st;

    tr_joblog_path(h, hj->j->id, path, sizeof(path));
    if (stat(path, &st) == 0) {
        hj->log.size = hj->log.written = hj->log.mem_off = (uint64_t)st.st_size;
        hj->log.cut = hj->log.size + MARKER_RESERVE >= head_limit(h);
    }
}

/* ---- appending (under h->mu, no I/O) -------------------------------------- */

static int mem_reserve(tr_job_log *l, size_t more)
{
    size_t used = (size_t)(l->size - l->mem_off);
    if (used + more <= l->mem_cap) {
        return 0;
    }
    size_t cap = l->mem_cap ? l->mem_cap : 4096;
    while (cap < used + more) {
        cap *= 2;
    }
    char *p = realloc(l->mem, cap);
    if (p == NULL) {
        return -1;
    }
    l->mem = p;
    l->mem_cap = cap;
    return 0;
}

/* put_line writes "[worker] text<sfx>\n" at p (wl = strlen(worker)). */
static void put_line(char *p, const char *worker, size_t wl, const char *text, size_t n, const char *sfx,
                     size_t sl)
{
    p[0] = '[';
    memcpy(p + 1, worker, wl);
    memcpy(p + 1 + wl, "] ", 2);
    memcpy(p + 3 + wl, text, n);
    if (sl > 0) {
        memcpy(p + 3 + wl + n, sfx, sl);
    }
    p[3 + wl + n + sl] = '\n';
}

/* mem_put_sfx appends one line, text then sfx (a marker; may be NULL). */
static void mem_put_sfx(tr_job_log *l, const char *worker, const char *text, size_t n, const char *sfx)
{
    size_t wl = strlen(worker), sl = sfx ? strlen(sfx) : 0, need = wl + n + sl + 4;
    if (mem_reserve(l, need) != 0) {
        l->dropped += n + 1;
        TR_LOG(TR_LOG_ERR, "out of memory keeping a log line of worker=%s; line dropped", worker);
        return;
    }
    put_line(l->mem + (l->size - l->mem_off), worker, wl, text, n, sfx, sl);
    l->size += need;
}

static void mem_put(tr_job_log *l, const char *worker, const char *text, size_t n)
{
    mem_put_sfx(l, worker, text, n, NULL);
}

static void queue_flush(tr_head *h, tr_head_job *hj)
{
    io_item *it;
    if (hj->log.queued || h->logio == NULL || (it = calloc(1, sizeof(*it))) == NULL) {
        return; /* already listed; or, without memory, the next append lists it */
    }
    it->job_id = hj->j->id;
    hj->log.queued = 1;
    queue_push(&h->logio->q[IO_FLUSH], it);
    pthread_cond_signal(&h->logio->cv);
}

/* tail_put keeps one line of a cut job in its tail window, dropping the
 * oldest whole lines when the window is full. The buffer holds up to twice
 * the window, so lines are moved once per window's worth, not per line. */
static void tail_put(const tr_head *h, tr_job_log *l, const char *worker, const char *text, size_t n,
                     const char *sfx)
{
    size_t cap = tail_window(h), wl = strlen(worker), sl = sfx ? strlen(sfx) : 0, need;

    if (wl + sl + 4 >= cap) {
        l->dropped += wl + n + sl + 4;
        return;
    }
    if (wl + n + sl + 4 > cap) { /* one line longer than the window: its end is kept */
        size_t cut = wl + n + sl + 4 - cap;
        l->dropped += cut;
        text += cut;
        n -= cut;
    }
    need = wl + n + sl + 4;
    if (l->tail_len + need > 2 * cap) { /* keep the newest lines: window less this one */
        size_t drop = l->tail_len + need - cap;
        const char *nl = memchr(l->tail + drop - 1, '\n', l->tail_len - drop + 1);
        drop = nl ? (size_t)(nl - l->tail) + 1 : l->tail_len;
        memmove(l->tail, l->tail + drop, l->tail_len - drop);
        l->tail_len -= drop;
        l->dropped += drop;
    }
    if (l->tail_len + need > l->tail_cap) {
        size_t c = l->tail_cap ? l->tail_cap : 4096;
        while (c < l->tail_len + need) {
            c *= 2;
        }
        c = c > 2 * cap ? 2 * cap : c;
        char *p = realloc(l->tail, c);
        if (p == NULL) {
            l->dropped += need;
            return;
        }
        l->tail = p;
        l->tail_cap = c;
    }
    put_line(l->tail + l->tail_len, worker, wl, text, n, sfx, sl);
    l->tail_len += need;
}

/* tail_end appends a cut job's tail window after a marker that says how much
 * was left out before it. */
static void tail_end(const tr_head *h, tr_head_job *hj)
{
    tr_job_log *l = &hj->log;
    size_t cap = tail_window(h), skip = 0;
    char text[400];

    if (l->tail_len > cap) { /* the buffer holds up to twice the window */
        const char *nl = memchr(l->tail + (l->tail_len - cap) - 1, '\n', cap + 1);
        skip = nl ? (size_t)(nl - l->tail) + 1 : l->tail_len;
        l->dropped += skip;
    }
    int n = snprintf(text, sizeof(text),
                     "log resumes: %llu bytes of output were left out here; the job's last %zu bytes follow",
                     (unsigned long long)l->dropped, l->tail_len - skip);
    mem_put(l, "troupe", text, (size_t)n);
    if (l->tail_len > skip && mem_reserve(l, l->tail_len - skip) == 0) {
        memcpy(l->mem + (l->size - l->mem_off), l->tail + skip, l->tail_len - skip);
        l->size += l->tail_len - skip;
    }
    free(l->tail);
    l->tail = NULL;
    l->tail_len = l->tail_cap = 0;
    l->dropped = 0;
}

void tr_joblog_settled(tr_head *h, tr_head_job *hj)
{
    if (!tr_jobs_is_settled(hj)) {
        return;
    }
    if (hj->log.tail_len > 0 || hj->log.dropped > 0) {
        uint64_t before = hj->log.size;
        tail_end(h, hj);
        h->log_unsaved += hj->log.size - before;
    }
    if (hj->log.mem != NULL) {
        queue_flush(h, hj);
    }
}

/* cut_here replaces the line that would cross the limit with the marker. */
static void cut_here(tr_head *h, tr_head_job *hj)
{
    char text[400];
    int n = snprintf(text, sizeof(text),
                     "log cut at %llu bytes (head max_job_log_bytes=%lld): the output after this is left "
                     "out, but for the job's last %zu bytes, which follow when it ends; each worker's "
                     "whole log stays on its node, in the agent's state dir under logs/",
                     (unsigned long long)hj->log.size, (long long)h->cfg.max_job_log_bytes, tail_window(h));
    mem_put(&hj->log, "troupe", text, (size_t)n);
    hj->log.cut = 1;
    TR_LOG(TR_LOG_WARNING, "job=%llu log cut at %llu bytes (max_job_log_bytes); its last %zu bytes are kept",
           (unsigned long long)hj->j->id, (unsigned long long)hj->log.size, tail_window(h));
}

/* line_out keeps one whole line of a worker (sfx: a marker at its end, or
 * NULL): in the log while under the bound, in the tail window past it. */
static void line_out(tr_head *h, tr_head_job *hj, const char *worker, const char *text, size_t n,
                     const char *sfx)
{
    size_t extra = strlen(worker) + (sfx ? strlen(sfx) : 0) + 4;
    if (!hj->log.cut && hj->log.size + n + extra > head_limit(h)) {
        cut_here(h, hj);
    }
    if (hj->log.cut) {
        tail_put(h, &hj->log, worker, text, n, sfx);
    } else {
        mem_put_sfx(&hj->log, worker, text, n, sfx);
    }
}

/* stream_of finds (or adds) the stream of one worker attempt; NULL without
 * memory. Streams live as long as the job: a report sent again after its
 * worker ended must still be recognised. */
static tr_log_stream *stream_of(tr_job_log *l, uint32_t worker, uint32_t attempt)
{
    for (size_t i = 0; i < l->n_streams; i++) {
        if (l->streams[i].worker == worker && l->streams[i].attempt == attempt) {
            return &l->streams[i];
        }
    }
    tr_log_stream *grown = realloc(l->streams, (l->n_streams + 1) * sizeof(*grown));
    if (grown == NULL) {
        return NULL;
    }
    l->streams = grown;
    memset(&grown[l->n_streams], 0, sizeof(*grown));
    grown[l->n_streams].worker = worker;
    grown[l->n_streams].attempt = attempt;
    return &grown[l->n_streams++];
}

/* part_add keeps the beginning of a line up to TR_LOG_LINE_MAX, counting
 * what is left out past it. */
static void part_add(tr_log_stream *s, const char *data, size_t n)
{
    size_t room = TR_LOG_LINE_MAX - s->part_len, take = n < room ? n : room;
    if (take > 0 && s->part_len + take > s->part_cap) {
        size_t cap = s->part_cap ? s->part_cap : 256;
        while (cap < s->part_len + take) {
            cap *= 2;
        }
        cap = cap > TR_LOG_LINE_MAX ? TR_LOG_LINE_MAX : cap;
        char *p = realloc(s->part, cap);
        if (p == NULL) {
            take = 0; /* counted as cut: the marker says so */
        } else {
            s->part = p;
            s->part_cap = cap;
        }
    }
    if (take > 0) {
        memcpy(s->part + s->part_len, data, take);
        s->part_len += take;
    }
    s->part_cut += n - take;
}

/* part_out ends the stream's begun line (its newline came, or its worker
 * ended without one) and frees the buffer. */
static void part_out(tr_head *h, tr_head_job *hj, tr_log_stream *s, const char *worker)
{
    char sfx[96];
    if (s->part_cut > 0) {
        snprintf(sfx, sizeof(sfx), " [troupe: line cut, %llu more bytes]", (unsigned long long)s->part_cut);
    }
    line_out(h, hj, worker, s->part ? s->part : "", s->part_len, s->part_cut > 0 ? sfx : NULL);
    free(s->part);
    s->part = NULL;
    s->part_len = s->part_cap = 0;
    s->part_cut = 0;
}

static int part_open(const tr_log_stream *s)
{
    return s->part_len > 0 || s->part_cut > 0;
}

/* take_bytes cuts new bytes of a stream into lines. */
static void take_bytes(tr_head *h, tr_head_job *hj, tr_log_stream *s, const char *worker, const char *data,
                       size_t len)
{
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t n = nl ? (size_t)(nl - data) : len;
        if (nl == NULL) {
            part_add(s, data, n); /* the line goes on in a later report */
            return;
        }
        if (part_open(s)) {
            part_add(s, data, n);
            part_out(h, hj, s, worker);
        } else if (n > TR_LOG_LINE_MAX) {
            char sfx[96];
            snprintf(sfx, sizeof(sfx), " [troupe: line cut, %zu more bytes]", n - TR_LOG_LINE_MAX);
            line_out(h, hj, worker, data, TR_LOG_LINE_MAX, sfx);
        } else {
            line_out(h, hj, worker, data, n, NULL);
        }
        data += n + 1;
        len -= n + 1;
    }
}

/* refuse_now: new bytes would pass max_log_memory_bytes while the head holds
 * output it could not write. Some output is always taken when nothing is
 * held, so a report larger than the bound still goes through. */
static int refuse_now(tr_head *h, size_t len)
{
    uint64_t max = (uint64_t)h->cfg.max_log_memory_bytes;
    int refuse = h->log_unsaved > 0 && h->log_unsaved + len > max;
    if (refuse != h->log_refusing) {
        h->log_refusing = refuse;
        if (refuse) {
            TR_LOG(TR_LOG_WARNING,
                   "job output held back: %llu bytes not written yet (max_log_memory_bytes=%llu; is %s/logs "
                   "full?); agents keep their workers' output and send it again",
                   (unsigned long long)h->log_unsaved, (unsigned long long)max, h->cfg.state_dir);
        } else {
            TR_LOG(TR_LOG_NOTICE, "job output taken again: %llu bytes not written yet",
                   (unsigned long long)h->log_unsaved);
        }
    }
    return refuse;
}

int tr_joblog_report(tr_head *h, tr_head_job *hj, uint32_t worker, const char *name, uint32_t attempt,
                     int has_off, uint64_t off, const char *data, size_t len, int ended)
{
    tr_job_log *l = &hj->log;
    tr_log_stream *s = stream_of(l, worker, attempt);
    uint64_t before = l->size;

    if (s == NULL) {
        return 0; /* out of memory: sent again */
    }
    if (!has_off) {
        off = s->next;
    }
    if (off > s->next) {
        /* Bytes this head never had: kept by the head before a restart, or
         * read by the agent before its own restart. The line begun is ended. */
        if (part_open(s)) {
            part_out(h, hj, s, name);
        }
        s->next = off;
    }
    if (off + len > s->next) {
        size_t skip = (size_t)(s->next - off);
        if (refuse_now(h, len - skip)) {
            return 0;
        }
        take_bytes(h, hj, s, name, data + skip, len - skip);
        s->next = off + len;
    }
    if (ended && part_open(s)) {
        part_out(h, hj, s, name);
    }
    h->log_unsaved += l->size - before;
    if (l->size > l->written) {
        queue_flush(h, hj);
    }
    if (l->size != before) {
        tr_events_publish(h, TR_EV_LOG_GREW, hj, NULL);
    }
    return 1;
}

uint64_t tr_joblog_unsaved(const tr_head *h)
{
    return h->log_unsaved;
}

/* ---- reading --------------------------------------------------------------- */

/* logs_done: the follower has everything and the job's end is on disk (an
 * end the head could still lose is not announced, as GetJob does not show
 * it; the "job saved" event answers the followers once it is saved). */
static int logs_done(const tr_head *h, const tr_head_job *hj, uint64_t next)
{
    return tr_jobs_is_settled(hj) && next >= hj->log.size && tr_jobs_saved(h, hj);
}

/* whole_lines returns how much of buf (n bytes, read with a limit of max)
 * the reply may consume: whole lines. A chunk without any newline (one line
 * longer than a chunk) is read again up to LINE_READ_MAX (line_end), so it
 * goes out whole; were there still no newline, it goes out as it is, so a
 * reader never stalls. */
static size_t whole_lines(const char *buf, size_t n, size_t max)
{
    size_t k = n;
    while (k > 0 && buf[k - 1] != '\n') {
        k--;
    }
    return (k == 0 && n == max) ? n : k;
}

/* filter keeps, in place, the lines of buf[0, n) that start with "[worker] ";
 * returns the length kept (all of it when worker is empty). */
static size_t filter(char *buf, size_t n, const char *worker)
{
    char prefix[128];
    size_t keep = 0, plen;

    if (worker == NULL || worker[0] == '\0') {
        return n;
    }
    plen = (size_t)snprintf(prefix, sizeof(prefix), "[%s] ", worker);
    for (size_t i = 0; i < n;) {
        char *nl = memchr(buf + i, '\n', n - i);
        size_t l = nl ? (size_t)(nl - (buf + i)) + 1 : n - i;
        if (l >= plen && memcmp(buf + i, prefix, plen) == 0) {
            memmove(buf + keep, buf + i, l);
            keep += l;
        }
        i += l;
    }
    return keep;
}

static uint32_t chunk_max(uint32_t max)
{
    return (max == 0 || max > LOG_CHUNK_MAX) ? LOG_CHUNK_MAX : max;
}

/* line_end: how many of the avail bytes at p one reply of at most max takes,
 * so that it ends at a newline: max, or less, or more when the first line is
 * longer than max (up to LINE_READ_MAX). */
static size_t line_end(const char *p, size_t avail, size_t max)
{
    size_t n = avail < max ? avail : max, far;
    const char *nl;

    if (n == avail || memchr(p, '\n', n) != NULL) {
        return n;
    }
    far = avail < LINE_READ_MAX ? avail : LINE_READ_MAX;
    nl = far > n ? memchr(p + n, '\n', far - n) : NULL;
    return nl ? (size_t)(nl - p) + 1 : n;
}

static void reply_logs(tr_rpc_call *call, const char *data, size_t len, uint64_t next, int done)
{
    Troupe__V1__GetLogsReply rep = TROUPE__V1__GET_LOGS_REPLY__INIT;
    rep.data.data = (uint8_t *)data;
    rep.data.len = len;
    rep.next_offset = next;
    rep.done = done;
    tr_rpc_reply(call, &rep.base);
}

static void on_read_expire(tr_rpc_call *call, void *arg)
{
    tr_head *h = arg;
    pthread_mutex_lock(&h->mu);
    tr_joblog_forget_call(h, call);
    pthread_mutex_unlock(&h->mu);
}

/* hand_over queues w for the I/O thread; returns 2, or 1 when it answered. */
static int hand_over(tr_head *h, tr_head_wait *w)
{
    io_item *it;
    if (h->logio == NULL || h->logio->no_reads || (it = calloc(1, sizeof(*it))) == NULL) {
        tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE,
                           "head cannot read logs now (shutting down or "
                           "out of memory); try again");
        return 1;
    }
    if (!w->deferred) {
        tr_rpc_defer(w->call, on_read_expire, h);
        w->deferred = 1;
    }
    it->w = w;
    queue_push(&h->logio->q[IO_READ], it);
    pthread_cond_signal(&h->logio->cv);
    return 2;
}

int tr_joblog_try(tr_head *h, tr_head_job *hj, tr_head_wait *w, int force)
{
    const tr_job_log *l = &hj->log;
    uint32_t max = chunk_max(w->max_bytes);
    uint64_t next = w->offset;
    char *buf = NULL;
    size_t n = 0, kept = 0;
    int done;

    if (w->offset < l->mem_off) {
        return hand_over(h, w); /* only on disk: the I/O thread reads it */
    }
    if (w->offset < l->size) {
        size_t avail = (size_t)(l->size - w->offset);
        n = line_end(l->mem + (w->offset - l->mem_off), avail, max);
        max = n > max ? (uint32_t)n : max; /* one long line: whole */
        if ((buf = malloc(n)) == NULL) {
            tr_rpc_reply_error(w->call, TROUPE_RESOURCE_EXHAUSTED, "head out of memory reading logs");
            return 1;
        }
        memcpy(buf, l->mem + (w->offset - l->mem_off), n);
        n = whole_lines(buf, n, max);
        next = w->offset + n;
        kept = filter(buf, n, w->worker);
    }
    done = logs_done(h, hj, next);
    if (!force && next == w->offset && !done) {
        free(buf);
        return 0;
    }
    reply_logs(w->call, buf, kept, next, done);
    free(buf);
    return 1;
}

int tr_joblog_forget_call(tr_head *h, tr_rpc_call *call)
{
    if (h->logio == NULL) {
        return 0;
    }
    io_queue *q = &h->logio->q[IO_READ];
    for (io_item **pp = &q->head; *pp != NULL; pp = &(*pp)->next) {
        io_item *it = *pp;
        if (it->w->call == call) {
            *pp = it->next;
            if (q->tail == &it->next) {
                q->tail = pp;
            }
            tr_rpc_call_release(call);
            free(it->w);
            free(it);
            return 1;
        }
    }
    return 0;
}

/* ---- the I/O thread ------------------------------------------------------- */

/* read_file reads [offset, offset + want) of path into a malloc'ed buffer. */
static ssize_t read_file(const char *path, uint64_t offset, size_t want, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t got = -1;

    *out = malloc(want ? want : 1);
    if (fd >= 0 && *out != NULL) {
        size_t have = 0;
        while (have < want) {
            ssize_t r = pread(fd, *out + have, want - have, (off_t)(offset + have));
            if (r < 0 && errno == EINTR) {
                continue;
            }
            if (r <= 0) {
                break;
            }
            have += (size_t)r;
        }
        got = (ssize_t)have;
    }
    if (fd >= 0) {
        close(fd);
    }
    return got;
}

/* do_read answers one follower from the file. Called and returns with h->mu
 * held; drops it for the read. */
static void do_read(tr_head *h, tr_logio *io, tr_head_wait *w)
{
    tr_head_job *hj = tr_jobs_find(h, w->job_id);
    uint32_t max = chunk_max(w->max_bytes);
    char path[4200], *buf = NULL;
    uint64_t end;
    ssize_t got;

    if (hj == NULL) {
        tr_rpc_reply_error(w->call, TROUPE_NOT_FOUND, "job %llu was deleted", (unsigned long long)w->job_id);
        goto out;
    }
    end = hj->log.written;
    tr_joblog_path(h, w->job_id, path, sizeof(path));
    io->reading = 1;
    pthread_mutex_unlock(&h->mu);
    got = read_file(path, w->offset, (size_t)(end - w->offset < max ? end - w->offset : max), &buf);
    if (got == (ssize_t)max && buf != NULL && memchr(buf, '\n', max) == NULL && end - w->offset > max) {
        /* one line longer than a chunk: read up to the longest kept */
        size_t want = (size_t)(end - w->offset < LINE_READ_MAX ? end - w->offset : LINE_READ_MAX);
        free(buf);
        got = read_file(path, w->offset, want, &buf);
        if (got > 0 && buf != NULL) {
            size_t n = line_end(buf, (size_t)got, max);
            max = n > max ? (uint32_t)n : max;
            got = (ssize_t)n;
        }
    }
    pthread_mutex_lock(&h->mu);
    io->reading = 0;
    pthread_cond_broadcast(&io->idle_cv);
    hj = tr_jobs_find(h, w->job_id);
    if (got < 0 || buf == NULL) {
        tr_rpc_reply_error(w->call, TROUPE_UNAVAILABLE, "cannot read the log of job %llu: %s",
                           (unsigned long long)w->job_id, buf ? strerror(errno) : "out of memory");
    } else {
        size_t n = whole_lines(buf, (size_t)got, max);
        size_t kept = filter(buf, n, w->worker);
        reply_logs(w->call, buf, kept, w->offset + n, hj != NULL && logs_done(h, hj, w->offset + n));
    }
out:
    tr_rpc_call_release(w->call);
    free(w);
    free(buf);
}

/* append_file appends buf to path; returns bytes written or -1 (errno). */
static ssize_t append_file(const char *path, const char *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600); /* the job owner's */
    size_t done = 0;

    if (fd < 0) {
        return -1;
    }
    while (done < n) {
        ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            break;
        }
        done += (size_t)w;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return done > 0 || n == 0 ? (ssize_t)done : -1;
}

/* trim drops written bytes from memory: a live job keeps the last MEM_KEEP
 * (followers read the tail), a settled one keeps nothing. */
static void trim(tr_head_job *hj)
{
    tr_job_log *l = &hj->log;
    size_t on_disk = (size_t)(l->written - l->mem_off);
    size_t keep = tr_jobs_is_settled(hj) ? 0 : MEM_KEEP, drop;

    if (on_disk <= keep) {
        return;
    }
    drop = on_disk - keep;
    if (keep > 0) {
        const char *nl = memchr(l->mem + drop - 1, '\n', on_disk - drop + 1);
        drop = nl ? (size_t)(nl - l->mem) + 1 : on_disk;
    }
    memmove(l->mem, l->mem + drop, (size_t)(l->size - l->mem_off) - drop);
    l->mem_off += drop;
    if (l->mem_off == l->size && keep == 0) {
        free_mem(l);
    }
}

/* do_flush writes the next bytes of one job. Called and returns with h->mu
 * held; drops it for the write. */
static void do_flush(tr_head *h, tr_logio *io, uint64_t id)
{
    tr_head_job *hj = tr_jobs_find(h, id);
    char path[4200], *buf;
    size_t n;
    ssize_t w;

    if (hj == NULL) {
        return; /* deleted */
    }
    n = (size_t)(hj->log.size - hj->log.written < FLUSH_MAX ? hj->log.size - hj->log.written : FLUSH_MAX);
    if (n == 0 || (buf = malloc(n)) == NULL) {
        hj->log.queued = 0;
        trim(hj);
        if (n > 0) {
            queue_flush(h, hj); /* out of memory: try again */
        }
        return;
    }
    memcpy(buf, hj->log.mem + (hj->log.written - hj->log.mem_off), n);
    tr_joblog_path(h, id, path, sizeof(path));
    pthread_mutex_unlock(&h->mu);
    w = append_file(path, buf, n);
    int saved = errno;
    free(buf);
    pthread_mutex_lock(&h->mu);
    if (w < 0) {
        TR_LOG(TR_LOG_ERR, "cannot write %s: %s; %zu bytes kept in memory, retrying every %d ms", path,
               strerror(saved), n, RETRY_MS);
        io->retry_at = tr_now_ms() + RETRY_MS;
        io->gave_up = io->stop;
    }
    if ((hj = tr_jobs_find(h, id)) == NULL) {
        return;
    }
    hj->log.written += w > 0 ? (uint64_t)w : 0;
    h->log_unsaved -= w > 0 ? (uint64_t)w : 0;
    hj->log.queued = 0;
    trim(hj);
    if (hj->log.size > hj->log.written) {
        queue_flush(h, hj);
    }
}

static void do_unlink(tr_head *h, char *path)
{
    pthread_mutex_unlock(&h->mu);
    if (unlink(path) != 0 && errno != ENOENT) {
        TR_LOG(TR_LOG_WARNING, "cannot remove %s: %s", path, strerror(errno));
    }
    free(path);
    pthread_mutex_lock(&h->mu);
}

static int has_work(const tr_logio *io, int64_t now)
{
    return io->q[IO_UNLINK].head || (io->q[IO_READ].head && !io->no_reads) ||
           (io->q[IO_FLUSH].head && now >= io->retry_at);
}

static void wait_work(tr_head *h, tr_logio *io)
{
    struct timespec ts;
    int64_t left = io->retry_at - tr_now_ms();

    if (io->q[IO_FLUSH].head == NULL || left <= 0) {
        pthread_cond_wait(&io->cv, &h->mu);
        return;
    }
    tr_abstime_in(&ts, left);
    pthread_cond_timedwait(&io->cv, &h->mu, &ts);
}

static void *io_main(void *arg)
{
    tr_head *h = arg;
    tr_logio *io = h->logio;

    pthread_mutex_lock(&h->mu);
    for (;;) {
        io_item *it;
        int64_t now = tr_now_ms();
        if (!has_work(io, now)) {
            /* At stop, writes that keep failing are given up (and said so). */
            if (io->stop && (io->q[IO_FLUSH].head == NULL || io->gave_up)) {
                break;
            }
            wait_work(h, io);
            continue;
        }
        if ((it = queue_pop(&io->q[IO_UNLINK])) != NULL) {
            do_unlink(h, it->path);
            free(it);
            continue;
        }
        if (!io->no_reads && (it = queue_pop(&io->q[IO_READ])) != NULL) {
            do_read(h, io, it->w); /* one read, then one write: neither starves */
            free(it);
        }
        if (now >= io->retry_at && (it = queue_pop(&io->q[IO_FLUSH])) != NULL) {
            uint64_t id = it->job_id;
            free(it);
            do_flush(h, io, id);
        }
    }
    while (io->q[IO_FLUSH].head != NULL) {
        io_item *it = queue_pop(&io->q[IO_FLUSH]);
        tr_head_job *hj = tr_jobs_find(h, it->job_id);
        if (hj != NULL) {
            TR_LOG(TR_LOG_ERR, "job=%llu: %llu log bytes not written at shutdown",
                   (unsigned long long)it->job_id, (unsigned long long)(hj->log.size - hj->log.written));
            hj->log.queued = 0;
        }
        free(it);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int tr_joblog_start(tr_head *h, tr_err *err)
{
    tr_logio *io = calloc(1, sizeof(*io));
    if (io == NULL) {
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (int i = 0; i < 3; i++) {
        io->q[i].tail = &io->q[i].head;
    }
    pthread_cond_init(&io->cv, NULL);
    pthread_cond_init(&io->idle_cv, NULL);
    h->logio = io;
    if (pthread_create(&io->thread, NULL, io_main, h) != 0) {
        h->logio = NULL;
        pthread_cond_destroy(&io->cv);
        pthread_cond_destroy(&io->idle_cv);
        free(io);
        return tr_err_set(err, TROUPE_RESOURCE_EXHAUSTED, "cannot start the log writer thread");
    }
    return TROUPE_OK;
}

void tr_joblog_quiesce(tr_head *h)
{
    if (h->logio == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    h->logio->no_reads = 1;
    while (h->logio->reading) {
        pthread_cond_wait(&h->logio->idle_cv, &h->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

void tr_joblog_stop(tr_head *h)
{
    tr_logio *io = h->logio;
    if (io == NULL) {
        return;
    }
    pthread_mutex_lock(&h->mu);
    io->stop = 1;
    io->no_reads = 1;
    pthread_cond_signal(&io->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(io->thread, NULL); /* writes what is left first */
    for (int i = 0; i < 3; i++) {
        io_item *it;
        while ((it = queue_pop(&io->q[i])) != NULL) {
            if (it->w != NULL) { /* not expected: the RPC server answered them */
                tr_rpc_call_release(it->w->call);
                free(it->w);
            }
            if (it->path != NULL) {
                unlink(it->path);
                free(it->path);
            }
            free(it);
        }
    }
    pthread_cond_destroy(&io->cv);
    pthread_cond_destroy(&io->idle_cv);
    free(io);
    h->logio = NULL;
}

void tr_joblog_remove(tr_head *h, tr_head_job *hj)
{
    char path[4200];
    io_item *it = calloc(1, sizeof(*it));

    h->log_unsaved -= hj->log.size - hj->log.written;
    hj->log.size = hj->log.written;
    tr_joblog_free(&hj->log);
    hj->log.queued = 0;
    tr_joblog_path(h, hj->j->id, path, sizeof(path));
    if (it == NULL || h->logio == NULL || (it->path = strdup(path)) == NULL) {
        free(it);
        TR_LOG(TR_LOG_ERR, "cannot queue removal of %s (out of memory); remove it by hand", path);
        return;
    }
    queue_push(&h->logio->q[IO_UNLINK], it);
    pthread_cond_signal(&h->logio->cv);
}
