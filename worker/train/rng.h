/* rng.h - a tiny deterministic generator (splitmix64) for init and batching.
 *
 * Chosen over rand() because its whole state is one uint64, so checkpoints can
 * store it and a resumed run draws exactly the same batches. */
#ifndef TR_TRAIN_RNG_H
#define TR_TRAIN_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t tr_rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* tr_rng_uniform returns a double in [0, 1) with 53 random bits. */
static inline double tr_rng_uniform(uint64_t *s)
{
    return (double)(tr_rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* tr_rng_below returns an integer in [0, n) (n > 0); the modulo bias is below
 * 2^-40 for the n we use, which does not matter for batch sampling. */
static inline uint64_t tr_rng_below(uint64_t *s, uint64_t n)
{
    return tr_rng_next(s) % n;
}

/* tr_rng_normal returns a standard normal sample (Box-Muller, one of the pair). */
static inline double tr_rng_normal(uint64_t *s)
{
    double u1 = tr_rng_uniform(s);
    double u2 = tr_rng_uniform(s);
    if (u1 < 1e-300) {
        u1 = 1e-300;
    }
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
