/* scopecall - calls any method of the troupe.v1.Head service with the
 * credential in $TROUPE_TOKEN (unset or empty: none), for the scope table
 * test (scopes.sh).
 *
 *   scopecall methods            every method of the service, one a line
 *   scopecall URL METHOD JOB     call METHOD ("StopJobs") once
 *
 * The request is the method's own message, empty but for the job: every
 * field named job_id (at the top or in a sub-message such as WorkerRef from)
 * is JOB, and a repeated job_ids holds JOB, so that a call reaches the check
 * of which job a credential may act on. Prints "code=N (NAME) message=..."
 * and exits 0, or prints "no reply" and exits 3. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc.h"
#include "troupe/v1/troupe.pb-c.h"

static uint64_t job_list[1];
static void *subs[16]; /* sub-messages set_job made, freed at the end */
static size_t n_subs;

/* set_job fills m's job fields with job, one level of sub-messages deep. */
static void set_job(ProtobufCMessage *m, uint64_t job, int depth)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char *at = (char *)m + f->offset;
        if (f->type == PROTOBUF_C_TYPE_UINT64 && f->label != PROTOBUF_C_LABEL_REPEATED &&
            strcmp(f->name, "job_id") == 0) {
            *(uint64_t *)at = job;
        } else if (f->type == PROTOBUF_C_TYPE_UINT64 && f->label == PROTOBUF_C_LABEL_REPEATED &&
                   strcmp(f->name, "job_ids") == 0) {
            job_list[0] = job;
            *(size_t *)((char *)m + f->quantifier_offset) = 1;
            *(uint64_t **)at = job_list;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE && f->label != PROTOBUF_C_LABEL_REPEATED && depth == 0) {
            const ProtobufCMessageDescriptor *sd = f->descriptor;
            ProtobufCMessage *sub = calloc(1, sd->sizeof_message);
            int has_job = 0;
            for (unsigned k = 0; k < sd->n_fields; k++) {
                has_job |= strcmp(sd->fields[k].name, "job_id") == 0;
            }
            if (sub == NULL || !has_job || n_subs == sizeof(subs) / sizeof(subs[0])) {
                free(sub);
                continue;
            }
            subs[n_subs++] = sub;
            protobuf_c_message_init(sd, sub);
            set_job(sub, job, 1);
            *(ProtobufCMessage **)at = sub;
        }
    }
}

static const ProtobufCMethodDescriptor *find_method(const char *name)
{
    const ProtobufCServiceDescriptor *sd = &troupe__v1__head__descriptor;
    for (unsigned i = 0; i < sd->n_methods; i++) {
        if (strcmp(sd->methods[i].name, name) == 0) {
            return &sd->methods[i];
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const ProtobufCServiceDescriptor *sd = &troupe__v1__head__descriptor;
    const ProtobufCMethodDescriptor *md;
    ProtobufCMessage *req;
    tr_envelope env = {0};
    char method[256];
    uint8_t *payload, *buf = NULL;
    size_t len = 0;
    nng_socket s;
    nng_msg *out, *rep;
    Troupe__V1__Reply *r;

    if (argc == 2 && strcmp(argv[1], "methods") == 0) {
        for (unsigned i = 0; i < sd->n_methods; i++) {
            printf("%s\n", sd->methods[i].name);
        }
        return 0;
    }
    if (argc != 4 || (md = find_method(argv[2])) == NULL) {
        fprintf(stderr, "usage: scopecall methods | scopecall URL METHOD JOB (METHOD of troupe.v1.Head)\n");
        return 2;
    }
    req = calloc(1, md->input->sizeof_message);
    protobuf_c_message_init(md->input, req);
    set_job(req, strtoull(argv[3], NULL, 10), 0);
    payload = malloc(protobuf_c_message_get_packed_size(req) + 1);
    env.payload_len = protobuf_c_message_pack(req, payload);
    env.payload = payload;
    snprintf(method, sizeof(method), "troupe.v1.Head/%s", md->name);
    env.method = method;
    env.request_id = 7;
    env.timeout_ms = 2000;
    env.token = getenv("TROUPE_TOKEN") != NULL ? getenv("TROUPE_TOKEN") : "";
    if (tr_envelope_encode_request(&env, &buf, &len, NULL) != 0) {
        fprintf(stderr, "scopecall: cannot encode %s\n", method);
        return 1;
    }
    nng_req0_open(&s);
    nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 5000);
    nng_socket_set_size(s, NNG_OPT_RECVMAXSZ, 0);
    nng_msg_alloc(&out, 0);
    nng_msg_append(out, buf, len);
    if (nng_dial(s, argv[1], NULL, 0) != 0 || nng_sendmsg(s, out, 0) != 0) {
        fprintf(stderr, "scopecall: cannot send to %s\n", argv[1]);
        return 1;
    }
    if (nng_recvmsg(s, &rep, 0) != 0) {
        printf("no reply\n");
        fflush(stdout);
        _exit(3); /* not nng_close: see rawcall.c */
    }
    r = troupe__v1__reply__unpack(NULL, nng_msg_len(rep), nng_msg_body(rep));
    if (r == NULL) {
        printf("undecodable reply\n");
        return 1;
    }
    printf("code=%d (%s) message=%s\n", r->code, troupe_strerror(r->code), r->message);
    troupe__v1__reply__free_unpacked(r, NULL);
    nng_msg_free(rep);
    nng_close(s);
    for (size_t i = 0; i < n_subs; i++) {
        free(subs[i]);
    }
    free(req);
    free(payload);
    free(buf);
    return 0;
}
