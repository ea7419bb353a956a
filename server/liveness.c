#include "liveness.h"

enum { ALIVE = 1, SUSPECT = 2, DEAD = 3, LEFT = 4 };

int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms)
{
    if (state == DEAD || state == LEFT) {
        return state;
    }
    if (silent_ms >= cfg->heartbeat_ms * cfg->dead_after) {
        return DEAD;
    }
    if (silent_ms >= cfg->heartbeat_ms * cfg->suspect_after) {
        return SUSPECT;
    }
    return ALIVE;
}

int64_t tr_liveness_lease_ms(const tr_liveness_cfg *cfg)
{
    int64_t dead = cfg->heartbeat_ms * cfg->dead_after;
    int64_t margin = dead / 4;

    if (cfg->lease_ms > 0) {
        return cfg->lease_ms;
    }
    if (margin < 2 * cfg->heartbeat_ms) {
        margin = 2 * cfg->heartbeat_ms;
    }
    if (margin < TR_LEASE_MARGIN_MS) {
        margin = TR_LEASE_MARGIN_MS;
    }
    /* dead_after > suspect_after >= 1 keeps dead >= 2 periods; never 0. */
    return dead - margin > cfg->heartbeat_ms ? dead - margin : cfg->heartbeat_ms;
}
