/* fuzz_jobspec.c - libFuzzer target for the job-spec YAML parser
 * (common/jobspec*.c), which reads files users hand to `troupe submit`.
 *
 * Each input is the text of a job file. Besides memory errors (ASan) and
 * undefined behaviour (UBSan), it checks properties and aborts when one fails:
 *   - a refused spec leaves *out NULL, err->code INVALID_ARGUMENT (or
 *     RESOURCE_EXHAUSTED) and a message that starts with the file's name;
 *   - an accepted spec passes tr_jobspec_validate, the head's own check of a
 *     SubmitJob request (what the CLI sends, the head must take);
 *   - it packs, unpacks, and the unpacked copy validates and packs to the
 *     same bytes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_jobspec: property failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void roundtrip(const Troupe__V1__JobSpec *spec)
{
    size_t n = troupe__v1__job_spec__get_packed_size(spec);
    uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
    Troupe__V1__JobSpec *copy;
    tr_err err = {0};

    CHECK(a != NULL && b != NULL, "out of memory");
    CHECK(troupe__v1__job_spec__pack(spec, a) == n, "pack size");
    copy = troupe__v1__job_spec__unpack(NULL, n, a);
    CHECK(copy != NULL, "packed spec does not unpack");
    CHECK(tr_jobspec_validate(copy, &err) == TROUPE_OK, "unpacked copy refused: %s", err.msg);
    CHECK(troupe__v1__job_spec__get_packed_size(copy) == n && troupe__v1__job_spec__pack(copy, b) == n &&
              memcmp(a, b, n) == 0,
          "unpacked copy packs differently");
    troupe__v1__job_spec__free_unpacked(copy, NULL);
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Troupe__V1__JobSpec *spec = (Troupe__V1__JobSpec *)1;
    tr_err err = {0};
    int rv = tr_jobspec_parse((const char *)data, size, "fuzz.yaml", "/base", &spec, &err);

    if (rv != TROUPE_OK) {
        CHECK(spec == NULL, "refused spec left *out set");
        CHECK(rv == TROUPE_INVALID_ARGUMENT || rv == TROUPE_RESOURCE_EXHAUSTED, "code %d", rv);
        CHECK(err.code == rv, "err.code %d != %d", err.code, rv);
        CHECK(strncmp(err.msg, "fuzz.yaml", 9) == 0, "message does not name the file: %s", err.msg);
        return 0;
    }
    CHECK(spec != NULL, "accepted spec is NULL");
    CHECK(tr_jobspec_validate(spec, &err) == TROUPE_OK, "the parser accepted what the head refuses: %s", err.msg);
    roundtrip(spec);
    tr_jobspec_free(spec);
    return 0;
}
