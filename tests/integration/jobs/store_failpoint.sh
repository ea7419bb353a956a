#!/usr/bin/env bash
# A full disk injected into the head's state store: while $T/full exists
# every commit fails as SQLite's SQLITE_FULL would (TROUPE_TEST_STORE_FULL_IF,
# store.h). store_full.inc says what is shown; store_full.sh does it on a
# real full filesystem.
source "$(dirname "$0")/../lib.sh"
export TROUPE_TEST_STORE_FULL_IF=$T/full
FULL=inject
source "$(dirname "$0")/store_full.inc"
