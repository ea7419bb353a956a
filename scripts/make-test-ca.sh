#!/usr/bin/env bash
# make-test-ca.sh DIR [HEAD_NAME...] [-- AGENT...]
#
# A test certificate authority for troupe over TLS (openssl; EC P-256 keys):
#   DIR/ca.pem, ca.key                  the CA (give ca.pem as tls_ca / tls_client_ca)
#   DIR/head.pem, head.key              the head's certificate, for tls_cert / tls_key; its
#                                       names (SANs): localhost, 127.0.0.1 and every HEAD_NAME
#   DIR/agent-NAME.pem, .key            a client certificate per AGENT (default: one "agent")
#   DIR/head-expired.pem, .key          like head.pem, valid only in January 2020 (tests)
#   DIR/agent-expired.pem, .key         like an agent's, expired the same way (tests)
# For tests and trials: a production CA keeps ca.key offline. Keys are 0600.
#
# An IP address is put in the certificate twice, as IP and as DNS name: the
# mbedTLS 2.28 in Debian's libnng matches the name a client dials only
# against DNS names and the CN.
set -euo pipefail
usage() { echo "usage: $0 DIR [HEAD_NAME...] [-- AGENT...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
DIR=$1; shift
HEADS=(localhost 127.0.0.1)
AGENTS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do HEADS+=("$1"); shift; done
[ "${1:-}" != -- ] || { shift; AGENTS=("$@"); }
[ ${#AGENTS[@]} -gt 0 ] || AGENTS=(agent)
command -v openssl >/dev/null || { echo "$0: openssl not found" >&2; exit 1; }
mkdir -p "$DIR"
umask 077
cd "$DIR"

# san NAME...: subjectAltName for these names (IPs as IP and DNS, see above).
san() {
    local out="" n
    for n in "$@"; do
        if [[ $n =~ ^[0-9.]+$ || $n == *:* ]]; then out+="IP:$n,DNS:$n,"; else out+="DNS:$n,"; fi
    done
    echo "${out%,}"
}
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

key ca.key
openssl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=troupe test CA $(date +%s)" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem

# sign NAME CN USAGE SAN [START END]: NAME.key + NAME.pem signed by the CA
# (START/END as YYYYMMDDHHMMSSZ make a certificate valid only then).
sign() {
    local name=$1 cn=$2 usage=$3 sanv=$4 start=${5:-} end=${6:-}
    key "$name.key"
    openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr"
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        echo "extendedKeyUsage=$usage"
        [ -z "$sanv" ] || echo "subjectAltName=$sanv"
    } >"$name.ext"
    if [ -z "$start" ]; then
        openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 \
            -extfile "$name.ext" -out "$name.pem" 2>/dev/null
    else
        # `openssl ca` is the tool that takes explicit dates.
        mkdir -p ca.db; : >ca.db/index; [ -f ca.db/serial ] || echo 1000 >ca.db/serial
        cat >ca.db/ca.cnf <<CNF
[ca]
default_ca = d
[d]
database = ca.db/index
serial = ca.db/serial
new_certs_dir = ca.db
default_md = sha256
policy = p
unique_subject = no
copy_extensions = none
[p]
commonName = supplied
CNF
        openssl ca -batch -config ca.db/ca.cnf -cert ca.pem -keyfile ca.key -in "$name.csr" \
            -startdate "$start" -enddate "$end" -extfile "$name.ext" -out "$name.pem" -notext 2>/dev/null
    fi
    rm -f "$name.csr" "$name.ext"
}
sign head "${HEADS[0]}" serverAuth "$(san "${HEADS[@]}")"
sign head-expired "${HEADS[0]}" serverAuth "$(san "${HEADS[@]}")" 20200101000000Z 20200102000000Z
for a in "${AGENTS[@]}"; do sign "agent-$a" "$a" clientAuth ""; done
sign agent-expired expired clientAuth "" 20200101000000Z 20200102000000Z
rm -rf ca.db ca.srl
chmod 644 ./*.pem
echo "$DIR: ca.pem, head.pem (names: ${HEADS[*]}), ${AGENTS[*]/#/agent-}, head-expired, agent-expired"
