#!/bin/sh
# HTTP/1.1 over RDMA: verbs/cm/examples/http_stream.rs runs hyper's server
# and client, unchanged, on rverbs_cm::stream's tokio streams (rsockets on
# rxe0). 3 connections at once, each 10 GET /hello and 10 POST /echo of
# 20000 bytes (different bytes per request), every answer checked byte
# for byte by the client. Both processes must exit 0, the client must
# report every connection intact and the server all 3 served.
set -eu
ex="$RVERBS_TARGET_DIR/debug/examples/http_stream"
out=$(mktemp -d)
timeout 150 "$ex" server 10.0.0.1:18080 -c 3 >"$out/server" 2>&1 &
server=$!
i=0
while ! grep -q "listening" "$out/server" && [ $i -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
done
rc=0
timeout 150 "$ex" client 10.0.0.1:18080 -c 3 -n 10 -s 20000 >"$out/client" 2>&1 || rc=$?
server_rc=0
wait "$server" || server_rc=$?
cat "$out/server" "$out/client"
ok=$(grep -c "10 GET and 10 POST of 20000 bytes answered intact" "$out/client" || true)
served=$(grep -c "3 connections served" "$out/server" || true)
echo "http_stream: $ok of 3 connections verified, client exit $rc, server exit $server_rc"
[ "$rc" -eq 0 ] && [ "$server_rc" -eq 0 ] && [ "$ok" -eq 3 ] && [ "$served" -eq 1 ]
