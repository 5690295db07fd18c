#!/bin/sh
# The classic two-process flow: server and client exchange QPN/PSN/GID and
# buffer/rkey over TCP on localhost, the client RDMA-WRITEs and RDMA-READs
# the server's buffer, and a SEND/RECV handshake confirms the write.
# Both processes must exit 0.
set -eu
ex="$RVERBS_TARGET_DIR/debug/examples/rc_client_server"
"$ex" -d rxe0 -p 18777 -s 65536 &
server=$!
client_rc=0
timeout 60 "$ex" -d rxe0 -p 18777 -s 65536 localhost || client_rc=$?
server_rc=0
wait "$server" || server_rc=$?
echo "rc_client_server: client exit $client_rc, server exit $server_rc"
[ "$client_rc" -eq 0 ] && [ "$server_rc" -eq 0 ]
