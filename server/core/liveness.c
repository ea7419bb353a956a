#include "liveness.h"

enum { ALIVE = 1, SUSPECT = 2, DEAD = 3, LEFT = 4 };

int64_t tr_liveness_dead_ms(const tr_liveness_cfg *cfg)
{
    return cfg->heartbeat_ms * cfg->dead_after;
}

int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms, int64_t period_ms)
{
    if (state == DEAD || state == LEFT) {
        return state;
    }
    if (silent_ms >= tr_liveness_dead_ms(cfg)) {
        return DEAD;
    }
    if (period_ms < cfg->heartbeat_ms) {
        period_ms = cfg->heartbeat_ms;
    }
    if (silent_ms >= period_ms * cfg->suspect_after) {
        return SUSPECT;
    }
    return ALIVE;
}

int64_t tr_liveness_lease_ms(const tr_liveness_cfg *cfg)
{
    int64_t dead = tr_liveness_dead_ms(cfg);
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

/* longest_period: the cap of tr_liveness_period_ms (liveness.h). */
static int64_t longest_period(const tr_liveness_cfg *cfg)
{
    int64_t dead = tr_liveness_dead_ms(cfg);
    int64_t cap = dead / 4;

    if (tr_liveness_lease_ms(cfg) / 3 < cap) {
        cap = tr_liveness_lease_ms(cfg) / 3;
    }
    if (dead / (cfg->suspect_after + 1) < cap) {
        cap = dead / (cfg->suspect_after + 1);
    }
    return cap;
}

int64_t tr_liveness_period_ms(const tr_liveness_cfg *cfg, int64_t nodes)
{
    int64_t base = cfg->heartbeat_ms, step = base / 4 > 0 ? base / 4 : 1, want, cap;

    if (cfg->max_beats_per_s <= 0 || nodes * 1000 <= base * cfg->max_beats_per_s) {
        return base;
    }
    want = (nodes * 1000 + cfg->max_beats_per_s - 1) / cfg->max_beats_per_s;
    want = base + (want - base + step - 1) / step * step;
    cap = longest_period(cfg);
    if (want > cap) {
        want = cap;
    }
    return want > base ? want : base;
}
