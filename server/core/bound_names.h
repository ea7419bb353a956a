/* bound_names.h - which node names each node credential has bound (an index
 * kept beside the node table, for RegisterNode's check of --max-nodes).
 *
 * A node record owned by credential C under name N counts once toward the
 * pair (C, N); a credential's bound names are its distinct N. The head adds
 * a pair when a record gains an owner (a registration, or a record recovered
 * from disk) and removes it when the record is replaced; lookups and counts
 * are O(1) on average, where walking the node table was quadratic in the
 * names one credential had bound. Not thread-safe: the head holds h->mu. */
#ifndef TR_BOUND_NAMES_H
#define TR_BOUND_NAMES_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr_bound_names tr_bound_names;

/* tr_bound_names_alloc returns an empty index, or NULL when out of memory;
 * tr_bound_names_free frees it (NULL is a no-op). */
tr_bound_names *tr_bound_names_alloc(void);
void tr_bound_names_free(tr_bound_names *b);

/* tr_bound_names_add counts one more record of cred named name; 0, or -1 when
 * out of memory (the index is unchanged then). name is copied. */
int tr_bound_names_add(tr_bound_names *b, uint64_t cred, const char *name);

/* tr_bound_names_remove counts one record fewer (a pair not counted is
 * ignored); the name stops being bound when no record is left. */
void tr_bound_names_remove(tr_bound_names *b, uint64_t cred, const char *name);

/* tr_bound_names_has says whether cred has bound name. */
int tr_bound_names_has(const tr_bound_names *b, uint64_t cred, const char *name);

/* tr_bound_names_count returns how many distinct names cred has bound. */
size_t tr_bound_names_count(const tr_bound_names *b, uint64_t cred);

#endif
