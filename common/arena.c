/* arena.c - scratch memory for one RPC call (arena.h). */
#include "arena.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define ALIGN ((size_t)alignof(max_align_t))

struct tr_arena_big {
    tr_arena_big *next;
    alignas(max_align_t) unsigned char data[];
};

static void *pb_alloc(void *data, size_t size)
{
    return tr_arena_alloc(data, size);
}

static void pb_free(void *data, void *ptr)
{
    (void)data; /* given back at the reset */
    (void)ptr;
}

void tr_arena_init(tr_arena *a)
{
    a->pb.alloc = pb_alloc;
    a->pb.free = pb_free;
    a->pb.allocator_data = a;
    a->block = NULL;
    a->cap = a->used = 0;
    a->big = NULL;
    a->big_bytes = 0;
}

void *tr_arena_alloc(tr_arena *a, size_t n)
{
    size_t need;
    tr_arena_big *b;

    if (n > SIZE_MAX - ALIGN - sizeof(tr_arena_big)) {
        return NULL;
    }
    need = (n + ALIGN - 1) & ~(ALIGN - 1);
    if (need == 0) {
        need = ALIGN; /* protobuf-c may ask for 0 bytes (an empty array) */
    }
    if (a->block == NULL && need <= TR_ARENA_FIRST && (a->block = malloc(TR_ARENA_FIRST)) != NULL) {
        a->cap = TR_ARENA_FIRST;
        a->used = 0;
    }
    if (a->block != NULL && need <= a->cap - a->used) {
        void *p = a->block + a->used;
        a->used += need;
        return p;
    }
    if ((b = malloc(sizeof(*b) + need)) == NULL) {
        return NULL;
    }
    b->next = a->big;
    a->big = b;
    a->big_bytes += need;
    return b->data;
}

void tr_arena_reset(tr_arena *a)
{
    size_t total = a->used + a->big_bytes;

    while (a->big != NULL) {
        tr_arena_big *b = a->big;
        a->big = b->next;
        free(b);
    }
    /* This call did not fit: make the block big enough for one like it,
     * within TR_ARENA_KEEP (a 4 MiB job spec must not stay behind). */
    if (a->big_bytes > 0 && total > a->cap && total <= TR_ARENA_KEEP) {
        size_t cap = a->cap > TR_ARENA_FIRST ? a->cap : TR_ARENA_FIRST;
        while (cap < total) {
            cap *= 2;
        }
        free(a->block);
        a->block = malloc(cap);
        a->cap = a->block != NULL ? cap : 0;
    }
    a->big_bytes = 0;
    a->used = 0;
}

void tr_arena_fini(tr_arena *a)
{
    while (a->big != NULL) {
        tr_arena_big *b = a->big;
        a->big = b->next;
        free(b);
    }
    a->big_bytes = 0;
    a->used = 0;
    free(a->block);
    a->block = NULL;
    a->cap = 0;
}
