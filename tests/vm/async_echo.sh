#!/bin/sh
# The async echo example (tokio, completions awaited through completion
# channels): one server process serves 3 clients at once, each a QP of its
# own exchanging endpoints over TCP, then 200 SEND/RECV echoes of 4 KiB
# (different bytes per client and round) checked byte for byte by the
# client. Every process must exit 0 and every client must report its
# rounds intact.
set -eu
ex="$RVERBS_TARGET_DIR/debug/examples/async_echo"
out=$(mktemp -d)
"$ex" server -d rxe0 -p 18790 -c 3 >"$out/server" 2>&1 &
server=$!
pids=""
for i in 1 2 3; do
    timeout 120 "$ex" client localhost -d rxe0 -p 18790 -n 200 -s 4096 -i "$i" >"$out/client$i" 2>&1 &
    pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
server_rc=0
wait "$server" || server_rc=$?
cat "$out/server" "$out"/client*
ok=$(cat "$out"/client* | grep -c "200 rounds of 4096 bytes echoed intact; OK" || true)
echo "async_echo: $ok of 3 clients verified, server exit $server_rc"
[ "$rc" -eq 0 ] && [ "$server_rc" -eq 0 ] && [ "$ok" -eq 3 ]
