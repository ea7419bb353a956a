"""troupe.Client's credentials and TLS, for integration.python.client_creds:
each way of giving them is tried against a head on tls+tcp:// that wants a
credential; prints one JSON line per case: {"case", "ok"} with the node count,
or the exception's class and message. The head URL, CA, other CA and user
token file come as arguments; TROUPE_* variables are set per case here."""
import json
import os
import sys

import troupe

head, ca, other_ca, tok_file = sys.argv[1:5]
tok = open(tok_file).read().strip()
for k in [k for k in os.environ if k.startswith("TROUPE_TOKEN") or k.startswith("TROUPE_TLS_") or
          k == "TROUPE_CREDENTIALS"]:
    del os.environ[k]


def case(name, env=None, **kw):
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        with troupe.Client(head=head, timeout=5, **kw) as c:
            print(json.dumps({"case": name, "ok": len(c.nodes()), "head": c.head}), flush=True)
    except troupe.TroupeError as e:
        print(json.dumps({"case": name, "error": type(e).__name__, "message": e.message}), flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


case("token_file", tls_ca=ca, token_file=tok_file)
case("token", tls_ca=ca, token=tok)
case("env_token", {"TROUPE_TOKEN": tok, "TROUPE_TLS_CA": ca})
case("env_token_file", {"TROUPE_TOKEN_FILE": tok_file}, tls_ca=ca)
case("no_token", tls_ca=ca)
case("bad_token", tls_ca=ca, token="tr1.not-a-credential")
case("no_ca", token=tok)
case("other_ca", tls_ca=other_ca, token=tok)
case("wrong_name", tls_ca=ca, token=tok, tls_server_name="head.wrong.example")
