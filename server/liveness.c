#include "liveness.h"

enum { ALIVE = 1, SUSPECT = 2, DEAD = 3 };

int tr_liveness_next(const tr_liveness_cfg *cfg, int state, int64_t silent_ms)
{
    if (state == DEAD) {
        return DEAD;
    }
    if (silent_ms >= cfg->heartbeat_ms * cfg->dead_after) {
        return DEAD;
    }
    if (silent_ms >= cfg->heartbeat_ms * cfg->suspect_after) {
        return SUSPECT;
    }
    return ALIVE;
}
