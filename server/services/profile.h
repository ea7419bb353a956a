/* profile.h - the head's profile-control service (`troupe profile`, and the
 * worker runtime's control long poll). Register with tr_head_add_service. */
#ifndef TR_PROFILE_H
#define TR_PROFILE_H

#include "head.h"

extern const tr_head_service tr_profile_service;

/* tr_profile_check validates a run-time setting: off alone, or exactly one of
 * an "A:B" range and next N (align only with next), plus worker globs. */
int tr_profile_check(const Troupe__V1__ProfileControl *pc, tr_err *err);

#endif
