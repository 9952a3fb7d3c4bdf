#!/usr/bin/env bash
# Makes the certificates of the mutual-TLS tests (tests/integration/mtls_test.cc)
# with the openssl CLI, in OUT_DIR:
#
#   ca.pem, ca.key                the cluster's CA
#   other-ca.pem, other-ca.key    an unrelated CA
#   service.pem, service.key      the services' certificate, signed by ca: SAN
#                                 IP:127.0.0.1 and DNS:localhost, usable as server
#                                 and as client (the coordinator presents it to
#                                 workers and drafters)
#   client.pem, client.key        a client certificate signed by ca
#   other-client.pem/.key         a client certificate signed by other-ca
#   expired-client.pem/.key       a client certificate signed by ca whose validity
#                                 ended in 2020 (`openssl ca -startdate -enddate`:
#                                 OpenSSL 3.0's `x509 -req` cannot backdate)
#
# Usage: make_certs.sh OUT_DIR
set -euo pipefail

out=${1:?usage: make_certs.sh OUT_DIR}
mkdir -p "$out"
cd "$out"

ssl() { openssl "$@" 2>/dev/null; }
# EC P-256 keys: made in milliseconds (RSA-2048 takes the test seconds).
newkey=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)

make_ca() {  # name subject
  ssl req -x509 "${newkey[@]}" -keyout "$1.key" -out "$1.pem" -days 3650 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
}

make_csr() {  # name subject
  ssl req "${newkey[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
}

cat > service.ext <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
EOF
cat > client.ext <<'EOF'
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
EOF

make_ca ca "treespec test CA"
make_ca other-ca "unrelated test CA"

sign() {  # name ca ext
  ssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days 365 -sha256 -extfile "$3"
}
make_csr service "treespec service"
sign service ca service.ext
make_csr client "treespec client"
sign client ca client.ext
make_csr other-client "other client"
sign other-client other-ca client.ext

# The expired certificate: `openssl ca` takes explicit start and end dates.
mkdir -p ca-db
: > ca-db/index.txt
echo 1000 > ca-db/serial
cat > ca.cnf <<EOF
[ ca ]
default_ca = test_ca
[ test_ca ]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any_name
unique_subject = no
[ any_name ]
commonName = supplied
[ client_ext ]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
EOF
make_csr expired-client "expired client"
ssl ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in expired-client.csr \
  -out expired-client.pem -startdate 20200101000000Z -enddate 20200201000000Z \
  -extensions client_ext -notext

# Checks: the good ones verify, the bad ones fail for the intended reason.
openssl verify -CAfile ca.pem service.pem client.pem > /dev/null
if openssl verify -CAfile ca.pem other-client.pem > /dev/null 2>&1; then
  echo "make_certs.sh: other-client.pem verifies against ca.pem" >&2; exit 1
fi
if openssl verify -CAfile ca.pem expired-client.pem > /dev/null 2>&1; then
  echo "make_certs.sh: expired-client.pem is not expired" >&2; exit 1
fi
openssl verify -CAfile ca.pem -no_check_time expired-client.pem > /dev/null
echo "certificates in $out"
