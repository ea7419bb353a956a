/* arena.h - scratch memory for what one RPC call decodes.
 *
 * A call's request envelope and, for the handlers that ask for it
 * (tr_rpc_unpack_scratch), its payload are decoded by protobuf-c into a
 * block the call keeps from one request to the next: an allocation is a
 * pointer bump, a free is nothing, and tr_arena_reset gives everything back
 * at once. A heartbeat decoded with malloc cost about 17 allocations and as
 * many frees (the envelope's three strings, 8 GpuStats, ...), on nng threads
 * that free what other threads allocated.
 *
 * What does not fit in the block gets its own malloc, freed at the reset;
 * the reset then grows the block to what the call used, up to
 * TR_ARENA_KEEP, so the next call of that size fits. Larger requests (a job
 * spec, a batch of metrics) keep going to malloc and leave no big block
 * behind. Not thread-safe: one call's arena is used by one thread at a time. */
#ifndef TR_ARENA_H
#define TR_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#define TR_ARENA_FIRST 1024u      /* the block's size at the first allocation */
#define TR_ARENA_KEEP (16u * 1024u) /* a reset never keeps a larger block */

typedef struct tr_arena_big tr_arena_big;

typedef struct tr_arena {
    ProtobufCAllocator pb; /* for protobuf-c: allocator_data is the arena */
    uint8_t *block;
    size_t cap, used;
    tr_arena_big *big; /* allocations that did not fit, freed at the reset */
    size_t big_bytes;  /* their total */
} tr_arena;

/* tr_arena_init makes an empty arena (no memory until the first allocation). */
void tr_arena_init(tr_arena *a);

/* tr_arena_alloc returns n bytes aligned for any type, valid until the next
 * tr_arena_reset or tr_arena_fini; NULL when out of memory. */
void *tr_arena_alloc(tr_arena *a, size_t n);

/* tr_arena_reset frees every allocation at once and keeps (or grows) the
 * block for the next use. */
void tr_arena_reset(tr_arena *a);

/* tr_arena_fini frees everything, the block included; the arena may be used
 * again (it starts empty). */
void tr_arena_fini(tr_arena *a);

#endif
