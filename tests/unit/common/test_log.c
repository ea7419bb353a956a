/* test_log.c - unit.common.log: the head's log writer thread (common/log.c)
 * and tr_log_flush_mine, which a server calls before it answers so that the
 * line a handler logged is in the log when the client reads the answer. */
#include "test_helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

/* A pipe in place of stderr while a case runs; the old stderr comes back
 * in teardown. */
static int pipe_fd[2] = {-1, -1}, saved_stderr = -1;

static int setup(void **state)
{
    (void)state;
    saved_stderr = dup(STDERR_FILENO);
    if (saved_stderr < 0 || pipe(pipe_fd) != 0 || dup2(pipe_fd[1], STDERR_FILENO) < 0) {
        return -1;
    }
    tr_log_init("unit-log", TR_LOG_INFO);
    return tr_log_async_start();
}

static int teardown(void **state)
{
    (void)state;
    /* Drain so that a writer blocked on the full pipe can finish. */
    fcntl(pipe_fd[0], F_SETFL, O_NONBLOCK);
    char buf[4096];
    int64_t end = tr_now_ms() + 5000;
    while (tr_now_ms() < end) {
        if (read(pipe_fd[0], buf, sizeof(buf)) <= 0) {
            tr_log_flush(50);
            if (read(pipe_fd[0], buf, sizeof(buf)) <= 0) {
                break;
            }
        }
    }
    tr_log_async_stop();
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    return 0;
}

/* read_now: what the pipe holds at this moment (non-blocking), as a string. */
static size_t read_now(char *buf, size_t size)
{
    size_t got = 0;
    fcntl(pipe_fd[0], F_SETFL, O_NONBLOCK);
    while (got + 1 < size) {
        ssize_t n = read(pipe_fd[0], buf + got, size - 1 - got);
        if (n <= 0) {
            break;
        }
        got += (size_t)n;
    }
    buf[got] = '\0';
    return got;
}

/* After flush_mine returns, this thread's line (and all before it) has been
 * written: no sleep, no retry. */
static void flush_mine_writes_own_line(void **state)
{
    (void)state;
    char buf[8192];
    for (int i = 0; i < 200; i++) {
        TR_LOG(TR_LOG_WARNING, "refused call %d: the reason", i);
        tr_log_flush_mine(5000);
        size_t n = read_now(buf, sizeof(buf));
        char want[64];
        snprintf(want, sizeof(want), "refused call %d: the reason\n", i);
        assert_true(n > 0);
        assert_non_null(strstr(buf, want));
    }
}

/* A thread that logged nothing does not wait, even while the writer is
 * stuck on a full stderr. */
static void flush_mine_nothing_logged(void **state)
{
    (void)state;
    int64_t t0 = tr_now_ms();
    tr_log_flush_mine(2000);
    assert_true(tr_now_ms() - t0 < 1000);
}

/* A stderr nobody reads: the wait ends at its deadline instead of holding
 * the answer back for good. */
static void flush_mine_bounded(void **state)
{
    (void)state;
    /* Fill the pipe so that the writer's next write blocks. */
    char junk[4096];
    memset(junk, 'x', sizeof(junk));
    fcntl(pipe_fd[1], F_SETFL, O_NONBLOCK);
    while (write(pipe_fd[1], junk, sizeof(junk)) > 0) {
    }
    fcntl(pipe_fd[1], F_SETFL, 0);
    TR_LOG(TR_LOG_WARNING, "a line stderr cannot take now");
    int64_t t0 = tr_now_ms();
    tr_log_flush_mine(300);
    int64_t took = tr_now_ms() - t0;
    assert_true(took >= 250);
    assert_true(took < 3000);
    /* And once seen to be pending, the next call does not wait again. */
    t0 = tr_now_ms();
    tr_log_flush_mine(300);
    assert_true(tr_now_ms() - t0 < 250);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(flush_mine_writes_own_line, setup, teardown),
        cmocka_unit_test_setup_teardown(flush_mine_nothing_logged, setup, teardown),
        cmocka_unit_test_setup_teardown(flush_mine_bounded, setup, teardown),
    };
    return TR_TEST_MAIN("unit.common.log", tests, argc, argv);
}
